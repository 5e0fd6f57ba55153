"""Retry with exponential backoff of a partition's copy (tidelog.remote.backoff): Kafka's
ExponentialBackoff figures, retriable errors retried by one scheduled task at the earliest due
time, non-retriable ones left to the next pass, nothing after shutdown; the fake clock only."""

from __future__ import annotations

import random

import pytest

from tidelog.remote.backoff import Backoff, CopyRetries
from tidelog.remote.errors import RemoteAccessDeniedError, RemoteStoreServerError, RemoteStoreUnreachableError
from tidelog.testing import FakeClock, FakeScheduler

RETRIABLE = RemoteStoreServerError("injected 503", operation="put", key="k", uri="s3://b/p")
DENIED = RemoteAccessDeniedError("injected 403", operation="put", key="k", uri="s3://b/p")


def test_delays_double_from_initial_to_max_within_the_jitter() -> None:
    backoff = Backoff(500, 30_000, 0.2)
    rng = random.Random(7)
    for failures, term in [(1, 500), (2, 1000), (3, 2000), (6, 16_000)]:
        delays = [backoff.delay_ms(failures, rng) for _ in range(200)]
        assert term * 0.8 <= min(delays) and max(delays) < term * 1.2
        assert len(set(delays)) > 20, "jittered"
    assert {backoff.delay_ms(n, rng) for n in (7, 8, 50, 10_000)} <= set(range(24_000, 30_001))
    assert Backoff(500, 30_000, 0.0).delay_ms(100) == 30_000
    assert Backoff(100, 1000, 0.0).delay_ms(1) == 100


@pytest.mark.parametrize("bad", [dict(initial_ms=0), dict(max_ms=0), dict(jitter=0.51), dict(jitter=-0.1)])
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        Backoff(**bad)


class Runs:
    """The ``run`` callback: records each call and fails the partitions in ``failing``."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.failing: dict[str, Exception] = {}
        self.retries: CopyRetries[str] | None = None

    def __call__(self, keys: list[str]) -> None:
        self.calls.append(sorted(keys))
        assert self.retries is not None
        for key in keys:
            if key in self.failing:
                self.retries.failed(key, self.failing[key])
            else:
                self.retries.succeeded(key)


def retries_of(clock: FakeClock, scheduler: FakeScheduler, closed: list[bool] | None = None) -> tuple[CopyRetries[str], Runs]:
    runs = Runs()
    state = closed if closed is not None else [False]
    retries = CopyRetries[str](Backoff(500, 4000, 0.0), clock, scheduler, runs, is_closed=lambda: state[0])
    runs.retries = retries
    return retries, runs


def test_a_retriable_failure_is_retried_after_its_backoff(clock: FakeClock, scheduler: FakeScheduler) -> None:
    retries, runs = retries_of(clock, scheduler)
    runs.failing["p0"] = RETRIABLE
    assert retries.failed("p0", RETRIABLE) == 500
    assert retries.waiting("p0") and not retries.waiting("p1")
    clock.advance(499)
    assert runs.calls == []
    clock.advance(1)
    assert runs.calls == [["p0"]] and retries.failures("p0") == 2
    clock.advance(999)
    assert runs.calls == [["p0"]]
    clock.advance(1)
    assert runs.calls == [["p0"]] * 2
    del runs.failing["p0"]
    clock.advance(2000)
    assert runs.calls == [["p0"]] * 3 and retries.failures("p0") == 0 and not retries.waiting("p0")
    clock.advance(60_000)
    assert len(runs.calls) == 3, "nothing more once it went through"


def test_the_delay_stops_growing_at_max(clock: FakeClock, scheduler: FakeScheduler) -> None:
    retries, runs = retries_of(clock, scheduler)
    runs.failing["p0"] = RETRIABLE
    retries.failed("p0", RETRIABLE)
    for step in (500, 1000, 2000, 4000, 4000, 4000):
        clock.advance(step)
    assert len(runs.calls) == 6 and retries.retry_due_ms("p0") == clock.milliseconds() + 4000


def test_a_non_retriable_failure_waits_for_the_next_pass(clock: FakeClock, scheduler: FakeScheduler) -> None:
    retries, runs = retries_of(clock, scheduler)
    assert retries.failed("p0", DENIED) is None
    assert not retries.waiting("p0") and retries.failures("p0") == 1
    clock.advance(60_000)
    assert runs.calls == [] and scheduler.pending() == 0


def test_partitions_failing_together_share_one_retry_task(clock: FakeClock, scheduler: FakeScheduler) -> None:
    retries, runs = retries_of(clock, scheduler)
    for key in ("p0", "p1", "p2"):
        retries.failed(key, RemoteStoreUnreachableError("refused", operation="list", key="", uri="s3://b/p"))
    assert scheduler.pending() == 1
    clock.advance(500)
    assert runs.calls == [["p0", "p1", "p2"]]


def test_an_earlier_retry_gets_its_own_task_and_later_ones_wait(clock: FakeClock, scheduler: FakeScheduler) -> None:
    retries, runs = retries_of(clock, scheduler)
    runs.failing["slow"] = RETRIABLE
    for _ in range(3):
        retries.failed("slow", RETRIABLE)  # third failure in a row: 2000 ms
    clock.advance(100)
    retries.failed("fast", RETRIABLE)  # due at +500
    clock.advance(500)
    assert runs.calls == [["fast"]]
    clock.advance(1400)
    assert runs.calls == [["fast"], ["slow"]]


def test_nothing_is_retried_after_shutdown(clock: FakeClock, scheduler: FakeScheduler) -> None:
    closed = [False]
    retries, runs = retries_of(clock, scheduler, closed)
    retries.failed("p0", RETRIABLE)
    closed[0] = True
    clock.advance(10_000)
    assert runs.calls == [] and retries.failed("p1", RETRIABLE) is None
    scheduler.shutdown()
    closed[0] = False
    assert retries.failed("p2", RETRIABLE) == 500, "a scheduler that refuses the task is not an error"


def test_a_partition_the_run_skips_is_forgotten(clock: FakeClock, scheduler: FakeScheduler) -> None:
    runs_seen: list[list[str]] = []
    retries = CopyRetries[str](Backoff(500, 4000, 0.0), clock, scheduler, runs_seen.append)  # reports nothing back
    retries.failed("gone", RETRIABLE)
    clock.advance(500)
    assert runs_seen == [["gone"]] and not retries.waiting("gone") and retries.failures("gone") == 0
    assert scheduler.pending() == 0


def test_the_broker_keys_have_kafkas_names_defaults_and_ranges() -> None:
    from tidelog.errors import ConfigError
    from tidelog.storage.config import BrokerConfig

    base = {"log.dirs": "/tmp/tidelog-unused"}
    broker = BrokerConfig.from_properties(base)
    assert (broker.remote_log_manager_task_retry_backoff_ms, broker.remote_log_manager_task_retry_backoff_max_ms,
            broker.remote_log_manager_task_retry_jitter) == (500, 30_000, 0.2)
    for name, bad in [("remote.log.manager.task.retry.backoff.ms", "0"), ("remote.log.manager.task.retry.backoff.max.ms", "0"),
                      ("remote.log.manager.task.retry.jitter", "0.51"), ("remote.log.manager.task.retry.jitter", "-1")]:
        with pytest.raises(ConfigError) as raised:
            BrokerConfig.from_properties({**base, name: bad})
        assert name in str(raised.value)
