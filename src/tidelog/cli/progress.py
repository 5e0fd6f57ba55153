"""Progress bars for long work (loading many partitions, verifying or dumping large data), drawn
on stderr only when it is a terminal, so piped output and tests never see them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

Update = Callable[[int, int], None]  # (done, total)


@contextmanager
def progress_bar(label: str, *, in_bytes: bool = False, threshold: int = 0) -> Iterator[Update | None]:
    """A callback ``update(done, total)`` drawing one bar, or None when stderr is not a terminal.
    The bar appears only once ``total`` reaches ``threshold`` (small work finishes before a bar helps)."""
    if not sys.stderr.isatty():
        yield None
        return
    amount: ProgressColumn = DownloadColumn() if in_bytes else MofNCompleteColumn()
    columns = (TextColumn(label), BarColumn(), amount, TimeElapsedColumn())
    with Progress(*columns, transient=True, console=Console(stderr=True)) as progress:
        task = None

        def update(done: int, total: int) -> None:
            nonlocal task
            if total < threshold:
                return
            if task is None:
                task = progress.add_task(label, total=total)
            progress.update(task, completed=done)

        yield update
