"""File and directory names (tidelog.storage.files): Kafka's LogFileUtils / LocalLog name rules
(kafka-storage.md §1.1; LocalLogTest.testParseTopicPartitionName*, testLogDeleteDirName,
testOffsetFromFile)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidelog import errors
from tidelog.errors import InvalidLogFileNameError, TidelogError
from tidelog.storage import files
from tidelog.storage.files import InvalidLogDirNameError, parse_topic_partition_name
from tidelog.topic_partition import TopicPartition

DELETE_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)-delete$")
FUTURE_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)-future$")


# --- segment file names -----------------------------------------------------------------------

@pytest.mark.parametrize(("offset", "name"), [
    (0, "00000000000000000000"),
    (42, "00000000000000000042"),
    (2**31, "00000000002147483648"),
    (2**63 - 1, "09223372036854775807"),
])
def test_filename_prefix_is_20_zero_padded_digits(offset: int, name: str) -> None:
    assert files.filename_prefix_from_offset(offset) == name
    assert len(name) == 20


def test_negative_base_offset_has_no_file_name() -> None:
    with pytest.raises(ValueError):
        files.filename_prefix_from_offset(-1)


def test_segment_file_paths(tmp_path: Path) -> None:
    assert files.log_file(tmp_path, 42) == tmp_path / "00000000000000000042.log"
    assert files.offset_index_file(tmp_path, 42) == tmp_path / "00000000000000000042.index"
    assert files.time_index_file(tmp_path, 42) == tmp_path / "00000000000000000042.timeindex"
    assert files.transaction_index_file(tmp_path, 42) == tmp_path / "00000000000000000042.txnindex"
    assert files.producer_snapshot_file(tmp_path, 42) == tmp_path / "00000000000000000042.snapshot"
    assert files.log_file(tmp_path, 42, files.CLEANED_SUFFIX) == tmp_path / "00000000000000000042.log.cleaned"
    assert files.time_index_file(tmp_path, 7, files.SWAP_SUFFIX) == tmp_path / "00000000000000000007.timeindex.swap"
    assert files.offset_index_file(tmp_path, 7, files.DELETED_SUFFIX).name == "00000000000000000007.index.deleted"


@pytest.mark.parametrize("suffix", [".log", ".index", ".timeindex", ".txnindex", ".snapshot",
                                    ".log.deleted", ".index.swap", ".timeindex.cleaned"])
def test_offset_from_file_name(suffix: str) -> None:
    assert files.offset_from_file_name(f"{files.filename_prefix_from_offset(23423423)}{suffix}") == 23423423


@pytest.mark.parametrize(
    "name", ["leader-epoch-checkpoint", "partition.metadata", ".log", "abc.log", "\u00b2\u00b3.log"]
)
def test_offset_from_a_name_without_offset_is_an_error(name: str) -> None:
    with pytest.raises(TidelogError) as raised:
        files.offset_from_file_name(name)
    assert isinstance(raised.value, InvalidLogFileNameError)
    assert raised.value.file == name


def test_atomic_write_scratch_file_is_target_name_plus_tmp(tmp_path: Path) -> None:
    assert files.temporary_write_path(tmp_path / "replication-offset-checkpoint") == (
        tmp_path / "replication-offset-checkpoint.tmp"
    )
    assert files.meta_properties_file(tmp_path) == tmp_path / "meta.properties"


def test_temporary_suffixes_are_replaced_not_stacked(tmp_path: Path) -> None:
    path = files.log_file(tmp_path, 5)
    deleted = files.with_temporary_suffix(path, files.DELETED_SUFFIX)
    assert deleted.name == "00000000000000000005.log.deleted"
    assert files.with_temporary_suffix(deleted, files.SWAP_SUFFIX).name == "00000000000000000005.log.swap"
    assert files.strip_temporary_suffix("00000000000000000005.index.cleaned") == "00000000000000000005.index"
    assert files.strip_temporary_suffix("00000000000000000005.index") == "00000000000000000005.index"


# --- partition dir names ----------------------------------------------------------------------

def test_partition_dir_name(tmp_path: Path) -> None:
    tp = TopicPartition("orders", 3)
    assert files.partition_dir_name(tp) == "orders-3"
    assert files.partition_dir(tmp_path, tp) == tmp_path / "orders-3"


def test_parse_topic_partition_name() -> None:
    assert parse_topic_partition_name("test_topic-143") == TopicPartition("test_topic", 143)


@pytest.mark.parametrize("topic", ["foo.bar-testtopic", "a-b-c", "x.y.z", "t"])
def test_parse_topic_partition_name_with_dashes_and_periods(topic: str) -> None:
    assert parse_topic_partition_name(f"{topic}-42") == TopicPartition(topic, 42)


def test_parse_topic_partition_name_with_period_for_deleted_topic() -> None:
    tp = TopicPartition("foo.bar-testtopic", 42)
    assert parse_topic_partition_name(files.log_delete_dir_name(tp)) == tp


@pytest.mark.parametrize("name_of", [files.log_delete_dir_name, files.log_future_dir_name, files.log_stray_dir_name])
def test_renamed_dirs_parse_back(name_of: object) -> None:
    tp = TopicPartition("my.topic-x", 7)
    name = name_of(tp)  # type: ignore[operator]
    assert files.is_renamed_partition_dir(name)
    assert parse_topic_partition_name(name) == tp
    assert not files.is_renamed_partition_dir(files.partition_dir_name(tp))


def test_parse_topic_partition_name_for_empty_name() -> None:
    with pytest.raises(InvalidLogDirNameError):
        parse_topic_partition_name("")


@pytest.mark.parametrize("name", ["test_topic1999", "test_topic1999.-delete"])
def test_parse_topic_partition_name_for_missing_separator(name: str) -> None:
    with pytest.raises(InvalidLogDirNameError):
        parse_topic_partition_name(name)


@pytest.mark.parametrize("name", ["-1999", f"-1999.{'0' * 32}-delete"])
def test_parse_topic_partition_name_for_missing_topic(name: str) -> None:
    with pytest.raises(InvalidLogDirNameError):
        parse_topic_partition_name(name)


def test_delete_dir_of_an_empty_topic_does_not_parse() -> None:
    with pytest.raises(InvalidLogDirNameError):
        parse_topic_partition_name(files.log_delete_dir_name(TopicPartition("", 1999)))


@pytest.mark.parametrize("name", ["test_topic-", "test_topic-.-delete"])
def test_parse_topic_partition_name_for_missing_partition(name: str) -> None:
    with pytest.raises(InvalidLogDirNameError):
        parse_topic_partition_name(name)


@pytest.mark.parametrize("name", ["test_topic-1999a", "test_topic1999a.-delete", "test_topic-1e3", "test_topic- 1"])
def test_parse_topic_partition_name_for_invalid_partition(name: str) -> None:
    with pytest.raises(InvalidLogDirNameError):
        parse_topic_partition_name(name)


@pytest.mark.parametrize("name", ["non_kafka_dir", "non_kafka_dir-delete"])
def test_parse_topic_partition_name_for_existing_invalid_dir(name: str) -> None:
    with pytest.raises(InvalidLogDirNameError):
        parse_topic_partition_name(name)


def test_invalid_dir_name_error_names_the_dir() -> None:
    with pytest.raises(InvalidLogDirNameError) as e:
        parse_topic_partition_name("non_kafka_dir")
    assert "non_kafka_dir" in str(e.value)


def test_invalid_dir_name_error_lives_in_the_error_hierarchy() -> None:
    assert files.InvalidLogDirNameError is errors.InvalidLogDirNameError  # still importable from files


# --- delete dir names ---------------------------------------------------------------------------

def test_log_delete_dir_name() -> None:
    name = files.log_delete_dir_name(TopicPartition("foo", 3))
    assert len(name) <= 255
    assert re.fullmatch(r"foo-3\.[0-9a-z]{32}-delete", name)
    assert DELETE_DIR.match(name) and not FUTURE_DIR.match(name)


def test_log_delete_dir_name_of_a_long_topic_is_truncated_to_255() -> None:
    name = files.log_delete_dir_name(TopicPartition("n" + "o" * 248, 5))
    assert len(name) == 255
    assert re.fullmatch(r"no{212}-5\.[0-9a-z]{32}-delete", name)


def test_log_delete_dir_names_are_unique() -> None:
    tp = TopicPartition("foo", 3)
    assert files.log_delete_dir_name(tp) != files.log_delete_dir_name(tp)


@pytest.mark.parametrize("length", [1, 200, 249, 255])
def test_delete_and_stray_dir_names_stay_within_255(length: int) -> None:
    tp = TopicPartition("t" * length, 12345)
    for name in (files.log_delete_dir_name(tp), files.log_stray_dir_name(tp)):
        assert len(name) <= 255
        assert name.endswith(("-delete", "-stray"))


def test_future_dir_name() -> None:
    name = files.log_future_dir_name(TopicPartition("foo", 3))
    assert re.fullmatch(r"foo-3\.[0-9a-z]{32}-future", name)
    assert FUTURE_DIR.match(name) and not DELETE_DIR.match(name)
