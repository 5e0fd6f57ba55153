"""``tidelog serve``: run the LogManager, its background work and the Kafka-protocol listeners until
SIGTERM or SIGINT.

Listeners come from the broker config (``--config``/``--override``): ``listeners`` (default
``PLAINTEXT://127.0.0.1:9092``), ``advertised.listeners``, ``socket.request.max.bytes``; see
:mod:`tidelog.server.config`. With ``metrics.listener`` (``http://host:port``) it also serves
Prometheus's ``GET /metrics`` there (:mod:`tidelog.server.metrics`), from before the partitions
load (recovery progress) until the listeners close; the URL is printed and written into the
address file ``tidelog-serve.json`` as ``"metrics"``. On a signal the listeners close first
(connections dropped, requests in flight finish their file call), then the manager shuts down cleanly.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

import click

from tidelog.cli.context import open_manager
from tidelog.errors import ConfigError
from tidelog.storage.config import BrokerConfig

if TYPE_CHECKING:
    from tidelog.manager.metrics import RecoveryProgress
    from tidelog.server.metrics import MetricsEndpoint, MetricsRegistry


@click.command()
@click.pass_context
def serve(ctx: click.Context) -> None:
    """Own the log dirs, serve Kafka clients on the configured listeners, and run retention,
    flushing, checkpoints and the cleaner until SIGTERM/SIGINT, then shut down cleanly."""
    # Imported here: the protocol codec (kafka-python's message classes) costs ~0.2 s to load,
    # which no other command should pay.
    from tidelog.server import ServerConfig, ServerThread
    from tidelog.server.allocator import retain_freed_memory

    broker: BrokerConfig = ctx.find_root().obj["broker"]
    try:
        config = ServerConfig.from_broker(broker)
    except ConfigError as e:
        raise click.ClickException(str(e)) from e
    retain_freed_memory(broker.get("tidelog.server.allocator.retain.bytes"))  # this process is the broker's
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    endpoint, registry, progress = _start_metrics(broker)
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with open_manager(ctx, on_progress=progress.on_progress if progress is not None else None) as manager:
            if progress is not None and registry is not None:
                progress.complete()
                registry.attach_manager(manager)
            manager.startup()
            server = ServerThread(manager, config)
            server.server.metrics_url = endpoint.url if endpoint is not None else None
            try:
                bound = server.start()
            except OSError as e:
                raise click.ClickException(f"cannot listen: {e}") from e
            if registry is not None:
                registry.attach_server(server.server)
            try:
                dirs = ", ".join(str(d.path) if d.offline is None else f"{d.path} (OFFLINE: {d.offline.describe()})"
                                 for d in manager.log_dirs())
                listening = ", ".join(f"{b.listener_name}://{b.host}:{b.port}" for b in bound)
                click.echo(f"tidelog serving {len(manager.live_partitions())} partition(s) of {len(manager.topics())} topic(s) "
                           f"in {dirs}; listening on {listening}; SIGTERM or Ctrl-C stops it", err=True)
                stop.wait()
                click.echo("shutting down cleanly", err=True)
            finally:
                server.stop()
                if endpoint is not None:
                    endpoint.stop()  # with the server: no scrape reads a manager shutting down
    finally:
        if endpoint is not None:
            endpoint.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start_metrics(broker: BrokerConfig) -> tuple[MetricsEndpoint | None, MetricsRegistry | None,
                                                  RecoveryProgress | None]:
    """The Prometheus endpoint of ``metrics.listener``, serving before the manager opens (with the
    recovery progress only: the manager's and server's collectors join once they exist); three
    Nones when the key is empty."""
    from tidelog.manager.metrics import RecoveryProgress
    from tidelog.server.metrics import MetricsEndpoint, MetricsRegistry, parse_metrics_listener

    try:
        listener = parse_metrics_listener(broker.get("metrics.listener"))
    except ConfigError as e:
        raise click.ClickException(str(e)) from e
    if listener is None:
        return None, None, None
    progress = RecoveryProgress()
    registry = MetricsRegistry(progress)
    endpoint = MetricsEndpoint(registry.registry, listener.host, listener.port,
                               render_interval_s=broker.get("tidelog.metrics.min.render.interval.ms") / 1000)
    try:
        endpoint.start()
    except OSError as e:
        raise click.ClickException(f"cannot listen on metrics.listener={broker.get('metrics.listener')}: {e}") from e
    click.echo(f"metrics on {endpoint.url}", err=True)
    return endpoint, registry, progress
