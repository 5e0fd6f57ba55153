"""The row schema of Spark's Kafka source, which the ``tidelog`` source reads and writes.

Reads: ``key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int`` and, with ``includeHeaders=true``, ``headers array<struct<key string, value
binary>>`` (null, not an empty array, for a record without headers). Spark takes Arrow record
batches from a Python source only when their types and column order match the declared schema
exactly (a mismatch fails late, in the JVM, with an opaque message), so :func:`arrow_read_schema`
is the one place both are defined.
"""

from __future__ import annotations

import pyarrow as pa

READ_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
HEADERS_COLUMN = "headers"

_READ_DDL = ("key binary, value binary, topic string, partition int, offset long, "
             "timestamp timestamp, timestampType int")
_HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def read_schema_ddl(include_headers: bool) -> str:
    """The read schema as Spark DDL (what ``DataSource.schema()`` returns)."""
    return f"{_READ_DDL}, {_HEADERS_DDL}" if include_headers else _READ_DDL


def arrow_read_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of every record batch a read yields, column for column.

    Timestamps are UTC microseconds (Spark's ``timestamp``); Kafka's are milliseconds, so readers
    multiply by 1000.
    """
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field(HEADERS_COLUMN, HEADER_TYPE))
    return pa.schema(fields)
