"""Serving under load: the real `nrllm-sidecar serve` process (gunicorn, the worker beside it), per database.

create   POST /api/v1/runs at a steady 100 requests/s for 30 s, open loop (each request leaves at its
         scheduled time whatever the earlier ones do; its latency counts from that time); the worker
         completes the runs meanwhile. Floor: no error, p99 under 50 ms.
read     GET /api/v1/runs/{id} at 500 requests/s for 30 s, open loop. Floor: p99 under 20 ms.
streams  1,000 event streams open on runs that do not move: the CPU the API processes (gunicorn's arbiter
         and HTTP workers, not the worker) use over 10 s, as a share of one core (floor: under 5 %), then
         GET /api/v1/health at 20 requests/s for 10 s (floor: p99 under 50 ms).
cpu ms   CPU time the API processes spent per request during a phase (/proc/<pid>/stat): the figure that
         moves least with the machine's load.

--quick: 3 s phases and 200 streams; figures printed, floors not checked.
"""

import gc
import http.client
import json
import os
import resource
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import CheckFailed, arguments, check, close_connections, conclude, measuring, percentile, verdict
from scratch_databases import scratch_database

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the real-process helpers the tests use

from sidecar.domain.lease import LeasePolicy  # noqa: E402
from sidecar.domain.sealing import generate_key  # noqa: E402
from sidecar.store import db, leases, migrations, runs, tokens  # noqa: E402
from sidecar.store.models import Run  # noqa: E402
from tests.support.servers import cpu_seconds, process_tree, start_serve  # noqa: E402
from tests.support.streams import StreamCrowd  # noqa: E402

ACTOR = "be_user:1"
FLOORS = {"create": 50.0, "read": 20.0, "health": 50.0}  # p99 ms
CPU_FLOOR_PERCENT = 5.0
CLIENT_THREADS = 64


def open_loop(port: int, rate: float, seconds: float, request) -> tuple[list[float], int, list]:
    """Send request(i) -> (method, path, body) at rate/s for `seconds`. (latencies ms, errors, answers)."""
    count = int(rate * seconds)
    start = time.monotonic() + 0.5
    latencies, answers, errors = [], [], [0]
    lock = threading.Lock()
    local = threading.local()

    def one(i: int) -> None:
        scheduled = start + i / rate
        if (delay := scheduled - time.monotonic()) > 0:
            time.sleep(delay)
        method, path, body, headers = request(i)
        try:
            conn = getattr(local, "conn", None) or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            local.conn = conn
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            ok = response.status in (200, 201)
        except (OSError, http.client.HTTPException):
            local.conn, ok, data = None, False, b""
        elapsed = (time.monotonic() - scheduled) * 1000
        with lock:
            latencies.append(elapsed)
            if ok:
                answers.append(data)
            else:
                errors[0] += 1

    gc.disable()  # the client's own collections would pause its threads and count as the server's latency
    try:
        with ThreadPoolExecutor(CLIENT_THREADS) as pool:
            for i in range(count):
                pool.submit(one, i)
    finally:
        gc.enable()
    return latencies, errors[0], answers


def api_processes(pid: int) -> list[int]:
    """serve's arbiter and HTTP workers: its process tree without the worker (`sidecar.cli worker`)."""
    return [p for p in process_tree(pid) if b"\0worker\0" not in Path(f"/proc/{p}/cmdline").read_bytes()]


def per_request_ms(pids: list[int], cpu_before: float, requests: int) -> float:
    """CPU the API processes spent per request since cpu_before: moves far less with the machine's load."""
    return (cpu_seconds(pids) - cpu_before) * 1000 / max(requests, 1)


def measure(dialect: str, quick: bool, logs: Path) -> list[tuple]:
    seconds = 3.0 if quick else 30.0
    streams = 200 if quick else 1000
    key = generate_key()
    rows = []
    with scratch_database(dialect) as url:
        bound = db.bind(url)
        migrations.upgrade()
        token = tokens.create("bench-host", "host")[0]
        auth = {"Authorization": f"Bearer {token}", "X-Nrllm-Actor": ACTOR}
        served = start_serve(url, logs / f"{dialect}.log", env={
            "NRLLM_SECRET_KEYS": key, "NRLLM_LEASE_SECONDS": "30", "NRLLM_STREAMS_PER_TOKEN": str(streams)})
        try:
            body = json.dumps({"input": "bench", "script": [{"content": "done"}]})
            json_auth = {**auth, "Content-Type": "application/json"}
            pids = api_processes(served.proc.pid)
            before = cpu_seconds(pids)
            latencies, errors, answers = open_loop(served.port, 100, seconds,
                                                   lambda i: ("POST", "/api/v1/runs", body, json_auth))
            check(errors == 0, f"{errors} of {len(latencies)} creations failed")
            rows.append(("create", 100, latencies, errors, per_request_ms(pids, before, len(latencies))))
            ids = [json.loads(a)["id"] for a in answers]
            before = cpu_seconds(pids)
            latencies, errors, _ = open_loop(served.port, 500, seconds,
                                             lambda i: ("GET", f"/api/v1/runs/{ids[i % len(ids)]}", None, auth))
            check(errors == 0, f"{errors} of {len(latencies)} reads failed")
            rows.append(("read", 500, latencies, errors, per_request_ms(pids, before, len(latencies))))
            rows.append(streams_phase(served, auth, streams, 3.0 if quick else 10.0))
        finally:
            code = served.stop()
            close_connections(bound)
        check(code == 0, f"serve stopped with status {code}")
    return rows


def streams_phase(served, auth: dict, count: int, seconds: float) -> tuple:
    # Runs that do not move: held under a long lease by this process, which does nothing with them.
    held = [runs.create_run(ACTOR, f"still {i}", wake=False) for i in range(100)]
    claimed = [c.run_id for c in leases.claim_queued("bench-still", len(held), LeasePolicy(3600))]
    check(len(claimed) > 0, "runs held still for the streams")
    crowd = StreamCrowd(served.port, auth)
    try:
        crowd.open([f"/api/v1/runs/{claimed[i % len(claimed)]}/events" for i in range(count)])
        time.sleep(2.0)  # the opening burst settles
        pids = api_processes(served.proc.pid)
        before = cpu_seconds(pids)
        time.sleep(seconds)
        cpu_percent = (cpu_seconds(pids) - before) / seconds * 100
        before = cpu_seconds(pids)
        latencies, errors, _ = open_loop(served.port, 20, seconds, lambda i: ("GET", "/api/v1/health", None, {}))
        cpu_ms = per_request_ms(pids, before, len(latencies))
        check(Run.select().where(Run.id.in_(claimed), Run.status == "running").count() == len(claimed),
              "the runs under the streams did not move")
        return ("health", 20, latencies, errors, cpu_ms, cpu_percent, count)
    finally:
        crowd.close()


def main() -> int:
    parser = arguments(__doc__, quick_help="3 s phases and 200 streams: a smoke run")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    problems: list[str] = []
    print(f"{'database':<11}{'phase':<8}{'rate/s':>7}{'requests':>9}{'errors':>7}{'p50 ms':>8}{'p99 ms':>8}"
          f"{'max ms':>8}{'cpu ms':>8}  floor (p99 ms)", flush=True)
    with tempfile.TemporaryDirectory(prefix="nrllm-bench-serving-") as logs:
        for dialect in args.databases:
            with measuring(dialect, args.quick, problems):
                try:
                    rows = measure(dialect, args.quick, Path(logs))
                except CheckFailed as exc:
                    tails = "".join(f"\n--- {p.name}:\n{p.read_text()[-1500:]}" for p in Path(logs).iterdir())
                    raise CheckFailed(f"{exc}{tails}") from None
                for phase, rate, latencies, errors, cpu_ms, *streams in rows:
                    p50, p99, floor = percentile(latencies, 0.5), percentile(latencies, 0.99), FLOORS[phase]
                    met = p99 < floor and errors == 0
                    print(f"{dialect:<11}{phase:<8}{rate:>7}{len(latencies):>9}{errors:>7}{p50:>8.1f}{p99:>8.1f}"
                          f"{max(latencies):>8.1f}{cpu_ms:>8.2f}  {verdict(floor, met, args.quick)}", flush=True)
                    if not args.quick and not met:
                        problems.append(f"{dialect}: {phase} p99 {p99:.1f} ms with {errors} errors, floor {floor} ms")
                    if streams:
                        cpu, count = streams
                        met = cpu < CPU_FLOOR_PERCENT
                        print(f"{dialect:<11}{'idle':<8} API CPU with {count} streams open: {cpu:.2f} % of a core  "
                              f"{verdict(f'{CPU_FLOOR_PERCENT} %', met, args.quick)}", flush=True)
                        if not args.quick and not met:
                            problems.append(f"{dialect}: API CPU {cpu:.2f} % with {count} idle streams")
    return conclude(problems)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
