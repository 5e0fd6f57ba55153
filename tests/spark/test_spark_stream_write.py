"""``df.writeStream.format("tidelog")``: each micro-batch published exactly once across failures.

A file source (replayable: a restarted query re-reads a batch's files) feeds a topic with
``Trigger.AvailableNow``. A commit made to fail (its commit-log write is blocked) stops the query;
the restart from the checkpoint replays that batch and publishes it once. A batch Spark forgets
it committed (its ``commits/N`` checkpoint file deleted, as if the driver died right after our
commit) is replayed on restart and skipped by the sink.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tidelog.manager import LogManager
from tidelog.partitioner import partition_for_key
from tidelog.records import iter_batches
from tidelog.storage.commit_log import COMMIT_LOG_FILE
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation


def make_data_dir(root: Path, topics: dict[str, int]) -> Path:
    root.mkdir(parents=True)
    with LogManager.open(BrokerConfig.from_properties({}), [root]) as manager:
        for name, partitions in topics.items():
            manager.create_topic(name, partitions)
    return root


def read_back(root: Path, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(partition, key, value) of every record, partition by partition, in offset order."""
    out = []
    with LogManager.open(BrokerConfig.from_properties({}), [root]) as manager:
        for tp, lg in manager.logs(topic):
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                batches = [b for _, b in iter_batches(lg.read(offset, 1 << 22, FetchIsolation.LOG_END).records)]
                out += [(tp.partition, r.key, r.value) for b in batches for r in b.records()]
                offset = batches[-1].next_offset
    return out


def add_input(directory: Path, name: str, numbers: range) -> None:
    lines = [json.dumps({"key": f"k{i}", "value": f"v{i}"}) for i in numbers]
    (directory / name).write_text("\n".join(lines) + "\n")


def run_available_now(spark: Any, source: Path, root: Path, checkpoint: Path) -> None:
    """Process every input file (one per micro-batch) and stop; raises when the query fails."""
    stream = spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1).json(str(source))
    query = (stream.writeStream.format("tidelog").option("path", str(root)).option("topic", "t")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    finally:
        query.stop()


def test_stream_writes_each_batch_once_across_a_failed_commit_and_a_replay(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    root = make_data_dir(tmp_path / "data", {"t": 2})
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    add_input(source, "a.json", range(0, 10))
    blocker = root / (COMMIT_LOG_FILE + ".tmp")
    blocker.mkdir()  # the commit log cannot be replaced: batch 0's commit fails before publishing

    with pytest.raises(StreamingQueryException, match="cannot"):
        run_available_now(spark, source, root, checkpoint)
    assert read_back(root, "t") == []
    staging = Path(str(root.resolve()) + ".tidelog-staging")
    assert not any(staging.rglob("*.batches"))  # abort() removed the batch's staged files

    blocker.rmdir()
    add_input(source, "b.json", range(10, 25))
    run_available_now(spark, source, root, checkpoint)  # replays batch 0, then runs batch 1
    records = read_back(root, "t")
    assert sorted(int(value[1:]) for _, _, value in records) == list(range(25))  # type: ignore[index]
    assert all(partition == partition_for_key(key, 2) for partition, key, _ in records)  # type: ignore[arg-type]

    query_id = json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
    commits = json.loads((root / COMMIT_LOG_FILE).read_bytes())
    assert commits["queries"] == {query_id: {"last_batch": 1}}

    for name in ("1", ".1.crc"):  # Spark forgets it committed batch 1: it replays it
        (checkpoint / "commits" / name).unlink()
    run_available_now(spark, source, root, checkpoint)
    assert read_back(root, "t") == records  # the replay was skipped
    assert (checkpoint / "commits" / "1").exists()
    assert not any(staging.rglob("*.batches"))
