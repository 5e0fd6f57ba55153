"""A real S3-compatible object store (SeaweedFS) on loopback, for tidelog's tiered-storage tests.

Not part of the installed package: the tests (``tests/conftest.py``) and ``bench`` import it from the repository
root, as they do ``kafka_oracle``. SeaweedFS's ``weed`` is built from the Go module proxy once per
machine and cached outside the repository (``make weed``; ``make test`` and ``make soak`` run it).

* :mod:`object_store_oracle.weed_build`: ``weed_binary()`` (download, build, cache, file lock).
* :mod:`object_store_oracle.server`: ``WeedS3Server`` (free ports, S3 identity, start, wait, stop).
* :mod:`object_store_oracle.fault_proxy`: ``FaultProxy``, an HTTP proxy in front of it that injects
  the store's faults at runtime (5xx, 403, slow answers, dropped connections, connection refused).
"""

from object_store_oracle.fault_proxy import FaultProxy, ProxiedRequest
from object_store_oracle.server import ObjectStoreError, S3Credentials, WeedS3Server
from object_store_oracle.weed_build import WEED_VERSION, WeedToolMissing, WeedUnavailable, weed_binary

__all__ = ["WEED_VERSION", "FaultProxy", "ObjectStoreError", "ProxiedRequest", "S3Credentials", "WeedS3Server", "WeedToolMissing",
           "WeedUnavailable", "weed_binary"]
