"""``topics``, ``configs`` and ``delete-records`` with ``--bootstrap-server``: Kafka's admin APIs.

Each function connects, asks, and returns what the local mode's renderer takes, so both modes
print the same way:

* topics: CreateTopics (``--partitions`` omitted: -1, the broker's ``num.partitions``),
  CreatePartitions, DeleteTopics, Metadata (list);
* ``topics describe``: Metadata (id, partitions; a partition the broker reports with an error is
  listed offline with Kafka's error name), DescribeConfigs (the overrides), ListOffsets (log start
  offset, high watermark) and DescribeLogDirs (the leader's log dir and size; log end offset =
  high watermark + the dir's offset lag). The segment count is not in Kafka's protocol: it is
  null (an empty column);
* configs: DescribeConfigs with synonyms (Kafka's DYNAMIC_TOPIC_CONFIG source is tidelog's
  TOPIC_CONFIG); IncrementalAlterConfigs (SET/DELETE), validated by the broker as a whole;
* delete-records: DeleteRecords (offset -1: the high watermark), the new low watermark;
* log-dirs: DescribeLogDirs, each log dir with its partitions' sizes; a dir the broker answers with
  an error (KAFKA_STORAGE_ERROR: the dir is offline) has no partitions and the error's name.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import OffsetSpec
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import AlterConfigOp, ConfigResource

from tidelog.cli.remote import RemoteClient, broker_error, check, connect, kafka_error_name, kafka_errors_mapped
from tidelog.errors import UnknownTopicOrPartitionError
from tidelog.storage.metadata import uuid_to_topic_id

KAFKA_TO_TIDELOG_SOURCE = {"DYNAMIC_TOPIC_CONFIG": "TOPIC_CONFIG"}


# --- topics ---------------------------------------------------------------------------------------

def create_topic(bootstrap: str, name: str, partitions: int | None, configs: Mapping[str, str]) -> None:
    """CreateTopics; the typed error of the broker's refusal."""
    spec = {"num_partitions": -1 if partitions is None else partitions, "replication_factor": -1,
            "configs": dict(configs)}
    with connect(bootstrap) as client, kafka_errors_mapped(topic=name):
        result = client.admin.create_topics({name: spec}, raise_errors=False)
    for topic in result["topics"]:
        check(topic["error_code"], topic.get("error_message"), topic=name)


def create_partitions(bootstrap: str, name: str, count: int) -> None:
    """CreatePartitions: ``name`` grows to ``count`` partitions."""
    with connect(bootstrap) as client, kafka_errors_mapped(topic=name):
        response = client.admin.create_partitions({name: count}, raise_errors=False)
    for result in response.results:
        check(result.error_code, result.error_message, topic=name)


def delete_topic(bootstrap: str, name: str) -> None:
    with connect(bootstrap) as client, kafka_errors_mapped(topic=name):
        result = client.admin.delete_topics([name], raise_errors=False)
    for topic in result["topics"]:
        check(topic["error_code"], topic.get("error_message"), topic=name)


def list_topics(bootstrap: str) -> list[str]:
    """Every topic name, sorted."""
    with connect(bootstrap) as client, kafka_errors_mapped():
        return sorted(client.admin.list_topics())


def describe_topics(bootstrap: str, name: str | None) -> list[dict[str, Any]]:
    """``topics describe --json`` documents of ``name`` (every topic when None), sorted by name."""
    with connect(bootstrap) as client:
        if name is not None:
            metadata = [client.topic_metadata(name)]
        else:
            with kafka_errors_mapped():
                metadata = sorted(client.admin.describe_topics(), key=lambda t: t["name"])
        names = [t["name"] for t in metadata]
        configs = _overrides(client, names)
        online = [KafkaTopicPartition(t["name"], p["partition_index"]) for t in metadata for p in t["partitions"]
                  if p["error_code"] == 0]
        offsets = _offsets(client, online)
        dirs = _log_dirs(client, {t["name"]: {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
                                  for t in metadata})
        return [_topic_document(t, configs.get(t["name"], {}), offsets, dirs) for t in metadata]


def _overrides(client: RemoteClient, names: Sequence[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    with kafka_errors_mapped():
        described = client.admin.describe_configs([ConfigResource("TOPIC", n) for n in names])
    return {name: {key: entry["value"] for key, entry in sorted(entries.items())
                   if entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"}
            for name, entries in described.get("topic", {}).items()}


def _offsets(client: RemoteClient, tps: list[KafkaTopicPartition]) -> dict[KafkaTopicPartition, tuple[int, int]]:
    """(log start offset, high watermark) of each partition."""
    if not tps:
        return {}
    with kafka_errors_mapped():
        earliest = client.admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
        latest = client.admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
    return {tp: (earliest[tp].offset, latest[tp].offset) for tp in tps}


def _log_dirs(client: RemoteClient, leaders: dict[str, dict[int, int]]) -> dict[tuple[str, int], tuple[str, int, int]]:
    """(log dir, size, offset lag) of each partition, as its leader reports it."""
    if not leaders:
        return {}
    with kafka_errors_mapped():
        per_broker = client.admin.describe_log_dirs({name: sorted(parts) for name, parts in leaders.items()})
    found: dict[tuple[str, int], tuple[str, int, int]] = {}
    for broker in per_broker:
        for log_dir in broker["log_dirs"]:
            for topic in log_dir["topics"]:
                for part in topic["partitions"]:
                    key = (topic["name"], part["partition_index"])
                    if leaders.get(key[0], {}).get(key[1]) == broker["broker"] and not part["is_future_key"]:
                        found[key] = (log_dir["log_dir"], part["partition_size"], part["offset_lag"])
    return found


def _topic_document(metadata: dict[str, Any], configs: dict[str, str],
                    offsets: dict[KafkaTopicPartition, tuple[int, int]],
                    dirs: dict[tuple[str, int], tuple[str, int, int]]) -> dict[str, Any]:
    name = metadata["name"]
    partitions, offline = [], []
    for p in sorted(metadata["partitions"], key=lambda p: p["partition_index"]):
        index = p["partition_index"]
        if p["error_code"]:
            offline.append({"partition": index, "path": None, "reason": broker_error(p["error_code"], None).message})
            continue
        start, high_watermark = offsets[KafkaTopicPartition(name, index)]
        log_dir, size, lag = dirs.get((name, index), (None, None, 0))
        partitions.append({"partition": index, "log_dir": log_dir, "log_start_offset": start,
                           "high_watermark": high_watermark, "log_end_offset": high_watermark + lag, "size": size,
                           "segments": None})
    return {"topic": name, "topic_id": _kafka_topic_id(metadata["topic_id"]), "partition_count": len(metadata["partitions"]),
            "configs": configs, "partitions": partitions, "offline": offline,
            "configs_unconfirmed": None}  # a hold is local state: the Kafka protocol has no field for it


def _kafka_topic_id(value: object) -> str | None:
    """Kafka's text form of a topic id (base64url, as tidelog and kafka-topics print it), from
    kafka-python's UUID string; None when the broker sent none."""
    if value is None:
        return None
    parsed = uuid.UUID(str(value))
    return None if parsed.int == 0 else uuid_to_topic_id(parsed)


# --- configs --------------------------------------------------------------------------------------

def describe_configs(bootstrap: str, topic: str) -> list[dict[str, str]]:
    """Every config of ``topic`` as ``configs describe`` rows (Name, Value, Source, Synonyms), by name."""
    with connect(bootstrap) as client:
        client.topic_metadata(topic)  # kafka-python drops DescribeConfigs' per-resource error
        with kafka_errors_mapped(topic=topic):
            described = client.admin.describe_configs([ConfigResource("TOPIC", topic)], include_synonyms=True,
                                                      config_filter="all")
    entries = described.get("topic", {}).get(topic, {})
    return [{"Name": key, "Value": entry["value"], "Source": _source(entry["config_source"]),
             "Synonyms": ", ".join(f"{_source(s['source'])}:{s['name']}={s['value']}"
                                   for s in entry.get("synonyms") or ())}
            for key, entry in sorted(entries.items())]


def _source(kafka_name: str) -> str:
    return KAFKA_TO_TIDELOG_SOURCE.get(kafka_name, kafka_name)


def alter_configs(bootstrap: str, topic: str, to_set: Mapping[str, str], to_delete: Sequence[str]) -> None:
    """IncrementalAlterConfigs: SET ``to_set``, DELETE ``to_delete``; the broker validates them all
    before writing any."""
    changes: dict[str, Any] = {key: (AlterConfigOp.DELETE, None) for key in to_delete}
    changes.update({key: (AlterConfigOp.SET, value) for key, value in to_set.items()})
    with connect(bootstrap) as client:
        client.topic_metadata(topic)
        resource = ConfigResource("TOPIC", topic, changes)
        with kafka_errors_mapped(topic=topic):
            results = client.admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
    outcome = results.get("topic", {}).get(topic, "OK")
    if outcome != "OK":
        raise broker_error(*_split_outcome(str(outcome)), topic=topic)


def _split_outcome(outcome: str) -> tuple[int, str]:
    """Kafka's code and the broker's message from kafka-python's ``"[Error 40] Name: message"``."""
    head, bracket, rest = outcome.partition("]")
    digits = head.removeprefix("[Error ").strip()
    if not bracket or not digits.lstrip("-").isdigit():
        return -1, outcome
    _, colon, message = rest.partition(": ")
    return int(digits), (message if colon else rest).strip()


# --- records --------------------------------------------------------------------------------------

def delete_records(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """DeleteRecords below ``offset`` (-1: the high watermark); the new low watermark."""
    tp = KafkaTopicPartition(topic, partition)
    name = f"{topic}-{partition}"
    with connect(bootstrap) as client:
        if partition not in client.partitions(topic):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}", topic_partition=name)
        with kafka_errors_mapped(topic_partition=name):
            result = client.admin.delete_records({tp: offset})
    return int(result[tp]["low_watermark"])


# --- log dirs -------------------------------------------------------------------------------------

def describe_log_dirs(bootstrap: str, topic: str | None) -> list[dict[str, Any]]:
    """``log-dirs`` documents (as the local mode's, plus ``offline``: None, or the Kafka error name
    the broker answered the dir with); segment counts and offsets are not in DescribeLogDirs."""
    with connect(bootstrap) as client, kafka_errors_mapped():
        per_broker = client.admin.describe_log_dirs([topic] if topic is not None else None)
    documents = []
    for broker in per_broker:
        for log_dir in broker["log_dirs"]:
            partitions = [{"partition": f"{t['name']}-{p['partition_index']}", "size": p["partition_size"],
                           "numLogSegments": None, "logStartOffset": None, "logEndOffset": None, "highWatermark": None}
                          for t in log_dir["topics"] for p in t["partitions"] if not p["is_future_key"]]
            code = log_dir["error_code"]
            documents.append({"logDir": log_dir["log_dir"], "size": sum(p["size"] for p in partitions),
                              "partitions": partitions, "setAside": [],
                              "offline": kafka_error_name(code) if code else None})
    return documents
