"""How a command gets its LogManager: the log dirs chosen from the global options, a progress bar
while many partitions load, and a clean shutdown whatever the command does.

Log dirs: ``--data-dir`` (or ``TIDELOG_DATA_DIR``) when given; otherwise ``log.dirs``/``log.dir``
from ``--config``/``--override`` when set there; otherwise ``./data``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from click.core import ParameterSource

from tidelog.cli.progress import Update, progress_bar
from tidelog.manager import LogManager
from tidelog.spark.engine import CLEANER_ENGINES
from tidelog.storage.config import BrokerConfig

DEFAULT_DATA_DIR = Path("./data")
PROGRESS_THRESHOLD = 200  # partitions; fewer load too fast for a bar to help


def _both(first: Update | None, second: Update | None) -> Update | None:
    """One progress callback telling both (either may be None)."""
    if first is None or second is None:
        return first or second

    def update(done: int, total: int) -> None:
        first(done, total)
        second(done, total)

    return update


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
def open_manager(ctx: click.Context, *, read_only: bool = False,
                 on_progress: Update | None = None) -> Iterator[LogManager]:
    """Open the LogManager over the chosen log dirs; always shut it down cleanly on exit.
    ``read_only``: the command only reads, so a clean-shutdown marker a broker left is kept
    byte for byte (:meth:`LogManager.open`). Its cleaner may run every engine the CLI knows (spark too).
    ``on_progress(done, total)`` is told of the partitions loaded, as the progress bar is."""
    broker: BrokerConfig = ctx.find_root().obj["broker"]
    with progress_bar("loading partitions", threshold=PROGRESS_THRESHOLD) as bar:
        manager = LogManager.open(broker, log_dirs(ctx), on_progress=_both(bar, on_progress), read_only=read_only,
                                  cleaner_engines=CLEANER_ENGINES)
    try:
        yield manager
    finally:
        manager.shutdown()
