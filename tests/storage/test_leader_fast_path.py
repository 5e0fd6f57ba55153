"""The leader's common append paths against the general one: the compiled path (one kernel call
checks and writes and keeps the active segment's bookkeeping in its tail:
``storage/_append_kernel.append_produced_batch``, or ``append_crc_checked_batch`` after the log's crc32c for
large batches, on a tail armed by LogSegment.arm_fast_append, the rest in
LogSegment.finish_fast_append; idempotent batches in sequence with a second call), and the Python
path it leaves to a fault plan, the interpreted twin and compressed batches (storage/validator.py's
one-pass check, LogSegment.append_if_no_roll).

The general path (validator's two steps + ``Log._append``) is the oracle: every append goes to
two logs with the same config, clock and jitter draws, one through ``append_as_leader`` (fast path
when it applies) and one through the general path only (``Log._append_as_leader``, a test seam).
Random valid AND invalid inputs must give the same LogAppendInfo or the same error, the same log
state, and byte-identical files (``.log``, ``.index``, ``.timeindex``, leader-epoch checkpoint).
The oracle test runs with no fault plan (the compiled path, where numba is), under a counting
fault plan (the Python path), and in a process with the interpreted twin.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import struct
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import T0, log_config

from tidelog.clock import SYSTEM_CLOCK
from tidelog.errors import InvalidTimestampError, StorageError, TidelogError
from tidelog.records import BatchBuilder, CompressionType, TimestampType, write_crc
from tidelog.records.batch import increment_sequence
from tidelog.records.scan import ACTIVE_IMPLEMENTATION, PRODUCED_COMPRESSED, PRODUCED_IDEMPOTENT, PRODUCED_OK
from tidelog.storage import fileops, files
from tidelog.storage._append_kernel import (
    PRODUCED_INDEX_DUE,
    PRODUCED_SHORT_WRITE,
    PRODUCED_UNARMED,
    TAIL_PRODUCER_CHECKED,
    TAIL_WRITTEN,
)
from tidelog.storage.append_info import AppendOrigin, LogAppendInfo
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler

LONG_MAX = 2**63 - 1
CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]


# --- inputs -----------------------------------------------------------------------------------

@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """Topic configs that make every rule fire now and then: rolls by size, time and full index,
    sparse index entries, compaction's key rule, timestamp bounds, codec changes, flushes."""
    return {
        "segment_bytes": draw(st.sampled_from([400, 1500, 6000, 1 << 30])),
        "segment_ms": draw(st.sampled_from([50, 604800000])),
        "segment_jitter_ms": draw(st.sampled_from([0, 30])),
        "segment_index_bytes": draw(st.sampled_from([24, 64, 10485760])),
        "index_interval_bytes": draw(st.sampled_from([0, 100, 4096])),
        "cleanup_policy": draw(st.sampled_from(["delete", "compact"])),
        "message_timestamp_type": draw(st.sampled_from(["CreateTime", "CreateTime", "LogAppendTime"])),
        "message_timestamp_before_max_ms": draw(st.sampled_from([LONG_MAX, 1000])),
        "message_timestamp_after_max_ms": draw(st.sampled_from([3600000, 1000])),
        "compression_type": draw(st.sampled_from(["producer", "producer", "uncompressed", "lz4"])),
        "max_message_bytes": draw(st.sampled_from([1048588, 700])),
        "flush_messages": draw(st.sampled_from([LONG_MAX, 7])),
    }


_timestamps = st.sampled_from([T0, T0, T0 + 1, T0 - 5000, T0 + 5000, -1, 0])


@st.composite
def produced_batches(draw: st.DrawFn) -> bytearray:
    """A v2 batch as a producer would send it, mostly the common case."""
    count = draw(st.integers(1, 12))
    producer_id = draw(st.sampled_from([-1, -1, -1, 7, 7, 8]))
    stamp_type = draw(st.sampled_from([TimestampType.CREATE_TIME] * 5 + [TimestampType.LOG_APPEND_TIME]))
    builder = BatchBuilder(
        compression=draw(st.sampled_from(CODECS[:1] * 4 + CODECS)),
        timestamp_type=stamp_type,
        producer_id=producer_id, producer_epoch=draw(st.sampled_from([0, 0, 0, 1])) if producer_id >= 0 else -1,
        base_sequence=draw(st.sampled_from([0, -1])) if producer_id >= 0 else -1,
        is_transactional=producer_id >= 0 and draw(st.sampled_from([False, False, True])),
        is_control=draw(st.sampled_from([False] * 15 + [True])),
        log_append_time=T0 + 3 if stamp_type is TimestampType.LOG_APPEND_TIME else None,
    )
    for i in range(count):
        key = draw(st.sampled_from([b"k", b"key-%d" % i, None, b""]))
        value = draw(st.one_of(st.none(), st.binary(max_size=60), st.binary(min_size=300, max_size=900)))
        headers = draw(st.sampled_from([(), (), (("h", b"v"),), (("h", None), ("x", b""))]))
        builder.append(i, draw(_timestamps), key, value, headers)
    return bytearray(builder.build())


@st.composite
def appends(draw: st.DrawFn) -> tuple[Any, int, AppendOrigin, bool]:
    """``(records, leader epoch, origin, resequence)``: a produced batch, often spoiled in one
    way; ``resequence``: the test gives it the next sequence of its producer (see _resequenced)."""
    data = draw(produced_batches())
    damage = draw(st.sampled_from(["none"] * 6 + [
        "flip", "flip_fixed_crc", "base_offset", "truncate", "trailing", "two_batches", "count",
        "delta", "max_timestamp", "epoch_field", "empty"]))
    if damage == "flip":  # a CRC mismatch (or a header that no longer parses)
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= 1 << draw(st.integers(0, 7))
    elif damage == "flip_fixed_crc":  # records that do not parse, or break a rule, with a good CRC
        i = draw(st.integers(21, len(data) - 1))
        data[i] ^= 1 << draw(st.integers(0, 7))
        write_crc(data)
    elif damage == "base_offset":
        data[7] = 5
    elif damage == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "trailing":
        data += bytes(draw(st.integers(1, 30)))
    elif damage == "two_batches":
        data += draw(produced_batches())
    elif damage in ("count", "delta", "max_timestamp"):
        at, width = {"count": (57, 4), "delta": (23, 4), "max_timestamp": (35, 8)}[damage]
        value = int.from_bytes(data[at:at + width], "big", signed=True) + draw(st.sampled_from([-1, 1]))
        data[at:at + width] = value.to_bytes(width, "big", signed=True)
        write_crc(data)
    elif damage == "epoch_field":  # outside the CRC: the leader overwrites it anyway
        data[12:16] = b"\x00\x00\x00\x09"
    elif damage == "empty":
        data = bytearray()
    kind = draw(st.sampled_from([bytes, bytes, bytes, bytearray, memoryview]))
    records = kind(bytes(data)) if kind is not memoryview else memoryview(bytes(data))
    epoch = draw(st.sampled_from([0, 0, 1, 3, -1]))
    origin = draw(st.sampled_from([AppendOrigin.CLIENT] * 8 + [AppendOrigin.COORDINATOR]))
    return records, epoch, origin, draw(st.sampled_from([True, True, True, False]))


def _resequenced(records: Any, log: Log) -> Any:
    """``records`` with the base sequence that continues its producer's in ``log`` (0 for a
    producer ``log`` does not know) and a CRC to match, when it has a producer id: idempotent
    batches then mostly continue their sequence, as a producer's do, and sometimes do not."""
    data = bytearray(bytes(records))
    if len(data) < 61 or data[43] & 0x80:
        return records
    entry = log.producer_state.last_entry(int.from_bytes(data[43:51], "big", signed=True))
    following = 0 if entry is None or entry.last_seq < 0 else increment_sequence(entry.last_seq, 1)
    data[53:57] = following.to_bytes(4, "big", signed=True)
    try:
        write_crc(data)
    except TidelogError:  # a damaged batch whose size field does not fit the bytes: keep it as drawn
        return records
    return memoryview(bytes(data)) if isinstance(records, memoryview) else type(records)(data)


# --- the two logs -----------------------------------------------------------------------------

def _outcome(call: Any, dir: Path) -> tuple[str, Any]:
    try:
        info = call()
    except TidelogError as e:
        return "error", (type(e).__name__, str(e).replace(str(dir), "<dir>"))
    assert type(info) is LogAppendInfo
    return "info", info


def _state(log: Log) -> tuple[Any, ...]:
    producers = log.producer_state.active_producers
    return (log.log_end_offset, log.log_start_offset, log.recovery_point, log.high_watermark,
            [(s.base_offset, s.size, s.max_timestamp_and_offset_so_far) for s in log.segments],
            [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries],
            sorted((p.producer_id, p.producer_epoch, list(p.batches), p.last_timestamp, p.current_txn_first_offset)
                   for p in producers.values()))


def _open_seeded(dir: Path, config: dict[str, Any], clock: FakeClock, scheduler: FakeScheduler) -> Log:
    """A log whose first segment draws the same segment.jitter.ms as the other side's (the draw
    comes from ``random``: unseeded, the two logs could roll on time at different appends)."""
    random.seed(-1)
    return Log.open(dir, log_config(**config), clock=clock, scheduler=scheduler)


def _append_to_both(step: int, fast: Log, general: Log, records: Any, leader_epoch: int,
                    origin: AppendOrigin = AppendOrigin.CLIENT) -> None:
    """``records`` appended to ``fast`` as a client's (the fast paths when they apply) and to
    ``general`` through the general path only: the same answer or error, and the same state after.
    The same segment.jitter.ms draw on both sides, should either roll."""
    random.seed(step)
    got = _outcome(lambda: fast.append_as_leader(records, leader_epoch, origin), fast.dir)
    random.seed(step)
    expected = _outcome(lambda: general._append_as_leader(records, leader_epoch, origin), general.dir)
    assert got == expected, f"step {step}"
    assert _state(fast) == _state(general), f"step {step}"


def _files(dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dir.iterdir()) if p.is_file()}


@pytest.mark.parametrize("fault_plan", [False, True], ids=["no-fault-plan", "counting-fault-plan"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(config=configs(), steps=st.lists(st.tuples(appends(), st.sampled_from([0, 0, 0, 1, 20, 200])), min_size=1, max_size=25))
def test_fast_and_general_paths_write_the_same_files_and_answer_the_same(
    tmp_path_factory: pytest.TempPathFactory, fault_plan: bool, config: dict[str, Any], steps: list[Any]
) -> None:
    root = tmp_path_factory.mktemp("paths")
    clock = FakeClock()
    scheduler = FakeScheduler(clock)
    fast_dir, general_dir = root / "fast" / "topic-0", root / "general" / "topic-0"
    fast, general = (_open_seeded(d, config, clock, scheduler) for d in (fast_dir, general_dir))
    # A counting plan (no rule) fails nothing, but with it installed every write must reach fileops.
    with fileops.inject() if fault_plan else contextlib.nullcontext():
        for step, ((records, epoch, origin, resequence), advance_ms) in enumerate(steps):
            if resequence:
                records = _resequenced(records, general)
            _append_to_both(step, fast, general, records, epoch, origin)
            clock.advance(advance_ms)
    fast.close()
    general.close()
    assert _files(fast_dir) == _files(general_dir)


@st.composite
def common_appends(draw: st.DrawFn) -> tuple[bytes, int]:
    """``(records, leader epoch)``: what most producers send, the batches the compiled path
    writes: uncompressed, CreateTime near the broker's time, no producer id, mostly small, now and
    then of many records; now and then one that a check refuses (a CRC mismatch, a wrong
    maxTimestamp, a keyless record)."""
    b = BatchBuilder()
    large = draw(st.sampled_from([False] * 6 + [True]))  # 4 KiB or more: crc32c, then append_crc_checked_batch
    for i in range(draw(st.integers(12, 30)) if large else draw(st.integers(1, 3))):
        b.append(i, T0 + draw(st.sampled_from([0, 0, 1, 2, -3, 40, 300])),
                 draw(st.sampled_from([b"k", b"k", b"key-%d" % i, None])), bytes(draw(st.sampled_from([5, 5, 60, 400]))))
    data = bytearray(b.build())
    damage = draw(st.sampled_from(["none"] * 10 + ["flip", "max_timestamp"]))
    if damage == "flip":
        data[draw(st.integers(16, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif damage == "max_timestamp":
        data[35:43] = (int.from_bytes(data[35:43], "big") + 1).to_bytes(8, "big")
        write_crc(data)
    return bytes(data), draw(st.sampled_from([0, 0, 0, 0, 1, 3]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), steps=st.lists(st.tuples(common_appends(), st.sampled_from([0, 0, 0, 1, 20, 200])),
                                        min_size=1, max_size=40))
def test_common_batches_on_the_compiled_path_write_what_the_general_path_writes(
    tmp_path_factory: pytest.TempPathFactory, config: dict[str, Any], steps: list[Any]
) -> None:
    """The oracle for the compiled path itself: mostly batches it writes (the oracle above draws
    mostly batches it leaves to Python), on configs that roll by size and time, fill indexes, add
    index entries at every append or rarely, refuse timestamps and keyless records, flush."""
    root = tmp_path_factory.mktemp("common")
    clock = FakeClock()
    scheduler = FakeScheduler(clock)
    fast_dir, general_dir = root / "fast" / "topic-0", root / "general" / "topic-0"
    fast, general = (_open_seeded(d, config, clock, scheduler) for d in (fast_dir, general_dir))
    for step, ((records, epoch), advance_ms) in enumerate(steps):
        _append_to_both(step, fast, general, records, epoch)
        clock.advance(advance_ms)
    fast.close()
    general.close()
    assert _files(fast_dir) == _files(general_dir)


def test_the_common_batch_oracle_mostly_takes_the_compiled_path(tmp_path: Path) -> None:
    """The oracle above is only worth its examples if they reach the compiled path: on a plain
    config, a run of common batches is written by the kernel, index entries included."""
    log = Log.open(tmp_path / "topic-0", log_config(index_interval_bytes=100), clock=FakeClock(),
                   scheduler=FakeScheduler(FakeClock()))
    try:
        if log._append_produced is None:
            pytest.skip("the interpreted twin has no compiled path")
        calls = _spy_kernel(log)
        for i in range(40):
            log.append_as_leader(_one_record(ts=T0 + i))
        # All but the segment's first (the second arms the tail, then writes); every other one or so
        # with an index entry due (a 1-record batch is ~70 bytes), which the kernel adds itself:
        # none is left to Python (PRODUCED_INDEX_DUE).
        assert calls.count(PRODUCED_OK) == 39 and PRODUCED_INDEX_DUE not in calls
        segment = log.active_segment
        assert segment.offset_index.entries == segment.time_index.entries >= 10  # a newer timestamp each time
    finally:
        log.close()


def test_large_batches_take_the_compiled_path_and_a_crc_mismatch_the_general_one(tmp_path: Path) -> None:
    """A batch of CRC_IN_KERNEL_BELOW bytes or more: crc32c in the log, then the kernel that
    skips the CRC writes it, index entry included; a CRC mismatch never reaches that kernel and
    gets the general path's error, with nothing written."""
    log = Log.open(tmp_path / "topic-0", log_config(), clock=FakeClock(), scheduler=FakeScheduler(FakeClock()))
    try:
        if log._append_produced is None:
            pytest.skip("the interpreted twin has no compiled path")
        large_calls, general_calls = _spy_kernel(log, large=True), _spy_general_path(log)
        for i in range(5):
            log.append_as_leader(_one_record(ts=T0 + i, value_size=6000))
        assert large_calls == [PRODUCED_UNARMED, PRODUCED_UNARMED] + [PRODUCED_OK] * 4  # the first: general
        assert len(general_calls) == 1 and log.active_segment.offset_index.entries == 4
        damaged = bytearray(_one_record(ts=T0, value_size=6000))
        damaged[-1] ^= 1
        size = log.active_segment.size
        with pytest.raises(TidelogError, match="stored crc"):
            log.append_as_leader(bytes(damaged))
        assert len(large_calls) == 6 and len(general_calls) == 2
        assert log.active_segment.size == size and log.log_end_offset == 5
    finally:
        log.close()


@st.composite
def idempotent_appends(draw: st.DrawFn) -> tuple[int, int, str, int, int]:
    """``(producer id, producer epoch, sequence kind, records, leader epoch)``: what a few
    idempotent producers send, mostly in sequence, sometimes a retry, a gap or a new epoch."""
    return (draw(st.sampled_from([7, 8])), draw(st.sampled_from([0, 0, 0, 0, 1, 2])),
            draw(st.sampled_from(["next"] * 6 + ["retry", "gap", "zero", "wrap"])), draw(st.integers(1, 4)),
            draw(st.sampled_from([0, 0, 1])))


def _idempotent_batch(log: Log, producer_id: int, epoch: int, kind: str, count: int, rng: random.Random) -> bytes:
    entry = log.producer_state.last_entry(producer_id)
    last = -1 if entry is None else entry.last_seq
    base = {"next": 0 if last < 0 else increment_sequence(last, 1), "retry": max(last - count + 1, 0),
            "gap": increment_sequence(max(last, 0), 2), "zero": 0, "wrap": 2**31 - 2}[kind]
    b = BatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=base)
    for i in range(count):
        b.append(i, T0 + rng.randrange(3), b"key-%d" % rng.randrange(4), bytes(rng.randrange(0, 40)))
    return b.build()


@pytest.mark.parametrize("fault_plan", [False, True], ids=["no-fault-plan", "counting-fault-plan"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), steps=st.lists(idempotent_appends(), min_size=1, max_size=30))
def test_idempotent_producers_get_the_same_answers_files_and_producer_state_on_both_paths(
    tmp_path_factory: pytest.TempPathFactory, fault_plan: bool, config: dict[str, Any], steps: list[Any]
) -> None:
    """The oracle for batches with a producer id: in sequence (the fast path), retried
    (duplicates: the original offsets), out of order, fenced, a new epoch, sequences wrapping."""
    root = tmp_path_factory.mktemp("idempotent")
    clock = FakeClock()
    scheduler = FakeScheduler(clock)
    fast_dir, general_dir = root / "fast" / "topic-0", root / "general" / "topic-0"
    fast, general = (_open_seeded(d, config, clock, scheduler) for d in (fast_dir, general_dir))
    rng = random.Random(0)
    with fileops.inject() if fault_plan else contextlib.nullcontext():
        for step, (producer_id, epoch, kind, count, leader_epoch) in enumerate(steps):
            records = _idempotent_batch(general, producer_id, epoch, kind, count, rng)
            _append_to_both(step, fast, general, records, leader_epoch)
            clock.advance(1)
    fast.close()
    general.close()
    assert _files(fast_dir) == _files(general_dir)  # producer snapshots included


@pytest.mark.skipif(os.environ.get("TIDELOG_PURE_PYTHON") == "1", reason="this is the interpreted run already")
def test_the_oracle_holds_for_the_interpreted_twin() -> None:
    """The same oracle test in a process where the scan kernels run interpreted (no compiled path)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "write_the_same_files or compiled_path_is_taken_only"],
        env={**os.environ, "TIDELOG_PURE_PYTHON": "1"}, capture_output=True, text=True, timeout=900,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


# --- the fast path is taken, and only when it should be ----------------------------------------

def _spy_general_path(log: Log) -> list[int]:
    """Count calls of the general path (test seam: wraps a private method of one instance)."""
    calls: list[int] = []
    general = log._append_as_leader

    def spy(*args: Any) -> LogAppendInfo:
        calls.append(1)
        return general(*args)

    log._append_as_leader = spy  # type: ignore[method-assign]
    return calls


def _one_record(ts: int = T0, value_size: int = 5, **builder: Any) -> bytes:
    b = BatchBuilder(**builder)
    b.append(0, ts, b"key", b"value"[:value_size] if value_size <= 5 else bytes(value_size))
    return b.build()


@pytest.mark.parametrize("codec", CODECS)
def test_common_batches_take_the_fast_path_after_the_segments_first_append(make_log: Any, codec: int) -> None:
    log = make_log()
    calls = _spy_general_path(log)
    for _ in range(5):
        log.append_as_leader(_one_record(compression=codec))
    assert len(calls) == 1  # the first append loads the segment's lazy state (index files, max timestamp)
    assert log.log_end_offset == 5


@pytest.mark.parametrize("builder,overrides", [
    ({"producer_id": 3, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True}, {}),
    ({"producer_id": 3, "producer_epoch": 0, "base_sequence": 0, "compression": CompressionType.GZIP}, {}),
    ({"timestamp_type": TimestampType.LOG_APPEND_TIME, "log_append_time": T0}, {}),
    ({}, {"message_timestamp_type": "LogAppendTime"}),
    ({"compression": CompressionType.GZIP}, {"compression_type": "lz4"}),
])
def test_batches_that_need_a_rewrite_or_producer_state_take_the_general_path(
    make_log: Any, builder: dict[str, Any], overrides: dict[str, Any]
) -> None:
    log = make_log(**overrides)
    calls = _spy_general_path(log)
    for _ in range(3):
        log.append_as_leader(_one_record(**builder))
    assert len(calls) == 3


@pytest.mark.parametrize("fault_plan", [False, True], ids=["compiled-check", "python-path"])
def test_idempotent_batches_in_sequence_take_the_fast_path_and_the_rest_the_general(
    make_log: Any, fault_plan: bool
) -> None:
    """Uncompressed batches with a producer id: written on the fast path while they continue
    their producer's sequence; a retry (duplicate), a gap, a new epoch and an older epoch are
    producer state's to answer, on the general path."""
    log = make_log()
    log.append_as_leader(_one_record())  # loads the segment's lazy state
    calls = _spy_general_path(log)
    with fileops.inject() if fault_plan else contextlib.nullcontext():
        first = [log.append_as_leader(_one_record(producer_id=3, producer_epoch=0, base_sequence=seq)) for seq in range(4)]
        assert [info.first_offset for info in first] == [1, 2, 3, 4] and calls == []
        retry = log.append_as_leader(_one_record(producer_id=3, producer_epoch=0, base_sequence=2))
        assert retry.first_offset == 3 and log.log_end_offset == 5 and len(calls) == 1  # the original offsets
        with pytest.raises(TidelogError, match="sequence"):
            log.append_as_leader(_one_record(producer_id=3, producer_epoch=0, base_sequence=9))
        log.append_as_leader(_one_record(producer_id=3, producer_epoch=1, base_sequence=0))  # a new epoch
        with pytest.raises(TidelogError, match="[Ee]poch"):
            log.append_as_leader(_one_record(producer_id=3, producer_epoch=0, base_sequence=4))
        assert len(calls) == 4
        log.append_as_leader(_one_record(producer_id=3, producer_epoch=1, base_sequence=1))
        assert len(calls) == 4
    entry = log.producer_state.last_entry(3)
    assert entry is not None and (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (1, 1, 6)


def test_idempotent_batches_in_sequence_are_written_by_the_kernel(make_log: Any) -> None:
    """Without a fault plan, an idempotent batch goes to the kernel twice: checked and not written
    (PRODUCED_IDEMPOTENT), then, producer state having nothing to say, written (TAIL_PRODUCER_CHECKED
    set for that one call). A retry never gets the second call."""
    log = make_log()
    if log._append_produced is None:
        pytest.skip("the interpreted twin has no compiled path")
    log.append_as_leader(_one_record())  # loads the segment's lazy state
    calls, general_calls = _spy_kernel(log), _spy_general_path(log)
    for seq in range(3):
        log.append_as_leader(_one_record(producer_id=3, producer_epoch=0, base_sequence=seq))
    assert calls == [PRODUCED_UNARMED, PRODUCED_IDEMPOTENT, PRODUCED_OK] + [PRODUCED_IDEMPOTENT, PRODUCED_OK] * 2
    assert general_calls == [] and log.active_segment.append_state.tail_slots[TAIL_PRODUCER_CHECKED] == 0
    assert log.append_as_leader(_one_record(producer_id=3, producer_epoch=0, base_sequence=1)).first_offset == 2
    assert calls[-1] == PRODUCED_IDEMPOTENT and len(general_calls) == 1 and log.log_end_offset == 4
    entry = log.producer_state.last_entry(3)
    assert entry is not None and (entry.last_seq, entry.last_data_offset) == (2, 3)


def test_a_roll_goes_through_the_general_path_then_the_new_segment_is_fast_again(make_log: Any) -> None:
    log = make_log(segment_bytes=3 * len(_one_record()))
    calls = _spy_general_path(log)
    for _ in range(7):
        log.append_as_leader(_one_record())
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    # The first append, each rolling append, and the first append to a rolled segment (which
    # opens that segment's lazy index files) take the general path: appends 0, 3, 4 and 6.
    assert len(calls) == 4


# --- the compiled path: taken when it should be; its writes fail as the Python path's do ---------

def _spy_kernel(log: Log, large: bool = False) -> list[int]:
    """The statuses of the compiled check-and-write kernel's calls (test seam: wraps one instance's;
    ``large``: the one for batches whose CRC the log checked, append_crc_checked_batch)."""
    calls: list[int] = []
    kernel = log._append_crc_checked if large else log._append_produced
    assert kernel is not None

    def spy(*args: Any) -> tuple[int, int, int]:
        result = kernel(*args)
        calls.append(result[0])
        return result

    if large:
        log._append_crc_checked = spy
    else:
        log._append_produced = spy
    return calls


def test_the_compiled_path_is_taken_only_without_a_fault_plan(make_log: Any) -> None:
    log = make_log()
    if ACTIVE_IMPLEMENTATION == "python":
        assert log._append_produced is None  # the interpreted twin: the Python path only
        return
    kernel_calls, large_calls, general_calls = _spy_kernel(log), _spy_kernel(log, large=True), _spy_general_path(log)
    for _ in range(3):
        log.append_as_leader(_one_record())
    with fileops.inject() as stats:  # a counting plan: every write must go through fileops
        log.append_as_leader(_one_record())
        log.append_as_leader(_one_record(value_size=5000))
    log.append_as_leader(_one_record(compression=CompressionType.GZIP))  # checked in Python
    log.append_as_leader(_one_record(value_size=5000))  # its CRC by crc32c, then the other kernel
    # The first append finds the tail unarmed, and an empty segment cannot be armed: it loads the
    # segment's state (general path). The second arms the tail; then two compiled appends; the
    # kernel leaves the compressed batch to Python. The large batch goes to the other kernel,
    # which writes it (no index entry due: the bytes before it are below index.interval.bytes).
    assert kernel_calls == [PRODUCED_UNARMED, PRODUCED_UNARMED, PRODUCED_OK, PRODUCED_OK, PRODUCED_COMPRESSED]
    assert large_calls == [PRODUCED_OK]
    assert len(general_calls) == 1
    assert stats.ops[fileops.FileOp.WRITE] == 2
    assert log.log_end_offset == 7


def test_the_compiled_path_reads_the_system_clock_itself(tmp_path: Path) -> None:
    import time

    log = Log.open(tmp_path / "topic-0", log_config(message_timestamp_after_max_ms=60_000), clock=SYSTEM_CLOCK,
                   scheduler=FakeScheduler(FakeClock()))
    try:
        now = time.time_ns() // 1_000_000
        for _ in range(3):
            assert log.append_as_leader(_one_record(ts=now)).max_timestamp == now
        with pytest.raises(InvalidTimestampError):
            log.append_as_leader(_one_record(ts=now + 3_600_000))
        assert log.log_end_offset == 3
    finally:
        log.close()


def _failing_append(log: Log, fault_plan: bool) -> StorageError:
    """The StorageError of an append whose write fails (the segment's descriptor is read-only)."""
    log.append_as_leader(_one_record())  # the segment's state is loaded: the next append is a common one
    records = log.active_segment.log
    os.close(records._descriptor())
    records._fd = os.open(records.path, os.O_RDONLY)  # test seam: writes now fail with EBADF
    log.active_segment.append_state.invalidate()  # (a new descriptor: the state is armed again with it)
    with fileops.inject() if fault_plan else contextlib.nullcontext():
        with pytest.raises(StorageError) as raised:
            log.append_as_leader(_one_record())
    assert log.log_end_offset == 1 and log.active_segment.size == len(_one_record())
    return raised.value


def test_a_failed_write_raises_what_the_python_path_raises(make_log: Any, tmp_path: Path) -> None:
    compiled = _failing_append(make_log(), fault_plan=False)
    python = _failing_append(make_log(dir=tmp_path / "python" / "topic-0"), fault_plan=True)
    assert compiled.message == python.message == f"append failed: {os.strerror(errno.EBADF)}"
    assert compiled.position == python.position == len(_one_record())
    assert compiled.path is not None and compiled.path.name == python.path.name  # type: ignore[union-attr]
    assert isinstance(compiled.__cause__, OSError) and compiled.__cause__.errno == errno.EBADF


@pytest.mark.parametrize("first_write", [10, 0, -errno.EINTR])
def test_a_short_or_interrupted_compiled_write_is_continued(tmp_path: Path, first_write: int) -> None:
    """FileRecords.finish_produced after a kernel write that stopped early (here ``first_write``
    bytes of the patched batch were written, or the write failed with EINTR): the rest is written."""
    from tidelog.storage.file_records import FileRecords

    records = FileRecords.open(tmp_path / "00000000000000000000.log", file_already_exists=False)
    batch = _one_record()
    patched = struct.pack(">qii", 42, len(batch) - 12, 3) + batch[16:]
    if first_write > 0:
        os.pwrite(records.descriptor(), patched[:first_write], 0)
    if first_write == 0:  # nothing written, and the retry through fileops writes nothing either
        with fileops.inject(fileops.FaultRule(ops=frozenset({fileops.FileOp.WRITE}), error=errno.ENOSPC)):
            with pytest.raises(StorageError, match="No space left"):
                records.finish_produced(batch, first_write, 42, 3)
        return
    records.finish_produced(batch, first_write, 42, 3)
    assert records.size_in_bytes == len(batch)
    assert records.read(0, 1 << 16) == patched


def test_a_failed_compiled_write_names_the_path_and_position(tmp_path: Path) -> None:
    from tidelog.storage.file_records import FileRecords

    records = FileRecords.open(tmp_path / "00000000000000000000.log", file_already_exists=False)
    with pytest.raises(StorageError) as raised:
        records.finish_produced(_one_record(), -errno.ENOSPC, 0, 0)
    assert raised.value.message == f"append failed: {os.strerror(errno.ENOSPC)}"
    assert raised.value.path == records.path and raised.value.position == 0
    assert records.size_in_bytes == 0


def test_a_short_compiled_write_ends_with_the_files_and_state_of_the_general_path(make_log: Any,
                                                                                  tmp_path: Path) -> None:
    """A kernel write that stopped early leaves the tail untouched: LogSegment.finish_fast_append
    finishes the write and does the bookkeeping (index entries included), as the general path would."""
    compiled, general = make_log(index_interval_bytes=100), make_log(dir=tmp_path / "general" / "topic-0",
                                                                     index_interval_bytes=100)
    if compiled._append_produced is None:
        pytest.skip("the interpreted twin has no compiled path")
    kernel = compiled._append_produced

    def short_kernel(data: bytes, tail: Any, now: int, base_offset: int, leader_epoch: int) -> Any:
        before = tail.copy()
        result = kernel(data, tail, now, base_offset, leader_epoch)
        if result[0] not in (PRODUCED_OK, PRODUCED_INDEX_DUE):
            return result
        tail[:] = before  # as if the write had stopped after 7 bytes: the kernel then updates nothing
        tail[TAIL_WRITTEN] = 7
        return PRODUCED_SHORT_WRITE, result[1], result[2]

    compiled._append_produced = short_kernel
    for i in range(12):
        batch = _one_record(ts=T0 + i)
        assert compiled.append_as_leader(batch, leader_epoch=2) == general._append_as_leader(batch, 2, AppendOrigin.CLIENT)
    compiled.close(), general.close()
    for name in ("00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"):
        assert (compiled.dir / name).read_bytes() == (general.dir / name).read_bytes(), name


# --- durability: the bytes are in the OS when append_as_leader returns --------------------------

_KILLED_AFTER_APPEND = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from tidelog.records import BatchBuilder
    from tidelog.storage.log import Log
    log = Log.open(Path(sys.argv[1]))
    for i in range(int(sys.argv[2])):
        b = BatchBuilder()
        b.append(0, 1_700_000_000_000, b"k%d" % i, b"v%d" % i)
        log.append_as_leader(b.build())
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush: only what the OS already holds
""")


def test_appended_bytes_survive_a_sigkill_right_after_append_returns(tmp_path: Path) -> None:
    dir = tmp_path / "topic-0"
    done = subprocess.run([sys.executable, "-c", _KILLED_AFTER_APPEND, str(dir), "40"],
                          env={**os.environ}, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    reopened = Log.open(dir)  # unclean: recovery keeps every complete, valid batch
    try:
        assert reopened.log_end_offset == 40
        assert files.log_file(dir, 0).stat().st_size == reopened.active_segment.size
    finally:
        reopened.close()


def test_another_process_reads_the_batch_as_soon_as_append_returns(make_log: Any) -> None:
    log = make_log()
    for i in range(3):
        info = log.append_as_leader(_one_record())
        read = subprocess.run([sys.executable, "-c", "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())",
                               str(files.log_file(log.dir, 0))], capture_output=True, timeout=60, check=True)
        assert len(read.stdout) == log.active_segment.size
        assert int.from_bytes(read.stdout[-len(_one_record()):][:8], "big") == info.first_offset == i
