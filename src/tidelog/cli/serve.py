"""``tidelog serve``: run the LogManager and its background work until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from tidelog.cli.context import open_manager


@click.command()
@click.pass_context
def serve(ctx: click.Context) -> None:
    """Own the log dirs and run retention, flushing and checkpoints until SIGTERM/SIGINT, then shut
    down cleanly (the Kafka-protocol listener joins in a later release)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with open_manager(ctx) as manager:
            manager.startup()
            dirs = ", ".join(str(d.path) for d in manager.log_dirs())
            click.echo(f"tidelog serving {len(manager.logs())} partition(s) of {len(manager.topics())} topic(s) "
                       f"in {dirs}; SIGTERM or Ctrl-C stops it", err=True)
            stop.wait()
            click.echo("shutting down cleanly", err=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
