"""What ``tidelog serve``'s ``/metrics`` endpoint serves after traffic that brings out every family
and the lazily created series: one scrape, taken once per test process and shared by the tests of
the dashboard and of docs/metrics.md.

The broker runs as a user starts it (``tidelog serve`` in a subprocess, ``metrics.listener`` on a
free port read from ``tidelog-serve.json``) with a remote tier on a file:// store (the remote
families exist only with one) and short cleaner and retention intervals. kafka-python creates a
plain topic, a compacted one and a tiered one, produces keyed records to each, and a consumer group
reads the plain topic and commits; the scrape is taken once the cleaner and retention passes have
recorded their reason codes and the fetches are counted.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.append(str(Path(__file__).parent.parent / "server"))  # server_helpers: serve()
from server_helpers import serve  # noqa: E402

WAIT_S = 60.0
TOPICS = {"orders": (2, {}), "users": (1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}),
          "tiered": (1, {"remote.storage.enable": "true", "segment.bytes": "65536"})}
RECORDS = 200


@dataclass(frozen=True, slots=True)
class Family:
    """One served family: the name a query uses (a counter's with ``_total``), its type, the
    label names its samples carry and how many samples it has."""

    name: str
    type: str
    labels: frozenset[str]
    samples: int


def exposed_families(text: str) -> dict[str, Family]:
    """The families of an exposition text, by the name a PromQL query uses."""
    found = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = frozenset(label for sample in family.samples for label in sample.labels)
        found[name] = Family(name, family.type, labels, len(family.samples))
    return found


_scraped: dict[str, str] = {}


def served_text(root: Path) -> str:
    """The text of one scrape of a broker after the traffic above (``root``: a new dir for its
    data), taken once per process."""
    if "text" not in _scraped:
        _scraped["text"] = _scrape_after_traffic(root)
    return _scraped["text"]


def metrics_url(log_dir: Path, timeout_s: float = WAIT_S) -> str:
    """The endpoint's URL from the broker's address file (``"metrics"``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            url = json.loads((log_dir / "tidelog-serve.json").read_text()).get("metrics")
        except (OSError, ValueError):
            url = None
        if url:
            return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"
        time.sleep(0.05)
    raise AssertionError(f"no \"metrics\" URL in {log_dir / 'tidelog-serve.json'} after {timeout_s:.0f} s")


def scrape(url: str) -> str:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
        return (gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body).decode()


def _scrape_after_traffic(root: Path) -> str:
    data = root / "data"
    overrides = ("metrics.listener=http://127.0.0.1:0", "log.cleaner.backoff.ms=100",
                 "log.retention.check.interval.ms=200", "log.initial.task.delay.ms=0", "auto.create.topics.enable=false",
                 "remote.log.storage.system.enable=true", f"remote.log.storage.uri={(root / 'remote').as_uri()}")
    with serve(*overrides, data=data) as served:
        url = metrics_url(data)
        _traffic(served.bootstrap)
        return _wait_for_series(url)


def _traffic(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)
                             for name, (partitions, configs) in TOPICS.items()])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(RECORDS):
        for topic in TOPICS:
            producer.send(topic, key=b"k%d" % (i % 20), value=b"v%d" % i)
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer("orders", bootstrap_servers=bootstrap, group_id="readers",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        read, deadline = 0, time.monotonic() + WAIT_S
        while read < RECORDS and time.monotonic() < deadline:
            read += sum(len(records) for records in consumer.poll(timeout_ms=500).values())
        assert read == RECORDS, f"the group read {read} of {RECORDS} records"
        consumer.commit()
    finally:
        consumer.close()


def _wait_for_series(url: str) -> str:
    """A scrape once the lazily created series are there: bytes out of the fetched topic, a cleaner
    reason of the compacted topic, a retention reason of the plain one, the tiered topic's copy lag."""
    wanted = {("kafka_server_brokertopicmetrics_bytesout", "orders"), ("tidelog_log_cleaner_reason", "users"),
              ("tidelog_log_retention_reason", "orders"), ("kafka_server_brokertopicmetrics_remotecopylagbytes", "tiered")}
    deadline = time.monotonic() + WAIT_S
    while True:
        text = scrape(url)
        seen = {(family.name, sample.labels.get("topic")) for family in text_string_to_metric_families(text)
                for sample in family.samples}
        if not wanted - seen:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"after {WAIT_S:.0f} s the scrape still lacks {sorted(wanted - seen)}:\n{text[:3000]}")
        time.sleep(0.2)
