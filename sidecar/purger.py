"""The daily purge (NRLLM_RETENTION): a worker companion that deletes finished runs older than the retention.

Every worker runs one, so the purge happens as long as any worker lives; several purging at once is safe
(store/retention.py). The first pass comes a random few minutes after start, so workers started together
do not all purge at the same moment; then one pass a day.
"""

import logging
import random
import threading
from datetime import timedelta

from .application import thread
from .domain.clock import utcnow
from .store import retention

log = logging.getLogger("nrllm_sidecar.retention")

DAY_SECONDS = 24 * 3600.0
FIRST_PASS_WITHIN_SECONDS = 300.0


class RetentionPurger:
    def __init__(self, keep: timedelta, *, interval: float = DAY_SECONDS,
                 first_delay: float | None = None, batch: int = retention.DEFAULT_BATCH):
        self.keep = keep
        self.interval = interval
        self.first_delay = random.uniform(0, FIRST_PASS_WITHIN_SECONDS) if first_delay is None else first_delay
        self.batch = batch
        self.passes = 0  # completed passes (tests and operators looking at a process)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = thread(self._loop, name="retention")
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread:
            self._thread.join(30)

    def purge_once(self) -> retention.PurgeReport:
        report = retention.purge(utcnow() - self.keep, batch=self.batch)
        self.passes += 1
        if report.runs or report.skipped:
            log.info("retention purge: deleted %d finished runs older than %s (%s), skipped %d with open "
                     "journal rows", report.runs, self.keep,
                     ", ".join(f"{table} {n}" for table, n in report.deleted.items() if n), report.skipped)
        return report

    def _loop(self) -> None:
        wait = self.first_delay
        while not self._stopping.wait(wait):
            try:
                self.purge_once()
            except Exception:
                log.exception("retention purge failed; trying again at the next pass")
            wait = self.interval
