"""A streaming pipeline on tidelog: orders -> per-customer totals in a compacted topic.

    python examples/orders_pipeline.py [--data-dir DIR]      # default: ./example-data

``--data-dir`` must not exist, be empty, or be a dir this example made on an earlier run (it
holds the marker file ``.orders-pipeline-example``): only then is it emptied and reused. Any
other non-empty dir is refused and left untouched.

What it does, in three rounds:

1. a Spark batch job writes a round of orders (key = customer, value = JSON) to the ``orders``
   topic (``df.write.format("tidelog")``: staged on executors, committed once by the driver);
2. a Structured Streaming query reads ``orders`` (``readStream.format("tidelog")``), keeps a
   running total per customer in Spark's state store, and appends each customer's new total to
   the compacted topic ``customer-totals`` (``writeStream.format("tidelog")``; Python sinks take
   the append output mode, hence ``applyInPandasWithState`` rather than a ``groupBy().sum()`` in
   update mode). ``Trigger.AvailableNow`` drains what is there in rate-limited micro-batches and
   stops; the next round restarts from the same checkpoint and reads only the new orders, each
   exactly once.

Then tidelog's log cleaner compacts ``customer-totals`` (``tidelog clean run``) and keeps only the
latest total per customer: the same totals a batch ``groupBy`` over every order gives, in a
fraction of the records. Nothing here talks to a broker: Spark reads and writes the segment files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CUSTOMERS = ("alice", "bob", "carol", "dave", "erin")
ORDERS_PER_ROUND = 1000
ROUNDS = 3
MARKER = ".orders-pipeline-example"


def prepare_data_dir(data: Path) -> None:
    """Make ``data`` an empty dir this example owns, deleting only what an earlier run made.

    Raises SystemExit naming ``data`` when it is a file or a non-empty dir without the marker.
    """
    if data.exists() and not data.is_dir():
        raise SystemExit(f"--data-dir {data} is a file, not a directory; give a new or empty directory")
    if data.is_dir() and any(data.iterdir()):
        if not (data / MARKER).is_file():
            raise SystemExit(f"--data-dir {data} is not empty and was not made by this example; refusing to "
                             f"delete it. Give a new or empty directory.")
        shutil.rmtree(data)
    data.mkdir(parents=True, exist_ok=True)
    (data / MARKER).write_text("made by examples/orders_pipeline.py; it empties this dir on its next run\n")


def create_topics(data: Path) -> None:
    from tidelog.manager import LogManager
    from tidelog.storage.config import BrokerConfig

    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))
    try:
        if not manager.has_topic("orders"):
            manager.create_topic("orders", 3)
        if not manager.has_topic("customer-totals"):
            # tiny segments (each round's totals roll one) and a low ratio: this small example has
            # something to compact; only segments below the active one are ever cleaned
            manager.create_topic("customer-totals", 1, {"cleanup.policy": "compact", "segment.bytes": "160",
                                                        "min.cleanable.dirty.ratio": "0.01"})
    finally:
        manager.shutdown()


def write_orders(spark: Any, data: Path, round: int) -> None:
    """One round of orders, written by a Spark batch job."""
    rows = [(CUSTOMERS[i % len(CUSTOMERS)], json.dumps({"order": f"{round}-{i}", "amount": (i * 7 + round) % 100}))
            for i in range(ORDERS_PER_ROUND)]
    frame = spark.createDataFrame(rows, "key string, value string")
    frame.write.format("tidelog").option("path", str(data)).option("topic", "orders").mode("append").save()


def _running_total(key: tuple[str], batches: Any, state: Any) -> Any:
    """Add a micro-batch's orders of one customer to its total; emit the new total."""
    import pandas as pd

    total = state.get[0] if state.exists else 0
    for batch in batches:
        total += int(batch["amount"].sum())
    state.update((total,))
    yield pd.DataFrame({"key": [key[0]], "value": [str(total)]})


def stream_totals(spark: Any, data: Path, checkpoint: Path) -> None:
    """Drain ``orders`` into ``customer-totals`` (AvailableNow), resuming from ``checkpoint``."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    orders = (spark.readStream.format("tidelog").option("path", str(data)).option("subscribe", "orders")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "4000").load())
    amount = F.get_json_object(F.col("value").cast("string"), "$.amount").cast("long")
    totals = (orders.select(F.col("key").cast("string").alias("customer"), amount.alias("amount"))
              .groupBy("customer")
              .applyInPandasWithState(_running_total, "key string, value string", "total long", "append",
                                      GroupStateTimeout.NoTimeout))
    query = (totals.writeStream.format("tidelog").option("path", str(data)).option("topic", "customer-totals")
             .option("checkpointLocation", str(checkpoint)).outputMode("append").trigger(availableNow=True).start())
    query.awaitTermination()


def clean(data: Path) -> str:
    """Compact ``customer-totals`` now, with tidelog's own cleaner (its command line)."""
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), "clean", "run",
                             "--topic", "customer-totals", "--force"], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def latest_totals(spark: Any, data: Path) -> tuple[int, dict[str, int]]:
    """(records in customer-totals, the latest total per customer) read back with Spark."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    records = (spark.read.format("tidelog").option("path", str(data)).option("subscribe", "customer-totals")
               .load().select(F.col("key").cast("string").alias("customer"), F.col("value").cast("string")
                              .cast("long").alias("total"), "offset"))
    latest = (records.withColumn("rank", F.row_number().over(Window.partitionBy("customer")
                                                             .orderBy(F.col("offset").desc())))
              .where("rank = 1"))
    return records.count(), {r.customer: r.total for r in latest.collect()}


def expected_totals(spark: Any, data: Path) -> dict[str, int]:
    """The same totals from a batch job over every order."""
    from pyspark.sql import functions as F

    orders = spark.read.format("tidelog").option("path", str(data)).option("subscribe", "orders").load()
    amount = F.get_json_object(F.col("value").cast("string"), "$.amount").cast("long")
    rows = orders.groupBy(F.col("key").cast("string").alias("customer")).agg(F.sum(amount).alias("total")).collect()
    return {r.customer: r.total for r in rows}


def run(spark: Any, data: Path, checkpoint: Path, say: Any = print) -> dict[str, Any]:
    create_topics(data)
    for round in range(ROUNDS):
        write_orders(spark, data, round)
        stream_totals(spark, data, checkpoint)
        records, totals = latest_totals(spark, data)
        say(f"round {round}: {ORDERS_PER_ROUND} orders written; customer-totals holds {records} records")
    before, totals = latest_totals(spark, data)
    say(clean(data))
    after, cleaned_totals = latest_totals(spark, data)
    expected = expected_totals(spark, data)
    say(f"compaction: {before} -> {after} records in customer-totals")
    say(f"latest totals: {cleaned_totals}")
    if cleaned_totals != expected or totals != expected:
        raise SystemExit(f"totals differ from a batch groupBy: {cleaned_totals} != {expected}")
    say("the latest total per customer equals a batch groupBy over every order")
    return {"records_before": before, "records_after": after, "totals": cleaned_totals, "expected": expected}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("example-data"))
    args = parser.parse_args()
    prepare_data_dir(args.data_dir)
    from tidelog.spark.session import local_session

    spark = local_session(app_name="tidelog orders pipeline", **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as checkpoint:
        run(spark, args.data_dir, Path(checkpoint) / "totals")
    spark.stop()


if __name__ == "__main__":
    main()
