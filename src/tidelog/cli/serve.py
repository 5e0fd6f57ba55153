"""``tidelog serve``: run the LogManager, its background work and the Kafka-protocol listeners until
SIGTERM or SIGINT.

Listeners come from the broker config (``--config``/``--override``): ``listeners`` (default
``PLAINTEXT://127.0.0.1:9092``), ``advertised.listeners``, ``socket.request.max.bytes``; see
:mod:`tidelog.server.config`. On a signal the listeners close first (connections dropped,
requests in flight finish their file call), then the manager shuts down cleanly.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from tidelog.cli.context import open_manager
from tidelog.errors import ConfigError
from tidelog.storage.config import BrokerConfig


@click.command()
@click.pass_context
def serve(ctx: click.Context) -> None:
    """Own the log dirs, serve Kafka clients on the configured listeners, and run retention,
    flushing, checkpoints and the cleaner until SIGTERM/SIGINT, then shut down cleanly."""
    # Imported here: the protocol codec (kafka-python's message classes) costs ~0.2 s to load,
    # which no other command should pay.
    from tidelog.server import ServerConfig, ServerThread

    broker: BrokerConfig = ctx.find_root().obj["broker"]
    try:
        config = ServerConfig.from_broker(broker)
    except ConfigError as e:
        raise click.ClickException(str(e)) from e
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with open_manager(ctx) as manager:
            manager.startup()
            server = ServerThread(manager, config)
            try:
                bound = server.start()
            except OSError as e:
                raise click.ClickException(f"cannot listen: {e}") from e
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
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
