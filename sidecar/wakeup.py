"""In-process wake-up: a worker sleeping between polls wakes at once when its application queues a run.

Other processes are rung through their doorbells on this machine (store/doorbell.py), or find out at their
next poll; on PostgreSQL a process with nobody of its own to wake tells every coordinator through the
database (store/notify.py). The events to set are the application's
(Application.woken_by_queued_runs and woken_by_due_waits): another application in the process is not woken.
"""

import threading

from .application import current


def subscribe(event: threading.Event) -> None:
    app = current()
    with app.lock:
        app.woken_by_queued_runs.add(event)


def unsubscribe(event: threading.Event) -> None:
    app = current()
    with app.lock:
        app.woken_by_queued_runs.discard(event)


def runs_queued() -> None:
    app = current()
    with app.lock:
        for event in app.woken_by_queued_runs:
            event.set()


# Coordinators of this application: woken when a wait becomes due sooner (a push, a cancel to send).
def subscribe_coordinator(event: threading.Event) -> None:
    app = current()
    with app.lock:
        app.woken_by_due_waits.add(event)


def unsubscribe_coordinator(event: threading.Event) -> None:
    app = current()
    with app.lock:
        app.woken_by_due_waits.discard(event)


def dependencies_due() -> None:
    app = current()
    with app.lock:
        for event in app.woken_by_due_waits:
            event.set()


def dependencies_due_at(when) -> None:
    """A wait comes due at `when` (naive UTC, a suspension's first poll): the coordinators of this application
    look then, each woken now only if it would sleep past it (its event's `due_at`). Only without one is
    anything else subscribed (the doorbell's ringer) set, at once."""
    app = current()
    with app.lock:
        coordinators = [event for event in app.woken_by_due_waits if hasattr(event, "due_at")]
        if coordinators:
            for coordinator in coordinators:
                coordinator.due_at(when)
            return
        for event in app.woken_by_due_waits:
            event.set()


def dependencies_heard_here() -> bool:
    """Whether this application has a coordinator, or rings other processes' (doorbell.py), to wake after a
    commit that makes a wait due: if not, only a notification through the database reaches one."""
    app = current()
    with app.lock:
        return bool(app.woken_by_due_waits)
