"""A lock held by another thread for a ``with`` body, as a writer (an append, a roll) holds a log's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held_by_another_thread(lock: threading.RLock) -> Iterator[threading.Event]:
    """``lock`` taken by a thread of its own before the body runs, and given back after it, or
    as soon as the body sets the event it is given."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30), "the holding thread did not take the lock"
    try:
        yield release
    finally:
        release.set()
        thread.join()
