"""How a command gets its LogManager: the log dirs chosen from the global options, a progress bar
while many partitions load, and a clean shutdown whatever the command does.

Log dirs: ``--data-dir`` (or ``TIDELOG_DATA_DIR``) when given; otherwise ``log.dirs``/``log.dir``
from ``--config``/``--override`` when set there; otherwise ``./data``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig

DEFAULT_DATA_DIR = Path("./data")
PROGRESS_THRESHOLD = 200  # partitions; fewer load too fast for a bar to help


def log_dirs(ctx: click.Context) -> list[Path]:
    root = ctx.find_root()
    broker: BrokerConfig = root.obj["broker"]
    data_dir: Path = root.obj["data_dir"]
    explicit = root.get_parameter_source("data_dir") in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    if explicit:
        return [data_dir]
    if broker.is_set("log.dirs") or broker.is_set("log.dir"):
        return [Path(p) for p in broker.log_dirs]
    return [DEFAULT_DATA_DIR]


@contextmanager
def open_manager(ctx: click.Context) -> Iterator[LogManager]:
    """Open the LogManager over the chosen log dirs; always shut it down cleanly on exit."""
    broker: BrokerConfig = ctx.find_root().obj["broker"]
    with _progress() as on_progress:
        manager = LogManager.open(broker, log_dirs(ctx), on_progress=on_progress)
    try:
        yield manager
    finally:
        manager.shutdown()


@contextmanager
def _progress() -> Iterator[object]:
    """A loading progress bar on a terminal's stderr, shown only for many partitions."""
    if not sys.stderr.isatty():
        yield None
        return
    columns = (TextColumn("loading partitions"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, console=Console(stderr=True)) as progress:
        task = None

        def on_progress(done: int, total: int) -> None:
            nonlocal task
            if total < PROGRESS_THRESHOLD:
                return
            if task is None:
                task = progress.add_task("load", total=total)
            progress.update(task, completed=done)

        yield on_progress
