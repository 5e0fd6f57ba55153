"""Fixtures for the records tests: kafka-python's snappy codec.

kafka-python's snappy framing (``kafka.codec.snappy_encode/decode``) calls the ``python-snappy``
module for raw blocks, which is not installed here. ``kafka_snappy`` supplies those two raw-block
calls from cramjam (the same Snappy block format), so the xerial framing under test is still
kafka-python's own code.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import cramjam
import pytest


class _RawSnappy(types.SimpleNamespace):
    @staticmethod
    def compress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.compress_raw(data))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))


@pytest.fixture
def kafka_snappy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Give kafka-python's codec module a raw snappy implementation (see module docstring)."""
    import kafka.codec

    monkeypatch.setattr(kafka.codec, "snappy", _RawSnappy())
    yield
