"""A streaming Spark driver for ``test_spark_killed_driver_broker.py``:
``python spark_stream_write_driver.py BOOTSTRAP SOURCE_DIR CHECKPOINT`` copies every JSON file of
SOURCE_DIR (one micro-batch per file) to topic ``t`` with ``writeStream.format("tidelog")`` through
the broker at BOOTSTRAP, ``Trigger.AvailableNow``, then prints ``done``. The test SIGKILLs it (and
every process it started) mid-way and runs it again on the same checkpoint."""

from __future__ import annotations

import sys

from tidelog.spark.session import local_session


def main(bootstrap: str, source: str, checkpoint: str) -> None:
    spark = local_session(**{"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                             "spark.driver.memory": "1g"})
    spark.sparkContext.setLogLevel("ERROR")
    stream = spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1).json(source)
    query = (stream.writeStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", "t")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
