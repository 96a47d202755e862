"""A remote agent's run of failed calls (polls, reconciliations, CancelTask): counted on its row, logged
twice (when it starts failing and when it answers again), never once per failed call.

The count lives in the database (store/remote_agents.py), so health and metrics in an API process see what
the workers' coordinators saw. When the agent answers again, every wait and cancel row that backs off
because of it is due at once: the backoff ends with the outage, not at its next long delay.
"""

import logging

from ..store import outbound, remote_agents, waits
from ..store.models import RemoteAgent

log = logging.getLogger("nrllm_sidecar.remote_agents")


def failed(agent: RemoteAgent, error: str) -> None:
    count = remote_agents.record_failure(agent.name, error)
    if count == 1:
        log.warning("remote agent %s is failing: %s (its polls and cancels back off until it answers)",
                    agent.name, error)
    else:
        log.debug("remote agent %s failed again (%d in a row): %s", agent.name, count, error)


def answered(agent: RemoteAgent) -> None:
    """A call was answered. Costs nothing for an agent that was not failing when it was read."""
    if not agent.consecutive_failures:
        return
    if failed_before := remote_agents.record_success(agent.name):
        brought_forward = waits.poll_backed_off_now(agent.name)
        outbound.retry_cancels_now(agent.name)
        log.warning("remote agent %s answers again after %d failed calls; %d waits polled now", agent.name,
                    failed_before, brought_forward)
