"""The high watermark's byte position: located once, kept while it holds, dropped when it moves
or the bytes under it change (truncation, segment deletion)."""

from __future__ import annotations

from storage_helpers import MakeLog
from storage_helpers import batch, read_all

from tidelog.storage.fetch_info import FetchIsolation

HW = FetchIsolation.HIGH_WATERMARK


def _offsets(log, isolation=HW) -> list[int]:
    return [r.offset for r in read_all(log, isolation=isolation)]


def test_reads_stop_at_a_high_watermark_below_the_log_end_across_appends(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300)
    for i in range(12):
        log.append_as_leader(batch(b"v%d" % i))
    log.update_high_watermark(7)
    assert _offsets(log) == list(range(7))
    for i in range(5):  # the log end moves on; the bound must not
        log.append_as_leader(batch(b"w%d" % i))
    assert _offsets(log) == list(range(7))
    log.update_high_watermark(15)
    assert _offsets(log) == list(range(15))


def test_truncation_below_the_high_watermark_rebounds_reads(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300)
    for i in range(12):
        log.append_as_leader(batch(b"v%d" % i))
    log.update_high_watermark(9)
    assert _offsets(log) == list(range(9))
    log.truncate_to(5)
    assert log.high_watermark == 5 and _offsets(log) == list(range(5))
    for i in range(6):
        log.append_as_leader(batch(b"n%d" % i))
    log.update_high_watermark(8)
    records = read_all(log, isolation=HW)
    assert [r.offset for r in records] == list(range(8))
    assert [r.value for r in records[5:]] == [b"n0", b"n1", b"n2"]  # the new bytes, not stale positions


def test_full_truncation_drops_the_located_high_watermark(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300)
    for i in range(10):
        log.append_as_leader(batch(b"v%d" % i))
    log.update_high_watermark(6)
    assert _offsets(log) == list(range(6))
    log.truncate_fully_and_start_at(20)
    for i in range(4):
        log.append_as_leader(batch(b"x%d" % i))
    log.update_high_watermark(22)
    assert _offsets(log) == [20, 21]


def test_high_watermark_back_at_the_same_offset_over_new_bytes_is_located_again(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=100_000)
    for i in range(12):
        log.append_as_leader(batch(b"v%d" % i))
    log.update_high_watermark(6)
    assert _offsets(log) == list(range(6))  # locates offset 6 in the segment
    log.truncate_to(3)  # no read in between: the bytes under offset 6 are replaced
    for i in range(9):
        log.append_as_leader(batch(b"a much longer value %d" % i))
    log.update_high_watermark(6)
    records = read_all(log, isolation=HW)
    assert [r.offset for r in records] == list(range(6))
    assert [r.value for r in records[3:]] == [b"a much longer value 0", b"a much longer value 1", b"a much longer value 2"]
