"""A Spark driver for ``test_spark_killed_driver.py``: ``python spark_write_driver.py DATA_DIR ROWS``
writes ROWS rows (keys ``0`` .. ``ROWS-1``, spread over 6 partitions) to topic ``t`` with
``df.write.format("tidelog")`` in its own local Spark session, then prints ``done``. The test
SIGKILLs it (and every process it started) once the commit has begun."""

from __future__ import annotations

import sys

from tidelog.spark.session import local_session


def main(data_dir: str, rows: int) -> None:
    spark = local_session(**{"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                             "spark.driver.memory": "1g"})
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(rows, numPartitions=2).selectExpr(
        "cast(id % 6 as int) as partition", "cast(id as string) as key",
        "concat('value-', cast(id as string), repeat('x', 80)) as value")
    df.write.format("tidelog").option("path", data_dir).option("topic", "t").mode("append").save()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
