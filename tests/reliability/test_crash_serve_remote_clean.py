"""SIGKILL of ``tidelog serve`` while its cleaner compacts a tiered topic's remote segments, then a restart.

A compacted tiered topic is written (four versions of 2000 keys, ~8 MB in 1 MiB segments), copied
and freed locally (``tiered copy``, ``retention run`` with ``local.retention.ms=0``), then half
the keys are updated. ``tidelog serve`` starts; its cleaner downloads the remote segments, cleans
them and stages the results as new remote segments before one swap. The test watches the store
(as another host would, a fresh metadata load every few ms) and kills the broker (-9) as soon as
a staged replacement appears, before the swap. Then:

- the store, read fresh, holds a contiguous set of finished segments, each whole (its ``.log``
  parses to its end), and every key's latest value is readable across both tiers;
- a second ``tidelog serve`` finishes the job: its cleaner checkpoints the pass, the remote
  segments holding superseded records are replaced by cleaned ones (one record per key below the
  local tier; a segment the clean leaves byte-identical keeps its object), nothing is left
  STARTED or DELETE_STARTED once ``file.delete.delay.ms`` is over, and the store holds exactly
  the finished segments' objects.

Marked soak (``make soak``): it produces ~10 MB through the CLI and runs two brokers (~30 s).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelog.records import iter_batches
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentState, TopicIdPartition, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.storage.metadata import decode_partition_metadata
from tidelog.topic_partition import TopicPartition

pytestmark = pytest.mark.soak

TP = TopicPartition("events", 0)
KEYS = 2000
VALUE = b"x" * 1000


def _cli(data: Path, remote: list[str], *args: str, stdin: bytes = b"") -> None:
    subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), *remote, *args],
                   input=stdin, check=True, capture_output=True, timeout=300)


def _serve(data: Path, remote: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), *remote,
                             "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", "remote.log.manager.task.interval.ms=100",
                             "--override", "log.cleaner.backoff.ms=100", "serve"],
                            stderr=subprocess.DEVNULL)


def _load(uri: str, data: Path) -> RemotePartitionMetadata:
    topic_id = decode_partition_metadata((data / "events-0" / "partition.metadata").read_bytes()).topic_id
    return RemotePartitionMetadata.load(open_store(uri), TopicIdPartition(topic_id, TP))


def _lines(version: int, keys: range) -> bytes:
    return b"".join(b"k%05d:%d-%s\n" % (k, version, VALUE) for k in keys)


def _staged(metadata: RemotePartitionMetadata) -> bool:
    """A cleaned replacement is staged: a STARTED segment starting inside the finished range."""
    highest = metadata.highest_offset()
    return any(s.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED and s.start_offset <= highest
               for s in metadata.unreferenced())


def _both_tiers(uri: str, data: Path) -> list[tuple[int, bytes, bytes | None]]:
    """Every record a consumer reads: finished remote segments below the local start, then local."""
    store, metadata = open_store(uri), _load(uri, data)
    local = sorted((data / "events-0").glob("*.log"))
    local_start = int(local[0].name.split(".")[0])
    out: list[tuple[int, bytes, bytes | None]] = []
    spans = [(s.start_offset, s.end_offset) for s in metadata.finished_segments()]
    assert spans and spans[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:])), spans
    for segment in metadata.finished_segments():
        data_bytes = store.get(object_key(segment, RemoteFileKind.SEGMENT))
        end = 0
        for position, batch in iter_batches(data_bytes):
            out += [(r.offset, r.key, r.value) for r in batch.records() if r.offset < local_start]
            end = position + batch.size_in_bytes
        assert end == len(data_bytes) == segment.segment_size_in_bytes, f"{segment.id} is not whole"
    for path in local:
        for _, batch in iter_batches(path.read_bytes()):
            out += [(r.offset, r.key, r.value) for r in batch.records() if r.offset >= local_start]
    return out


def _checkpointed(data: Path) -> int:
    """The partition's cleaner checkpoint (its first dirty offset), 0 when none is written."""
    lines = (data / "cleaner-offset-checkpoint").read_text().splitlines()[2:]
    return max((int(line.split()[2]) for line in lines if line.startswith("events 0 ")), default=0)


def _check_latest(records: list[tuple[int, bytes, bytes | None]]) -> None:
    latest = {k: v for _, k, v in records}
    assert len(latest) == KEYS
    for k in range(KEYS):
        version = 4 if k % 2 == 0 else 3
        assert latest[b"k%05d" % k] == b"%d-%s" % (version, VALUE), k


def test_sigkill_during_a_remote_compaction_leaves_a_whole_set_and_the_restart_finishes(tmp_path: Path) -> None:
    data, uri = tmp_path / "data", (tmp_path / "remote").as_uri()
    remote = ["--override", "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri={uri}"]
    _cli(data, remote, "topics", "create", "events", "--partitions", "1", "--config", "cleanup.policy=compact",
         "--config", "remote.storage.enable=true", "--config", f"segment.bytes={1 << 20}",
         "--config", "local.retention.ms=0", "--config", "file.delete.delay.ms=1000")
    _cli(data, remote, "produce", "events", "--key-separator", ":", "--batch-size", "50",
         stdin=b"".join(_lines(v, range(KEYS)) for v in range(4)))
    time.sleep(0.05)
    _cli(data, remote, "tiered", "copy")
    _cli(data, remote, "retention", "run")
    _cli(data, remote, "produce", "events", "--key-separator", ":", "--batch-size", "50",
         stdin=_lines(4, range(0, KEYS, 2)))
    before = {s.id for s in _load(uri, data).finished_segments()}
    assert len(before) >= 6 and not sorted((data / "events-0").glob("00000000000000000000.log"))

    process = _serve(data, remote)
    try:
        deadline = time.monotonic() + 90
        while not _staged(_load(uri, data)):
            assert time.monotonic() < deadline, "the broker's cleaner staged nothing"
            assert process.poll() is None, "the broker exited"
            time.sleep(0.005)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    after_kill = _load(uri, data)
    assert {s.id for s in after_kill.finished_segments()} == before, "killed before the swap"
    _check_latest(_both_tiers(uri, data))

    process = _serve(data, remote)
    try:
        deadline = time.monotonic() + 120
        while True:
            metadata = _load(uri, data)
            replaced = {s.id for s in metadata.finished_segments()} != before and not metadata.unreferenced()
            if replaced and _checkpointed(data) > 0:
                break
            assert time.monotonic() < deadline, "the restarted broker did not finish the remote compaction"
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0

    records = _both_tiers(uri, data)
    _check_latest(records)
    final = _load(uri, data)
    local_start = int(sorted((data / "events-0").glob("*.log"))[0].name.split(".")[0])
    remote_keys = [k for o, k, _ in records if o < local_start]
    assert len(remote_keys) == len(set(remote_keys)), "the remote tier is compacted: one record per key"
    expected = {object_key(m, kind) for m in final.finished_segments() for kind in RemoteFileKind
                if not (kind is RemoteFileKind.TRANSACTION_INDEX and m.txn_idx_empty)}
    held = {o.key for o in open_store(uri).list("") if "/metadata/" not in o.key}
    assert held == expected, "no orphan object of the killed clean or of the replaced segments"
