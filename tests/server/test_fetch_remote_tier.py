"""Reads from the remote tier through the broker.

* In process, on a file:// store (``make test``): a tiered topic whose early segments were copied
  and deleted locally is consumed from offset 0 by kafka-python, every batch byte for byte as the
  local log held it, across fetches that mix the remote and the local tier; ListOffsets by
  timestamp lands in the remote range.
* ``tidelog serve`` on the real S3 server (SeaweedFS; soak: ~25 s of subprocesses): the same
  topic made with the CLI (local.retention.ms=0, ``tiered copy``, ``retention run``), consumed by
  kafka-python and aiokafka, ListOffsets by timestamp, then ``tidelog consume --from-beginning``
  through the manager's remote door.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from server_helpers import TIMEOUT_S, Broker, serve

from tidelog.errors import OffsetMovedToTieredStorageError
from tidelog.records import BatchBuilder, iter_batches
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.topic_partition import TopicPartition as Tp

TOPIC = "events"
LINES = [b"%06d %s" % (i, bytes([97 + i % 26]) * (200 + i % 300)) for i in range(5000)]  # ~1.7 MB


@pytest.fixture
def tiered_data(tmp_path: Path, object_store, bucket: str) -> tuple[Path, list[str]]:
    """A data dir whose ``events-0`` lives mostly in the remote tier; the overrides that reach it."""
    credentials = object_store.credentials
    overrides = ["remote.log.storage.system.enable=true", f"remote.log.storage.uri=s3://{bucket}/tier",
                 f"rsm.config.endpoint.url={credentials.endpoint_url}", f"rsm.config.access.key={credentials.access_key}",
                 f"rsm.config.secret.key={credentials.secret_key}", f"rsm.config.region={credentials.region}"]
    data = tmp_path / "data"
    cli(data, overrides, "topics", "create", TOPIC, "--config", "remote.storage.enable=true",
        "--config", "segment.bytes=131072", "--config", "local.retention.ms=0")
    cli(data, overrides, "produce", TOPIC, "--batch-size", "50", stdin=b"\n".join(LINES) + b"\n")
    cli(data, overrides, "tiered", "copy")
    cli(data, overrides, "retention", "run")
    local_start = int(cli(data, overrides, "offsets", TOPIC, "--time", "earliest-local").split(":")[-1])
    assert local_start > len(LINES) // 2, "most of the topic is only in the remote tier"
    return data, overrides


def test_kafka_python_reads_both_tiers_byte_for_byte(make_broker, tmp_path: Path) -> None:
    broker: Broker = make_broker(**{"remote.log.storage.system.enable": "true",
                                    "remote.log.storage.uri": (tmp_path / "store").as_uri()})
    manager = broker.manager
    manager.create_topic(TOPIC, 1, {"remote.storage.enable": "true", "segment.bytes": "65536",
                                    "local.retention.bytes": "1"})
    now = int(time.time() * 1000)
    for i in range(0, len(LINES), 25):
        builder = BatchBuilder(base_offset=0)
        for j, line in enumerate(LINES[i:i + 25]):
            builder.append(j, now + i + j, None, line)
        manager.append(Tp(TOPIC, 0), builder.build())
    log = manager.get_log(Tp(TOPIC, 0))
    assert log is not None
    before = {b.base_offset: bytes(b.buffer) for s in log.segments for _, b in iter_batches(s.log.read(0, s.size))}
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    manager.run_retention()
    assert log.local_log_start_offset > len(LINES) // 2 and log.log_start_offset == 0

    consumer, tp, got = read_from_zero(broker.bootstrap, 100_000)
    assert [r.offset for r in got] == list(range(len(LINES)))
    assert [r.value for r in got] == LINES
    found = consumer.offsets_for_times({tp: now + 1234})[tp]
    assert found is not None and (found.offset, found.timestamp) == (1234, now + 1234)
    consumer.close()

    offset, served = 0, {}
    while offset < len(LINES):  # the same bytes the local log held, batch by batch
        try:
            records = manager.fetch(Tp(TOPIC, 0), offset, 100_000, FetchIsolation.HIGH_WATERMARK).records
        except OffsetMovedToTieredStorageError:
            records = manager.fetch_remote(Tp(TOPIC, 0), offset, 100_000, FetchIsolation.HIGH_WATERMARK).result(10).records
        batches = [b for _, b in iter_batches(records)]
        served.update({b.base_offset: bytes(b.buffer) for b in batches})
        offset = batches[-1].next_offset
    assert served == before


def read_from_zero(bootstrap: str, max_partition_fetch_bytes: int) -> tuple[KafkaConsumer, TopicPartition, list]:
    """A kafka-python consumer of partition 0 from offset 0, and every record of LINES it polled."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             max_partition_fetch_bytes=max_partition_fetch_bytes)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got: list = []
    while len(got) < len(LINES):
        polled = consumer.poll(timeout_ms=int(TIMEOUT_S * 1000))
        assert polled, f"no records within {TIMEOUT_S}s after {len(got)}"
        got += polled[tp]
    return consumer, tp, got


def cli(data: Path, overrides: list[str], *args: str, stdin: bytes = b"") -> str:
    command = [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data)]
    for override in overrides:
        command += ["--override", override]
    done = subprocess.run([*command, *args], input=stdin, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.mark.soak
def test_consumers_read_a_tiered_topic_from_offset_zero(tiered_data: tuple[Path, list[str]]) -> None:
    data, overrides = tiered_data
    with serve(*overrides, data=data) as served:
        consumer, tp, got = read_from_zero(served.bootstrap, 256 * 1024)
        assert [r.offset for r in got] == list(range(len(LINES)))
        assert [r.value for r in got] == LINES

        # ListOffsets by timestamp into the remote range: the first record at or after it
        probe = got[1234]
        expected = next(r.offset for r in got if r.timestamp >= probe.timestamp)
        found = consumer.offsets_for_times({tp: probe.timestamp})[tp]
        assert found is not None and found.offset == expected and found.timestamp == probe.timestamp
        consumer.close()

        assert asyncio.run(_aiokafka_values(served.bootstrap)) == LINES

    printed = cli(data, overrides, "consume", TOPIC, "--from-beginning").encode().splitlines()
    assert printed == LINES


async def _aiokafka_values(bootstrap: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTp

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = AioTp(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        values: list[bytes] = []
        while len(values) < len(LINES):
            polled = await consumer.getmany(tp, timeout_ms=int(TIMEOUT_S * 1000))
            assert polled, f"aiokafka: no records after {len(values)}"
            values += [r.value for r in polled[tp]]
        return values
    finally:
        await consumer.stop()
