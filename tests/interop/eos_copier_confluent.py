"""A consume-transform-produce loop with confluent-kafka (librdkafka), run as a process by
tests/interop/test_eos_copier.py beside Kafka's Java ``TransactionalMessageCopier``, with the same
arguments and the same output: one JSON status line per loop with ``remaining``, exit 0 once the
input partition is copied up to the end it had when the process started.

Each poll (up to ``--transaction-size`` records) is one transaction: the records go to the output
topic's partition of the same number, the consumer's position is added with
``send_offsets_to_transaction`` (the group's offset commits with the transaction), then the
transaction commits. librdkafka's error classes decide what follows a failure: a retriable one
retries the commit, an abortable one aborts and rewinds the consumer to the group's committed
offset, anything else (a fenced producer) ends the process with status 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

TIMEOUT_S = 60


def status(remaining: int, stage: str) -> None:
    print(json.dumps({"remaining": remaining, "stage": stage}), flush=True)


def committed_position(consumer: Consumer, tp: TopicPartition) -> int:
    """The group's committed offset for ``tp``, or its log start offset when there is none."""
    offset = consumer.committed([tp], timeout=TIMEOUT_S)[0].offset
    if offset < 0:
        offset = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)[0]
    return offset


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--broker-list", "--transactional-id", "--input-topic", "--output-topic", "--consumer-group"):
        parser.add_argument(name, required=True)
    parser.add_argument("--input-partition", type=int, required=True)
    parser.add_argument("--transaction-size", type=int, default=200)
    parser.add_argument("--transaction-timeout", type=int, default=60000)
    args = parser.parse_args()

    consumer = Consumer({"bootstrap.servers": args.broker_list, "group.id": args.consumer_group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": args.broker_list, "transactional.id": args.transactional_id,
                         "transaction.timeout.ms": args.transaction_timeout, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    tp = TopicPartition(args.input_topic, args.input_partition)
    start = committed_position(consumer, tp)
    end = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)[1]
    consumer.assign([TopicPartition(args.input_topic, args.input_partition, start)])
    remaining = end - start
    while remaining > 0:
        status(remaining, "ProcessLoop")
        records = [m for m in consumer.consume(num_messages=args.transaction_size, timeout=0.5) if m.error() is None]
        if not records:
            continue
        producer.begin_transaction()
        for m in records:
            producer.produce(args.output_topic, key=m.key(), value=m.value(), partition=m.partition())
        try:
            producer.send_offsets_to_transaction(consumer.position([tp]), consumer.consumer_group_metadata(),
                                                 TIMEOUT_S)
            while True:
                try:
                    producer.commit_transaction(TIMEOUT_S)
                    break
                except KafkaException as e:
                    if not e.args[0].retriable():
                        raise
            remaining -= len(records)
        except KafkaException as e:
            if not e.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(TIMEOUT_S)
            consumer.assign([TopicPartition(args.input_topic, args.input_partition, committed_position(consumer, tp))])
    status(0, "ShutdownComplete")
    producer.flush(TIMEOUT_S)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
