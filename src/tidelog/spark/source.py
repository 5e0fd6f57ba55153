"""``format("tidelog")``: the Spark data source over tidelog (and Kafka) data dirs.

The class Spark instantiates stays thin: Spark pickles it (and what it returns) into every task,
so it holds only the options. Each capability is built by its own module, which validates the
options there, so a bad option fails at ``load()``/``save()`` before any job runs:

* batch and streaming reads: :mod:`tidelog.spark.reader`; reads of the remote tier (``path`` an
  object-store URI such as ``s3://bucket/prefix``): :mod:`tidelog.spark.remote_source` (batch),
  :mod:`tidelog.spark.remote_stream` (streaming);
* batch and streaming writes: :mod:`tidelog.spark.writer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from tidelog.spark.schema import read_schema_ddl

if TYPE_CHECKING:
    from pyspark.sql.datasource import (DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                        DataSourceWriter)
    from pyspark.sql.types import StructType

SHORT_NAME = "tidelog"


def _flag(options: dict[str, str], key: str) -> bool:
    value = str(options.get(key, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {key}={options.get(key)!r}: expected true or false")
    return value == "true"


class TidelogDataSource(DataSource):
    """Kafka's row schema and option names, read from and written to segment files directly."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        # Spark asks for the schema at load(): checking the read options here makes a bad option,
        # path or partition fail there, before any job (writes pass: they name no subscription).
        from tidelog.spark import remote_source
        from tidelog.spark.reader import check_load_options

        if remote_source.is_store_path(self.options):  # s3://..., file://...: the remote tier
            remote_source.check_load_options(self.options)
        else:
            check_load_options(self.options)
        return read_schema_ddl(_flag(self.options, "includeHeaders"))

    def reader(self, schema: StructType) -> DataSourceReader:
        from tidelog.spark import remote_source
        from tidelog.spark.reader import batch_reader

        if remote_source.is_store_path(self.options):
            return remote_source.batch_reader(dict(self.options), schema)
        return batch_reader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from tidelog.spark import remote_source
        from tidelog.spark.reader import stream_reader

        if remote_source.is_store_path(self.options):
            from tidelog.spark.remote_stream import stream_reader as remote_stream_reader

            return remote_stream_reader(dict(self.options), schema)
        return stream_reader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from tidelog.spark.writer import batch_writer

        return batch_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from tidelog.spark.writer import stream_writer

        return stream_writer(dict(self.options), schema, overwrite)
