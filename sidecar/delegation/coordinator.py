"""The coordinator: inside the worker process, polls the remote tasks that waiting runs wait on.

A tick claims the due waits (advancing each one's next poll is the claim, so coordinators in several
processes never poll one row twice), asks each remote agent for its task on a small thread pool, and
resolves a wait when the task has an answer for the model. A run that waits holds no thread here
between ticks: only due rows cost anything.
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from ..domain.vocabulary import TerminationReason
from ..store import outbound, remote_agents, waits
from ..store.models import DependencyWait
from . import remote
from .results import lost_task_text, result_text
from .types import TASK_NOT_FOUND, RemoteError

log = logging.getLogger("nrllm_sidecar.coordinator")

# Between ticks: the due index is polled at most this often (pushes and same-process wake-ups are sooner).
TICK_SECONDS = 0.25


class Coordinator:
    def __init__(self, settings, *, concurrency: int = 4, batch: int = 100, tick_seconds: float = TICK_SECONDS):
        self.settings = settings
        self.batch = batch
        self.tick_seconds = tick_seconds
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="coordinator")
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="coordinator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread:
            self._thread.join(10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("coordinator tick failed; trying again at the next tick")
            self._wake.wait(self.tick_seconds)
            self._wake.clear()

    def tick(self) -> int:
        """Claim what is due and poll it; returns how many waits were polled."""
        due = waits.claim_due(self.batch)
        for finished in [self._pool.submit(self.poll, wait) for wait in due]:
            finished.result()
        return len(due)

    def poll(self, wait: DependencyWait) -> None:
        try:
            checkpoint = remote.unseal_checkpoint(wait)
        except remote.KeyMissing:
            # An operator removed the key: the run stays waiting and health says so.
            waits.mark_unsealable(wait.id, True)
            return
        except remote.Tampered:
            detail = {"reason": "the checkpoint failed authentication"}
            if waits.fail(wait, TerminationReason.CHECKPOINT_INVALID, detail):
                log.error("run %s: checkpoint of wait %s failed authentication; run failed", wait.run_id, wait.id)
            return
        if wait.unsealable:
            waits.mark_unsealable(wait.id, False)
        # The journal row the sealed checkpoint names holds the task id (reconciliation may have found it since).
        journalled = outbound.get(checkpoint["outbound_id"])
        task_id = journalled.remote_task_id if journalled else None
        agent = remote_agents.get_agent(wait.remote_agent)
        if agent is None or not task_id:
            return
        try:
            task = remote.client_for(agent, self.settings).get_task(task_id)
        except RemoteError as exc:
            if exc.code == TASK_NOT_FOUND:
                self._resolve(wait, checkpoint, lost_task_text(task_id), {"remote_task_id": task_id})
            else:
                log.warning("run %s: polling %s failed: %s", wait.run_id, agent.name, exc)
            return
        except remote.Unreachable as exc:
            log.warning("run %s: %s unreachable: %s", wait.run_id, agent.name, exc)
            return
        if task.finished:
            self._resolve(wait, checkpoint, result_text(task), {"remote_task_id": task_id, "state": task.state})

    def _resolve(self, wait, checkpoint: dict, text: str, detail: dict) -> None:
        if waits.resolve(wait, turn_index=checkpoint["turn_index"], result=text, detail=detail):
            log.info("run %s resumed with the answer of %s", wait.run_id, wait.remote_agent)
