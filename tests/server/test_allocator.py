"""tidelog serve's C allocator settings (server.allocator): large buffers allocated and freed over
and over stop faulting in fresh pages once freed memory is kept, in a process of their own (the
settings are process-wide); 0 changes nothing; the key is checked like any other."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tidelog.errors import ConfigError
from tidelog.server import allocator
from tidelog.storage.config import BrokerConfig

# a large request's buffers, as the server's read path makes them: a 1 MiB block, a stream buffer
# grown in 128 KiB reads, the frame copied out of it; all freed before the next request
_FAULTS_OF_LARGE_REQUESTS = textwrap.dedent("""
    import resource, sys
    from tidelog.server.allocator import retain_freed_memory
    took = retain_freed_memory(int(sys.argv[1]))

    def request():
        block = bytes(1 << 20)
        stream = bytearray()
        for _ in range(8):
            stream += block[:128 << 10]
        frame = bytes(stream)
        del block, stream, frame

    for _ in range(20):
        request()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        request()
    print(took, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(retain_bytes: int) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _FAULTS_OF_LARGE_REQUESTS, str(retain_bytes)], check=True,
                         capture_output=True, text=True, timeout=120).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(allocator._glibc() is None, reason="the settings are glibc's")
def test_kept_freed_memory_stops_large_requests_faulting_in_fresh_pages() -> None:
    took, faults = _faults(8 << 20)  # the default
    untouched, default_faults = _faults(0)
    assert took and not untouched
    # 200 requests of ~3 MiB: with glibc's own thresholds their pages are fresh each time
    assert default_faults > 200 * 256, default_faults
    assert faults < 200, faults


def test_nothing_changes_without_retained_bytes() -> None:
    assert allocator.retain_freed_memory(0) is False


def test_the_key_defaults_to_8_mib_and_refuses_a_negative_size() -> None:
    assert BrokerConfig.from_properties({}).get("tidelog.server.allocator.retain.bytes") == 8 << 20
    assert BrokerConfig.from_properties({"tidelog.server.allocator.retain.bytes": "0"}).get(
        "tidelog.server.allocator.retain.bytes") == 0
    with pytest.raises(ConfigError, match="tidelog.server.allocator.retain.bytes"):
        BrokerConfig.from_properties({"tidelog.server.allocator.retain.bytes": "-1"})
