"""The application object: everything one sidecar keeps while it lives, built once by bootstrap.start and
passed down. Two applications in one process share nothing: each has its own database, sealing keys,
plugins, gate, listeners, wake-ups, event streams and connections to remote agents.

Code reaches the application it runs in through `current()`: the one a thread entered (`Application.run`,
`thread()`, the HTTP app for each request), else the process's default, which bootstrap.start sets (a
process that serves, works or answers a command builds one application). A thread does not inherit the
application of the thread that starts it: threads an application starts are made with `thread()`, pools
with `enter` as their initializer.

Each part's state is owned by the module named beside it; this module only holds it.
"""

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .config import Settings
from .domain.sealing import Sealer


@dataclass(eq=False)
class Application:
    settings: Settings | None = None
    # store/db.py: the peewee database every model works on (the models' proxy resolves to it).
    database: Any = None
    # keys.py: the sealing keys.
    sealer: Sealer | None = None
    # plugins.py: the plugin manager (built on first use) and the context every hook gets.
    plugin_manager: Any = None
    plugin_context: Any = None
    # store/status_guard.py: the gate's last word on a status outside the base vocabulary.
    status_guard: Callable[[str, str | None, object], str | None] | None = None
    # compat/service.py: the gate built last, with what it was built from and when it was last found current.
    gate_built: Any = None
    # store/events.py: who is told of each committed event, by kind.
    event_listeners: dict = field(default_factory=dict)
    # wakeup.py: the events set when this application queues a run, and when a wait becomes due sooner.
    woken_by_queued_runs: set = field(default_factory=set)
    woken_by_due_waits: set = field(default_factory=set)
    # api/event_hub.py: the feed of the event streams, made with the first stream.
    event_hub: Any = None
    # delegation/a2a.py: the routes (connection pools) to remote agents, one per address and allow-list.
    remote_routes: dict = field(default_factory=dict)
    # store/push_counts.py: the pushes counted in this process and not written yet.
    push_counts: Any = None
    # store/idempotency.py: when expired records were last deleted (time.monotonic()).
    idempotency_purged_at: float = 0.0
    # Guards the parts made on first use by several threads (the plugin manager, the hub, routes, wake-ups).
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def run(self, fn: Callable, *args, **kwargs):
        """fn(*args, **kwargs) in this application, whatever the thread's application was."""
        token = _entered.set(self)
        try:
            return fn(*args, **kwargs)
        finally:
            _entered.reset(token)


_entered: contextvars.ContextVar[Application | None] = contextvars.ContextVar("nrllm_application", default=None)
_default = Application()  # until a start-up sets one: a bare process (a command that binds only the database)


def current() -> Application:
    """The application this thread runs in: the one it entered, else the process's default."""
    return _entered.get() or _default


def set_default(application: Application) -> None:
    """The application of threads that entered none (bootstrap.start: the one the process was started for)."""
    global _default
    _default = application


def enter(application: Application) -> None:
    """Run the rest of this thread in `application` (a thread pool's initializer)."""
    _entered.set(application)


def thread(target: Callable, *, name: str, args: tuple = (), application: Application | None = None,
           daemon: bool = True) -> threading.Thread:
    """A thread that runs target(*args) in `application`, by default the one that makes the thread."""
    return threading.Thread(target=(application or current()).run, args=(target, *args), name=name, daemon=daemon)
