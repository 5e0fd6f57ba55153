"""Fixtures of the reliability tests.

* ``kill_root``: a factory of empty dirs for kill points, on tmpfs (``/dev/shm``) when there is
  one: a killed *process* leaves the page cache in place, so ``fsync`` changes nothing a kill
  point can observe, and on tmpfs it costs nothing (on a disk it is ~5 ms, most of a run).
* ``kill_summary``: collects outcomes and prints the summary line the issue's figures come from.
* ``broker``: a ``tidelog serve`` process (:class:`reliability.broker.ServeProcess`) started on
  an empty data dir, killed at the end if still running.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reliability.broker import ServeProcess

sys.path.append(str(Path(__file__).parent.parent / "manager"))  # kill_harness uses manager_helpers.crash
from kill_harness import Summary  # noqa: E402 - needs the path above

_SHM = Path("/dev/shm")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ServeProcess]:
    serve = ServeProcess(tmp_path / "data")
    serve.start()
    yield serve
    serve.kill()  # nothing when it stopped already


@pytest.fixture
def kill_root(tmp_path: Path) -> Iterator[Callable[[], Path]]:
    base = Path(tempfile.mkdtemp(prefix="tidelog-kill-", dir=_SHM)) if _SHM.is_dir() else tmp_path
    count = 0

    def fresh() -> Path:
        nonlocal count
        count += 1
        path = base / f"k{count}"
        path.mkdir()
        return path

    yield fresh
    if base != tmp_path:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def kill_summary(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Iterator[Summary]:
    summary = Summary()
    yield summary
    with capsys.disabled():
        print("\n" + summary.line(f"kill points [{request.node.callspec.params.get('workload', '?')}]"))
