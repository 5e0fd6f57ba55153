"""Kafka's jars from Maven Central: resolved once by ``mvn dependency:build-classpath``, cached.

The classpath Maven prints is cached next to this file (``.cache/``, git-ignored) under a key
of the version and the POM's content, and reused while every jar on it still exists, so a test
session pays Maven's ~8 s only on a machine's first run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
STREAMS_POM = HERE / "streams-pom.xml"  # kafka-streams (and rocksdbjni) for the Streams interop test
CACHE_DIR = HERE / ".cache"
MAVEN_TIMEOUT_S = 600.0


class KafkaUnavailable(RuntimeError):
    """Kafka's jars could not be resolved (Maven failed, Central unreachable); the message says why."""


class KafkaToolMissing(KafkaUnavailable):
    """``java`` or ``mvn`` is not installed: the one case where the interop tests skip."""


@dataclass(frozen=True)
class KafkaDistribution:
    """One Kafka release line: ``version`` from Maven Central, ``line`` picks the POM profile."""

    version: str
    line: int  # 4: log4j2 logging, DumpLogSegments in kafka-tools; 3: reload4j, DumpLogSegments in core

    @property
    def name(self) -> str:
        return f"kafka-{self.version}"

    def classpath(self) -> str:
        """The jars of the broker and its tools, ``:``-joined; resolved through Maven on first use."""
        return self._classpath(POM, "kafka_2.13-")

    def streams_classpath(self) -> str:
        """The jars of Kafka Streams (``kafka-streams``, its ``kafka-clients``, ``rocksdbjni``) at this
        version, ``:``-joined; resolved through Maven on first use, cached as :meth:`classpath` is."""
        return self._classpath(STREAMS_POM, "kafka-streams-")

    def _classpath(self, pom: Path, needed_jar: str) -> str:
        if shutil.which("java") is None:
            raise KafkaToolMissing("no `java` on PATH: Kafka's broker and tools need a JDK 17+")
        cached = self._cache_file(pom)
        classpath = self._cached_classpath(cached)
        if classpath is not None:
            return classpath
        CACHE_DIR.mkdir(exist_ok=True)
        # one Maven at a time: xdist workers share ~/.m2, which Maven 3.8 does not lock
        with open(CACHE_DIR / "resolve.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            classpath = self._cached_classpath(cached)
            return classpath if classpath is not None else self._resolve(cached, pom, needed_jar)

    @staticmethod
    def _cached_classpath(cached: Path) -> str | None:
        if not cached.exists():
            return None
        entries = cached.read_text().strip().split(os.pathsep)
        if entries and all(Path(jar).exists() for jar in entries):
            return os.pathsep.join(entries)
        return None

    def java_command(self, main_class: str, *args: str, jvm_options: tuple[str, ...] = ()) -> list[str]:
        """``java -cp <classpath> [jvm_options] main_class args`` for one of Kafka's classes."""
        return ["java", *jvm_options, "-cp", self.classpath(), main_class, *args]

    def _cache_file(self, pom: Path) -> Path:
        pom_digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
        kind = "" if pom == POM else f"{pom.stem}-"
        return CACHE_DIR / f"classpath-{kind}{self.version}-{pom_digest}.txt"

    def _resolve(self, cache_file: Path, pom: Path, needed_jar: str) -> str:
        maven = shutil.which("mvn")
        if maven is None:
            raise KafkaToolMissing("no `mvn` on PATH: Kafka's jars are resolved from Maven Central by Maven")
        output = cache_file.with_suffix(f".{os.getpid()}.tmp")
        command = [maven, "-q", "-B", "-f", str(pom), f"-Dkafka.version={self.version}"]
        if self.line == 3:
            command.append("-Dkafka.line=3")
        command += ["dependency:build-classpath", f"-Dmdep.outputFile={output}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise KafkaUnavailable(f"Maven did not resolve Kafka {self.version} in {MAVEN_TIMEOUT_S:.0f} s") from exc
        if done.returncode != 0 or not output.exists():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise KafkaUnavailable(f"Maven could not resolve Kafka {self.version} from {pom}:\n{tail}")
        entries = [jar for jar in output.read_text().strip().split(os.pathsep) if jar]
        output.unlink()
        if not any(Path(jar).name.startswith(needed_jar) for jar in entries):
            raise KafkaUnavailable(f"Maven's classpath for Kafka {self.version} from {pom.name} has no "
                                   f"{needed_jar.rstrip('-')} jar")
        written = cache_file.with_suffix(f".{os.getpid()}.write")
        written.write_text(os.pathsep.join(entries))
        os.replace(written, cache_file)  # readers outside the lock see the old file or the new one
        return os.pathsep.join(entries)


# The current line (KRaft only), and the last 3.x line, for the legacy (v0/v1) checks.
# 4.4.0 is listed on Maven Central without its kafka-tools-api jar, so 4.3.1 is the newest that resolves.
KAFKA_4 = KafkaDistribution("4.3.1", line=4)
KAFKA_3 = KafkaDistribution("3.9.2", line=3)
