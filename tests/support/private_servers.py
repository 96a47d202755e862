"""Private database servers for tests that stop and start them: a PostgreSQL cluster and a MariaDB instance.

Each lives in its own temporary directory (data, socket, log), listens on 127.0.0.1 on a free port only and
is never the shared server the other tests use, so a test may stop, restart or break it freely.

    server = PrivatePostgres(); server.start()
    server.create_database("app"); url = server.url("app")
    server.stop(); server.start(); server.restart()
    server.cleanup()  # stops it and removes everything

Tests run as root: PostgreSQL refuses to run as root, so its cluster runs as the `postgres` OS user
(`runuser`); MariaDB runs with --user=root. When a server cannot be started here the fixture skips its
tests with the reason (under CI=true it fails instead, as the shared servers do).
"""

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

IN_CI = os.environ.get("CI", "").lower() == "true"
START_TIMEOUT = 60


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class PrivatePostgres:
    """A PostgreSQL cluster made with initdb and run with pg_ctl as the postgres OS user (trust auth)."""

    def __init__(self):
        self.bin_dir = self._bin_dir()
        self.directory = Path(tempfile.mkdtemp(prefix="nrllm-pg-"))
        self.data_dir = self.directory / "data"
        self.log_path = self.directory / "server.log"
        self.port = free_port()
        self._initialised = False
        account = pwd.getpwnam("postgres")
        os.chown(self.directory, account.pw_uid, account.pw_gid)
        os.chmod(self.directory, 0o700)

    @staticmethod
    def _bin_dir() -> Path:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
        if not found:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        return Path(found[-1]).parent

    def _as_postgres(self, *command: str, timeout: float = START_TIMEOUT) -> None:
        result = subprocess.run(
            ["runuser", "-u", "postgres", "--", *command],
            capture_output=True, text=True, timeout=timeout, cwd=self.directory,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {result.stdout}{result.stderr}")

    def start(self) -> None:
        if not self._initialised:
            self._as_postgres(
                str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "-A", "trust",
                "-E", "UTF8", "--no-sync",
            )
            self._initialised = True
        options = f"-p {self.port} -h 127.0.0.1 -k {self.directory} -c fsync=off"
        self._as_postgres(
            str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path), "-o", options,
            "-w", "-t", str(START_TIMEOUT), "start",
        )

    def stop(self) -> None:
        """Fast shutdown: open sessions are ended, as when the server is restarted by its operator."""
        self._as_postgres(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def is_running(self) -> bool:
        return (self.data_dir / "postmaster.pid").exists()

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        import psycopg2

        conn = psycopg2.connect(self.url("postgres"), connect_timeout=5)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()

    def cleanup(self) -> None:
        if self._initialised and self.is_running():
            with contextlib.suppress(Exception):  # cleanup removes the directory whatever the server says
                self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class PrivateMariaDB:
    """A MariaDB instance made with mariadb-install-db and run as mariadbd with its own datadir and port.

    root may connect over TCP from 127.0.0.1 without a password (created at the first start).
    """

    def __init__(self):
        self.install_db = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        self.server = shutil.which("mariadbd") or shutil.which("mysqld") or "/usr/sbin/mariadbd"
        if not self.install_db or not Path(self.server).exists():
            raise RuntimeError("no MariaDB server binaries (mariadb-install-db, mariadbd)")
        self.directory = Path(tempfile.mkdtemp(prefix="nrllm-mariadb-"))
        self.data_dir = self.directory / "data"
        self.socket_path = self.directory / "mariadb.sock"
        self.pid_path = self.directory / "mariadb.pid"
        self.log_path = self.directory / "server.log"
        self.port = free_port()
        self._initialised = False
        self._process: subprocess.Popen | None = None

    def _server_args(self) -> list[str]:
        return [
            self.server, "--no-defaults", f"--datadir={self.data_dir}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--socket={self.socket_path}", f"--pid-file={self.pid_path}",
            f"--log-error={self.log_path}", "--user=root", "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2", "--skip-log-bin",
        ]

    def start(self) -> None:
        if not self._initialised:
            result = subprocess.run(
                [self.install_db, "--no-defaults", f"--datadir={self.data_dir}", "--user=root",
                 "--auth-root-authentication-method=normal", "--skip-test-db"],
                capture_output=True, text=True, timeout=START_TIMEOUT,
            )
            if result.returncode != 0:
                raise RuntimeError(f"mariadb-install-db failed: {result.stdout}{result.stderr}")
        self._process = subprocess.Popen(
            self._server_args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            wait_until(lambda: self._process.poll() is not None or _port_answers(self.port), START_TIMEOUT,
                       interval=0.1, what="mariadbd to answer or end")
            if self._process.poll() is not None:
                raise RuntimeError(f"mariadbd ended with {self._process.returncode}")
        except (AssertionError, RuntimeError) as exc:
            log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            raise RuntimeError(f"{exc}: {log[-2000:]}") from exc
        if not self._initialised:
            self._allow_root_over_tcp()
            self._initialised = True

    def _allow_root_over_tcp(self) -> None:
        import pymysql

        conn = pymysql.connect(unix_socket=str(self.socket_path), user="root", connect_timeout=5, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
        conn.close()

    def stop(self) -> None:
        """A normal shutdown (SIGTERM): open connections are closed, as when the server is restarted."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=5, autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        conn.close()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def _started(kind):
    try:
        server = kind()
    except Exception as exc:  # noqa: BLE001 - any reason it cannot run here is reported as the skip reason
        _cannot_run(kind, exc)
    try:
        server.start()
    except Exception as exc:  # noqa: BLE001
        server.cleanup()
        _cannot_run(kind, exc)
    return server


def _cannot_run(kind, exc: Exception):
    message = f"a private {kind.__name__.removeprefix('Private')} server cannot be started here ({exc})"
    if IN_CI:
        pytest.fail(f"{message}, but CI=true requires it", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def private_postgres():
    """A running private PostgreSQL cluster for the tests of one module; removed afterwards."""
    server = _started(PrivatePostgres)
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def private_mariadb():
    """A running private MariaDB instance for the tests of one module; removed afterwards."""
    server = _started(PrivateMariaDB)
    yield server
    server.cleanup()
