"""``spark.read.format("tidelog")`` returns exactly what ``tidelog consume``'s reader returns,
for every option: codecs, headers, compaction gaps, transaction markers, timestamps, data loss."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_read_data import (
    T0,
    append_control,
    append_simple,
    append_with_gaps,
    expected_rows,
    open_manager,
)

from tidelog.records import CompressionType
from tidelog.topic_partition import TopicPartition

P0, P1 = TopicPartition("plain", 0), TopicPartition("plain", 1)
GAPS, TXN, OLD = TopicPartition("gaps", 0), TopicPartition("txn", 0), TopicPartition("old", 0)
COLUMNS = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    log_dir = tmp_path_factory.mktemp("batch") / "logs"
    m = open_manager(log_dir)
    m.create_topic("plain", 2)
    for name in ("gaps", "txn", "old"):
        m.create_topic(name, 1)
    append_simple(m, P0, 200, per_batch=10)
    for codec in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD):
        append_simple(m, P0, 30, per_batch=15, compression=codec)
    append_simple(m, P1, 75, per_batch=1, ts0=T0 + 1000)
    append_with_gaps(m, GAPS, [0, 2, 3, 7, 8, 9, 15, 40, 41, 42, 60, 61, 99])
    append_simple(m, TXN, 5)
    append_control(m, TXN, commit=True)
    append_control(m, TXN, commit=False)
    append_simple(m, TXN, 5)
    append_simple(m, OLD, 100)
    m.delete_records(OLD, 40)
    m.checkpoint_log_start_offsets()
    m.run_retention()
    yield log_dir, m
    m.shutdown()


def read(spark, log_dir: Path, headers: bool = False, **options: object):  # type: ignore[no-untyped-def]
    reader = spark.read.format("tidelog")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.option("includeHeaders", headers).load(str(log_dir))
    cols = COLUMNS + (["headers"] if headers else [])
    out = []
    for row in df.selectExpr(*cols).collect():
        values = list(row)
        if headers and values[-1] is not None:
            values[-1] = [(h["key"], h["value"]) for h in values[-1]]
        out.append(tuple(values))
    return sorted(out, key=lambda r: (r[2], r[3], r[4])), df


def test_a_full_read_equals_consume_with_headers_codecs_gaps_and_markers(spark, data) -> None:  # type: ignore[no-untyped-def]
    log_dir, m = data
    got, df = read(spark, log_dir, headers=True, subscribePattern=".*")
    expected = []
    for tp in sorted((P0, P1, GAPS, TXN, OLD)):
        expected += expected_rows(m, tp, headers=True)
    assert len(got) == len(expected) == 320 + 75 + 13 + 5 + 6 + 5 + 60
    assert got == expected
    gaps = [r[4] for r in got if r[2] == "gaps"]
    assert gaps == [0, 2, 3, 7, 8, 9, 15, 40, 41, 42, 60, 61, 99]
    txn = [r[4] for r in got if r[2] == "txn"]
    assert 8 not in txn and 12 not in txn  # the two markers
    assert df.rdd.getNumPartitions() == 5  # one Spark partition per topic-partition


def test_offsets_json_and_assign(spark, data) -> None:  # type: ignore[no-untyped-def]
    log_dir, m = data
    got, _ = read(spark, log_dir, assign='{"plain":[0]}', startingOffsets='{"plain":{"0":25}}',
                  endingOffsets='{"plain":{"0":213}}')
    assert got == expected_rows(m, P0, 25, 213)
    got, _ = read(spark, log_dir, subscribe="plain,gaps", startingOffsets='{"plain":{"0":-2,"1":70},"gaps":{"0":8}}',
                  endingOffsets='{"plain":{"0":3,"1":-1},"gaps":{"0":61}}')
    assert got == expected_rows(m, GAPS, 8, 61) + expected_rows(m, P0, 0, 3) + expected_rows(m, P1, 70)


def test_timestamp_options(spark, data) -> None:  # type: ignore[no-untyped-def]
    log_dir, m = data
    got, _ = read(spark, log_dir, subscribe="plain", startingTimestamp=T0 + 50, endingTimestamp=T0 + 1010)
    assert got == expected_rows(m, P0, 50, 320) + expected_rows(m, P1, 0, 10)
    got, _ = read(spark, log_dir, subscribe="plain",
                  startingOffsetsByTimestamp=f'{{"plain":{{"0":{T0 + 7},"1":{T0 + 1070}}}}}',
                  endingOffsetsByTimestamp=f'{{"plain":{{"0":{T0 + 9},"1":{T0 + 99999}}}}}')
    assert got == expected_rows(m, P0, 7, 9) + expected_rows(m, P1, 70)


def test_splitting_options_change_tasks_not_rows(spark, data) -> None:  # type: ignore[no-untyped-def]
    log_dir, m = data
    whole, _ = read(spark, log_dir, subscribe="plain")
    split, df = read(spark, log_dir, subscribe="plain", minPartitions=5, maxRecordsPerPartition=100)
    assert split == whole == expected_rows(m, P0) + expected_rows(m, P1)
    assert df.rdd.getNumPartitions() == 5  # P0 in 4 (320 offsets, at most 100), P1 in 1


def test_fail_on_data_loss(spark, data) -> None:  # type: ignore[no-untyped-def]
    log_dir, m = data
    options = {"subscribe": "old", "startingOffsets": '{"old":{"0":10}}'}
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, log_dir, **options)
    got, _ = read(spark, log_dir, failOnDataLoss=False, **options)
    assert got == expected_rows(m, OLD) and got[0][4] == 40
