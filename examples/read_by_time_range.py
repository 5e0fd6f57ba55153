"""A batch job reading a topic by time range: orders per hour between two instants.

    python examples/read_by_time_range.py [--data-dir DIR --topic T --from ISO --to ISO]

Without ``--data-dir`` it first writes a demo topic (``clicks``: two days of records, one every
minute, over 3 partitions) into a fresh ``./example-data-time``. The read uses the Kafka source's
options: ``startingTimestamp`` / ``endingTimestamp`` resolve, per partition, to the first offset
whose record timestamp is >= the instant (tidelog answers it from each segment's ``.timeindex``,
as a Kafka broker answers ListOffsets), so only the segments in range are read.
"""

from __future__ import annotations

import argparse
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

DEMO_START = datetime(2026, 11, 1, tzinfo=timezone.utc)
MINUTE_MS = 60_000


def write_demo(data: Path, topic: str = "clicks", partitions: int = 3, minutes: int = 2 * 24 * 60) -> None:
    from tidelog.manager import LogManager
    from tidelog.records.builder import build_batch
    from tidelog.storage.config import BrokerConfig
    from tidelog.topic_partition import TopicPartition

    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))
    try:
        manager.create_topic(topic, partitions, {"segment.bytes": str(64 * 1024)})
        start = int(DEMO_START.timestamp() * 1000)
        for minute in range(minutes):
            tp = TopicPartition(topic, minute % partitions)
            manager.append(tp, build_batch([(b"user-%d" % (minute % 17), b"click %d" % minute)],
                                           timestamp=start + minute * MINUTE_MS))
    finally:
        manager.shutdown()


def per_hour(spark: Any, data: Path, topic: str, since: datetime, until: datetime) -> list[tuple[str, int]]:
    from pyspark.sql import functions as F

    frame = (spark.read.format("tidelog").option("path", str(data)).option("subscribe", topic)
             .option("startingTimestamp", str(int(since.timestamp() * 1000)))
             .option("endingTimestamp", str(int(until.timestamp() * 1000))).load())
    hours = frame.groupBy(F.window("timestamp", "1 hour").alias("hour")).count().orderBy("hour")
    return [(row.hour.start.strftime("%Y-%m-%d %H:%M"), row["count"]) for row in hours.collect()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--from", dest="since", default="2026-11-01T06:00:00+00:00")
    parser.add_argument("--to", dest="until", default="2026-11-01T12:00:00+00:00")
    args = parser.parse_args()
    data = args.data_dir
    if data is None:
        data = Path("example-data-time")
        shutil.rmtree(data, ignore_errors=True)
        write_demo(data, args.topic)
    from tidelog.spark.session import local_session

    spark = local_session(app_name="tidelog read by time range")
    spark.sparkContext.setLogLevel("ERROR")
    for hour, count in per_hour(spark, data, args.topic, datetime.fromisoformat(args.since),
                                datetime.fromisoformat(args.until)):
        print(f"{hour}  {count:6d}")
    spark.stop()


if __name__ == "__main__":
    main()
