"""The server-side collector: Kafka's BrokerTopicMetrics, RequestMetrics, socket-server,
DelayedOperationPurgatory and GroupMetadataManager families, named as the Prometheus JMX
exporter renders them (``kafka-2_0_0.yml``; the connection count as Strimzi's rules do), plus
tidelog's refused-connections counter.

Read at scrape time, on the endpoint's worker thread, from state the event loop writes without
locks (:mod:`.broker_metrics`): every read is a copy made at once under the GIL. The collector
takes no lock of the server, the manager or any log.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidelog.server.metrics.broker_metrics import QUANTILES, ServerMetrics, TopicCounters, quantile
from tidelog.server.metrics.request_names import error_name

NETWORK_PROCESSOR = "0"  # one event loop serves every connection: Kafka's processor 0 of each listener

# (metric name without _total, TopicCounters attribute, Kafka's meter)
TOPIC_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("kafka_server_brokertopicmetrics_bytesin", "bytes_in", "BytesInPerSec"),
    ("kafka_server_brokertopicmetrics_bytesout", "bytes_out", "BytesOutPerSec"),
    ("kafka_server_brokertopicmetrics_messagesin", "messages_in", "MessagesInPerSec"),
    ("kafka_server_brokertopicmetrics_totalproducerequests", "total_produce", "TotalProduceRequestsPerSec"),
    ("kafka_server_brokertopicmetrics_failedproducerequests", "failed_produce", "FailedProduceRequestsPerSec"),
    ("kafka_server_brokertopicmetrics_totalfetchrequests", "total_fetch", "TotalFetchRequestsPerSec"),
    ("kafka_server_brokertopicmetrics_failedfetchrequests", "failed_fetch", "FailedFetchRequestsPerSec"),
    ("kafka_server_brokertopicmetrics_bytesrejected", "bytes_rejected", "BytesRejectedPerSec"),
)
GROUP_STATES = (("Stable", "stable"), ("Empty", "empty"), ("PreparingRebalance", "preparingrebalance"),
                ("CompletingRebalance", "completingrebalance"), ("Dead", "dead"))


class ServerView(Protocol):
    """What the collector reads from a running server (:class:`~tidelog.server.server.KafkaServer`);
    every member is safe to read from another thread without a lock."""

    metrics: ServerMetrics
    refused_connections: int

    def connection_counts(self) -> dict[str, int]: ...

    @property
    def delayed_fetches(self) -> int: ...

    def group_states(self) -> list[tuple[str, int]]: ...

    def has_topic(self, name: str) -> bool: ...


class ServerCollector(Collector):
    """Yields the server's families from ``server`` at each scrape. Thread-safe, lock-free;
    O(topics + request names * 1028 + groups)."""

    def __init__(self, server: ServerView) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        all_topics, topics = self._server.metrics.topics.snapshot()
        # a deleted topic's series go, as Kafka removes its meters (a topic created again continues)
        yield from topic_families(all_topics, {n: c for n, c in topics.items() if self._server.has_topic(n)})
        yield from request_families(self._server.metrics)
        yield from self._socket_server()
        yield from self._groups()

    def _socket_server(self) -> Iterator[Metric]:
        server = self._server
        connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                        "Open client connections (Kafka's socket-server-metrics connection-count)",
                                        labels=["listener", "networkProcessor"])
        for listener, count in sorted(server.connection_counts().items()):
            connections.add_metric([listener, NETWORK_PROCESSOR], count)
        yield connections
        refused = CounterMetricFamily("tidelog_server_refused_connections",
                                      "Connections closed at accept by a max.connections limit")
        refused.add_metric([], server.refused_connections)
        yield refused
        purgatory = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                      "Delayed operations waiting (Kafka's DelayedOperationPurgatory PurgatorySize)",
                                      labels=["delayedOperation"])
        purgatory.add_metric(["Fetch"], server.delayed_fetches)
        yield purgatory

    def _groups(self) -> Iterator[Metric]:
        states = self._server.group_states()
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield _gauge(prefix + "numgroups", "Classic groups (Kafka's GroupMetadataManager NumGroups)", len(states))
        yield _gauge(prefix + "numoffsets", "Committed offsets (Kafka's GroupMetadataManager NumOffsets)",
                     sum(n for _, n in states))
        for state, suffix in GROUP_STATES:
            yield _gauge(prefix + "numgroups" + suffix, f"Groups in state {state} (NumGroups{state})",
                         sum(1 for s, _ in states if s == state))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


def topic_families(all_topics: TopicCounters, topics: dict[str, TopicCounters]) -> Iterator[Metric]:
    """The BrokerTopicMetrics counters: an all-topics series without labels and one per topic."""
    for name, attribute, meter in TOPIC_COUNTERS:
        family = CounterMetricFamily(name, f"Kafka's BrokerTopicMetrics {meter} count", labels=["topic"])
        family.add_metric([], getattr(all_topics, attribute))
        for topic in sorted(topics):
            family.add_metric([topic], getattr(topics[topic], attribute))
        yield family


def request_families(metrics: ServerMetrics) -> Iterator[Metric]:
    """RequestMetrics: RequestsPerSec, ErrorsPerSec and TotalTimeMs (percentiles and count)."""
    snapshot = metrics.requests.snapshot()
    requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Kafka's RequestMetrics RequestsPerSec "
                                   "count", labels=["request", "version"])
    errors = CounterMetricFamily("kafka_network_requestmetrics_errors", "Kafka's RequestMetrics ErrorsPerSec count",
                                 labels=["request", "error"])
    times = GaugeMetricFamily("kafka_network_requestmetrics_totaltimems", "Kafka's RequestMetrics TotalTimeMs "
                              "percentiles over the last 1028 requests", labels=["request", "quantile"])
    counts = CounterMetricFamily("kafka_network_requestmetrics_totaltimems_count", "Kafka's RequestMetrics "
                                 "TotalTimeMs Count", labels=["request"])
    for name in sorted(snapshot):
        stats = snapshot[name]
        for version in sorted(stats.requests):
            requests.add_metric([name, str(version)], stats.requests[version])
        for code in sorted(stats.errors):
            errors.add_metric([name, error_name(code)], stats.errors[code])
        if stats.count:
            for label, q in QUANTILES:
                times.add_metric([name, label], quantile(stats.times, q))
            counts.add_metric([name], stats.count)
    yield from (requests, errors, times, counts)
