"""Fixtures for the cleaner tests: ``make_log(**overrides)`` opens a Log on ``<tmp>/log-0`` with
:func:`cleaner_helpers.cleaner_config` (LogCleanerTest's defaults plus snake_case overrides);
logs still open at teardown are closed. ``clock``/``scheduler`` come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cleaner_helpers import MakeLog, cleaner_config

from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler


@pytest.fixture
def make_log(tmp_path: Path, clock: FakeClock, scheduler: FakeScheduler) -> Iterator[MakeLog]:
    opened: list[Log] = []

    def make(*, dir: Path | None = None, config: LogConfig | None = None, recovery_point: int = 0,
             log_start_offset: int = 0, high_watermark: int | None = None, **overrides: Any) -> Log:
        log = Log.open(dir or tmp_path / "log-0", config or cleaner_config(**overrides),
                       recovery_point=recovery_point, log_start_offset=log_start_offset,
                       high_watermark=high_watermark, clock=clock, scheduler=scheduler)
        opened.append(log)
        return log

    yield make
    for log in opened:
        if not log._closed:
            log.close()
