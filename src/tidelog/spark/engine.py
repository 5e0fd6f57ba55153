"""The ``spark`` cleaner engine as a factory for the log cleaner (``tidelog.cleaner.engine=spark``).

The cleaner layer knows only its in-process engine; the front doors that start a cleaner
(``tidelog serve``, the CLI) hand it :data:`CLEANER_ENGINES`. Importing this module costs nothing:
pyspark and pyarrow are imported only when the engine is built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from types import MappingProxyType

from tidelog.cleaner.clean import CleanerBuffers, CleaningEngine
from tidelog.cleaner.log_cleaner import EngineFactory
from tidelog.cleaner.throttler import Throttler
from tidelog.errors import ConfigError

ENGINE_SPARK = "spark"  # its value of tidelog.cleaner.engine


def spark_cleaning_engine(buffers: CleanerBuffers, throttler: Throttler | None, master: str) -> CleaningEngine:
    """A :class:`~tidelog.spark.compaction.SparkCleaningEngine` on ``master`` (its session is taken
    on first use; the throttle is not used: executors do the I/O). ConfigError naming
    ``tidelog.cleaner.engine`` when pyspark or pyarrow is not installed."""
    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"the spark cleaner engine needs {' and '.join(missing)}: install the 'spark' extra "
                          "(pip install 'tidelog[spark]')", config="tidelog.cleaner.engine", value=ENGINE_SPARK)
    from tidelog.spark.compaction import SparkCleaningEngine  # needs pyspark: only when chosen

    return SparkCleaningEngine(buffers, master=master)


CLEANER_ENGINES: Mapping[str, EngineFactory] = MappingProxyType({ENGINE_SPARK: spark_cleaning_engine})
