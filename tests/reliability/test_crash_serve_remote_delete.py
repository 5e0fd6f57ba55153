"""SIGKILL of ``tidelog serve`` while remote retention deletes segments from the remote tier (the
SeaweedFS S3 server), then a restart.

A tiered topic with ``retention.ms=4000`` gets ~150 small sealed segments, copied to the store by
``tidelog tiered copy``; once they are older than retention.ms, ``tidelog serve`` starts with a
pass every 100 ms. Its first expiration checkpoints the raised log start offset, then records the
segments DELETE_SEGMENT_STARTED and deletes their objects (two metadata events and six object
DELETEs each). The process is killed (-9) 0.3 s after the checkpoint shows the new log start
offset, mid-delete. Then: the checkpointed log start offset is already past every expired segment
(raised before any delete), and, as another host reads the store (a fresh metadata load), every
segment still FINISHED is whole. A second
``tidelog serve`` must finish: no remote segment left in any state, no segment object left, and
the log start offset past every sealed segment.

Marked soak (``make soak``): it times a kill against the deletes and runs for 45-70 s on 2 shared cores.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelog.remote.metadata import RemoteFileKind, TopicIdPartition, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.storage import files
from tidelog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.storage.metadata import decode_partition_metadata
from tidelog.topic_partition import TopicPartition

pytestmark = pytest.mark.soak

SEGMENT = 16 * 1024
RETENTION_MS = 4000
TP = TopicPartition("events", 0)


def _options(object_store: object) -> dict[str, str]:
    c = object_store.credentials  # type: ignore[attr-defined]
    return {"endpoint.url": c.endpoint_url, "access.key": c.access_key, "secret.key": c.secret_key,
            "region": c.region}


def _cli(data: Path, remote: list[str], *args: str, stdin: bytes = b"") -> None:
    subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), *remote, *args],
                   input=stdin, check=True, capture_output=True, timeout=300)


def _serve(data: Path, remote: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), *remote,
                             "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", "remote.log.manager.task.interval.ms=100", "serve"],
                            stderr=subprocess.DEVNULL)


def _load(uri: str, options: dict[str, str], data: Path) -> RemotePartitionMetadata:
    topic_id = decode_partition_metadata((data / "events-0" / "partition.metadata").read_bytes()).topic_id
    return RemotePartitionMetadata.load(open_store(uri, options), TopicIdPartition(topic_id, TP))


def _log_start(data: Path) -> int:
    return OffsetCheckpointFile(data / LOG_START_OFFSET_CHECKPOINT_FILE).read().get(TP, 0)


def test_sigkill_during_a_remote_delete_then_the_restart_finishes(tmp_path: Path, object_store: object,
                                                                  bucket: str) -> None:
    data, uri, options = tmp_path / "data", f"s3://{bucket}/tier", _options(object_store)
    remote = ["--override", "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri={uri}",
              *[a for k, v in options.items() for a in ("--override", f"rsm.config.{k}={v}")]]
    _cli(data, remote, "topics", "create", "events", "--config", "remote.storage.enable=true",
         "--config", f"segment.bytes={SEGMENT}", "--config", f"retention.ms={RETENTION_MS}")
    produced = time.monotonic()
    lines = b"".join(b"%08d %s\n" % (i, b"x" * 1000) for i in range(1500))  # ~1.5 MB: ~100 sealed segments
    _cli(data, remote, "produce", "events", "--batch-size", "10", stdin=lines)
    _cli(data, remote, "tiered", "copy")
    sealed = sorted(int(p.name.split(".")[0]) for p in (data / "events-0").glob("*.log"))
    sealed, active = sealed[:-1], sealed[-1]
    assert len(sealed) >= 60 and len(_load(uri, options, data).finished_segments()) == len(sealed)
    time.sleep(max(0.0, produced + RETENTION_MS / 1000 + 1 - time.monotonic()))  # every sealed segment expired

    process = _serve(data, remote)
    deadline = time.monotonic() + 60
    while _log_start(data) == 0:
        assert time.monotonic() < deadline and process.poll() is None, "the expiration never checkpointed"
        time.sleep(0.01)
    time.sleep(0.3)  # some of the deletes done
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    start = _log_start(data)
    assert start == active, "the log start offset is raised past every expired segment before any delete"
    after_kill = _load(uri, options, data)
    store = open_store(uri, options)
    for segment in after_kill.finished_segments():  # whole, as another host reads it
        local = files.log_file(data / "events-0", segment.start_offset).read_bytes()
        assert store.get(object_key(segment, RemoteFileKind.SEGMENT)) == local, segment
    assert after_kill.segments(), "every segment was already deleted: the kill came too late"
    assert len(after_kill.finished_segments()) < len(sealed), "no delete had started: the kill came too early"

    process = _serve(data, remote)
    try:
        deadline = time.monotonic() + 90
        while _load(uri, options, data).segments():
            assert time.monotonic() < deadline, "the restarted broker did not finish the deletes"
            time.sleep(0.3)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    assert _log_start(data) == active
    held = {o.key for o in open_store(uri, options).list("") if "/metadata/" not in o.key}
    assert held == set(), "no object of a deleted segment is left"
