"""SIGKILL of ``tidelog serve`` while it uploads a segment to the remote tier, then a restart.

A tiered topic is written locally first (five sealed segments of 2 MiB), then ``tidelog serve``
starts with a copy pass every 100 ms throttled to 2 MB/s, so each segment takes about a second
to upload; the process is killed (-9) 3 s in (start-up, then about 1.5 segments), mid-copy. The store is
then read as another host would (a fresh metadata load): every finished segment must be whole.
A second ``tidelog serve`` must finish the copy: each sealed segment in the remote tier exactly
once, nothing left STARTED, no orphan object, and the local segments untouched.

Marked soak (``make soak``): it times a kill against an upload and runs for ~16 s.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentState, TopicIdPartition, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.storage import files
from tidelog.storage.metadata import decode_partition_metadata
from tidelog.topic_partition import TopicPartition

pytestmark = pytest.mark.soak

SEGMENT = 2 * 1024 * 1024
TP = TopicPartition("events", 0)


def _cli(data: Path, remote: list[str], *args: str, stdin: bytes = b"") -> None:
    subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), *remote, *args],
                   input=stdin, check=True, capture_output=True, timeout=120)


def _serve(data: Path, remote: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), *remote,
                             "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", "remote.log.manager.task.interval.ms=100",
                             "--override", "remote.log.manager.copy.max.bytes.per.second=2000000", "serve"],
                            stderr=subprocess.DEVNULL)


def _load(uri: str, data: Path) -> RemotePartitionMetadata:
    partition = data / "events-0"
    topic_id = decode_partition_metadata((partition / "partition.metadata").read_bytes()).topic_id
    return RemotePartitionMetadata.load(open_store(uri), TopicIdPartition(topic_id, TP))


def _check_finished_whole(uri: str, data: Path, metadata: RemotePartitionMetadata) -> None:
    store = open_store(uri)
    for segment in metadata.finished_segments():
        local = files.log_file(data / "events-0", segment.start_offset).read_bytes()
        assert store.get(object_key(segment, RemoteFileKind.SEGMENT)) == local, segment


def test_sigkill_during_an_upload_publishes_nothing_partial_and_the_restart_finishes(tmp_path: Path) -> None:
    data, uri = tmp_path / "data", (tmp_path / "remote").as_uri()
    remote = ["--override", "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri={uri}"]
    _cli(data, remote, "topics", "create", "events", "--config", "remote.storage.enable=true",
         "--config", f"segment.bytes={SEGMENT}")
    lines = b"".join(b"%08d %s\n" % (i, b"x" * 1000) for i in range(11_000))  # ~11 MB: five sealed segments
    _cli(data, remote, "produce", "events", "--batch-size", "100", stdin=lines)
    sealed = sorted(int(p.name.split(".")[0]) for p in (data / "events-0").glob("*.log"))[:-1]
    assert len(sealed) >= 4

    process = _serve(data, remote)
    time.sleep(3.0)  # started (~1 s), then about 1.5 segments uploaded
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    after_kill = _load(uri, data)
    _check_finished_whole(uri, data, after_kill)
    assert len(after_kill.finished_segments()) < len(sealed), "the kill came after the whole copy: too late"
    assert after_kill.unreferenced(), "no segment was left STARTED: the kill came between two copies"

    process = _serve(data, remote)
    try:
        deadline = time.monotonic() + 60
        while len(_load(uri, data).finished_segments()) < len(sealed):
            assert time.monotonic() < deadline, "the restarted broker did not finish the copy"
            time.sleep(0.2)
        time.sleep(0.5)  # the pass that published the last one also cleans up before it
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0

    final = _load(uri, data)
    _check_finished_whole(uri, data, final)
    assert [m.start_offset for m in final.finished_segments()] == sealed, "each sealed segment once"
    assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in final.segments())
    expected = {object_key(m, kind) for m in final.finished_segments() for kind in RemoteFileKind
                if kind is not RemoteFileKind.TRANSACTION_INDEX}
    held = {o.key for o in open_store(uri).list("") if "/metadata/" not in o.key}
    assert held == expected, "no orphan object of the killed upload"
