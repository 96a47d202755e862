"""In-process wake-up: a worker sleeping between polls wakes at once when this process queues a run.

Other processes' runs are found by the worker's poll of the queued index; other processes' coordinators
are woken through the database (store/notify.py).
"""

import threading

_subscribers: set[threading.Event] = set()
_lock = threading.Lock()


def subscribe(event: threading.Event) -> None:
    with _lock:
        _subscribers.add(event)


def unsubscribe(event: threading.Event) -> None:
    with _lock:
        _subscribers.discard(event)


def runs_queued() -> None:
    with _lock:
        for event in _subscribers:
            event.set()


# Coordinators of this process: woken when a wait becomes due sooner (a push, a cancel to send).
_coordinators: set[threading.Event] = set()


def subscribe_coordinator(event: threading.Event) -> None:
    with _lock:
        _coordinators.add(event)


def unsubscribe_coordinator(event: threading.Event) -> None:
    with _lock:
        _coordinators.discard(event)


def dependencies_due() -> None:
    with _lock:
        for event in _coordinators:
            event.set()
