"""Compaction across both tiers of a tiered compacted log (file:// store; the S3 server in one case).

Each case runs the same history on a tiered log (early segments copied, then deleted locally by
``local.retention.ms=0``) and on a plain compacted log, with clocks in step, and checks that a
cleaning pass leaves, as a fresh reader of the store plus the local tail shows, exactly the
records the plain log keeps: latest value per key across both tiers, offsets preserved,
tombstones kept until their delete horizon and then removed."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_clean_helpers import (
    TP,
    Tier,
    append,
    both_tiers,
    clean,
    cleaner,
    fresh,
    local_records,
    local_retention,
    open_log,
    remote_records,
    roll,
    segment_objects,
    stored_segment_objects,
)

from tidelog.cleaner.remote_view import WORKSPACE_DIR
from tidelog.remote.copy import clean_unreferenced
from tidelog.remote.metadata import RemoteLogSegmentState
from tidelog.remote.store import ArrowRemoteStore, RemoteStore
from tidelog.storage.log import Log
from tidelog.testing import FakeClock


def _history(log: Log, clock: FakeClock, tier: Tier | None) -> None:
    """30 keys, sealed (copied and freed locally when tiered), then every other key updated."""
    append(log, [(k, f"a{k}") for k in range(30)])
    roll(log)
    clock.advance(10)
    if tier is not None:
        tier.copy(log)
        local_retention(log, clock)
    append(log, [(k, f"b{k}") for k in range(0, 30, 2)])
    roll(log)


def _pair(tmp_path: Path, store: RemoteStore, **overrides: str) -> tuple[Log, Tier, FakeClock, Log, FakeClock]:
    clock, plain_clock = FakeClock(), FakeClock()
    tier = Tier(store, clock)
    tiered = open_log(tmp_path / "tiered" / "events-0", clock, tiered=True, **overrides)
    plain = open_log(tmp_path / "plain" / "events-0", plain_clock, tiered=False, **overrides)
    return tiered, tier, clock, plain, plain_clock


def _file_store(tmp_path: Path) -> ArrowRemoteStore:
    return ArrowRemoteStore((tmp_path / "store").as_uri())


def _check_clean_pass(tmp_path: Path, store: RemoteStore) -> None:
    tiered, tier, clock, plain, plain_clock = _pair(tmp_path, store)
    _history(tiered, clock, tier)
    _history(plain, plain_clock, None)
    local_start = tiered.local_log_start_offset
    assert local_start >= 30 and tiered.log_start_offset == 0, "the early segments are only remote"
    old = {s.id for s in fresh(store).finished_segments()}

    c, remote = cleaner(clock, tier)
    end, _ = c.clean_pass(tiered, TP, 0, tiered.active_segment.base_offset)
    assert end == clean(plain, plain_clock, None)

    result = both_tiers(store, tiered)
    assert result == local_records(plain), "both tiers keep what an untiered log keeps"
    latest = {int(k): (o, v) for o, k, v in result}
    assert latest == {k: ((30 + k // 2, f"b{k}".encode()) if k % 2 == 0 else (k, f"a{k}".encode())) for k in range(30)}
    assert len(result) == 30, "one record per key: offsets kept, superseded records gone"

    reader = fresh(store)
    new = {s.id for s in reader.finished_segments()}
    replaced = old - new
    assert replaced and new - old, "cleaned remote segments are new objects"
    assert {s.id for s in reader.unreferenced()} == replaced
    assert all(s.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED for s in reader.unreferenced())
    spans = [(s.start_offset, s.end_offset) for s in reader.finished_segments()]
    assert spans[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:])), spans
    assert stored_segment_objects(store) > segment_objects(store), "replaced objects wait for file.delete.delay.ms"

    assert remote is not None
    clock.advance(59_000)  # the copy pass's cleanup waits file.delete.delay.ms from the swap's time
    assert clean_unreferenced(store, fresh(store), now_ms=clock.milliseconds(), delete_delay_ms=60_000) == []
    clock.advance(1_000)
    gone = clean_unreferenced(store, fresh(store), now_ms=clock.milliseconds(), delete_delay_ms=60_000)
    assert {s.id for s in gone} == replaced
    assert stored_segment_objects(store) == segment_objects(store), "old objects gone, nothing orphaned"
    assert fresh(store).unreferenced() == []
    assert not any((tiered.dir.parent / WORKSPACE_DIR).rglob("*.log")), "the workspace is emptied"

    tier.copy(tiered)  # the copy pass goes on from the highest remote offset
    spans = [(s.start_offset, s.end_offset) for s in fresh(store).finished_segments()]
    assert all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:])), spans
    assert spans[-1][1] + 1 == tiered.active_segment.base_offset, spans
    tiered.close()
    plain.close()


def test_a_clean_pass_compacts_both_tiers_as_an_untiered_log(tmp_path: Path) -> None:
    _check_clean_pass(tmp_path, _file_store(tmp_path))


def test_a_clean_pass_on_the_s3_server(tmp_path: Path, object_store: object, bucket: str) -> None:
    credentials = object_store.credentials  # type: ignore[attr-defined]
    store = ArrowRemoteStore(f"s3://{bucket}/tier", {
        "endpoint.url": credentials.endpoint_url, "access.key": credentials.access_key,
        "secret.key": credentials.secret_key, "region": credentials.region, "retry.max.attempts": "1"})
    _check_clean_pass(tmp_path, store)


def test_tombstones_in_remote_segments_follow_the_delete_horizon(tmp_path: Path) -> None:
    store = _file_store(tmp_path)
    tiered, tier, clock, plain, plain_clock = _pair(tmp_path, store)
    for log, c, t in ((tiered, clock, tier), (plain, plain_clock, None)):
        append(log, [(k, f"a{k}") for k in range(20)] + [(3, None), (7, None)])
        roll(log)
        c.advance(10)
        if t is not None:
            t.copy(log)
            local_retention(log, c)
        append(log, [(1, "b1")])
        roll(log)
    assert tiered.local_log_start_offset > 21, "the tombstones are only remote"

    first = clean(tiered, clock, tier)
    assert clean(plain, plain_clock, None) == first
    kept = both_tiers(store, tiered)
    assert kept == local_records(plain)
    assert (20, b"3", None) in kept and (21, b"7", None) in kept, "tombstones kept until their horizon"
    assert not any(k in (b"3", b"7") and v is not None for _, k, v in kept)

    for log, c in ((tiered, clock), (plain, plain_clock)):
        c.advance(1_001)  # past delete.retention.ms since the first clean stamped the horizon
        append(log, [(2, "b2")])
        roll(log)
    assert clean(tiered, clock, tier, first) == clean(plain, plain_clock, None, first)
    kept = both_tiers(store, tiered)
    assert kept == local_records(plain)
    assert not any(k in (b"3", b"7") for _, k, _ in kept), "tombstones past their horizon are gone"


def test_a_group_whose_records_all_go_keeps_its_offsets(tmp_path: Path) -> None:
    store = _file_store(tmp_path)
    tiered, tier, clock, plain, plain_clock = _pair(tmp_path, store)
    for log, c, t in ((tiered, clock, tier), (plain, plain_clock, None)):
        append(log, [(k, f"a{k}") for k in range(14)])
        roll(log)
        c.advance(10)
        if t is not None:
            t.copy(log)
            local_retention(log, c)
        append(log, [(k, f"b{k}") for k in range(14)])
        roll(log)
    clean(tiered, clock, tier)
    clean(plain, plain_clock, None)
    assert both_tiers(store, tiered) == local_records(plain)
    reader = fresh(store)
    segments = reader.finished_segments()
    assert segments[0].start_offset == 0 and segments[0].segment_size_in_bytes == 0, "an empty segment keeps 0..13"
    assert reader.highest_offset() == 13 and remote_records(store) == []
    assert segments[0].segment_leader_epochs == ((0, 0),)


def test_local_groups_never_mix_copied_and_uncopied_segments(tmp_path: Path) -> None:
    """The hazard: a cleaned group starting at or below the highest remote offset and ending past
    it. The copy pass must still copy every offset past it, once."""
    store = _file_store(tmp_path)
    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(tmp_path / "logs" / "events-0", clock, tiered=True, local_retention_ms="-2")
    for round in range(3):
        append(log, [(k, f"{round}-{k}") for k in range(12)])
        roll(log)
        if round == 0:
            tier.copy(log)
    copied = log.highest_offset_in_remote_storage
    assert 0 < copied < log.active_segment.base_offset - 1
    clean(log, clock, tier)
    assert any(s.base_offset <= copied for s in log.segments[:-1])
    tier.copy(log)
    spans = [(s.start_offset, s.end_offset) for s in fresh(store).finished_segments()]
    assert spans[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:])), spans
    assert spans[-1][1] + 1 == log.active_segment.base_offset, "every sealed offset is remote, once"
    log.close()


def test_the_dirty_ratio_counts_remote_bytes(tmp_path: Path) -> None:
    from tidelog.cleaner.plan import log_to_clean

    store = _file_store(tmp_path)
    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(tmp_path / "logs" / "events-0", clock, tiered=True)
    _history(log, clock, tier)
    _, remote = cleaner(clock, tier)
    assert remote is not None
    assert remote.spans(TP, log) == [], "nothing counted before the metadata is loaded"
    remote.load([(TP, log)])
    spans = remote.spans(TP, log)
    remote_bytes = sum(size for _, _, size in spans)
    assert remote_bytes > 0 and all(end < log.local_log_start_offset for _, end, _ in spans)
    local = log_to_clean(TP, log, None, clock.milliseconds())
    both = log_to_clean(TP, log, None, clock.milliseconds(), remote_spans=spans)
    assert both.cleanable_bytes == local.cleanable_bytes + remote_bytes
    after = log_to_clean(TP, log, log.active_segment.base_offset, clock.milliseconds(), remote_spans=spans)
    assert after.clean_bytes >= remote_bytes and after.cleanable_bytes == 0
    log.close()


@pytest.mark.parametrize("abort_at", [1, 2])
def test_an_aborted_pass_leaves_the_old_set_and_no_staged_objects(tmp_path: Path, abort_at: int) -> None:
    from tidelog.errors import LogCleaningAbortedError
    from tidelog.cleaner.clean import Cleaner, InProcessEngine
    from tidelog.cleaner.remote_clean import RemoteCleaning
    from remote_clean_helpers import BUFFERS

    store = _file_store(tmp_path)
    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(tmp_path / "logs" / "events-0", clock, tiered=True)
    _history(log, clock, tier)
    before = both_tiers(store, log)
    old = [s.id for s in fresh(store).finished_segments()]
    calls = []

    def check(tp: object) -> None:
        calls.append(tp)
        if tier.metadata is not None and len([s for s in tier.metadata.segments()
                                              if s.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED]) >= abort_at:
            raise LogCleaningAbortedError("aborted", topic_partition=str(TP))

    c = Cleaner(InProcessEngine(BUFFERS), clock, check_done=check, remote=RemoteCleaning(tier.source))
    with pytest.raises(LogCleaningAbortedError):
        c.clean_pass(log, TP, 0, log.active_segment.base_offset)
    assert [s.id for s in fresh(store).finished_segments()] == old
    assert both_tiers(store, log) == before
    assert fresh(store).unreferenced() == [] and stored_segment_objects(store) == segment_objects(store)
    log.close()


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_clean_in_several_map_passes_matches_the_untiered_one(tmp_path: Path, policy: str) -> None:
    """An offset map of 9 keys: the clean goes on pass after pass, each one reading the remote
    tier again; the records kept are still the untiered log's, with either compacted policy."""
    from remote_clean_helpers import clean_all

    from tidelog.cleaner.clean import CleanerBuffers

    small = CleanerBuffers(dedupe_buffer_size=24 * 10, load_factor=0.9, io_buffer_size=1 << 16,
                           max_io_buffer_size=1 << 20)
    store = _file_store(tmp_path)
    tiered, tier, clock, plain, plain_clock = _pair(tmp_path, store, cleanup_policy=policy, retention_ms="-1")
    _history(tiered, clock, tier)
    _history(plain, plain_clock, None)
    done = clean_all(tiered, clock, tier, small)
    assert done == clean_all(plain, plain_clock, None, small) and done[1] > 1
    assert both_tiers(store, tiered) == local_records(plain)
    assert len({k for _, k, _ in both_tiers(store, tiered)}) == len(both_tiers(store, tiered)) == 30


def test_aborted_transactions_in_remote_segments_are_dropped_as_locally(tmp_path: Path) -> None:
    """The aborted data is in one remote segment, its ABORT marker and .txnindex entry in the
    next: the pass reads the remote .txnindex objects (and goes on into later segments)."""
    from cleaner_helpers import keyed_batch

    from tidelog.records.control import build_end_txn_marker_batch
    from tidelog.storage.txn_index import AbortedTxn

    store = _file_store(tmp_path)
    tiered, tier, clock, plain, plain_clock = _pair(tmp_path, store)
    for log, c, t in ((tiered, clock, tier), (plain, plain_clock, None)):
        log.append_as_follower(keyed_batch([(b"k", b"committed")], base_offset=0, partition_leader_epoch=0))
        log.append_as_follower(keyed_batch([(b"k", b"aborted"), (b"j", b"aborted")], base_offset=1, producer_id=1,
                                           producer_epoch=0, base_sequence=0, is_transactional=True))
        log.roll()
        log.append_as_follower(build_end_txn_marker_batch(commit=False, producer_id=1, producer_epoch=0,
                                                          coordinator_epoch=0, base_offset=3, timestamp=c.milliseconds()))
        log.active_segment.txn_index.append(AbortedTxn(1, 1, 3, 1))  # as Kafka's producer state writes it
        log.append_as_follower(keyed_batch([(b"other", b"x")], base_offset=4))
        log.roll()
        log.append_as_follower(keyed_batch([(b"other", b"y")], base_offset=5))
        log.update_high_watermark(log.log_end_offset)
        log.roll()
        c.advance(10)
        if t is not None:
            t.copy(log)
            local_retention(log, c)
    assert tiered.local_log_start_offset == 6
    assert any(not s.txn_idx_empty for s in fresh(store).finished_segments())
    assert clean(tiered, clock, tier) == clean(plain, plain_clock, None)
    kept = both_tiers(store, tiered)
    assert kept == local_records(plain)
    assert (0, b"k", b"committed") in kept and not any(v == b"aborted" for _, _, v in kept)


def test_a_remote_object_gone_behind_its_back_fails_the_pass_and_changes_nothing(tmp_path: Path) -> None:
    from tidelog.remote.errors import RemoteStorageError
    from tidelog.remote.metadata import RemoteFileKind, object_key

    store = _file_store(tmp_path)
    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(tmp_path / "logs" / "events-0", clock, tiered=True)
    _history(log, clock, tier)
    finished = fresh(store).finished_segments()
    doomed = object_key(finished[-1], RemoteFileKind.SEGMENT)
    (tmp_path / "store" / doomed).unlink()
    local_before = local_records(log)

    with pytest.raises(RemoteStorageError) as failed:
        clean(log, clock, tier)
    assert doomed in str(failed.value), "the error names the object"
    assert [s.id for s in fresh(store).finished_segments()] == [s.id for s in finished]
    assert fresh(store).unreferenced() == [], "what was staged is deleted"
    assert local_records(log) == local_before, "the local tier is not cleaned alone"
    log.close()


class _SwapAnswerLost:
    """The store, except that the PUT of a swap event lands and then fails (the answer was lost),
    and the next ``lists_lost`` LISTs after it fail."""

    def __init__(self, inner: RemoteStore, lists_lost: int) -> None:
        self.inner, self.uri = inner, inner.uri
        self.lists_lost = -lists_lost  # < 0: armed by the swap

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def put(self, key: str, data: bytes) -> None:
        from tidelog.remote.errors import RemoteStoreServerError

        self.inner.put(key, data)
        if "/metadata/" in key and b'"type":"swap"' in bytes(data):
            self.lists_lost = -self.lists_lost
            raise RemoteStoreServerError("injected lost answer", operation="put", key=key, uri=self.uri)

    def list(self, prefix: str = "") -> object:
        from tidelog.remote.errors import RemoteStoreUnreachableError

        if self.lists_lost > 0:
            self.lists_lost -= 1
            raise RemoteStoreUnreachableError("injected outage", operation="list", key=prefix, uri=self.uri)
        return self.inner.list(prefix)


@pytest.mark.parametrize("lists_lost", [0, 1])
def test_a_swap_whose_answer_is_lost_keeps_the_segments_it_published(tmp_path: Path, lists_lost: int) -> None:
    """The swap event landed but its PUT failed: readers see the cleaned set, so neither the
    pass's own cleanup nor the next copy pass's may delete it (the replaced set is already
    DELETE_SEGMENT_STARTED: that would leave no segment for those offsets). With ``lists_lost``,
    the pass cannot read the metadata again, and the copy pass's cleanup must."""
    from tidelog.remote.errors import RemoteStorageError

    inner = _file_store(tmp_path)
    store = _SwapAnswerLost(inner, lists_lost)
    tiered, _, clock, plain, plain_clock = _pair(tmp_path, inner)
    tier = Tier(store, clock)  # type: ignore[arg-type]
    _history(tiered, clock, tier)
    _history(plain, plain_clock, None)
    clean(plain, plain_clock, None)
    expected = [r for r in local_records(plain) if r[0] < tiered.local_log_start_offset]

    with pytest.raises(RemoteStorageError, match="injected lost answer"):
        clean(tiered, clock, tier)
    for _ in range(2):  # after the failed pass, then after the next copy pass's cleanup
        assert remote_records(inner, tiered.local_log_start_offset) == expected, "the cleaned set is readable"
        assert segment_objects(inner) <= stored_segment_objects(inner), "every published segment has its objects"
        tier.copy(tiered)
    clock.advance(60_000)  # file.delete.delay.ms after the swap: the replaced segments' objects go
    tier.copy(tiered)
    assert remote_records(inner, tiered.local_log_start_offset) == expected
    assert stored_segment_objects(inner) == segment_objects(inner), "nothing orphaned"
    tiered.close()
    plain.close()


def test_with_copy_disabled_the_cleaner_leaves_the_remote_tier_as_it_is(tmp_path: Path) -> None:
    """``remote.log.copy.disable=true`` makes the remote data read-only (Kafka: nothing more is
    uploaded): a pass writes no object and no metadata event, and cleans the local tier alone."""
    store = _file_store(tmp_path)
    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(tmp_path / "logs" / "events-0", clock, tiered=True)
    _history(log, clock, tier)
    append(log, [(k, f"c{k}") for k in range(0, 30, 4)])
    roll(log)
    log.update_config(log.config.with_overrides({}, remote_log_copy_disable=True, local_retention_ms=-2))
    stored = {i.key: i.size for i in store.list()}
    remote_before = remote_records(store)
    local_before = local_records(log)

    _, remote = cleaner(clock, tier)
    assert remote is not None
    remote.load([(TP, log)])
    assert remote.spans(TP, log) == [], "remote bytes the cleaner leaves are not counted as its to clean"
    clean(log, clock, tier)
    assert {i.key: i.size for i in store.list()} == stored, "nothing written to the store"
    assert remote_records(store) == remote_before
    latest = {k: o for o, k, _ in local_before}
    assert local_records(log) == [r for r in local_before if latest[r[1]] == r[0]], "the local tier is cleaned"
    assert len(local_records(log)) < len(local_before)
    log.close()
