"""The Grafana dashboard (``docs/grafana/tidelog.json``) against a real Prometheus scraping
``tidelog serve`` after ordinary traffic: every panel's query is valid PromQL for Prometheus's own
engine (a name check cannot see a misplaced bracket or a ``by`` on a missing label), finds series,
and the topic variable's ``label_values`` lists the topics the clients made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from server_helpers import TIMEOUT_S, serve

from prometheus_oracle import PrometheusError, PrometheusServer

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "tidelog.json"
ALL_TOPICS = ".*"  # the topic variable's allValue ("All" selected)
# series that ordinary traffic does not create: no partition is quarantined, and whether a client met
# an error other than NONE depends on its version (JoinGroup's MEMBER_ID_REQUIRED)
MAY_BE_EMPTY = ("tidelog_log_cleaner_quarantined", 'kafka_network_requestmetrics_errors_total{error!="NONE"}')


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression with the dashboard's variables as "All" gives them) of every target."""
    return [(panel.get("title", "?"), target["expr"].replace("$topic", ALL_TOPICS))
            for panel in _panels(dashboard["panels"]) for target in panel.get("targets", []) if target.get("expr")]


def _traffic(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("orders", 2, 1), NewTopic("users", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    for i in range(60):
        producer.send("orders", b"order-%d" % i)
        producer.send("users", key=b"user-%d" % (i % 5), value=b"v%d" % i)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer("orders", bootstrap_servers=bootstrap, group_id="readers", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=int(TIMEOUT_S * 1000))
    read = [next(consumer) for _ in range(60)]
    consumer.commit()
    consumer.close()
    assert len(read) == 60


def test_every_dashboard_query_runs_in_prometheus_and_finds_series(
        tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = _queries(dashboard)
    assert len(queries) >= 20
    data = tmp_path / "data"
    with serve("metrics.listener=http://127.0.0.1:0", "log.cleaner.backoff.ms=100",
               "log.retention.check.interval.ms=200", "log.initial.task.delay.ms=0", data=data) as served:
        prom = prometheus(json.loads((data / "tidelog-serve.json").read_text())["metrics"])
        _traffic(served.bootstrap)
        # rate() over [1m] needs two samples of a series: two scrapes after the last client
        prom.wait_for_scrape_after(prom.wait_for_scrape_after(time.time()))
        prom.wait_for('count(tidelog_log_cleaner_reason{topic="users"})', lambda v: v == 1, "the cleaner's pass")
        prom.wait_for('count(tidelog_log_retention_reason{topic="orders"})', lambda v: v == 2, "a retention pass")
        failed, empty = {}, []
        for title, expr in queries:
            try:
                if not prom.query(expr):
                    empty.append((title, expr))
            except PrometheusError as error:
                failed[f"{title}: {expr}"] = str(error)
        assert failed == {}
        assert [(title, expr) for title, expr in empty if not any(name in expr for name in MAY_BE_EMPTY)] == []
        topics = prom.label_values("topic", "kafka_log_log_size")
        assert {"orders", "users"} <= set(topics)
