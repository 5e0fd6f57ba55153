"""``format("tidelog")`` writes through a live ``tidelog serve`` (real local Spark, a real server):
the job is staged through the broker and committed by it, whole, while a kafka-python producer
keeps producing to the same topic; batch and streaming; bad input fails naming what and where."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTP

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "server"))  # server_helpers: start_broker

from server_helpers import start_broker  # noqa: E402

from tidelog.manager import LogManager  # noqa: E402
from tidelog.server import ServerThread  # noqa: E402
from tidelog.storage.commit_log import default_staging_root  # noqa: E402

PARTITIONS = 3


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LogManager, ServerThread, str]]:
    manager, thread = start_broker(tmp_path / "data")
    manager.create_topic("t", PARTITIONS)
    try:
        yield manager, thread, f"127.0.0.1:{thread.server.bound[0].port}"
    finally:
        thread.stop()
        manager.shutdown()


def consume(bootstrap: str, expected: int, topic: str = "t") -> dict[int, list[bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [KafkaTP(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    found: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in found.values()) < expected and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            found[tp.partition].extend(r.value for r in records)
    consumer.close()
    return found


class Producing:
    """A kafka-python producer sending ``p<n>`` round-robin to every partition until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap, self.stop, self.sent = bootstrap, threading.Event(), 0
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks=1, retries=10_000, retry_backoff_ms=5,
                                 max_in_flight_requests_per_connection=1)
        n = 0
        while not self.stop.is_set():
            producer.send("t", b"p%d" % n, partition=n % PARTITIONS)
            n += 1
            if n % 20 == 0:
                producer.flush()
                time.sleep(0.001)
        producer.flush()
        producer.close()
        self.sent = n

    def __enter__(self) -> Producing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def rows(spark: Any, start: int, count: int) -> Any:
    return spark.range(start, start + count).selectExpr("CAST(id AS STRING) AS key", "concat('j', id) AS value")


def check_whole(found: dict[int, list[bytes]], jobs: int, job_rows: int, produced: int) -> None:
    """Every record once; the records of each job contiguous in each partition."""
    job_values = [v for values in found.values() for v in values if v.startswith(b"j")]
    assert len(job_values) == len(set(job_values)) == jobs * job_rows
    assert sum(len(v) for v in found.values()) == jobs * job_rows + produced
    for values in found.values():
        pattern = "".join("j" if v.startswith(b"j") else "p" for v in values)
        assert pattern.count("pj") + pattern.startswith("j") <= jobs, pattern  # at most one run per job


def test_a_write_to_a_dir_served_by_tidelog_serve_goes_through_the_broker(spark: Any, served: Any) -> None:
    manager, _, bootstrap = served
    data = manager.log_dirs()[0].path
    with Producing(bootstrap) as producer:
        rows(spark, 0, 3000).repartition(3).write.format("tidelog").mode("append") \
            .option("path", str(data)).option("topic", "t").save()
        rows(spark, 3000, 3000).repartition(2).write.format("tidelog").mode("append") \
            .option("kafka.bootstrap.servers", bootstrap).option("topic", "t").save()
    found = consume(bootstrap, 6000 + producer.sent)
    check_whole(found, 2, 3000, producer.sent)
    assert not any(default_staging_root(data).iterdir())  # staging reclaimed once committed


def add_input(directory: Path, name: str, numbers: range) -> None:
    (directory / name).write_text("".join(json.dumps({"key": f"k{i}", "value": f"j{i}"}) + "\n" for i in numbers))


def run_stream(spark: Any, source: Path, bootstrap: str, checkpoint: Path) -> None:
    stream = spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1).json(str(source))
    query = (stream.writeStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", "t")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    finally:
        query.stop()


def test_a_streaming_query_writes_each_micro_batch_once_through_the_broker(spark: Any, served: Any,
                                                                            tmp_path: Path) -> None:
    _, _, bootstrap = served
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    add_input(source, "a.json", range(0, 100))
    add_input(source, "b.json", range(100, 250))
    run_stream(spark, source, bootstrap, checkpoint)
    add_input(source, "c.json", range(250, 300))
    run_stream(spark, source, bootstrap, checkpoint)  # restarted from the checkpoint: only the new file
    found = consume(bootstrap, 300)
    values = sorted(v for vs in found.values() for v in vs)
    assert values == sorted(b"j%d" % i for i in range(300))


def test_bad_input_fails_at_save_naming_what_and_where(spark: Any, served: Any) -> None:
    _, _, bootstrap = served
    df = rows(spark, 0, 10)
    with pytest.raises(Exception, match="127.0.0.1:1"):  # unreachable
        df.write.format("tidelog").mode("append").option("kafka.bootstrap.servers", "127.0.0.1:1") \
            .option("topic", "t").save()
    with pytest.raises(Exception, match=f"topic 'nope' does not exist on the broker at {bootstrap}"):
        df.write.format("tidelog").mode("append").option("kafka.bootstrap.servers", bootstrap) \
            .option("topic", "nope").save()
    with pytest.raises(Exception, match="kafka.acks is not supported"):
        df.write.format("tidelog").mode("append").option("kafka.bootstrap.servers", bootstrap) \
            .option("kafka.acks", "all").option("topic", "t").save()
