"""In-process wake-up: a worker sleeping between polls wakes at once when its application queues a run.

Other processes' runs are found by the worker's poll of the queued index; other processes' coordinators
are woken through the database (store/notify.py). The events to set are the application's
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
