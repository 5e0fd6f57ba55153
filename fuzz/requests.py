"""Valid request frames of every API and version the server advertises: the request target's corpus.

Built from tests/server/server_samples.py (the server tests' one source of valid requests), so a
new API or version advertised there is fuzzed without touching this package.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_SERVER_TESTS = Path(__file__).resolve().parent.parent / "tests" / "server"


def sample_frames() -> list[bytes]:
    """One frame (header and body, no size prefix) per (api_key, version) of SUPPORTED_APIS."""
    if str(_SERVER_TESTS) not in sys.path:
        sys.path.append(str(_SERVER_TESTS))
    import server_samples

    return [frame(server_samples.sample(api_key, version), version)
            for api_key, version in server_samples.all_versions()]


def frame(request: Any, version: int, correlation_id: int = 7) -> bytes:
    """``request`` encoded at ``version`` with its header, as a client sends it after the size prefix."""
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    request.API_VERSION = version
    return bytes(request.encode(header=True))
