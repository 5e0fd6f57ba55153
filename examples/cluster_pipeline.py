"""A pipeline on a Spark cluster whose executors never see the broker's disk.

    python examples/cluster_pipeline.py --master spark://HOST:7077 --bootstrap-server HOST:9092 \\
        --store s3://BUCKET/PREFIX --store-option endpoint.url=http://HOST:8333 \\
        --store-option access.key=... --store-option secret.key=... --store-option region=us-east-1

What it needs running (none of it is started here):

* ``tidelog serve`` with tiered storage, its sealed segments copied to the object store, e.g.::

      tidelog --data-dir ./data --override listeners=PLAINTEXT://0.0.0.0:9092 \\
          --override remote.log.storage.system.enable=true \\
          --override remote.log.storage.uri=s3://BUCKET/PREFIX \\
          --override rsm.config.endpoint.url=http://HOST:8333 --override rsm.config.region=us-east-1 \\
          --override rsm.config.access.key=... --override rsm.config.secret.key=... serve

* a Spark standalone cluster (``spark-class org.apache.spark.deploy.master.Master``, and
  ``...deploy.worker.Worker spark://HOST:7077`` on each worker host).

Every executor host needs ``pip install 'tidelog[spark]'`` in the Python Spark starts there
(``PYSPARK_PYTHON``; registering the source checks it and names the host if not), and must reach
the broker's listener and the object store; nothing else: no data dir, no shared file system.

What it does, in one run:

1. creates the topics through the broker when missing: ``orders`` (3 partitions, tiered) and
   ``customer-totals`` (compacted, tiered);
2. a batch job on the cluster writes ``--orders`` orders (key = customer, value = JSON) to
   ``orders`` through the broker, exactly once: executors send their producer batches to the
   broker, which commits the job whole (``df.write.format("tidelog")`` with
   ``kafka.bootstrap.servers``);
3. a batch job reads every order: the part already tiered straight from the object store on the
   executors, the rest through the broker's Fetch API (``path`` = the store,
   ``kafka.bootstrap.servers`` = the broker), and computes each customer's total;
4. writes the totals to the compacted topic ``customer-totals``, again exactly once through the
   broker, and reads them back (latest per customer).

It prints one JSON line at the end: orders read, totals written, the totals read back.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

CUSTOMERS = ("alice", "bob", "carol", "dave", "erin")
ORDERS_TOPIC = "orders"
TOTALS_TOPIC = "customer-totals"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--master", required=True, help="the cluster's master URL, spark://HOST:7077")
    parser.add_argument("--bootstrap-server", required=True, help="tidelog serve's listener, HOST:PORT")
    parser.add_argument("--store", required=True, help="the broker's remote.log.storage.uri, e.g. s3://BUCKET/PREFIX")
    parser.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                        help="one of the broker's rsm.config.* settings, without the prefix (repeatable)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark conf (repeatable)")
    parser.add_argument("--orders", type=int, default=10_000, help="orders to write (default 10,000)")
    args = parser.parse_args(argv)
    args.store_options = dict(_pair(item, "--store-option") for item in args.store_option)
    args.confs = dict(_pair(item, "--conf") for item in args.conf)
    if args.orders < 1:
        parser.error(f"--orders must be at least 1, not {args.orders}")
    return args


def _pair(item: str, flag: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise SystemExit(f"{flag} {item!r}: expected KEY=VALUE")
    return key, value


def create_topics(bootstrap: str) -> None:
    """The two topics, through the broker's CreateTopics; existing ones are kept as they are."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="cluster-pipeline-example")
    try:
        existing = set(admin.list_topics())
        wanted = [NewTopic(ORDERS_TOPIC, 3, 1, topic_configs={"remote.storage.enable": "true"}),
                  NewTopic(TOTALS_TOPIC, 1, 1, topic_configs={"remote.storage.enable": "true",
                                                               "cleanup.policy": "compact"})]
        missing = [topic for topic in wanted if topic.name not in existing]
        if missing:
            try:
                admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass  # another run created them meanwhile
    finally:
        admin.close()


def session(master: str, confs: dict[str, str]) -> Any:
    """A SparkSession on ``master`` with tidelog's source registered (which checks, with one small
    job, that the executors' Python has tidelog)."""
    from pyspark.sql import SparkSession

    from pyspark_tidelog import register

    builder = SparkSession.builder.master(master).appName("tidelog cluster pipeline")
    for key, value in {"spark.sql.session.timeZone": "UTC", "spark.ui.enabled": "false", **confs}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def write_orders(spark: Any, bootstrap: str, count: int) -> None:
    """``count`` orders through the broker, exactly once (one job, visible whole or not at all)."""
    orders = spark.range(count).selectExpr(
        f"element_at(array({', '.join(repr(c) for c in CUSTOMERS)}), cast(id % {len(CUSTOMERS)} + 1 as int)) AS customer",
        "id", "cast(id % 97 + 1 as int) AS amount")
    (orders.selectExpr("customer AS key", "to_json(named_struct('order', id, 'amount', amount)) AS value")
     .write.format("tidelog").mode("append")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", ORDERS_TOPIC).save())


def reader(spark: Any, args: argparse.Namespace, topic: str) -> Any:
    """Every record of ``topic``: the tiered part from the store, the rest through the broker."""
    read = (spark.read.format("tidelog").option("path", args.store)
            .option("kafka.bootstrap.servers", args.bootstrap_server).option("subscribe", topic))
    for key, value in args.store_options.items():
        read = read.option(f"rsm.config.{key}", value)
    return read.load()


def totals(orders: Any) -> Any:
    return (orders.selectExpr("cast(key as string) AS customer",
                              "get_json_object(cast(value as string), '$.amount') AS amount")
            .groupBy("customer").agg({"amount": "sum"}).withColumnRenamed("sum(amount)", "total"))


def write_totals(spark: Any, bootstrap: str, frame: Any) -> None:
    (frame.selectExpr("customer AS key", "cast(cast(total as bigint) as string) AS value")
     .write.format("tidelog").mode("append")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", TOTALS_TOPIC).save())


def latest_totals(records: Any) -> dict[str, int]:
    """The newest value per key, as compaction keeps it."""
    latest: dict[str, tuple[int, int]] = {}
    for row in records.select("key", "value", "partition", "offset").collect():
        customer, offset = row.key.decode(), row.offset
        if customer not in latest or offset > latest[customer][0]:
            latest[customer] = (offset, int(row.value.decode()))
    return {customer: total for customer, (_, total) in sorted(latest.items())}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    create_topics(args.bootstrap_server)
    spark = session(args.master, args.confs)
    try:
        write_orders(spark, args.bootstrap_server, args.orders)
        orders = reader(spark, args, ORDERS_TOPIC)
        by_customer = totals(orders).collect()
        write_totals(spark, args.bootstrap_server, spark.createDataFrame(by_customer))
        read_back = latest_totals(reader(spark, args, TOTALS_TOPIC))
        summary = {"orders_read": orders.count(), "totals_written": len(by_customer), "totals": read_back}
    finally:
        spark.stop()
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
