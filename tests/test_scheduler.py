"""Schedulers (tidelog.scheduler.ThreadScheduler, tidelog.testing.FakeScheduler): one set of rules,
delay clamping, period check and shutdown, for the fake driven by a FakeClock and for the real thread."""

from __future__ import annotations

import threading
import time

import pytest

from tidelog.scheduler import ThreadScheduler
from tidelog.testing import FakeClock, FakeScheduler


def _fake() -> tuple[FakeClock, FakeScheduler]:
    clock = FakeClock(0)
    return clock, FakeScheduler(clock)


# --- FakeScheduler ---------------------------------------------------------------------------

def test_fake_once_task_runs_when_the_clock_reaches_its_delay() -> None:
    clock, scheduler = _fake()
    scheduler.schedule_once("flush", lambda: None, delay_ms=100)
    clock.advance(99)
    assert (scheduler.ran, scheduler.pending()) == ([], 1)
    clock.advance(1)
    assert (scheduler.ran, scheduler.pending()) == (["flush"], 0)


def test_fake_negative_delay_means_now() -> None:
    clock, scheduler = _fake()
    scheduler.schedule_once("now", lambda: None, delay_ms=-50)
    clock.advance(0)
    assert scheduler.ran == ["now"]


def test_fake_periodic_task_repeats_every_period() -> None:
    clock, scheduler = _fake()
    scheduler.schedule_periodic("retention", lambda: None, delay_ms=10, period_ms=30)
    for _ in range(10):
        clock.advance(10)  # t = 10 .. 100: due at 10, 40, 70, 100
    assert scheduler.ran == ["retention"] * 4
    assert scheduler.pending() == 1


@pytest.mark.parametrize("period_ms", [0, -1])
def test_fake_periodic_task_without_a_positive_period_is_rejected(period_ms: int) -> None:
    _, scheduler = _fake()
    with pytest.raises(ValueError, match="'checkpoint' must be > 0 ms"):
        scheduler.schedule_periodic("checkpoint", lambda: None, 0, period_ms)
    assert scheduler.pending() == 0


def test_fake_shutdown_drops_pending_tasks_and_refuses_new_ones() -> None:
    clock, scheduler = _fake()
    scheduler.schedule_once("late", lambda: None, delay_ms=10)
    scheduler.shutdown()
    assert scheduler.pending() == 0
    with pytest.raises(RuntimeError, match="cannot schedule 'flush-t-0'"):
        scheduler.schedule_once("flush-t-0", lambda: None)
    with pytest.raises(RuntimeError, match="cannot schedule 'retention'"):
        scheduler.schedule_periodic("retention", lambda: None, 0, 10)
    clock.advance(100)
    assert scheduler.ran == []


def test_fake_failing_task_does_not_stop_the_others() -> None:
    clock, scheduler = _fake()

    def fail() -> None:
        raise OSError("disk gone")

    scheduler.schedule_once("bad", fail)
    scheduler.schedule_once("good", lambda: None)
    clock.advance(0)
    assert scheduler.ran == ["bad", "good"]


def test_fake_clock_runs_every_attached_scheduler() -> None:
    clock = FakeClock(0)
    first, second = FakeScheduler(clock), FakeScheduler(clock)
    first.schedule_once("a", lambda: None, 5)
    second.schedule_once("b", lambda: None, 5)
    clock.sleep(5)
    assert (first.ran, second.ran) == (["a"], ["b"])


# --- ThreadScheduler (real thread, real time, bounded waits) ---------------------------------

def test_thread_once_task_runs_after_its_delay() -> None:
    scheduler = ThreadScheduler(name="test-scheduler")
    ran = threading.Event()
    try:
        start = time.monotonic()
        scheduler.schedule_once("once", ran.set, delay_ms=20)
        assert ran.wait(timeout=2.0)
        assert time.monotonic() - start >= 0.015  # due 20 ms after a whole-ms "now": >= 19 ms, minus clock skew
    finally:
        scheduler.shutdown()


def test_thread_periodic_task_repeats() -> None:
    scheduler = ThreadScheduler(name="test-scheduler")
    runs: list[int] = []
    third = threading.Event()

    def tick() -> None:
        runs.append(1)
        if len(runs) == 3:
            third.set()

    try:
        scheduler.schedule_periodic("tick", tick, delay_ms=0, period_ms=5)
        assert third.wait(timeout=2.0)
    finally:
        scheduler.shutdown()


def test_thread_periodic_task_without_a_positive_period_is_rejected() -> None:
    scheduler = ThreadScheduler(name="test-scheduler")
    try:
        with pytest.raises(ValueError, match="'checkpoint' must be > 0 ms"):
            scheduler.schedule_periodic("checkpoint", lambda: None, 0, 0)
    finally:
        scheduler.shutdown()


def test_thread_shutdown_drops_pending_tasks_and_refuses_new_ones() -> None:
    scheduler = ThreadScheduler(name="test-scheduler")
    ran = threading.Event()
    scheduler.schedule_once("late", ran.set, delay_ms=60_000)
    scheduler.shutdown()
    assert not scheduler._thread.is_alive()  # test seam: the worker thread has ended
    with pytest.raises(RuntimeError, match="cannot schedule 'flush-t-0'"):
        scheduler.schedule_once("flush-t-0", ran.set)
    assert not ran.is_set()
