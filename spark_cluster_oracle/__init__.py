"""A real Spark standalone cluster on loopback (a master and workers from PySpark's own jars), for
tidelog's cluster tests: the workers run in mount namespaces that hide the broker's data dir.

Not part of the installed package: the tests (``tests/conftest.py``) import it from the repository
root, as they do ``kafka_oracle`` and ``object_store_oracle``.

* :mod:`spark_cluster_oracle.cluster`: ``SparkStandaloneCluster`` (free ports, start, wait for
  ALIVE workers, a SparkSession on it, stop with nothing left).
"""

from spark_cluster_oracle.cluster import (
    SparkClusterError,
    SparkClusterUnavailable,
    SparkStandaloneCluster,
    check_java,
    is_loopback,
    listeners,
    namespace_command,
    spark_home,
)

__all__ = ["SparkClusterError", "SparkClusterUnavailable", "SparkStandaloneCluster", "check_java", "is_loopback", "listeners",
           "namespace_command", "spark_home"]
