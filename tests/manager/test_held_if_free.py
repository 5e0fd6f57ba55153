"""LogManager.held_if_free: the logs' locks held for a body when every one is free now, never
waited for (the server's event loop reads under it), and nothing left held on any way out."""

from __future__ import annotations

import threading
from pathlib import Path

from manager_helpers import Opener, batch, tp

from tests.lock_helpers import held_by_another_thread

from tidelog.manager import LogManager
from tidelog.storage.fetch_info import FetchIsolation


def _free_elsewhere(manager: LogManager, topic: str, partition: int = 0) -> bool:
    """Whether another thread can take the log's lock now (and gives it back)."""
    lock = manager.log(tp(topic, partition)).lock
    got: list[bool] = []

    def take() -> None:
        got.append(lock.acquire(blocking=False))
        if got[0]:
            lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    return got[0]


def test_free_logs_are_held_for_the_body_and_read_without_waiting(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("t", 2)
    manager.append(tp("t"), batch(3))
    with manager.held_if_free([tp("t", 0), tp("t", 1), tp("t", 0)]) as free:  # a partition named twice too
        assert free
        assert not _free_elsewhere(manager, "t", 0) and not _free_elsewhere(manager, "t", 1)
        got = manager.fetch(tp("t"), 0, 1 << 20, FetchIsolation.HIGH_WATERMARK)  # re-entrant: no wait
        assert got.high_watermark == 3
    assert _free_elsewhere(manager, "t", 0) and _free_elsewhere(manager, "t", 1)


def test_one_busy_log_yields_false_and_holds_none(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("t", 3)
    with held_by_another_thread(manager.log(tp("t", 1)).lock):
        with manager.held_if_free([tp("t", 0), tp("t", 1), tp("t", 2)]) as free:
            assert not free
            assert _free_elsewhere(manager, "t", 0), "the lock taken before the busy one is given back at once"
            assert _free_elsewhere(manager, "t", 2)
    assert all(_free_elsewhere(manager, "t", p) for p in range(3))


def test_an_unknown_partition_yields_false_and_holds_none(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("t", 1)
    with manager.held_if_free([tp("t", 0), tp("t", 5), tp("nope")]) as free:
        assert not free and _free_elsewhere(manager, "t", 0)


def test_the_locks_are_given_back_when_the_body_raises(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("t", 1)
    try:
        with manager.held_if_free([tp("t")]) as free:
            assert free
            raise KeyError("boom")
    except KeyError:
        pass
    assert _free_elsewhere(manager, "t", 0)
