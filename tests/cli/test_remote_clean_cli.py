"""``tidelog clean run`` on a compacted tiered topic (file:// remote tier): the early segments are
only in the store (copied, then freed by local retention), updates follow, and one clean run
rewrites the remote segments: a second process reading the store finds cleaned segments holding
each key's latest value, and explain counts the remote bytes."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run_cli

from tidelog.records import iter_batches
from tidelog.remote.metadata import RemoteFileKind, TopicIdPartition, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.storage.metadata import decode_partition_metadata
from tidelog.topic_partition import TopicPartition


def ok(data_dir: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run_cli(data_dir, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def _remote_values(data: Path, store: Path) -> dict[bytes, list[bytes]]:
    tp = TopicPartition("changes", 0)
    topic_id = decode_partition_metadata((data / "changes-0" / "partition.metadata").read_bytes()).topic_id
    remote = open_store(store.as_uri())
    metadata = RemotePartitionMetadata.load(remote, TopicIdPartition(topic_id, tp))
    values: dict[bytes, list[bytes]] = {}
    for segment in metadata.finished_segments():
        for _, batch in iter_batches(remote.get(object_key(segment, RemoteFileKind.SEGMENT))):
            for r in batch.records():
                values.setdefault(r.key, []).append(r.value)
    return values


def test_clean_run_compacts_the_remote_segments_of_a_tiered_topic(tmp_path: Path) -> None:
    data, store = tmp_path / "data", tmp_path / "store"
    opts = ["--override", "remote.log.storage.system.enable=true",
            "--override", f"remote.log.storage.uri={store.as_uri()}"]
    ok(data, *opts, "topics", "create", "changes", "--config", "cleanup.policy=compact",
       "--config", "remote.storage.enable=true", "--config", "segment.bytes=500", "--config", "local.retention.ms=0")
    ok(data, *opts, "produce", "changes", "--key-separator", ":", "--batch-size", "5",
       stdin=b"".join(b"k%d:v%d-%d\n" % (k, v, k) for v in range(3) for k in range(20)))
    ok(data, *opts, "tiered", "copy")
    ok(data, *opts, "retention", "run")
    before = _remote_values(data, store)
    assert max(len(v) for v in before.values()) > 1, "superseded values in the remote tier"

    cleaning = json.loads(ok(data, *opts, "explain", "changes", "--json"))[0]["cleaning"]
    remote_bytes = sum(p.stat().st_size for p in store.rglob("*.log"))
    assert cleaning["dirty_bytes"] >= remote_bytes > 0, "explain counts the remote-only bytes as dirty"

    out = ok(data, *opts, "clean", "run", "--topic", "changes")
    assert "changes-0: cleaned" in out, out
    after = _remote_values(data, store)
    assert all(len(values) == 1 for values in after.values()), after
    latest = {k: v[-1] for k, v in after.items()}
    for path in sorted((data / "changes-0").glob("*.log")):
        for _, batch in iter_batches(path.read_bytes()):
            latest.update((r.key, r.value) for r in batch.records())
    assert latest == {b"k%d" % k: b"v2-%d" % k for k in range(20)}, "each key's latest value across the tiers"
