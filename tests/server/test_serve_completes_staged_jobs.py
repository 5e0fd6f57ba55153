"""``tidelog serve`` started on a data dir where a multi-partition job (a Spark write) was killed
mid-commit: the broker completes the job before it listens, so a producer's records land after
all of the job, never inside it, and a consumer reads the job whole. The crash state is built
with the protocol's own steps (no Spark here; ``tests/spark/test_spark_killed_driver.py`` kills a
real driver)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTP

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "manager"))  # manager_helpers: batch, crash

from manager_helpers import batch, crash  # noqa: E402

from reliability.broker import ServeProcess  # noqa: E402
from tidelog.manager import LogManager  # noqa: E402
from tidelog.manager.staged_commit import Committer, Job, StagedReader  # noqa: E402
from tidelog.storage.commit_log import default_staging_root  # noqa: E402
from tidelog.storage.config import BrokerConfig  # noqa: E402
from tidelog.storage.staging_dirs import job_dir, process_lease, stage_batches  # noqa: E402
from tidelog.topic_partition import TopicPartition  # noqa: E402

PARTITIONS = 3
KAFKA_DEFAULTS = {"log.segment.bytes": str(1 << 30)}


def test_a_produce_after_start_up_lands_after_the_whole_interrupted_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("t", PARTITIONS)
    job = Job("job-killed", str(default_staging_root(data)))
    refs = stage_batches(job.staging_root, job.key, "part-0.batches",
                         [("t", p, batch(4, timestamp=int(time.time() * 1000))) for p in range(PARTITIONS) for _ in range(3)],
                         process_lease(os.getpid()))  # timestamps of now: retention keeps them
    manager = LogManager.open(BrokerConfig.from_properties({}), [data])
    committer = Committer(manager, [str(data)])
    entry = committer.write_intent(job, refs)
    with StagedReader(job_dir(job.staging_root, job.key)) as staged:
        committer.publish_partition(entry, entry["partitions"][0], staged)  # one partition of three
        manager.append(TopicPartition("t", 1), staged.read(refs[3][0], refs[3][1]))  # one batch of the next
    crash(manager)  # the driver is killed here

    broker = ServeProcess(data, KAFKA_DEFAULTS)
    broker.start()
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        sent = [producer.send("t", b"after", partition=p).get(timeout=30) for p in range(PARTITIONS)]
        producer.close()
        assert [m.offset for m in sent] == [12, 12, 12]  # after the job's 12 records in every partition
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        tps = [KafkaTP("t", p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 13 * PARTITIONS and time.monotonic() < deadline:
            for tp, records in consumer.poll(1000).items():
                got[tp.partition] += [r.value for r in records]
        consumer.close()
        assert {p: len(v) for p, v in got.items()} == {p: 13 for p in range(PARTITIONS)}
        assert all(values[-1] == b"after" and len(values) == 13 for values in got.values())
    finally:
        assert broker.stop() == 0
    assert not job_dir(job.staging_root, job.key).exists()
