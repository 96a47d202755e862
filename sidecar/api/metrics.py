"""GET /metrics: Prometheus text. Runs by status and remote agents' consecutive failures are read from the
database at scrape time, so every API process reports the same numbers; the counters are this process's
own (sidecar/metrics.py)."""

from flask import Response, current_app
from flask.views import MethodView
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from ..domain.errors import ForbiddenRole
from ..domain.vocabulary import RunStatus
from ..store import remote_agents, runs
from . import examples
from .auth import principal, public
from .parsing import Blueprint

blp = Blueprint("metrics", __name__, url_prefix="", description="Prometheus metrics")


class _Scrape:
    """A collector for one scrape: the process registry plus the run counts and the remote agents'
    failures read now (the workers record failures in the database; this may be another process)."""

    def collect(self):
        yield from REGISTRY.collect()
        counts = runs.count_by_status()
        family = GaugeMetricFamily("nrllm_runs", "Runs in the database, by status", labels=["status"])
        for status in RunStatus:
            family.add_metric([status.value], counts.get(status.value, 0))
        yield family
        failing = GaugeMetricFamily("nrllm_remote_agent_consecutive_failures",
                                    "Calls of each remote agent that failed in a row (0: its last call was answered)",
                                    labels=["agent"])
        for name, failures in sorted(remote_agents.failure_counts().items()):
            failing.add_metric([name], failures)
        yield failing


@blp.route("/metrics")
@public(when=lambda settings: settings.metrics_public)
class Metrics(MethodView):
    @blp.doc(responses={200: {"description": "Prometheus text format 0.0.4",
                              "content": {"text/plain": {"schema": {"type": "string"}, "example": examples.METRICS}}},
                        401: "UNAUTHORIZED", 403: "FORBIDDEN"},
             description="Needs an operator token, unless NRLLM_METRICS_PUBLIC=1.")
    def get(self):
        """Prometheus metrics (operator)."""
        if not current_app.config["NRLLM_SETTINGS"].metrics_public and principal().role != "operator":
            raise ForbiddenRole("metrics are for operator tokens")
        return Response(generate_latest(_Scrape()), mimetype=None, content_type=CONTENT_TYPE_PLAIN_0_0_4)
