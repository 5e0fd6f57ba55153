"""A local SparkSession wired to this Python, for tests, the CLI and the examples.

Spark starts its Python workers with ``python3`` from ``PATH`` unless told otherwise; that
interpreter usually lacks pyarrow and tidelog, and the first Python task then fails with an
import error far from its cause. :func:`local_session` points both the driver's and the
executors' workers at ``sys.executable`` (the environment tidelog is installed in).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"


def use_this_python() -> None:
    """Make Spark's Python workers run this interpreter (unless the user chose one)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(master: str = DEFAULT_MASTER, app_name: str = "tidelog", **conf: str) -> SparkSession:
    """Get (or create) a SparkSession on ``master`` with tidelog's source registered.

    ``conf`` entries are Spark confs (dots spelled as given, e.g. ``{"spark.sql.shuffle.partitions":
    "4"}`` passed as ``**{...}``). The UI is off: on a shared machine its port is one more thing
    to collide on.
    """
    use_this_python()
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from pyspark_tidelog import register

    register(spark)
    return spark
