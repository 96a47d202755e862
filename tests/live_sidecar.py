"""A live sidecar as an installation runs it: `nrllm-sidecar serve` (API and worker) in its own process on a
free port, with an SQLite file of its own, and the commands of the same environment beside it. Documentation
tests run their shell steps and PHP scripts against it."""

import os
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import stop_process, wait_until

BIN = Path(sys.executable).parent  # where pip put the nrllm-sidecar command of this environment


@dataclass(frozen=True)
class LiveSidecar:
    url: str
    env: dict  # the environment the sidecar runs with: its database, and PATH with nrllm-sidecar first
    log: Path

    def command(self, *args: str) -> str:
        """Run `nrllm-sidecar ARGS` against this sidecar's database; its standard output."""
        done = subprocess.run(["nrllm-sidecar", *args], env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@contextmanager
def live_sidecar(directory: Path, python_path: tuple[Path, ...] = ()):
    # Without the tests' PYTHONPATH (the sidecar `make run` serves, without the test plugins); `python_path`
    # adds plugins as installed ones (tests/plugin_site.py).
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in python_path)
    env.update(NRLLM_DATABASE_URL=f"sqlite:///{directory / 'sidecar.db'}", PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    log = directory / "serve.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(["nrllm-sidecar", "serve", "--port", "0"], cwd=directory, env=env,
                                stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        found = wait_until(lambda: proc.poll() is None and re.search(r"listening on (http://\S+)", log.read_text())
                           or proc.poll() is not None, timeout=60, interval=0.1, what="the sidecar to listen")
        assert proc.poll() is None, f"the sidecar stopped:\n{log.read_text()}"
        yield LiveSidecar(found.group(1), env, log)
    finally:
        assert stop_process(proc) == 0, log.read_text()
