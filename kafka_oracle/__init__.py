"""Apache Kafka itself, as the oracle for tidelog's interop tests and side-by-side benchmarks.

Not part of the installed package: ``tests/interop`` and ``bench`` import it from the repository
root. It resolves Kafka's jars from Maven Central (``pom.xml`` through ``mvn``), runs Kafka's
command-line classes (``DumpLogSegments``, ``StorageTool``) and starts a real single-node KRaft
broker on loopback with a given ``log.dirs``.

* :mod:`kafka_oracle.jars`: which Kafka (``KafkaDistribution``), its classpath, why it is missing.
* :mod:`kafka_oracle.broker`: ``KafkaBroker`` (format, start, wait until ready, stop, kill -9).
* :mod:`kafka_oracle.dump`: ``DumpLogSegments`` run on files and its output parsed.
"""

from kafka_oracle.broker import KafkaBroker
from kafka_oracle.jars import KAFKA_3, KAFKA_4, KafkaDistribution, KafkaToolMissing, KafkaUnavailable

__all__ = ["KAFKA_3", "KAFKA_4", "KafkaBroker", "KafkaDistribution", "KafkaToolMissing",
           "KafkaUnavailable"]
