"""Spark finds tidelog's data source here: ``spark.read.format("tidelog")``.

PySpark registers the ``DefaultSource`` of any importable top-level module named ``pyspark_*``
the first time a Python data source is looked up, so installing tidelog (with the ``spark``
extra) in the driver's and executors' Python is all a user does. Where auto-registration cannot
see the package (shipped only with ``--py-files``), call :func:`register` once per SparkSession.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.spark.source import TidelogDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DefaultSource = TidelogDataSource

__all__ = ["DefaultSource", "TidelogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register ``format("tidelog")`` in ``spark`` (registration is per SparkSession). First checks
    that the Python Spark starts for its workers can import tidelog, and raises naming that Python
    if not: on a local master by running it here
    (:func:`tidelog.spark.session.check_workers_python`), on a cluster by one probe job on the
    executors (:func:`tidelog.spark.session.check_cluster_workers_python`)."""
    from tidelog.spark.session import check_cluster_workers_python, check_workers_python

    context = spark.sparkContext
    if context.master.startswith("local"):
        check_workers_python(dict(context.getConf().getAll()))
    else:
        check_cluster_workers_python(spark)
    spark.dataSource.register(TidelogDataSource)
