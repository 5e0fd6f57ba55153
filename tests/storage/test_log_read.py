"""Reading a partition log: UnifiedLogTest / LocalLogTest read scenarios (kafka-storage.md §3.3, §3.5)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from storage_helpers import T0, MakeLog, batch, batches_of, crash, log_config, read_all, records

from tidelog.errors import OffsetOutOfRangeError
from tidelog.records import CompressionType
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler

LOG_END, HW = FetchIsolation.LOG_END, FetchIsolation.HIGH_WATERMARK


def assert_non_empty_fetch(log: Log, offset: int, isolation: FetchIsolation, bound: int) -> None:
    info = log.read(offset, 2**31 - 1, isolation, min_one_message=True)
    assert not info.first_entry_incomplete
    found = batches_of(info.records)
    assert found, offset
    assert found[0].base_offset <= offset <= found[0].last_offset
    assert all(b.last_offset < bound for b in found)
    assert info.fetch_offset_metadata.message_offset == offset


def assert_empty_fetch(log: Log, offset: int, isolation: FetchIsolation) -> None:
    info = log.read(offset, 2**31 - 1, isolation, min_one_message=True)
    assert info.records == b"" and not info.first_entry_incomplete
    assert info.fetch_offset_metadata.message_offset == offset


def three_epochs(log: Log) -> None:
    for epoch in range(3):
        for _ in range(5):
            log.append_as_leader(batch(b"v"), leader_epoch=epoch)


def test_fetch_up_to_log_end_offset(make_log: MakeLog) -> None:
    log = make_log()
    three_epochs(log)
    for offset in range(log.log_start_offset, log.log_end_offset):
        assert_non_empty_fetch(log, offset, LOG_END, log.log_end_offset)
    assert_empty_fetch(log, log.log_end_offset, LOG_END)


@pytest.mark.parametrize("isolation", [HW, FetchIsolation.TXN_COMMITTED])
def test_fetch_up_to_high_watermark(make_log: MakeLog, isolation: FetchIsolation) -> None:
    log = make_log()
    three_epochs(log)

    def check() -> None:
        for offset in range(log.log_start_offset, log.high_watermark):
            assert_non_empty_fetch(log, offset, isolation, log.high_watermark)
        for offset in range(log.high_watermark, log.log_end_offset + 1):
            assert_empty_fetch(log, offset, isolation)

    check()
    for hw in (3, 15, 7, 0):
        log.update_high_watermark(hw)
        check()


def test_read_is_bounded_by_high_watermark_across_a_roll(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(1))
    assert log.read(0, 10_000, HW).records == b""
    log.roll()
    assert log.read(0, 10_000, HW).records == b""
    log.update_high_watermark(1)
    assert [b.base_offset for b in batches_of(log.read(0, 10_000, HW).records)] == [0]
    log.append_as_leader(records(1))
    log.roll()
    assert [b.base_offset for b in batches_of(log.read(0, 10_000, HW).records)] == [0]
    log.update_high_watermark(2)
    assert [b.base_offset for b in batches_of(log.read(1, 10_000, HW).records)] == [1]


def test_high_watermark_maintenance(make_log: MakeLog) -> None:
    log = make_log()

    def three(offset: int) -> bytes:
        return batch(b"value", b"value", b"value", keys=[b"a", b"b", b"c"], base_offset=offset)

    assert log.high_watermark == 0
    log.append_as_leader(three(0))
    assert log.high_watermark == 0, "an append does not move the high watermark"
    log.maybe_increment_high_watermark(1)
    assert log.high_watermark == 1
    log.update_high_watermark(5)
    assert log.high_watermark == 3, "clamped to the log end"
    log.append_as_follower(three(3))
    log.update_high_watermark(6)
    assert log.high_watermark == 6
    assert log.maybe_increment_high_watermark(4) == 6, "a leader only moves it forward"
    log.truncate_to(3)
    assert log.high_watermark == 3
    log.append_as_leader(three(0))
    assert (log.high_watermark, log.log_end_offset, log.log_start_offset) == (3, 6, 0)
    log.truncate_fully_and_start_at(4)
    assert (log.log_end_offset, log.log_start_offset, log.high_watermark) == (4, 4, 4)


def test_read_at_log_gap_continues_in_next_segment(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300)
    while log.num_segments == 1:
        log.append_as_leader(batch(b"42"))
    log.segments[0].truncate_to(1)  # a gap: offsets 1.. of the first segment are gone
    info = log.read(1, 200, LOG_END)
    assert batches_of(info.records)[0].last_offset == log.log_end_offset - 1


def test_read_with_min_one_message_and_too_small_max_length(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=72)  # one keyless record per segment
    ids = [*range(50), *range(50, 200, 7)]
    for i in ids:
        log.append_as_follower(batch(str(i).encode(), keys=[None], base_offset=i))
    for offset in range(50, max(ids)):
        empty = log.read(offset, 0, LOG_END, min_one_message=False)
        assert empty.records == b"" and not empty.first_entry_incomplete
        partial = log.read(offset, 1, LOG_END, min_one_message=False)
        assert partial.first_entry_incomplete and len(partial.records) == 1
        whole = log.read(offset, 1, LOG_END, min_one_message=True)
        first = batches_of(whole.records)[0]
        assert first.base_offset == min(i for i in ids if i >= offset)
        assert not whole.first_entry_incomplete


def test_read_out_of_range(make_log: MakeLog, tp_dir: Path) -> None:
    tp_dir.mkdir()
    (tp_dir / "00000000000000001024.log").touch()
    (tp_dir / "00000000000000001024.index").touch()
    log = make_log(segment_bytes=1024)
    assert (log.log_start_offset, log.log_end_offset) == (1024, 1024)
    log.append_as_leader(batch(b"42"))
    assert log.read(1025, 1000, LOG_END).records == b""
    for offset in (0, 1023, 1026):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset, 1000, LOG_END)


def test_read_below_log_start_offset_after_delete_records_is_out_of_range(make_log: MakeLog) -> None:
    log = make_log()
    for _ in range(5):
        log.append_as_leader(records(2))
    log.update_high_watermark(10)
    assert log.delete_records(5) == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000, LOG_END)
    # the batch holding 5 starts at 4: reads return whole batches
    assert batches_of(log.read(5, 1000, LOG_END).records)[0].base_offset == 4
    assert read_all(log)[0].offset == 5


def test_log_start_offset_cannot_pass_the_high_watermark(make_log: MakeLog) -> None:
    log = make_log()
    for _ in range(30):
        log.append_as_leader(batch(b"v"))
    log.update_high_watermark(25)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(26)
    assert log.maybe_increment_log_start_offset(25) is True
    assert log.maybe_increment_log_start_offset(10) is False
    assert log.log_start_offset == 25


def test_delete_records_needs_the_delete_policy_and_minus_one_means_high_watermark(make_log: MakeLog) -> None:
    from tidelog.errors import PolicyViolationError

    log = make_log(cleanup_policy="compact")
    log.append_as_leader(batch(b"v"))
    with pytest.raises(PolicyViolationError):
        log.delete_records(0)
    log.update_config(log_config(cleanup_policy="compact,delete"))
    for _ in range(4):
        log.append_as_leader(batch(b"v"))
    log.update_high_watermark(3)
    assert log.delete_records(-1) == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(-2)


def test_compressed_batches_read_from_their_first_record(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=110)
    log.append_as_leader(batch(b"hello", b"there", compression=CompressionType.GZIP))
    log.append_as_leader(batch(b"alpha", b"beta", compression=CompressionType.GZIP))

    def first_record(offset: int) -> int:
        return next(batches_of(log.read(offset, 4096, LOG_END).records)[0].records()).offset

    assert [first_record(o) for o in range(4)] == [0, 0, 2, 2]


def test_successive_reads_walk_a_multi_segment_log(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=100)
    values = [str(i).encode() for i in range(100)]
    for v in values:
        log.append_as_leader(batch(v, timestamp=T0))
    offset = 0
    for expected in values:
        head = batches_of(log.read(offset, 1 << 20, LOG_END).records)[0]
        assert head.last_offset == offset
        assert next(head.records()).value == expected
        offset = head.last_offset + 1
    assert log.read(100, 1 << 20, LOG_END).records == b""


def test_read_max_length_limits_bytes_but_keeps_first_batch_whole(make_log: MakeLog) -> None:
    log = make_log()
    sizes = []
    for i in range(5):
        data = records(1, base_offset=0, value_size=50 + i)
        sizes.append(len(data))
        log.append_as_leader(data)
    info = log.read(0, sizes[0] + sizes[1] + 10, LOG_END)
    assert len(info.records) == sizes[0] + sizes[1] + 10  # may end mid-batch
    assert [b.base_offset for b in batches_of(info.records)] == [0, 1]
    assert len(log.read(0, 5, LOG_END, min_one_message=True).records) == sizes[0]


def test_read_after_everything_was_compacted_away_returns_empty_at_log_end(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_follower(batch(b"a", base_offset=0))
    log.roll(10)  # next segment starts at 10; offsets 1..9 never existed (compaction-style gap)
    log.append_as_follower(batch(b"b", base_offset=10))
    log.segments[1].truncate_to(10)
    log._log_end_offset = 11  # test seam: keep the log end while the data past offset 0 is gone
    info = log.read(3, 1000, LOG_END)
    assert info.records == b""
    assert info.fetch_offset_metadata.message_offset == 11
    log._log_end_offset = 10


# --- property: every offset reads the batch holding it ----------------------------------------

# (gap before, record count, value size, batches in the same append) per batch; a batch is at
# most ~350 bytes, so a 400-byte segment holds one or two appends and most plans span several.
FOLLOWER_LOG_PLAN = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 60), st.integers(1, 3)),
                             min_size=4, max_size=40)


@settings(max_examples=60, deadline=None)
@example(plan=[(1, 2, 40, 2)] * 12, interval=50, segment_bytes=400, reopen="unclean", picks=list(range(0, 400, 7)))
@given(plan=FOLLOWER_LOG_PLAN, interval=st.sampled_from([0, 1, 50, 400, 4096]),
       segment_bytes=st.sampled_from([400, 700, 1500]), reopen=st.sampled_from(["no", "clean", "unclean"]),
       picks=st.lists(st.integers(0, 1 << 16), min_size=1, max_size=25))
def test_read_of_any_offset_returns_the_batch_holding_it(
    plan: list[tuple[int, int, int, int]], interval: int, segment_bytes: int, reopen: str, picks: list[int]
) -> None:
    """Appends of one to three batches (one index entry per append, §1.12), offset gaps, reopened
    or not: a read of any offset (``pick % log end``) starts at the batch holding it (or the next
    one after a gap)."""
    clock = FakeClock(T0)
    scheduler = FakeScheduler(clock)
    config = log_config(segment_bytes=segment_bytes, index_interval_bytes=interval, segment_index_bytes=4096)
    spans: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        dir = Path(tmp) / "topic-0"
        log = Log.open(dir, config, clock=clock, scheduler=scheduler)
        offset, chunk, pending = 0, b"", 0
        for gap, count, size, together in plan:
            offset += gap
            one = batch(*[b"x" * size] * count, base_offset=offset, timestamp=T0 + offset)
            if len(chunk) + len(one) > segment_bytes:  # an append must fit in a segment
                log.append_as_follower(chunk)
                chunk, pending = b"", 0
            chunk += one
            spans.append((offset, offset + count - 1))
            offset += count
            pending += 1
            if pending >= together:
                log.append_as_follower(chunk)
                chunk, pending = b"", 0
        if chunk:
            log.append_as_follower(chunk)
        if reopen != "no":
            if reopen == "clean":
                log.close()
            else:
                crash(log)
            log = Log.open(dir, config, clock=clock, scheduler=scheduler, had_clean_shutdown=reopen == "clean",
                           recovery_point=0)
        for target in (pick % offset for pick in picks):
            info = log.read(target, 1, LOG_END, min_one_message=True)
            first = batches_of(info.records)[0]
            holder = next((s for s in spans if s[1] >= target))
            assert (first.base_offset, first.last_offset) == holder, target
            assert info.fetch_offset_metadata.message_offset == target
        log.close()
