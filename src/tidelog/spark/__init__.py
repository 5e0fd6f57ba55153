"""tidelog's data pipeline on Spark (PySpark >= 4.2): the ``tidelog`` data source and Spark jobs.

A front door, like ``server`` and ``cli``: it reads segment files directly (never through a
broker), writes through a staged, driver-committed protocol, and runs compaction and reports as
Spark jobs. Nothing below this package imports it; it needs the ``spark`` extra (pyspark, pyarrow).

* :mod:`tidelog.spark.source`: the ``DataSource`` Spark finds as ``format("tidelog")`` (through
  the ``pyspark_tidelog`` module's ``DefaultSource``, or :func:`pyspark_tidelog.register`);
* :mod:`tidelog.spark.schema`: the row schema, the same as Spark's Kafka source;
* :mod:`tidelog.spark.session`: a local session wired to this Python (tests, CLI, examples).
"""
