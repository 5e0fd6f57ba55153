"""A SparkSession on the session's standalone cluster (``spark_cluster`` in ``tests/conftest.py``).

One SparkContext per process: ``cluster_spark`` stops any other active context (the local one of
``tests/spark``; xdist keeps both directories on one worker, in collection order) and stops its own at
the end of the module, so a later ``local_session`` starts afresh instead of reusing the cluster's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_cluster_oracle import SparkStandaloneCluster


@pytest.fixture(scope="module")
def cluster_spark(spark_cluster: SparkStandaloneCluster) -> Iterator[SparkSession]:
    session = spark_cluster.session()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
