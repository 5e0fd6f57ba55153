"""The one :class:`~prometheus_client.registry.CollectorRegistry` of a ``tidelog serve``.

:class:`MetricsRegistry` starts with the process collectors (``process_*`` and ``python_info``,
as the JMX exporter serves the JVM's beside Kafka's) and, when given, the recovery-progress
collector, so the endpoint can serve during start-up; the manager's and the server's collectors
are attached once they exist. ``auto_describe=False``: registering never runs a collector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from tidelog.server.metrics.collectors import ServerCollector, ServerView

if TYPE_CHECKING:
    from tidelog.manager import LogManager
    from tidelog.manager.metrics import RecoveryProgress


class MetricsRegistry:
    """A registry that grows as ``tidelog serve`` starts. Thread-safe (prometheus_client's
    registry lock, held only while a collector is added or listed)."""

    def __init__(self, progress: RecoveryProgress | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        if progress is not None:
            from tidelog.manager.metrics import RecoveryProgressCollector

            self._add(RecoveryProgressCollector(progress))

    def _add(self, collector: Collector) -> None:
        self.registry.register(collector)

    def attach_manager(self, manager: LogManager) -> None:
        """Add the log, log-manager, cleaner and replica-manager families of ``manager``."""
        from tidelog.manager.metrics import LogManagerCollector

        self._add(LogManagerCollector(manager))

    def attach_server(self, server: ServerView) -> None:
        """Add the broker-topic, request, socket-server, purgatory and group families of ``server``."""
        self._add(ServerCollector(server))


def build_registry(*, progress: RecoveryProgress | None = None, manager: LogManager | None = None,
                   server: ServerView | None = None) -> MetricsRegistry:
    """A registry with whichever of the recovery, manager and server collectors are given."""
    registry = MetricsRegistry(progress)
    if manager is not None:
        registry.attach_manager(manager)
    if server is not None:
        registry.attach_server(server)
    return registry
