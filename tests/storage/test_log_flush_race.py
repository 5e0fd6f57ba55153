"""A flush picks its segments under the log's lock and fsyncs them without it; a segment deleted
and closed meanwhile (retention, a clean's swap, the delayed unlink), or the whole log closed
meanwhile (shutdown under a scheduled flush-after-roll), is not an error: there is nothing of
theirs left to make durable. A live segment that fails still fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from storage_helpers import MakeLog, single

from tidelog.errors import IndexStateError
from tidelog.storage.log import Log


def _interleave(log: Log, monkeypatch: pytest.MonkeyPatch, between: Callable[[], None]) -> None:
    """Run ``between`` after the flush chose its segments and before it fsyncs them."""
    local = log._local
    real = local.flush_segments

    def flush_segments(segments, recovery_point):  # type: ignore[no-untyped-def]
        between()
        return real(segments, recovery_point)

    monkeypatch.setattr(local, "flush_segments", flush_segments)


def _three_segments(make_log: MakeLog) -> Log:
    log = make_log()
    for _ in range(3):
        log.append_as_leader(single(1_000))
        log.roll()
        log.segments[-2].offset_index  # opened by this process: its flush touches the map
    assert log.recovery_point == 0 and log.num_segments == 4
    return log


def test_a_segment_deleted_and_closed_under_the_flush_is_skipped(make_log: MakeLog,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = _three_segments(make_log)
    first = log.segments[0]

    def delete_first() -> None:
        log.delete_segments([first], "retention")
        first.close_handlers()  # what the delayed unlink does when file.delete.delay.ms is short

    _interleave(log, monkeypatch, delete_first)
    log.flush_upto(log.log_end_offset)
    assert log.recovery_point == log.log_end_offset


def test_the_log_closed_under_the_flush_is_not_an_error(make_log: MakeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _three_segments(make_log)
    _interleave(log, monkeypatch, log.close)
    log.flush_upto(log.log_end_offset)  # nothing raised: close() released every file


def test_a_live_segment_that_cannot_flush_still_fails(make_log: MakeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _three_segments(make_log)
    second = log.segments[1]

    def closed_while_live() -> None:  # a bug, not a race: it must surface
        raise IndexStateError("offset index is closed", path=second.log.path)

    monkeypatch.setattr(second, "flush", closed_while_live)
    with pytest.raises(IndexStateError):
        log.flush_upto(log.log_end_offset)
    assert log.recovery_point == 0
