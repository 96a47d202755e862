"""Run every benchmark in bench/, passing the arguments on (`make bench` runs it with --quick).

Exits 1 if any benchmark failed or missed its floor. A new benchmark adds its file to BENCHMARKS.
"""

import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
BENCHMARKS = [
    "bench_store.py",
    "bench_runs.py",
    "bench_waiting.py",
    "bench_push.py",
    "bench_cycle.py",
    "bench_decisions.py",
    "bench_serving.py",
    "bench_console.py",
    "bench_sqlite_lock.py",
]


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"== {name} {' '.join(sys.argv[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, str(BENCH / name), *sys.argv[1:]], cwd=BENCH.parent)
        print(f"== {name}: exit {code} after {time.monotonic() - started:.1f} s", flush=True)
        if code != 0:
            failed.append(name)
    print(f"FAILED: {', '.join(failed)}" if failed else f"all {len(BENCHMARKS)} benchmarks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
