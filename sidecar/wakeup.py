"""In-process wake-up: a worker sleeping between polls wakes at once when this process queues a run.

Other processes' runs are found by the worker's poll of the queued index.
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
