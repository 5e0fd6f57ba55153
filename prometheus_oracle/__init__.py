"""A real Prometheus on loopback, for tidelog's observability tests.

Not part of the installed package: the tests (``tests/observability/conftest.py``) import it from the
repository root, as they do ``kafka_oracle`` and ``object_store_oracle``. ``prometheus`` and
``promtool`` come from PATH, or from Debian's ``prometheus`` package, installed once per machine
(``make prometheus``; ``make test`` and ``make soak`` run it) with no daemon left running.

* :mod:`prometheus_oracle.install`: ``prometheus_binaries()`` (find or install; a file lock).
* :mod:`prometheus_oracle.server`: ``PrometheusServer`` (config checked by promtool, free port,
  start, wait ready, query and target-health helpers, stop).
"""

from prometheus_oracle.install import (PrometheusBinaries, PrometheusMissing, PrometheusUnavailable, find_binaries,
                                       prometheus_binaries)
from prometheus_oracle.server import PrometheusError, PrometheusServer, Sample, TargetHealth

__all__ = ["PrometheusBinaries", "PrometheusError", "PrometheusMissing", "PrometheusServer", "PrometheusUnavailable",
           "Sample", "TargetHealth", "find_binaries", "prometheus_binaries"]
