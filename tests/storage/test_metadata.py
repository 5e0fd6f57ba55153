"""partition.metadata, meta.properties and .kafka_cleanshutdown (Kafka's PartitionMetadataFileTest,
CleanShutdownFileHandlerTest and MetaProperties reader rules)."""

from __future__ import annotations

import calendar
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import CheckpointError
from tidelog.storage.metadata import (
    CLEAN_SHUTDOWN_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
    ZERO_TOPIC_ID,
    InvalidUuidError,
    MetaProperties,
    PartitionMetadata,
    PartitionMetadataFile,
    decode_partition_metadata,
    delete_clean_shutdown,
    has_clean_shutdown,
    new_topic_id,
    read_clean_shutdown,
    read_meta_properties,
    topic_id_to_uuid,
    uuid_to_topic_id,
    write_clean_shutdown,
    write_meta_properties,
)
from tidelog.storage.files import temporary_write_path

TOPIC_ID = "q1w2e3r4t5y6u7i8o9p0aQ"


# --- Kafka Uuid strings ---------------------------------------------------------------------

def test_uuid_string_known_vectors() -> None:
    assert uuid_to_topic_id(uuid.UUID(int=0)) == ZERO_TOPIC_ID
    assert uuid_to_topic_id(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka Uuid.ONE_UUID
    assert uuid_to_topic_id(uuid.UUID(int=2**128 - 1)) == "_____________________w"


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**128 - 1))
def test_uuid_string_round_trips(value: int) -> None:
    text = uuid_to_topic_id(uuid.UUID(int=value))
    assert len(text) == 22
    assert topic_id_to_uuid(text) == uuid.UUID(int=value)


def test_uuid_string_with_padding_is_accepted_like_javas_decoder() -> None:
    assert topic_id_to_uuid("AAAAAAAAAAAAAAAAAAAAAQ==") == uuid.UUID(int=1)


@pytest.mark.parametrize("text", ["", "AAAA", "AAAAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAA+", "A" * 25, "has space!"])
def test_invalid_uuid_string_raises(text: str) -> None:
    with pytest.raises(InvalidUuidError):
        topic_id_to_uuid(text)


def test_new_topic_id_is_valid_and_never_reserved() -> None:
    ids = {new_topic_id() for _ in range(200)}
    assert len(ids) == 200
    for topic_id in ids:
        assert len(topic_id) == 22 and not topic_id.startswith("-")
        assert topic_id_to_uuid(topic_id).version == 4
        assert topic_id not in (ZERO_TOPIC_ID, "AAAAAAAAAAAAAAAAAAAAAQ")


# --- partition.metadata ---------------------------------------------------------------------

def test_partition_metadata_exact_bytes_without_trailing_newline(tmp_path: Path) -> None:
    file = PartitionMetadataFile(tmp_path)
    file.write(TOPIC_ID)
    assert (tmp_path / PARTITION_METADATA_FILE).read_bytes() == f"version: 0\ntopic_id: {TOPIC_ID}".encode()
    assert not temporary_write_path(file.path).exists()
    assert file.read() == PartitionMetadata(0, TOPIC_ID)


def test_partition_metadata_reader_accepts_trailing_newline_and_wide_separators() -> None:
    assert decode_partition_metadata(f"version:\t 0\ntopic_id:   {TOPIC_ID}\n".encode()) == PartitionMetadata(0, TOPIC_ID)


def test_partition_metadata_future_version_is_read() -> None:
    assert decode_partition_metadata(f"version: 1\ntopic_id: {TOPIC_ID}".encode()).version == 1


@pytest.mark.parametrize(
    ("text", "line_number", "expected"),
    [
        (f"version:0\ntopic_id: {TOPIC_ID}", 1, "expected 'version: <value>'"),
        (f"versions: 0\ntopic_id: {TOPIC_ID}", 1, "expected 'version: <value>'"),
        (f"version: x\ntopic_id: {TOPIC_ID}", 1, "malformed version"),
        (f"version: -1\ntopic_id: {TOPIC_ID}", 1, "unrecognized partition metadata version -1"),
        ("version: 0", 2, "missing line 'topic_id: <value>'"),
        ("", 1, "missing line 'version: <value>'"),
        (f"version: 0\ntopicid: {TOPIC_ID}", 2, "expected 'topic_id: <value>'"),
        ("version: 0\ntopic_id: short", 2, "invalid topic id"),
        (f"version: 0\ntopic_id: {ZERO_TOPIC_ID}", 2, "invalid topic id"),
    ],
)
def test_partition_metadata_malformed_raises(text: str, line_number: int, expected: str, tmp_path: Path) -> None:
    (tmp_path / PARTITION_METADATA_FILE).write_text(text)
    with pytest.raises(CheckpointError, match=expected) as raised:
        PartitionMetadataFile(tmp_path).read()
    assert raised.value.line_number == line_number
    assert raised.value.path == tmp_path / PARTITION_METADATA_FILE


def test_partition_metadata_write_rejects_zero_and_malformed_ids(tmp_path: Path) -> None:
    for bad in (ZERO_TOPIC_ID, "nope"):
        with pytest.raises(InvalidUuidError):
            PartitionMetadataFile(tmp_path).write(bad)
    assert not (tmp_path / PARTITION_METADATA_FILE).exists()


def test_partition_metadata_exists_and_delete(tmp_path: Path) -> None:
    file = PartitionMetadataFile(tmp_path)
    assert not file.exists()
    file.write(TOPIC_ID)
    assert file.exists()
    file.delete()
    file.delete()
    assert not file.exists()


# --- meta.properties ------------------------------------------------------------------------

_NOW = calendar.timegm((2024, 10, 24, 12, 0, 5, 0, 0, 0))


def test_meta_properties_v1_exact_text(tmp_path: Path) -> None:
    meta = MetaProperties(1, node_id=3, cluster_id="MkU3OEVBNTcwNTJENDM2Qk", directory_id=TOPIC_ID)
    write_meta_properties(tmp_path, meta, now=_NOW)
    assert (tmp_path / META_PROPERTIES_FILE).read_text() == (
        "#\n"
        "#Thu Oct 24 12:00:05 UTC 2024\n"
        "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
        f"directory.id={TOPIC_ID}\n"
        "node.id=3\n"
        "version=1\n"
    )
    assert read_meta_properties(tmp_path) == meta


def test_meta_properties_v0_writes_broker_id(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, MetaProperties(0, node_id=7), now=_NOW)
    text = (tmp_path / META_PROPERTIES_FILE).read_text()
    assert "broker.id=7\n" in text and "node.id" not in text
    assert read_meta_properties(tmp_path) == MetaProperties(0, node_id=7)


def test_read_meta_properties_as_kafka_writes_it(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(
        "#\n#Tue Mar 04 09:12:44 CET 2025\nnode.id=1\ndirectory.id=xl0Jd4tZT2uKqv8Ei5JkqQ\n"
        "version=1\ncluster.id=5L6g3nShT-eMCtK--X86sw\n"
    )
    assert read_meta_properties(tmp_path) == MetaProperties(
        1, node_id=1, cluster_id="5L6g3nShT-eMCtK--X86sw", directory_id="xl0Jd4tZT2uKqv8Ei5JkqQ"
    )


def test_read_meta_properties_missing_file_is_none(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None


def test_read_meta_properties_without_version_is_v0_and_broker_id_optional(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text("cluster.id = abc\n")
    assert read_meta_properties(tmp_path) == MetaProperties(0, node_id=None, cluster_id="abc")


def test_read_meta_properties_ignores_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text("version=0\nbroker.id=2\nfuture.key=x\n")
    assert read_meta_properties(tmp_path) == MetaProperties(0, node_id=2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version=1\ncluster.id=c\n", "required property node.id is missing"),
        ("version=1\nnode.id=1\n", "version 1 requires cluster.id"),
        ("version=2\nnode.id=1\n", "version 2 requires directory.id"),
        ("version=3\nnode.id=1\n", "unknown meta.properties version 3"),
        ("version=one\n", "property version is not a base-10 int32"),
        ("version=0\nbroker.id=x\n", "property broker.id is not a base-10 int32"),
        ("version=1\nnode.id=4294967296\ncluster.id=c\n", "property node.id is not a base-10 int32"),
        ("version=1\nnode.id=1\ncluster.id=c\ndirectory.id=zzz\n", "directory.id is not a Kafka Uuid"),
        ("version=0\nbroker.id=1\\u00zz\n", "Malformed"),
    ],
)
def test_read_meta_properties_invalid_raises_naming_the_file(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(text)
    with pytest.raises(CheckpointError, match=expected) as raised:
        read_meta_properties(tmp_path)
    assert raised.value.path == tmp_path / META_PROPERTIES_FILE


def test_meta_properties_construction_validates() -> None:
    with pytest.raises(CheckpointError, match="version 1 requires node.id"):
        MetaProperties(1, cluster_id="c")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"node_id": 1, "cluster_id": "c", "directory_id": "zzz"}, "directory.id is not a Kafka Uuid"),
        ({"node_id": 2**31, "cluster_id": "c"}, "node id 2147483648 does not fit in an int32"),
    ],
)
def test_meta_properties_that_could_not_be_read_back_are_never_written(
    tmp_path: Path, fields: dict[str, object], expected: str
) -> None:
    with pytest.raises(CheckpointError, match=expected):
        write_meta_properties(tmp_path, MetaProperties(1, **fields))  # type: ignore[arg-type]
    assert not (tmp_path / META_PROPERTIES_FILE).exists()


# --- .kafka_cleanshutdown -------------------------------------------------------------------

def test_clean_shutdown_marker_exact_json(tmp_path: Path) -> None:
    write_clean_shutdown(tmp_path, 3)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":3}'
    assert has_clean_shutdown(tmp_path)
    assert read_clean_shutdown(tmp_path) == 3
    assert not temporary_write_path(tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_clean_shutdown_marker_unknown_fields_are_ignored(tmp_path: Path) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":10,"unknown":123}')
    assert read_clean_shutdown(tmp_path) == 10


def test_clean_shutdown_marker_missing_is_none(tmp_path: Path) -> None:
    assert read_clean_shutdown(tmp_path) is None
    assert not has_clean_shutdown(tmp_path)


def test_clean_shutdown_marker_empty_from_old_kafka_reads_minus_one(tmp_path: Path) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    assert has_clean_shutdown(tmp_path)
    assert read_clean_shutdown(tmp_path) == -1


@pytest.mark.parametrize("text", ["{", "[1]", '{"version":0}', '{"brokerEpoch":"3"}', '{"brokerEpoch":true}', "\xff"])
def test_clean_shutdown_marker_malformed_raises(tmp_path: Path, text: str) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(text.encode("latin-1"))
    with pytest.raises(CheckpointError) as raised:
        read_clean_shutdown(tmp_path)
    assert raised.value.path == tmp_path / CLEAN_SHUTDOWN_FILE


def test_clean_shutdown_marker_delete(tmp_path: Path) -> None:
    write_clean_shutdown(tmp_path, 1)
    delete_clean_shutdown(tmp_path)
    delete_clean_shutdown(tmp_path)
    assert not has_clean_shutdown(tmp_path)


def test_clean_shutdown_marker_large_epoch_round_trips(tmp_path: Path) -> None:
    write_clean_shutdown(tmp_path, 2**63 - 1)
    assert read_clean_shutdown(tmp_path) == 2**63 - 1
    with pytest.raises(ValueError):
        write_clean_shutdown(tmp_path, 2**63)


def test_uuid_string_keeps_byte_order() -> None:
    # Kafka: new Uuid(0x0001020304050607L, 0x08090a0b0c0d0e0fL).toString()
    assert uuid_to_topic_id(uuid.UUID(bytes=bytes(range(16)))) == "AAECAwQFBgcICQoLDA0ODw"
    assert topic_id_to_uuid("AAECAwQFBgcICQoLDA0ODw") == uuid.UUID(int=0x0001020304050607_08090A0B0C0D0E0F)
