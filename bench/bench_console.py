"""The console's runs page with 100,000 runs in the database: the server's time to render it (the view, its
queries and the template, in this process through the app's test client: no network, no browser), for the
first page, each filter, and a page further on by its cursor.

    .venv/bin/python bench/bench_console.py                  # 100,000 runs on SQLite, checked against 200 ms
    .venv/bin/python bench/bench_console.py --quick          # 2,000 runs: proves it works, checks no floor
    .venv/bin/python bench/bench_console.py --databases sqlite,postgresql

The runs are written by the store's bulk insert (sidecar/store/console_queries.py): statuses, owners (50)
and origins rotate, so every filter finds runs. Reported per page: the median and the slowest of the
renders (after one warm-up render). Exits 1 when a median is over the floor in a full run, or a page does
not answer 200 with 1 to 50 runs. The floor is checked on the median: on a loaded machine the scheduler
adds pauses to single renders that are not the page's; the slowest render is printed beside it.
"""

import re
import statistics
import sys
import time
from pathlib import Path

from harness import arguments, check, close_connections, conclude, measuring, verdict
from scratch_databases import scratch_database

from sidecar.app import create_app
from sidecar.config import Settings
from sidecar.domain.sealing import generate_key
from sidecar.store import console_queries, migrations, tokens
from sidecar.store import db as store_db

FLOOR_MS = 200.0
FULL_RUNS, QUICK_RUNS = 100_000, 2_000
RENDERS = 15
PAGES = {
    "first page": "/console/runs",
    "status": "/console/runs?status=completed",
    "owner": "/console/runs?owner=be_user:7",
    "origin": "/console/runs?origin=typo3",
    "owner+status": "/console/runs?owner=be_user:3&status=completed",
}
RUN_LINK = re.compile(rb'href="/console/runs/[0-9a-f-]{36}"')
NEXT_PAGE = re.compile(rb'href="(/console/runs\?cursor=[^"]+)" rel="next"')


def _render(client, path: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    answer = client.get(path)
    elapsed = (time.perf_counter() - started) * 1000
    check(answer.status_code == 200, f"{path} answered {answer.status_code}")
    return elapsed, answer.data


def measure(dialect: str, count: int, quick: bool, problems: list[str]) -> None:
    with scratch_database(dialect) as url, measuring(dialect, quick, problems):
        bound = store_db.bind(url)
        migrations.upgrade()
        started = time.perf_counter()
        console_queries.bulk_insert_runs(count)
        filled = time.perf_counter() - started
        directory = Path(url.removeprefix("sqlite:///")).parent if dialect == "sqlite" else Path("/tmp")
        app = create_app(Settings(instance_path=directory, database_url=url, secret_keys=(generate_key(),)),
                         bind_database=False)
        token, _ = tokens.create("bench", "operator")
        client = app.test_client()
        check(client.post("/console/login", data={"token": token}).status_code == 302, "the login was refused")
        print(f"{dialect}: {count} runs inserted in {filled:.1f} s", flush=True)
        print(f"{'database':<12}{'page':<16}{'median ms':>10}{'max ms':>10}  floor")
        pages = dict(PAGES)
        _, first = _render(client, PAGES["first page"])
        pages["third page"] = NEXT_PAGE.search(_render(client, NEXT_PAGE.search(first).group(1).decode())[1]) \
            .group(1).decode().replace("&amp;", "&")
        for name, path in pages.items():
            _render(client, path)  # warm-up: the first render compiles the template
            times, body = [], b""
            for _ in range(RENDERS):
                elapsed, body = _render(client, path)
                times.append(elapsed)
            check(0 < len(RUN_LINK.findall(body)) <= 50, f"{name}: {len(RUN_LINK.findall(body))} runs shown")
            median, slowest = statistics.median(times), max(times)
            met = median < FLOOR_MS
            print(f"{dialect:<12}{name:<16}{median:>10.1f}{slowest:>10.1f}  "
                  f"{verdict(f'< {FLOOR_MS:.0f} ms', met, quick)}", flush=True)
            if not met and not quick:
                problems.append(f"{dialect}: {name} took {median:.1f} ms (median), over {FLOOR_MS:.0f} ms")
        close_connections(bound)


def main() -> int:
    options = arguments(__doc__, quick_help=f"{QUICK_RUNS} runs instead of {FULL_RUNS}", databases="sqlite") \
        .parse_args()
    problems: list[str] = []
    for dialect in options.databases:
        measure(dialect, QUICK_RUNS if options.quick else FULL_RUNS, options.quick, problems)
    return conclude(problems)


if __name__ == "__main__":
    sys.exit(main())
