"""Shared fixtures for the partition-log tests (Kafka's LogTestUtils, our way).

* ``tp_dir``: an empty partition dir named like Kafka's, ``<tmp>/topic-0``.
* ``clock`` / ``scheduler``: a :class:`FakeClock` and the :class:`FakeScheduler` it drives;
  ``clock.advance(ms)`` runs due tasks (async flush after a roll, delayed ``.deleted`` unlinks).
* ``make_log(**overrides)``: opens a :class:`Log` on ``tp_dir`` with topic-config overrides given
  as snake_case keywords (``segment_bytes=1024`` means ``segment.bytes``) and the loader's inputs
  (``recovery_point``, ``log_start_offset``, ``had_clean_shutdown``, ``high_watermark``). Logs
  still open at teardown are closed.

Plain helpers (``crash``, ``batch``, ``read_all`` ...) are in ``storage_helpers.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import MakeLog, log_config

from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler


@pytest.fixture
def tp_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def make_log(tp_dir: Path, clock: FakeClock, scheduler: FakeScheduler) -> Iterator[MakeLog]:
    opened: list[Log] = []

    def make(
        *,
        dir: Path | None = None,
        config: LogConfig | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        high_watermark: int | None = None,
        **overrides: Any,
    ) -> Log:
        log = Log.open(
            dir or tp_dir, config or log_config(**overrides),
            recovery_point=recovery_point, log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown, high_watermark=high_watermark,
            clock=clock, scheduler=scheduler,
        )
        opened.append(log)
        return log

    yield make
    for log in opened:
        if not log._closed:  # test seam: a crashed log is marked closed by crash()
            log.close()


