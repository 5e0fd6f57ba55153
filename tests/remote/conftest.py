"""Fixtures for the remote tier's tests.

* ``store``: a real :class:`ArrowRemoteStore` on ``file://<tmp>/store`` (pyarrow's LocalFileSystem).
* ``tip``: the partition ``orders-2`` with a fixed topic id.

Plain helpers (``segment_meta``, ``FlakyStore`` ...) are in ``remote_helpers.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.remote.metadata import TopicIdPartition
from tidelog.remote.store import ArrowRemoteStore
from remote_helpers import TOPIC_ID_PARTITION


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_root: Path) -> ArrowRemoteStore:
    return ArrowRemoteStore(store_root.as_uri())


@pytest.fixture
def tip() -> TopicIdPartition:
    return TOPIC_ID_PARTITION
