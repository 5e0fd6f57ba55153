"""``tidelog clean run --engine spark --master spark://…`` on the standalone cluster: a tiered
compacted topic whose remote tier is in the real S3 server, cleaned by executors that cannot see
the data dir, leaves byte for byte what ``--engine in-process`` leaves on a copy of the same data
dir and store.

soak: the cluster start, the driver's SparkContext and the first job's executors cost ~1 min on 2
shared cores.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

sys.path.append(str(Path(__file__).parent.parent / "spark"))  # the read-side helpers of tests/spark
from spark_read_data import T0, batch, open_manager  # noqa: E402
from test_spark_remote_read import TIERED, s3_options  # noqa: E402

from tests.cli_helpers import run_cli  # noqa: E402
from tidelog.remote.metadata import RemoteFileKind, object_key  # noqa: E402
from tidelog.remote.metadata_log import RemotePartitionMetadata  # noqa: E402
from tidelog.remote.store import ArrowRemoteStore, open_store  # noqa: E402
from tidelog.topic_partition import TopicPartition  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from object_store_oracle import WeedS3Server
    from spark_cluster_oracle import SparkStandaloneCluster

pytestmark = pytest.mark.soak
TP = TopicPartition("table", 0)
KEYS = 150


def _overrides(uri: str, options: dict[str, str]) -> list[str]:
    props = {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri,
             "log.segment.bytes": "4096", "log.index.interval.bytes": "256",
             **{f"rsm.config.{k}": v for k, v in options.items()}}
    return [a for k, v in props.items() for a in ("--override", f"{k}={v}")]


def _build(data: Path, uri: str, options: dict[str, str]) -> None:
    """``table``: 1500 records over 150 keys, tiered and freed locally, then updates of a third of
    the keys in the local tier. No tombstones: the CLI cleans on the wall clock, which a kept
    tombstone's batch records as its delete horizon, so two runs would differ there (the Spark
    tests with a fake clock compare tombstones byte for byte)."""
    manager = open_manager(data, **{"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri,
                                    **{f"rsm.config.{k}": v for k, v in options.items()}})
    try:
        manager.create_topic("table", 1, {**TIERED, "cleanup.policy": "compact"})
        for first in range(0, 1500, 10):
            manager.append(TP, batch([(j, T0 + first + j, b"k%d" % ((first + j) % KEYS), b"v%d" % (first + j), [])
                                      for j in range(10)]))
        manager.get_log(TP).roll()
        manager.remote_tier.copy_pass()
        manager.run_retention()
        assert manager.get_log(TP).local_log_start_offset >= 1000, "most of the topic is only remote"
        for first in range(0, KEYS, 30):
            manager.append(TP, batch([(j, T0 + 5000 + first + j, b"k%d" % (first + j), b"w%d" % (first + j), [])
                                      for j in range(10)]))
        manager.get_log(TP).roll()
    finally:
        manager.shutdown()


def _copy_prefix(store_uri: str, to_uri: str, options: dict[str, str]) -> None:
    source, target = open_store(store_uri, options), open_store(to_uri, options)
    for info in source.list():
        target.put(info.key, source.get(info.key))


def _stored(data: Path, uri: str, options: dict[str, str]) -> dict[str, Any]:
    store = open_store(uri, options)
    tips = {m for m in _partitions(store)}
    assert len(tips) == 1
    reader = RemotePartitionMetadata.load(store, tips.pop())
    remote = [(s.start_offset, s.end_offset, s.segment_size_in_bytes, s.txn_idx_empty,
               {k.name: store.get(object_key(s, k)) for k in RemoteFileKind
                if not (k is RemoteFileKind.TRANSACTION_INDEX and s.txn_idx_empty)})
              for s in reader.finished_segments()]
    local = {p.name: p.read_bytes() for p in sorted((data / str(TP)).iterdir())
             if p.suffix in (".log", ".index", ".timeindex", ".txnindex")}
    return {"remote": remote, "waiting": sorted((s.start_offset, s.state.name) for s in reader.unreferenced()),
            "local": local}


def _partitions(store: ArrowRemoteStore) -> set[Any]:
    from tidelog.remote.metadata import TopicIdPartition

    found = set()
    for info in store.list():
        top, partition, *_ = info.key.split("/")  # <topic>-<topic id>: an id may hold "-" too
        found.add(TopicIdPartition(top.removeprefix("table-"), TopicPartition("table", int(partition))))
    return found


def test_clean_run_on_the_cluster_compacts_the_s3_tier_as_in_process(
        cluster_spark: SparkSession, spark_cluster: SparkStandaloneCluster, object_store: WeedS3Server,
        bucket: str, tmp_path: Path) -> None:
    options = s3_options(object_store)
    uri, copy_uri = f"s3://{bucket}/compact", f"s3://{bucket}/compact-copy"
    _build(tmp_path / "cluster", uri, options)
    shutil.copytree(tmp_path / "cluster", tmp_path / "in-process")
    _copy_prefix(uri, copy_uri, options)
    assert _stored(tmp_path / "cluster", uri, options) == _stored(tmp_path / "in-process", copy_uri, options)

    def clean(data: Path, store_uri: str, *engine: str) -> dict[str, Any]:
        code, out, err = run_cli(data, *_overrides(store_uri, options), "clean", "run", "--json", "--force", *engine)
        assert code == 0, err
        (row,) = json.loads(out)
        return row

    row = clean(tmp_path / "cluster", uri, "--engine", "spark", "--master", spark_cluster.master_url)
    expected = clean(tmp_path / "in-process", copy_uri, "--engine", "in-process")
    assert row["outcome"] == "cleaned" and row == expected
    assert cluster_spark.sparkContext.master == spark_cluster.master_url, "the clean ran on the cluster's session"
    got, want = _stored(tmp_path / "cluster", uri, options), _stored(tmp_path / "in-process", copy_uri, options)
    assert got["remote"] == want["remote"], "the remote segments' objects are byte for byte the same"
    assert got["waiting"] == want["waiting"] and got["local"] == want["local"]
    assert len(got["waiting"]) > 0, "remote segments were replaced"
    assert any(tmp_path.resolve().is_relative_to(h) for h in spark_cluster.hidden), \
        "the data dir is hidden from the workers: the executors read and wrote the store only"
