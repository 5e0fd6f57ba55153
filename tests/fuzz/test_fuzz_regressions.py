"""Inputs the fuzzers found, minimized, each with what it used to do (see also test_decompression_bomb.py)."""

from __future__ import annotations

import pytest

from fuzz.targets import TARGETS
from fuzz_strategies import peak_allocation
from bomb_samples import lz4_frame_claiming
from tidelog.errors import CheckpointError, ConfigError, CorruptRecordError
from tidelog.manager.topics import decode_registry
from tidelog.records import CompressionType, decompress
from tidelog.server.security.credentials import load_credentials
from tidelog.storage.metadata import decode_clean_shutdown

DEEP_JSON = b"[" * 100_000  # json.loads raised RecursionError, not the loader's typed error


def test_deeply_nested_json_is_a_checkpoint_error_not_a_recursion_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CheckpointError, match="not JSON"):
        decode_registry(DEEP_JSON, tmp_path / "tidelog-topics.json")
    with pytest.raises(CheckpointError, match="not JSON"):
        decode_clean_shutdown(DEEP_JSON, tmp_path / ".kafka_cleanshutdown")
    (tmp_path / "credentials").write_bytes(DEEP_JSON)
    with pytest.raises(ConfigError, match="RecursionError"):
        load_credentials(tmp_path / "credentials")


def test_lz4_frame_declaring_2_to_the_62_bytes_was_a_memory_error() -> None:
    """atheris, batch target: a magic-0 LZ4 wrapper whose frame descriptor declares its content
    size (magic 0 recomputes the header checksum, so any size passes it); lz4.frame.decompress
    allocated the declared size first, and raised MemoryError."""
    frame = lz4_frame_claiming(1 << 62)
    with pytest.raises(CorruptRecordError):  # decoded in pieces: the frame's size is found wrong
        decompress(CompressionType.LZ4, frame, magic=0)


def test_lz4_small_frame_did_not_allocate_the_whole_limit() -> None:
    """Hypothesis, compression target (input ``ad 01``: lz4, an empty stream): giving the decoder
    ``max_length=limit`` made it allocate 256 MiB for every frame, however small."""
    TARGETS["compression"].check(b"\xad\x01")  # imports outside the measure
    assert peak_allocation(lambda: TARGETS["compression"].check(b"\xad\x01")) < 1 << 20
