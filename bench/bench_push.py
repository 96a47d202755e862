"""Push-to-resume latency: how soon a run waiting on a remote task resumes after the remote agent pushes
that the task is done, per database, with production's processes.

    .venv/bin/python bench/bench_push.py                  # full run, compared with the floors
    .venv/bin/python bench/bench_push.py --quick          # a few seconds: proves it works, checks no floor
    .venv/bin/python bench/bench_push.py --databases sqlite,postgresql,mysql
    .venv/bin/python bench/bench_push.py --databases sqlite --processes 1 --concurrency 4   # a smaller worker

A real a2a-sdk peer with push notifications (tests/support/peers.py, its own process), `nrllm-sidecar serve
--no-worker` receiving its pushes at POST /api/v1/push, and `nrllm-sidecar worker` (production settings:
the coordinator polls the due index every 250 ms, on PostgreSQL also LISTENs, and the API rings the worker
process's doorbell, store/doorbell.py). The agent is polled
only every 60 s, so a run resumes that soon only because of the push. Each run delegates
`work:<seconds>:...` with seconds spread over the measurement, so pushes arrive one at a time.

latency     from the arrival of the push saying the task completed to the commit that resumes the run
            (the wait's resolved_at): the webhook, the wake-up (NOTIFY, or the worker process's doorbell),
            GetTask and the resolution. The peer posts to a relay in this process
            that notes the arrival and passes the push on to the webhook (one more local hop, counted)
later       the runs whose completion push arrived after every run had suspended (all first segments done),
            and their p99: the same latency once the sidecar no longer starts 200 runs at once. No floor:
            the floor is on every run's (docs/performance.md, "Push to resume and the worker's size")

Exits 1 when a floor is missed or a check fails (every run resumed with the remote's answer).
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench_waiting import AGENT, ROOT, close, settings_for, start_peer
from harness import (
    CheckFailed,
    add_worker_size,
    arguments,
    check,
    conclude,
    free_port,
    measuring,
    percentile,
    verdict,
    worker_size,
)
from scratch_databases import scratch_database

from sidecar import bootstrap
from sidecar.delegation.a2a import normalise_state, notification_task_id
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import generate_key
from sidecar.store import consumers, db, remote_agents, runs
from sidecar.store.models import DependencyWait, Outbound, Run, WorkerHeartbeat
from sidecar.store.remote_agents import AgentFields

P99_FLOORS_MS = {"postgresql": 250, "sqlite": 100}  # issue 6; SQLite's lowered by issue 14 (the doorbell)
FULL_RUNS, QUICK_RUNS = 200, 5
SPREAD_SECONDS = 0.05  # between two runs' completions on the peer
SCRIPT_ANSWER = "pushed answer"


def sidecar(args: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", "sidecar.cli", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=log)


class Relay(ThreadingHTTPServer):
    """Between the peer and the webhook: notes when the first push saying a task completed arrives, then
    passes every push on unchanged and answers what the webhook answered."""

    daemon_threads = True

    def __init__(self, webhook_port: int):
        self.webhook_port = webhook_port
        self.completed: dict[str, datetime] = {}  # task id -> arrival (naive UTC, as the store's times)
        super().__init__(("127.0.0.1", 0), RelayHandler)


class RelayHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        arrived = utcnow()
        try:
            push = json.loads(body)
        except ValueError:
            push = None
        task_id = notification_task_id(push)
        inner = (push.get("statusUpdate") or push.get("task") or push) if isinstance(push, dict) else {}
        if task_id and normalise_state((inner.get("status") or {}).get("state")) == "completed":
            self.server.completed.setdefault(task_id, arrived)
        connection = http.client.HTTPConnection("127.0.0.1", self.server.webhook_port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        connection.request("POST", self.path, body=body, headers=headers)
        answer = connection.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        connection.close()

    def log_message(self, *args):
        pass


@dataclass(frozen=True)
class Latency:
    ms: float  # from the arrival of the task's completion push to its run's resumption
    later: bool  # the push arrived after every run had suspended


def latencies(dialect: str, peer_url: str, count: int, worker_args: list[str]) -> list[Latency]:
    """Each run's push-to-resume latency; `worker_args` are added to the `worker` command's."""
    key = generate_key()
    with scratch_database(dialect) as url, tempfile.TemporaryDirectory() as logs:
        bound = db.bind(url)
        bootstrap.start(settings_for(url, key), bind_database=False, migrate=True)
        consumers.replace_report([])
        remote_agents.create_agent(AGENT, AgentFields(url=peer_url, poll_interval_seconds=60, deadline_seconds=600,
                                                      push=True))
        port = free_port()
        relay = Relay(port)
        threading.Thread(target=relay.serve_forever, name="relay", daemon=True).start()
        env = {**os.environ, "NRLLM_DATABASE_URL": url, "NRLLM_SECRET_KEYS": key, "NRLLM_REMOTE_ALLOW": "127.0.0.1",
               "NRLLM_PUBLIC_URL": f"http://127.0.0.1:{relay.server_address[1]}"}
        processes = [sidecar(["serve", "--no-worker", "--host", "127.0.0.1", "--port", str(port)], env,
                             Path(logs) / "api.log"),
                     sidecar(["worker", "--poll-interval", "0.05", *worker_args], env, Path(logs) / "worker.log")]
        try:
            deadline = time.monotonic() + 60
            while not (WorkerHeartbeat.select().exists() and api_answers(port)):
                check(all(p.poll() is None for p in processes) and time.monotonic() < deadline, "the sidecar started")
                time.sleep(0.05)
            ids = [runs.create_run("bench", "delegate", spec={"provider": "scripted", "script": script(i)})
                   for i in range(count)]
            deadline = time.monotonic() + 60 + count * SPREAD_SECONDS
            while Run.select().where(Run.id.in_(ids), Run.status == "completed").count() < count:
                check(time.monotonic() < deadline, f"{count} runs resumed by pushes and completed")
                time.sleep(0.1)
        except CheckFailed as exc:
            tails = "".join(f"\n--- {p.name}:\n{p.read_text()[-1500:]}" for p in Path(logs).iterdir())
            raise CheckFailed(f"{exc}{tails}") from None
        finally:
            for process in processes:
                process.terminate()
                process.wait(30)
            relay.shutdown()
        check(all(r.output == f"Remote said: {SCRIPT_ANSWER}" for r in Run.select().where(Run.id.in_(ids))),
              "every run completed with the remote's answer")
        found = []
        waits = list(DependencyWait.select())
        last_suspension = max(wait.since for wait in waits)
        for wait in waits:
            task_id = Outbound.get_by_id(wait.outbound_id).remote_task_id
            check(task_id in relay.completed, f"the push saying task {task_id} completed arrived")
            arrived = relay.completed[task_id]
            found.append(Latency((wait.resolved_at - arrived).total_seconds() * 1000, arrived > last_suspension))
        close(bound)
    return found


def api_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # answered (degraded is 503)
    except OSError:
        return False


def script(index: int) -> list[dict]:
    seconds = 1.0 + index * SPREAD_SECONDS
    return [{"tool_calls": [{"id": "call_1", "name": "delegate_to_agent",
                             "arguments": {"agent": AGENT, "message": f"work:{seconds:.2f}:{SCRIPT_ANSWER}"}}]},
            {"content": "Remote said: {last_tool_result}"}]


def main() -> int:
    parser = arguments(__doc__, quick_help="a few pushes; checks the figures exist, not the floors")
    add_worker_size(parser)
    args = parser.parse_args()
    worker_args = worker_size(args)
    count = QUICK_RUNS if args.quick else FULL_RUNS
    print(f"push benchmark ({'quick' if args.quick else 'full'}): {count} runs per database, agent polled every 60 s")
    print(f"{'database':<11}{'runs':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'later':>7}{'p99 ms':>9}"
          "  floor (p99 ms)", flush=True)
    peer, peer_url = start_peer(push=True)
    problems = []
    try:
        for dialect in args.databases:
            with measuring(dialect, args.quick, problems):
                found = latencies(dialect, peer_url, count, worker_args)
                values = [latency.ms for latency in found]
                later = [latency.ms for latency in found if latency.later]
                p50, p99, floor = percentile(values, 0.5), percentile(values, 0.99), P99_FLOORS_MS.get(dialect)
                later_p99 = f"{percentile(later, 0.99):.0f}" if len(later) >= 2 else "-"
                print(f"{dialect:<11}{len(values):>8}{p50:>9.0f}{p99:>9.0f}{max(values):>9.0f}{len(later):>7}"
                      f"{later_p99:>9}  {verdict(floor, floor is not None and p99 < floor, args.quick)}", flush=True)
                if floor is not None and not args.quick and p99 >= floor:
                    problems.append(f"{dialect}: push-to-resume p99 {p99:.0f} ms, floor {floor:.0f} ms")
    finally:
        peer.stdin.close()
        peer.wait(30)
    return conclude(problems)


if __name__ == "__main__":
    sys.exit(main())
