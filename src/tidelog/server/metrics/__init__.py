"""The Prometheus endpoint of ``tidelog serve`` and the server's own metrics.

:mod:`.broker_metrics` keeps the counters the event loop updates without locks;
:mod:`.collectors` renders them (and the connection, purgatory and group gauges) under Kafka's
names as the JMX exporter shows them; :mod:`.registry` gathers those with the manager's
collectors; :mod:`.endpoint` serves ``GET /metrics`` on ``metrics.listener`` (:mod:`.listener`).
"""

from tidelog.server.metrics.broker_metrics import ServerMetrics
from tidelog.server.metrics.endpoint import MetricsEndpoint
from tidelog.server.metrics.listener import MetricsListener, parse_metrics_listener
from tidelog.server.metrics.registry import MetricsRegistry, build_registry

__all__ = ["MetricsEndpoint", "MetricsListener", "MetricsRegistry", "ServerMetrics", "build_registry",
           "parse_metrics_listener"]
