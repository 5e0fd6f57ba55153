"""Spark's own Kafka connector (spark-sql-kafka-0-10) from Maven Central, as ``spark.jars``.

Spark's ``spark.jars.packages`` resolves through Ivy, which here reaches only ``~/.m2`` (and
spark-packages.org, unreachable), so the connector's jars are resolved with Maven instead, like
Kafka's (:mod:`kafka_oracle.jars`), and handed to a session as ``spark.jars``. The running Spark's
own version is tried first, then the newest published connector of the same major version that is
not newer than Spark (:func:`candidate_versions`): the reachable Maven Central has no 4.3.0
connector, and on PySpark 4.3 the 4.1.1 connector fails in streaming with ``NoSuchMethodError``
(an API it calls changed in 4.2) while the 4.2.0 one streams. Only the connector's own jars are kept
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

# Connector versions published on Maven Central (spark-sql-kafka-0-10_2.13 with its token provider).
PUBLISHED_VERSIONS = ("4.2.0", "4.1.1", "4.0.0")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def candidate_versions(spark_version: str) -> list[str]:
    """Connector versions to try for a Spark of ``spark_version``, best first: its own, then the
    published ones of the same major version not newer than it, newest first (a connector newer
    than Spark, or of another major version, calls APIs that Spark does not have)."""
    own = _version_key(spark_version)
    older = sorted((v for v in PUBLISHED_VERSIONS if _version_key(v)[:1] == own[:1] and _version_key(v) <= own),
                   key=_version_key, reverse=True)
    return list(dict.fromkeys((spark_version, *older)))
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
        for version in candidate_versions(spark_version):
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
