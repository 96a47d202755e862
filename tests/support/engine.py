"""Test parts for the engine: providers and tools that count their calls or crash, and the agent loops that
worker processes run with them (`--executor tests.support.engine:CountingAgentLoop`).

The counting wrappers are real providers and tools around real ones; they only record what was called,
in memory and (for worker processes) in the file named by NRLLM_TEST_CALL_LOG.
"""

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.domain.vocabulary import ToolEffect
from sidecar.engine import AgentLoop
from sidecar.engine.registry import Registry, build_registry
from sidecar.engine.tools import Tool
from sidecar.store import leases
from sidecar.store.models import Run


class Crash(BaseException):
    """Stands for the process dying at that point: nothing after it runs, nothing catches it."""


class CallLog:
    def __init__(self, path: str | None = None):
        self.path = path
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def add(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            if self.path:
                with open(self.path, "a") as f:
                    f.write(line + "\n")

    @staticmethod
    def read(path) -> list[str]:
        path = Path(path)
        return path.read_text().splitlines() if path.exists() else []


class CountingProvider:
    """Records `provider <run> <turn index>` for every call; `crash_at` turns a call into a Crash once."""

    def __init__(self, inner, log: CallLog, crash_at: set[int] | None = None):
        self.inner = inner
        self.name = inner.name
        self.log = log
        self.crash_at = set(crash_at or ())

    def next_turn(self, request):
        index = len(request.conversation.turns)
        self.log.add(f"provider {request.run_id} {index}")
        if index in self.crash_at:
            self.crash_at.discard(index)
            raise Crash(f"crash while asking for turn {index}")
        return self.inner.next_turn(request)


class CountingTool(Tool):
    """Wraps a tool; records `start <call>` and `end <call>`; `crash_once` crashes its first call."""

    def __init__(self, inner: Tool, log: CallLog, crash_once: bool = False):
        self.inner = inner
        self.name = inner.name
        self.effect = inner.effect
        self.description = inner.description
        self.parameters = inner.parameters
        self.log = log
        self.crash_once = crash_once

    def run(self, arguments, context):
        self.log.add(f"start {self.name}")
        if self.crash_once:
            self.crash_once = False
            raise Crash(f"crash in {self.name}")
        result = self.inner.run(arguments, context)
        self.log.add(f"end {self.name}")
        return result


class FunctionTool(Tool):
    """A tool made of a function, for what the built-in tools cannot show."""

    def __init__(self, name: str, fn, effect: ToolEffect = ToolEffect.READ_ONLY):
        self.name = name
        self.effect = effect
        self.description = f"test tool {name}"
        self.parameters = {"type": "object"}
        self.fn = fn

    def run(self, arguments, context):
        return self.fn(arguments, context)


def make_settings(**overrides) -> Settings:
    return Settings(instance_path=Path("/nonexistent"), database_url="sqlite://", **overrides)


def registry(*extra_tools: Tool, settings: Settings | None = None, log: CallLog | None = None,
             crash_provider_at: set[int] | None = None, crash_tools: tuple[str, ...] = ()) -> Registry:
    """The default registry, with extra tools, and every provider and tool counted in `log`."""
    base = build_registry(settings or make_settings())
    tools = {**base.tools, **{t.name: t for t in extra_tools}}
    if log is not None:
        tools = {name: CountingTool(t, log, crash_once=name in crash_tools) for name, t in tools.items()}
        providers = {name: CountingProvider(p, log, crash_provider_at) for name, p in base.providers.items()}
        base = replace(base, providers=providers)
    return replace(base, tools=tools)


def requeue_as_the_reaper_would(run_id: str) -> None:
    """The holder died: let its lease expire and reap it back to the queue."""
    Run.update(lease_expires_at=utcnow().replace(year=2000)).where(Run.id == run_id).execute()
    assert [r.action for r in leases.reap()] == ["requeued"]


def request_cancel(run_id: str) -> None:
    """What the API's cancel of a running run does: mark it; the segment ends it at its next boundary."""
    Run.update(cancel_requested_at=utcnow()).where(Run.id == run_id).execute()


class CountingAgentLoop(AgentLoop):
    """The agent loop of a worker process, counting provider and tool calls in $NRLLM_TEST_CALL_LOG."""

    def __init__(self):
        super().__init__(registry(settings=Settings.from_env(), log=CallLog(os.environ["NRLLM_TEST_CALL_LOG"])))


class TickingTool(Tool):
    """`tick`: works for `seconds` without looking at its lease or its run, as blocking work in a library would,
    and records `start|tick|end <pid> <unix time>` lines: which process ran it, when, and whether it ended."""

    name = "tick"
    effect = ToolEffect.READ_ONLY
    description = "Works for the given number of seconds, recording its progress."
    parameters = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
    INTERVAL = 0.2

    def __init__(self, log: CallLog):
        self.log = log

    def _record(self, what: str) -> None:
        self.log.add(f"{what} {os.getpid()} {time.time():.6f}")

    def run(self, arguments, context):
        self._record("start")
        until = time.monotonic() + arguments["seconds"]
        while (left := until - time.monotonic()) > 0:
            time.sleep(min(left, self.INTERVAL))
            self._record("tick")
        self._record("end")
        return "ticked"


class TickingAgentLoop(AgentLoop):
    """The agent loop of a worker process with the `tick` tool, recording in $NRLLM_TEST_CALL_LOG."""

    def __init__(self):
        super().__init__(registry(TickingTool(CallLog(os.environ["NRLLM_TEST_CALL_LOG"])),
                                  settings=Settings.from_env()))


class AgentLoopWokenOnlyByWakeUps(AgentLoop):
    """The agent loop of a worker process whose coordinator sleeps an hour between looks at the due index
    (instead of 10 s listening on PostgreSQL, 0.25 s elsewhere): before a wait's poll is due, only a
    wake-up from another process (NOTIFY, or the doorbell, store/doorbell.py) makes it look."""

    def __init__(self):
        from sidecar.delegation import coordinator

        coordinator.IDLE_SECONDS = 3600.0
        # The worker command builds its coordinator after loading this executor, with the default tick.
        coordinator.Coordinator.__init__.__kwdefaults__["tick_seconds"] = 3600.0
        super().__init__()
