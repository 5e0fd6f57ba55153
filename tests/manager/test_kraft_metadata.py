"""Kafka's KRaft metadata log read for its topics (``tidelog.manager.kraft_metadata``), and the
LogManager adopting a Kafka data dir's topics with what it says.

The metadata here is synthetic (the suite runs without Java), built the way Kafka writes it: v2
record batches (tidelog's ``BatchBuilder``; null keys, the raft epoch as partition leader epoch)
whose record values are framed metadata records::

    value  = uvarint frameVersion (1) | uvarint apiKey | uvarint version | message
    message, flexible versions: int8/int16/int32 big-endian, uuid = 16 bytes,
             string = uvarint (len + 1) then UTF-8 (0 = null), array = uvarint (n + 1) then items,
             and a tagged-fields count (uvarint 0 here) closing the message

    TopicRecord (2) v0        Name string, TopicId uuid, tags
    PartitionRecord (3) v2    PartitionId int32, TopicId uuid, Replicas [int32], Isr [int32],
                              RemovingReplicas [int32], AddingReplicas [int32], Leader int32,
                              LeaderEpoch int32, PartitionEpoch int32, Directories [uuid], tags
    ConfigRecord (4) v0       ResourceType int8 (2 topic, 4 broker), ResourceName string,
                              Name string, Value nullable string, tags
    RemoveTopicRecord (9) v0  TopicId uuid, tags
    FeatureLevelRecord (12)   Name string, FeatureLevel int16, tags (a record type we skip)
    Begin/End/AbortTransactionRecord (23/24/25) v0: tags only

A snapshot ``<end offset:020>-<epoch:010>.checkpoint`` is a control batch holding a SnapshotHeader
(key: int16 version 0, int16 type 3; value: int16 version, int64 lastContainedLogTimestamp, tags),
batches of metadata records with offsets from 1, and a control batch holding a SnapshotFooter
(type 4; value: int16 version, tags). ``tests/interop/test_kafka_topic_configs_adopted.py`` has
Kafka's own DumpLogSegments decode these bytes, so the layout here is Kafka's, not our reading of it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from manager_helpers import T0, Opener, batch, registry

from tidelog.errors import CorruptRecordError
from tidelog.manager.kraft_metadata import (
    KraftTopic,
    MetadataImage,
    find_metadata_log,
    newest_snapshot,
    read_metadata_log,
)
from tidelog.records import BatchBuilder
from tidelog.records.control import ControlRecordType, control_key
from tidelog.records.varint import encode_unsigned_varint
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log
from tidelog.storage.metadata import PartitionMetadataFile, topic_id_to_uuid
from tidelog.testing import FakeClock, FakeScheduler

ORDERS_ID = "q9Qo-wkKRAKLDw_iWvRQZg"
CLICKS_ID = "pUZXcnwHTjipdMKw0ii5gQ"
OFFSETS_ID = "UV5kRvjPS7GwDNKACU32PA"
AGAIN_ID = "Ytu_rla7TW-1tlirPBmVgw"
DIRECTORY_ID = "MGbXSbxGRAGQxqo3sB9U0g"
TOPIC, BROKER = 2, 4
EPOCH = 1
DAY_MS = 86_400_000


# --- encoding metadata records as Kafka does --------------------------------------------------

def _string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    return encode_unsigned_varint(len(data) + 1) + data


def _uuid(topic_id: str) -> bytes:
    return topic_id_to_uuid(topic_id).bytes


def _array(items: Sequence[bytes]) -> bytes:
    return encode_unsigned_varint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


def framed(api_key: int, version: int, message: bytes) -> bytes:
    return encode_unsigned_varint(1) + encode_unsigned_varint(api_key) + encode_unsigned_varint(version) + message


def topic_record(name: str, topic_id: str) -> bytes:
    return framed(2, 0, _string(name) + _uuid(topic_id) + NO_TAGS)


def partition_record(topic_id: str, partition: int) -> bytes:
    one = [struct.pack(">i", 1)]
    message = (struct.pack(">i", partition) + _uuid(topic_id) + _array(one) + _array(one) + _array([]) + _array([])
               + struct.pack(">iii", 1, 0, 0) + _array([_uuid(DIRECTORY_ID)]) + NO_TAGS)
    return framed(3, 2, message)


def config_record(topic: str, name: str, value: str | None, resource_type: int = TOPIC) -> bytes:
    return framed(4, 0, struct.pack(">b", resource_type) + _string(topic) + _string(name) + _string(value) + NO_TAGS)


def remove_topic_record(topic_id: str) -> bytes:
    return framed(9, 0, _uuid(topic_id) + NO_TAGS)


def feature_level_record(name: str, level: int) -> bytes:
    return framed(12, 0, _string(name) + struct.pack(">h", level) + NO_TAGS)


def begin_transaction() -> bytes:
    return framed(23, 0, NO_TAGS)


def end_transaction() -> bytes:
    return framed(24, 0, NO_TAGS)


def abort_transaction() -> bytes:
    return framed(25, 0, NO_TAGS)


def new_topic(name: str, topic_id: str, partitions: int, **configs: str) -> list[bytes]:
    """What Kafka's controller writes for CreateTopics: the topic, its configs, its partitions."""
    return ([topic_record(name, topic_id)] + [config_record(name, k.replace("_", "."), v) for k, v in configs.items()]
            + [partition_record(topic_id, p) for p in range(partitions)])


def metadata_batch(base_offset: int, values: Sequence[bytes]) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, partition_leader_epoch=EPOCH)
    for i, value in enumerate(values):
        builder.append(base_offset + i, T0, None, value)
    return builder.build()


def control_batch(base_offset: int, kind: ControlRecordType, value: bytes) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, partition_leader_epoch=EPOCH, is_control=True)
    builder.append(base_offset, T0, control_key(kind), value)
    return builder.build()


@dataclass
class MetadataLog:
    """A ``__cluster_metadata-0`` dir under construction: segments and snapshots, offsets kept."""

    dir: Path
    next_offset: int = 0

    def segment(self, *batches: Sequence[bytes], base_offset: int | None = None) -> Path:
        """A new ``.log`` segment of one batch per item (each a list of record values)."""
        if base_offset is not None:
            self.next_offset = base_offset
        path = self.dir / f"{self.next_offset:020d}.log"
        data = b""
        for values in batches:
            data += metadata_batch(self.next_offset, values)
            self.next_offset += len(values)
        self.dir.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def snapshot(self, end_offset: int, *batches: Sequence[bytes], epoch: int = EPOCH) -> Path:
        """A snapshot of the state below ``end_offset``: header, batches, footer."""
        data = control_batch(0, ControlRecordType.SNAPSHOT_HEADER, struct.pack(">hq", 0, T0) + NO_TAGS)
        offset = 1
        for values in batches:
            data += metadata_batch(offset, values)
            offset += len(values)
        data += control_batch(offset, ControlRecordType.SNAPSHOT_FOOTER, struct.pack(">h", 0) + NO_TAGS)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{end_offset:020d}-{epoch:010d}.checkpoint"
        path.write_bytes(data)
        return path


@pytest.fixture
def metadata(tmp_path: Path) -> MetadataLog:
    return MetadataLog(tmp_path / "kafka" / "__cluster_metadata-0")


def topics(image: MetadataImage) -> dict[str, tuple[str, int, dict[str, str]]]:
    return {name: (t.topic_id, t.partitions, dict(t.configs)) for name, t in image.topics.items()}


# --- reading the log ---------------------------------------------------------------------------

def test_topics_with_their_configs_and_partitions(metadata: MetadataLog) -> None:
    metadata.segment(
        [feature_level_record("metadata.version", 30)],
        new_topic("orders", ORDERS_ID, 3, cleanup_policy="compact", min_compaction_lag_ms="1000"),
        [config_record("1", "log.retention.ms", "5", BROKER), config_record("", "log.cleanup.policy", "compact", BROKER)],
        new_topic("clicks", CLICKS_ID, 2),
        new_topic("1", AGAIN_ID, 1),  # a topic named as broker 1, whose config above is not its
    )
    image = read_metadata_log(metadata.dir)
    assert topics(image) == {
        "1": (AGAIN_ID, 1, {}),
        "clicks": (CLICKS_ID, 2, {}),
        "orders": (ORDERS_ID, 3, {"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"}),
    }
    assert (image.end_offset, image.snapshot, image.torn_tail) == (metadata.next_offset, None, None)
    assert image.topics["orders"] == KraftTopic("orders", ORDERS_ID, 3, {"cleanup.policy": "compact",
                                                                          "min.compaction.lag.ms": "1000"})


def test_a_config_changed_then_deleted(metadata: MetadataLog) -> None:
    metadata.segment(
        new_topic("orders", ORDERS_ID, 1, retention_ms="1000", retention_bytes="2048"),
        [config_record("orders", "retention.ms", "5000")],
        [config_record("orders", "retention.bytes", None), config_record("orders", "segment.bytes", "1048576")],
        [config_record("clicks", "retention.ms", None)],  # deleting what never was: nothing happens
    )
    assert topics(read_metadata_log(metadata.dir)) == {
        "orders": (ORDERS_ID, 1, {"retention.ms": "5000", "segment.bytes": "1048576"})}


def test_a_removed_topic_is_gone_with_its_configs(metadata: MetadataLog) -> None:
    metadata.segment(
        new_topic("orders", ORDERS_ID, 2, cleanup_policy="compact"),
        new_topic("clicks", CLICKS_ID, 1),
        [remove_topic_record(ORDERS_ID), remove_topic_record(AGAIN_ID)],  # an unknown id is ignored
    )
    assert topics(read_metadata_log(metadata.dir)) == {"clicks": (CLICKS_ID, 1, {})}
    metadata.segment(new_topic("orders", AGAIN_ID, 1, retention_ms="10"))
    assert topics(read_metadata_log(metadata.dir))["orders"] == (AGAIN_ID, 1, {"retention.ms": "10"})


def test_partitions_added_later_count(metadata: MetadataLog) -> None:
    metadata.segment(new_topic("orders", ORDERS_ID, 2), [partition_record(ORDERS_ID, 2), partition_record(ORDERS_ID, 3)])
    assert read_metadata_log(metadata.dir).topics["orders"].partitions == 4


def test_a_snapshot_then_the_log_segments_after_it(metadata: MetadataLog) -> None:
    """The log before the snapshot's end offset is skipped (a record there would change the result),
    a batch that straddles it counts from it on, older snapshots and ``.part`` files are ignored."""
    metadata.segment(new_topic("orders", ORDERS_ID, 1), [config_record("orders", "retention.ms", "1")])  # 0..2
    metadata.segment([config_record("orders", "retention.ms", "2"), config_record("orders", "cleanup.policy", "compact")],
                     [config_record("orders", "retention.bytes", "4096")])  # 3..5; the snapshot ends at 4
    metadata.segment(new_topic("clicks", CLICKS_ID, 1))  # 6..7
    metadata.snapshot(2, new_topic("orders", ORDERS_ID, 1, retention_ms="999"))
    metadata.snapshot(4, [feature_level_record("metadata.version", 30)], new_topic("orders", ORDERS_ID, 1, segment_ms="7"))
    (metadata.dir / f"{9:020d}-{EPOCH:010d}.checkpoint.part").write_bytes(b"unfinished")
    (metadata.dir / f"{8:020d}-{EPOCH:010d}.checkpoint.deleted").write_bytes(b"gone")

    image = read_metadata_log(metadata.dir)
    assert image.snapshot == metadata.dir / f"{4:020d}-{EPOCH:010d}.checkpoint"
    assert topics(image) == {
        "clicks": (CLICKS_ID, 1, {}),
        "orders": (ORDERS_ID, 1, {"segment.ms": "7", "cleanup.policy": "compact", "retention.bytes": "4096"}),
    }
    assert image.end_offset == 8


def test_a_snapshot_after_which_old_segments_were_deleted(metadata: MetadataLog) -> None:
    metadata.snapshot(10, new_topic("orders", ORDERS_ID, 2, cleanup_policy="compact"))
    metadata.segment([config_record("orders", "retention.ms", "60000")],  # 9: in the snapshot already
                     [config_record("orders", "cleanup.policy", "compact,delete")], base_offset=9)
    metadata.segment(new_topic("clicks", CLICKS_ID, 1))
    assert newest_snapshot(metadata.dir) == (metadata.dir / f"{10:020d}-{EPOCH:010d}.checkpoint", 10)
    image = read_metadata_log(metadata.dir)
    assert topics(image) == {"clicks": (CLICKS_ID, 1, {}), "orders": (ORDERS_ID, 2, {"cleanup.policy": "compact,delete"})}
    assert image.end_offset == 13


def test_a_snapshot_alone(metadata: MetadataLog) -> None:
    metadata.snapshot(57, new_topic("orders", ORDERS_ID, 2, cleanup_policy="compact"))
    image = read_metadata_log(metadata.dir)
    assert (topics(image), image.end_offset) == ({"orders": (ORDERS_ID, 2, {"cleanup.policy": "compact"})}, 57)


def test_a_log_that_starts_after_the_snapshot_misses_records(metadata: MetadataLog) -> None:
    metadata.snapshot(5, new_topic("orders", ORDERS_ID, 1))
    segment = metadata.segment([config_record("orders", "retention.ms", "1")], base_offset=7)
    with pytest.raises(CorruptRecordError, match="no record at offset 5") as raised:
        read_metadata_log(metadata.dir)
    assert (raised.value.context["path"], raised.value.context["offset"]) == (segment, 5)


def torn_by_truncation(data: bytes, second_batch: int) -> bytes:
    return data[:second_batch + 30]


def torn_by_a_flipped_byte(data: bytes, second_batch: int) -> bytes:
    return data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:]


def torn_by_zeros(data: bytes, second_batch: int) -> bytes:
    return data + bytes(4096)  # a preallocated tail


@pytest.mark.parametrize("tear", [torn_by_truncation, torn_by_a_flipped_byte, torn_by_zeros])
def test_a_torn_tail_stops_reading_with_a_warning(metadata: MetadataLog, caplog: pytest.LogCaptureFixture,
                                                 tear: Callable[[bytes, int], bytes]) -> None:
    """Records 0-2 create orders, 3 and 4 (one batch each, in a second segment) change it; the
    tear damages the batch of record 4 (or, zeros, follows it); a third segment is never read."""
    metadata.segment(new_topic("orders", ORDERS_ID, 1, retention_ms="100"))
    torn = metadata.segment([config_record("orders", "cleanup.policy", "compact")],
                            [config_record("orders", "retention.ms", "200")])
    data = torn.read_bytes()
    second_batch = len(metadata_batch(3, [config_record("orders", "cleanup.policy", "compact")]))
    torn.write_bytes(tear(data, second_batch))
    metadata.segment(new_topic("clicks", CLICKS_ID, 1))

    with caplog.at_level(logging.WARNING):
        image = read_metadata_log(metadata.dir)
    whole = tear is torn_by_zeros
    position = len(data) if whole else second_batch
    assert topics(image) == {"orders": (ORDERS_ID, 1, {"retention.ms": "200" if whole else "100",
                                                       "cleanup.policy": "compact"})}
    assert image.torn_tail is not None
    assert (image.torn_tail.path, image.torn_tail.position, image.end_offset) == (torn, position, 5 if whole else 4)
    assert f"{torn}: Kafka's metadata log is read up to byte {position} only" in caplog.text


def test_a_record_that_does_not_decode_names_file_and_offset(metadata: MetadataLog) -> None:
    cut = topic_record("orders", ORDERS_ID)[:-5]  # inside a batch whose CRC is good
    segment = metadata.segment(new_topic("clicks", CLICKS_ID, 1), [cut])
    with pytest.raises(CorruptRecordError, match="does not decode") as raised:
        read_metadata_log(metadata.dir)
    assert (raised.value.context["path"], raised.value.context["offset"]) == (segment, 2)
    assert raised.value.context["api_key"] == 2


def test_frame_version_0_is_refused(metadata: MetadataLog) -> None:
    segment = metadata.segment([b"\x00" + topic_record("orders", ORDERS_ID)[1:]])
    with pytest.raises(CorruptRecordError, match="unknown frame version 0") as raised:
        read_metadata_log(metadata.dir)
    assert raised.value.context["path"] == segment


def test_a_damaged_snapshot_is_an_error(metadata: MetadataLog) -> None:
    path = metadata.snapshot(3, new_topic("orders", ORDERS_ID, 1))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CorruptRecordError, match="snapshot is damaged") as raised:
        read_metadata_log(metadata.dir)
    assert raised.value.context["path"] == path


def test_metadata_transactions(metadata: MetadataLog, caplog: pytest.LogCaptureFixture) -> None:
    """KIP-868: applied at End, dropped at Abort, not applied while open at the end of the log."""
    metadata.segment(
        [begin_transaction()], new_topic("orders", ORDERS_ID, 2), [end_transaction()],
        [begin_transaction(), config_record("orders", "cleanup.policy", "compact")],
        [partition_record(ORDERS_ID, 2), abort_transaction()],
        [begin_transaction(), *new_topic("clicks", CLICKS_ID, 1)],
    )
    with caplog.at_level(logging.WARNING):
        assert topics(read_metadata_log(metadata.dir)) == {"orders": (ORDERS_ID, 2, {})}
    assert "ends inside a metadata transaction: its 2 records are not applied" in caplog.text


def test_where_the_metadata_log_is(tmp_path: Path) -> None:
    first, second, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "meta"
    assert find_metadata_log([first, second]) is None
    (second / "__cluster_metadata-0").mkdir(parents=True)
    assert find_metadata_log([first, second]) == second / "__cluster_metadata-0"
    (first / "__cluster_metadata-0").mkdir(parents=True)
    assert find_metadata_log([first, second]) == first / "__cluster_metadata-0"
    assert find_metadata_log([first, second], elsewhere) is None
    (elsewhere / "__cluster_metadata-0").mkdir(parents=True)
    assert find_metadata_log([first, second], elsewhere) == elsewhere / "__cluster_metadata-0"


def test_an_empty_metadata_log(metadata: MetadataLog) -> None:
    metadata.dir.mkdir(parents=True)
    (metadata.dir / f"{0:020d}.log").write_bytes(b"")
    assert read_metadata_log(metadata.dir) == MetadataImage({}, 0)


# --- the LogManager adopting a Kafka data dir ---------------------------------------------------

def kafka_partition(log_dir: Path, topic: str, partition: int, topic_id: str | None, *,
                    records: int = 1, timestamp: int = T0, segment_bytes: int | None = None) -> Path:
    """A partition dir as a Kafka broker leaves it (written by tidelog's Log, no manager)."""
    config = LogConfig.defaults() if segment_bytes is None else LogConfig.defaults().with_overrides(
        segment_bytes=segment_bytes)
    clock = FakeClock(T0)
    lg = Log.open(log_dir / f"{topic}-{partition}", config, clock=clock, scheduler=FakeScheduler(clock))
    for _ in range(records):
        lg.append_as_leader(batch(1, timestamp=timestamp))
    lg.close()
    if topic_id is not None:
        PartitionMetadataFile(lg.dir).write(topic_id)
    return lg.dir


def kafka_data_dir(log_dir: Path) -> MetadataLog:
    """A Kafka data dir: orders (compacted, 2 partitions), clicks (overrides Kafka 4 has and
    tidelog does not, and a value tidelog refuses), __consumer_offsets; a deleted topic."""
    metadata = MetadataLog(log_dir / "__cluster_metadata-0")
    metadata.segment(
        [feature_level_record("metadata.version", 30)],
        new_topic("orders", ORDERS_ID, 2, cleanup_policy="compact", min_compaction_lag_ms="1000"),
        new_topic("clicks", CLICKS_ID, 1, retention_ms="60000", internal_segment_bytes="1024",
                  max_message_bytes="-5"),
        new_topic("__consumer_offsets", OFFSETS_ID, 1, cleanup_policy="compact", segment_bytes="104857600",
                  compression_type="producer"),
        new_topic("gone", AGAIN_ID, 1, cleanup_policy="compact"), [remove_topic_record(AGAIN_ID)],
    )
    for topic, topic_id, partitions in (("orders", ORDERS_ID, 2), ("clicks", CLICKS_ID, 1),
                                        ("__consumer_offsets", OFFSETS_ID, 1)):
        for p in range(partitions):
            kafka_partition(log_dir, topic, p, topic_id)
    return metadata


def described(manager: object, topic: str) -> tuple[str, int, dict[str, str]]:
    d = manager.describe_topic(topic)  # type: ignore[attr-defined]
    return d.topic_id, d.partition_count, dict(d.configs)


def test_adopted_topics_take_kafkas_ids_and_overrides(broker: Opener, one_dir: list[Path],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    one_dir[0].mkdir()
    kafka_data_dir(one_dir[0])
    with caplog.at_level(logging.INFO, logger="tidelog.manager"):
        manager = broker.open(one_dir)
    assert manager.topics() == ["__consumer_offsets", "clicks", "orders"]
    assert described(manager, "orders") == (ORDERS_ID, 2, {"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"})
    assert described(manager, "clicks") == (CLICKS_ID, 1, {"retention.ms": "60000"})
    assert described(manager, "__consumer_offsets") == (
        OFFSETS_ID, 1, {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"})
    assert manager.topic_config("orders").compact and manager.topic_config("orders").min_compaction_lag_ms == 1000
    assert [(lg.config.compact, lg.config.min_compaction_lag_ms) for _, lg in manager.logs("orders")] == [(True, 1000)] * 2
    assert manager.topic_config("clicks").retention_ms == 60000
    assert "Kafka's override internal.segment.bytes=1024 is left out: Unknown topic config name" in caplog.text
    assert "Kafka's override max.message.bytes=-5 is left out: Invalid value -5" in caplog.text
    assert f"adopting topic orders (2 partition dirs found) with Kafka's topic id {ORDERS_ID}" in caplog.text
    assert registry(one_dir[0])["topics"]["orders"]["configs"] == {"cleanup.policy": "compact",
                                                                    "min.compaction.lag.ms": "1000"}
    assert (one_dir[0] / "__cluster_metadata-0" / f"{0:020d}.log").stat().st_size > 0  # left alone


def test_kafkas_topic_id_wins_over_a_stale_partition_dir(broker: Opener, one_dir: list[Path]) -> None:
    """A dir left by an older topic of the same name is not a partition of Kafka's topic."""
    one_dir[0].mkdir()
    kafka_data_dir(one_dir[0])
    kafka_partition(one_dir[0], "orders", 1, AGAIN_ID)  # replaces orders-1's partition.metadata
    manager = broker.open(one_dir)
    assert manager.describe_topic("orders").topic_id == ORDERS_ID
    assert [s.topic_partition.partition for s in manager.set_aside() if s.topic_partition] == [1]
    assert "InconsistentTopicId" in manager.set_aside()[0].reason


def test_more_partitions_in_kafka_than_in_the_dirs(broker: Opener, one_dir: list[Path],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    one_dir[0].mkdir()
    metadata = MetadataLog(one_dir[0] / "__cluster_metadata-0")
    metadata.segment(new_topic("orders", ORDERS_ID, 4))
    kafka_partition(one_dir[0], "orders", 0, ORDERS_ID)
    with caplog.at_level(logging.WARNING, logger="tidelog.manager"):
        manager = broker.open(one_dir)
    assert manager.partitions("orders") == [0]
    assert "Kafka's metadata log has 4 partitions, the log dirs hold 1" in caplog.text


def test_the_metadata_log_in_metadata_log_dir(broker: Opener, log_dirs: list[Path]) -> None:
    log_dirs[0].mkdir()
    kafka_partition(log_dirs[0], "orders", 0, ORDERS_ID)
    MetadataLog(log_dirs[2] / "__cluster_metadata-0").segment(new_topic("orders", ORDERS_ID, 1, retention_ms="5"))
    manager = broker.open(log_dirs[:1], {"metadata.log.dir": str(log_dirs[2])})
    assert described(manager, "orders") == (ORDERS_ID, 1, {"retention.ms": "5"})


def test_without_metadata_internal_topics_keep_kafkas_policy(broker: Opener, one_dir: list[Path],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    one_dir[0].mkdir()
    for topic in ("__consumer_offsets", "__transaction_state", "__share_group_state", "orders"):
        kafka_partition(one_dir[0], topic, 0, None)
    with caplog.at_level(logging.INFO, logger="tidelog.manager"):
        manager = broker.open(one_dir)
    configs = {topic: described(manager, topic)[2] for topic in manager.topics()}
    assert configs == {
        "__consumer_offsets": {"cleanup.policy": "compact", "segment.bytes": "104857600"},
        "__share_group_state": {"cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "104857600"},
        "__transaction_state": {"cleanup.policy": "compact", "segment.bytes": "104857600"},
        "orders": {},
    }
    assert ("adopting topic __consumer_offsets (1 partition dirs found) with the configs Kafka creates it with, "
            "{cleanup.policy=compact, segment.bytes=104857600} (no Kafka metadata log was read)") in caplog.text
    assert "adopting topic orders (1 partition dirs found) with default configs (no Kafka metadata log was read)" \
        in caplog.text


def test_an_unreadable_metadata_log_is_not_used(broker: Opener, one_dir: list[Path],
                                                caplog: pytest.LogCaptureFixture) -> None:
    one_dir[0].mkdir()
    metadata = kafka_data_dir(one_dir[0])
    metadata.segment([b"\x07garbage"])
    with caplog.at_level(logging.INFO, logger="tidelog.manager"):
        manager = broker.open(one_dir)
    assert "Kafka's metadata log is not used, it does not read: metadata record does not decode" in caplog.text
    assert described(manager, "orders")[2] == {}
    assert described(manager, "__consumer_offsets")[2] == {"cleanup.policy": "compact", "segment.bytes": "104857600"}


def test_the_metadata_log_is_read_only_when_something_is_adopted(broker: Opener, one_dir: list[Path],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("orders", 1)
    manager.shutdown()
    MetadataLog(one_dir[0] / "__cluster_metadata-0").segment([b"\x07garbage"])
    with caplog.at_level(logging.DEBUG, logger="tidelog.manager"):
        assert described(broker.open(one_dir), "orders")[2] == {}
    assert "metadata log" not in caplog.text


def test_retention_deletes_nothing_from_an_adopted_compacted_topic(broker: Opener, one_dir: list[Path]) -> None:
    """Kafka's compacted ``__consumer_offsets`` with month-old segments: retention would have taken
    them all under the default ``delete`` policy (as it does for ``orders`` here, whose configs
    nothing recorded, once an operator confirms them)."""
    one_dir[0].mkdir()
    for topic in ("__consumer_offsets", "orders"):
        kafka_partition(one_dir[0], topic, 0, None, records=6, timestamp=T0 - 30 * DAY_MS, segment_bytes=200)
    manager = broker.open(one_dir)
    plans = {plan.topic_partition.topic: plan for plan in manager.run_retention(dry_run=True)}
    assert manager.logs("__consumer_offsets")[0][1].num_segments > 2
    assert plans["__consumer_offsets"].segments == ()
    assert plans["__consumer_offsets"].cleanup_policy == ("compact",)
    assert plans["orders"].segments == () and "unconfirmed" in plans["orders"].reasons[0]
    assert manager.confirm_topic_configs("orders")
    [plan] = manager.run_retention("orders", dry_run=True)
    assert len(plan.segments) == manager.logs("orders")[0][1].num_segments


def test_a_dir_of_a_topic_kafka_deleted_is_set_aside_not_adopted(broker: Opener, one_dir: list[Path],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A dir Kafka never renamed (its broker was down during the delete): Kafka keeps it aside as a
    stray; so does tidelog, instead of serving a deleted topic again. Nothing is removed."""
    one_dir[0].mkdir()
    kafka_data_dir(one_dir[0])
    kafka_partition(one_dir[0], "gone", 0, AGAIN_ID)
    with caplog.at_level(logging.WARNING, logger="tidelog.manager"):
        manager = broker.open(one_dir)
    assert "gone" not in manager.topics()
    [aside] = [s for s in manager.set_aside() if s.topic_partition is not None]
    assert (aside.topic_partition.topic, aside.path.name) == ("gone", "gone-0")
    assert f"Kafka's metadata log deleted topic gone (id {AGAIN_ID})" in aside.reason
    assert (one_dir[0] / "gone-0" / "00000000000000000000.log").exists()
