"""ApiVersions: exactly the APIs and versions of :data:`~tidelog.server.codec.SUPPORTED_APIS`.

A request of a version this server does not know is answered with UNSUPPORTED_VERSION and the
full list in a v0 body (KIP-511), so the client can pick a version and ask again.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse

from tidelog.server.codec import SUPPORTED_APIS, Request
from tidelog.server.errors import ErrorCode


def api_versions_response(request: Request) -> tuple[Any, int]:
    """``(response body, version to encode it in)``."""
    keys = [ApiVersionsResponse.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
            for s in sorted(SUPPORTED_APIS.values(), key=lambda s: s.api_key)]
    if request.body is None:
        return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys), 0
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys, throttle_time_ms=0), request.api_version
