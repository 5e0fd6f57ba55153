"""The ``tidelog`` short name resolves through ``pyspark_tidelog`` as it does for users."""

from __future__ import annotations

import pyspark_tidelog
from tidelog.spark.schema import arrow_read_schema, read_schema_ddl
from tidelog.spark.source import TidelogDataSource


def test_default_source_is_the_tidelog_source() -> None:
    assert pyspark_tidelog.DefaultSource is TidelogDataSource
    assert TidelogDataSource.name() == "tidelog"


def test_read_schema_matches_kafka_sources_columns(spark) -> None:
    from pyspark.sql.types import _parse_datatype_string

    ddl = _parse_datatype_string(read_schema_ddl(include_headers=True))
    assert [f.name for f in ddl.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                             "timestampType", "headers"]
    assert [f.simpleString() for f in ddl.fields][-1] == "headers:array<struct<key:string,value:binary>>"
    assert arrow_read_schema(include_headers=True).names == [f.name for f in ddl.fields]
    assert arrow_read_schema(include_headers=False).names == [f.name for f in ddl.fields][:-1]


def test_spark_tests_are_one_xdist_group(request) -> None:
    """Under ``make test`` (``-n 2 --dist loadgroup``) every Spark test joins group ``spark``, so
    one worker runs them on one session (pytest 9.2 silently broke xdist's grouping: pinned)."""
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@spark")
