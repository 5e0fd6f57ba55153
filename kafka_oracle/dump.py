"""Kafka's ``DumpLogSegments`` (kafka-dump-log.sh) run on files, as the reader nobody here wrote."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka_oracle.jars import HERE, KafkaDistribution

DUMP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class DumpOutput:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> DumpOutput:
        """This output, or an AssertionError quoting Kafka's complaint when the tool failed."""
        if self.returncode != 0:
            raise AssertionError(f"DumpLogSegments exited {self.returncode}:\n{self.stderr[-4000:]}\n{self.stdout[-2000:]}")
        return self


def dump_main_class(distribution: KafkaDistribution) -> str:
    # moved from core (Scala) to the tools module (Java) in Kafka 4
    return "org.apache.kafka.tools.DumpLogSegments" if distribution.line >= 4 else "kafka.tools.DumpLogSegments"


def dump_log_segments(distribution: KafkaDistribution, files: Sequence[Path], *options: str,
                      work_dir: Path | None = None) -> DumpOutput:
    """Run DumpLogSegments once over ``files`` (one JVM for all: ~1 s a start) with ``options``
    such as ``--deep-iteration``, ``--print-data-log``, ``--verify-index-only``, ``--index-sanity-check``."""
    logs_dir = work_dir if work_dir is not None else Path(files[0]).parent
    logging = (f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}" if distribution.line >= 4
               else f"-Dlog4j.configuration=file:{HERE / 'log4j.properties'}")
    command = distribution.java_command(
        dump_main_class(distribution), *options, "--files", ",".join(str(f) for f in files),
        jvm_options=(logging, f"-Dkafka.logs.dir={logs_dir}"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    return DumpOutput(command, done.returncode, done.stdout, done.stderr)
