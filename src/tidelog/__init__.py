"""tidelog: Apache Kafka's log storage layer in Python, byte-compatible with a broker's ``log.dirs``.

Public doors: :mod:`tidelog` (this module), :mod:`tidelog.errors`, :mod:`tidelog.testing`.
Everything else is internal and may change.
"""

__version__ = "0.1.0"
