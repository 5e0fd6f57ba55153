"""Spark's own Kafka connector (spark-sql-kafka-0-10) from Maven Central, as ``spark.jars``.

Spark's ``spark.jars.packages`` resolves through Ivy, which here reaches only ``~/.m2`` (and
spark-packages.org, unreachable), so the connector's jars are resolved with Maven instead, like
Kafka's (:mod:`kafka_oracle.jars`), and handed to a session as ``spark.jars``. The running Spark's
own version is tried first, then older ones: the Maven Central mirror reachable from the build
machine lacks ``spark-token-provider-kafka`` for 4.1+, and the 4.0.0 connector runs on Spark 4.3
(checked: reads and writes through ``tidelog serve``). Only the connector's own jars are kept
(the connector, its token provider, kafka-clients, commons-pool2): Spark brings the rest.
Resolved once per machine; cached in ``.cache/``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from kafka_oracle.jars import CACHE_DIR, MAVEN_TIMEOUT_S

FALLBACK_VERSIONS = ("4.1.1", "4.0.0")
_KEEP = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "kafka-clients-", "commons-pool2-")
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>tidelog</groupId><artifactId>spark-kafka-connector</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId>
<version>{version}</version></dependency></dependencies></project>
"""


def connector_jars(spark_version: str) -> tuple[str, list[str]] | None:
    """``(connector version, jar paths)`` for a Spark of ``spark_version``, or None when Maven
    cannot resolve any (no ``mvn``, or none of the versions on the reachable Central)."""
    if shutil.which("mvn") is None:
        return None
    CACHE_DIR.mkdir(exist_ok=True)
    with open(CACHE_DIR / "resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for version in dict.fromkeys((spark_version, *FALLBACK_VERSIONS)):
            jars = _cached(version) or _resolve(version)
            if jars:
                return version, jars
    return None


def _cache_file(version: str) -> Path:
    return CACHE_DIR / f"spark-kafka-connector-{version}.txt"


def _cached(version: str) -> list[str] | None:
    cached = _cache_file(version)
    if not cached.exists():
        return None
    text = cached.read_text().strip()
    if text == "unresolvable":
        return []
    jars = text.split(os.pathsep)
    return jars if all(Path(j).exists() for j in jars) else None


def _resolve(version: str) -> list[str]:
    work = CACHE_DIR / f"spark-kafka-connector-{version}"
    work.mkdir(exist_ok=True)
    (work / "pom.xml").write_text(_POM.format(version=version))
    output = work / "classpath.txt"
    try:
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(work / "pom.xml"), "dependency:build-classpath",
                               f"-Dmdep.outputFile={output}", "-Dmdep.includeScope=runtime"],
                              capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return []
    jars = []
    if done.returncode == 0 and output.exists():
        jars = [j for j in output.read_text().strip().split(os.pathsep) if Path(j).name.startswith(_KEEP)]
    _cache_file(version).write_text(os.pathsep.join(jars) if len(jars) == len(_KEEP) else "unresolvable")
    return jars if len(jars) == len(_KEEP) else []
