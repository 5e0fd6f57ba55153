"""Exactly-once through ``tidelog serve`` with code nobody here wrote: Kafka's own
``TransactionalMessageCopier`` (kafka-tools 4.3.1, the tool of Kafka's exactly-once system tests)
copies an input partition to an output topic in transactions (about a third of them aborted at
random, ``--enable-random-aborts``), each transaction committing the consumed offsets with
``sendOffsetsToTransaction``, while the broker is SIGKILLed and restarted
and the copier itself is SIGKILLed and restarted (a new copier fences the killed one's epoch and
aborts what it left open, then resumes from the group's committed offset); the same with a
confluent-kafka consume-transform-produce loop (``eos_copier_confluent.py``). Afterwards:

* a read_committed consumer (kafka-python, through the broker) and ``tidelog consume
  --isolation-level read_committed`` (the files) see every input record exactly once in the output;
* the group's committed offset for the input partition is its end;
* Kafka 4.3 opens the output partition's files (segments and ``.txnindex``) and its read_committed
  consumer sees exactly what tidelog's does.

Fencing: a copier frozen mid-run (SIGSTOP) is replaced by one with the same transactional id,
then wakes up: it dies fenced (Java's ``ProducerFencedException``, ``InvalidProducerEpochException``
when a produce is the first to hear it, or "the transactional.id ... has been claimed by another
process" when its abort is) and the output is
still exactly once: nothing the zombie wrote after the new copier started is visible to
read_committed readers.

The Java copier's short run is in ``make test``; the long runs (more records, three broker kills
and three copier kills; Java and confluent-kafka) are soak tests. Skipped, saying why, where Java or Maven is missing.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from kafka_oracle import KAFKA_4, KafkaBroker, KafkaToolMissing
from kafka_oracle.broker import free_port
from reliability.broker import ServeProcess
from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.records.builder import build_batch
from tidelog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
INPUT, OUTPUT, GROUP = "eos-in", "eos-out", "eos-copier"
FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m")
LOG4J2 = Path(__file__).resolve().parents[2] / "kafka_oracle" / "log4j2.properties"
SERVE_OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
WAIT_S = 240.0
FENCED = ("ProducerFencedException", "InvalidProducerEpochException",  # what the Java client says when fenced
          "has been claimed by another process")  # (the last: its KafkaException when the abort finds it fenced)
STALL_S = 30.0  # a copier silent this long is replaced (each loop prints a status; a JVM client blocks <= 60 s
# only on max.block.ms, which a broker restarted within seconds never reaches)


def _java() -> None:
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's TransactionalMessageCopier needs Java and Maven: {missing}")


# --- the copier ------------------------------------------------------------------------------

@dataclass
class Copier:
    """One copier process; its JSON status lines are read as they come."""

    command: list[str]
    work_dir: Path
    statuses: list[dict] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    last_status_at: float = 0.0  # time.monotonic() of the last status line (or of the start)
    _reader: threading.Thread | None = None

    def start(self) -> Copier:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.statuses = []
        self.last_status_at = time.monotonic()
        self._stderr = open(self.work_dir / "stderr.txt", "a")
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                try:
                    self.statuses.append(json.loads(line))
                    self.last_status_at = time.monotonic()
                except ValueError:
                    pass

    @property
    def remaining(self) -> int | None:
        """What the copier says is left to copy (None before its first loop)."""
        loops = [s for s in self.statuses if "remaining" in s]
        return int(loops[-1]["remaining"]) if loops else None

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.wait(30)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None
        code = self.process.wait(timeout_s)
        if self._reader is not None:
            self._reader.join(5)
        self._stderr.close()
        return code

    def stderr(self) -> str:
        return (self.work_dir / "stderr.txt").read_text(errors="replace")

    def heard_fenced(self) -> bool:
        """Whether the copier's stderr or its Java client's log says its producer was fenced."""
        log = self.work_dir / "server.log"
        said = self.stderr() + (log.read_text(errors="replace") if log.exists() else "")
        return any(words in said for words in FENCED)

    def diagnosis(self) -> str:
        log = self.work_dir / "server.log"
        client_log = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        return f"copier stderr:\n{self.stderr()[-3000:]}\nclient log:\n{client_log}\nlast status: {self.statuses[-1:]}"


def copier(bootstrap: str, work_dir: Path, transactional_id: str = "eos-copier-0", transaction_size: int = 50,
           kind: str = "java", transaction_timeout_ms: int = 20000, random_aborts: bool = False) -> Copier:
    """Kafka's Java copier (``kind="java"``) or the confluent-kafka loop, with the same arguments."""
    args = ("--broker-list", bootstrap, "--transactional-id", transactional_id, "--input-topic", INPUT,
            "--input-partition", "0", "--output-topic", OUTPUT, "--consumer-group", GROUP,
            "--transaction-size", str(transaction_size), "--transaction-timeout", str(transaction_timeout_ms))
    if kind == "confluent":
        return Copier([sys.executable, str(Path(__file__).with_name("eos_copier_confluent.py")), *args], work_dir)
    flags = ("--use-group-metadata", *(("--enable-random-aborts",) if random_aborts else ()))
    command = KAFKA_4.java_command(COPIER, *args, *flags, jvm_options=(
        *FAST_START, f"-Dlog4j2.configurationFile={LOG4J2}", f"-Dkafka.logs.dir={work_dir}"))
    return Copier(command, work_dir)


def wait_until(condition, what: str, timeout_s: float, diagnosis=lambda: "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{diagnosis()}")
        time.sleep(0.1)


# --- the broker and the data -------------------------------------------------------------------

def seed(data_dir: Path, count: int) -> list[bytes]:
    """The input topic (``count`` records in batches of 25, stamped now: retention keeps them)
    and the empty output topic."""
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data_dir)}))
    now_ms = int(time.time() * 1000)
    try:
        manager.create_topic(INPUT, 1)
        manager.create_topic(OUTPUT, 1)
        values = [b"value-%06d" % i for i in range(count)]
        for first in range(0, count, 25):
            manager.append(TopicPartition(INPUT, 0), build_batch(
                [(b"k%d" % (i % 97), values[i]) for i in range(first, min(first + 25, count))], timestamp=now_ms))
    finally:
        manager.shutdown()
    return values


def serve(data_dir: Path, port: int) -> ServeProcess:
    broker = ServeProcess(data_dir, overrides={"listeners": f"PLAINTEXT://127.0.0.1:{port}", **SERVE_OVERRIDES})
    broker.start()
    return broker


def read_committed(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """Every record of ``topic``-0 a read_committed kafka-python consumer gets, up to the LSO."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             request_timeout_ms=30_000)
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"read_committed stalled at {consumer.position(tp)} of {end}"
            for records in consumer.poll(timeout_ms=500).values():
                got += [(r.offset, r.value) for r in records]
        return got
    finally:
        consumer.close()


def log_end(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level="read_uncommitted")
    try:
        tp = KafkaTopicPartition(topic, 0)
        return consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def committed_offset(bootstrap: str) -> int | None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="eos-check")
    try:
        found = admin.list_group_offsets(GROUP)[GROUP]
    finally:
        admin.close()
    answer = found.get(KafkaTopicPartition(INPUT, 0))
    return None if answer is None else answer.offset


def local_read_committed(data_dir: Path, level: str = "read_committed") -> list[tuple[int, bytes]]:
    """``tidelog consume --isolation-level read_committed`` (or ``level``) of the output, from the files."""
    code, out, err = run_cli(data_dir, "consume", OUTPUT, "--from-beginning", "--format", "json", "--encoding",
                             "base64", "--isolation-level", level)
    assert code == 0, err
    return [(r["offset"], base64.b64decode(r["value"])) for r in map(orjson.loads, out.splitlines())]


def exactly_once(values: list[bytes], got: list[tuple[int, bytes]]) -> None:
    copies = Counter(v for _, v in got)
    duplicates = {v: n for v, n in copies.items() if n > 1}
    missing = set(values) - set(copies)
    assert not duplicates and not missing, (f"{len(duplicates)} duplicated (e.g. {sorted(duplicates)[:3]}), "
                                            f"{len(missing)} missing (e.g. {sorted(missing)[:3]})")
    assert len(got) == len(values)


# --- the scenario ------------------------------------------------------------------------------

@dataclass
class CopyRun:
    """What a finished run left: the data dir, the input values, what was read through the broker."""

    data_dir: Path
    values: list[bytes]
    through_broker: list[tuple[int, bytes]]
    output_end: int
    committed_offset: int | None
    broker_kills: int
    copier_kills: int
    copier_failures: list[str]


def run_with_kills(tmp_path: Path, count: int, broker_kills: int, copier_kills: int, kind: str = "java",
                   random_aborts: bool = False) -> CopyRun:
    """Copy ``count`` records with the ``kind`` of copier; at evenly spaced points of its progress
    kill the broker (restarted at once, on the same port) or the copier (a new one started),
    alternating; then let it finish. A copier that dies of a broker kill, or prints nothing for
    ``STALL_S`` (librdkafka 2.16's ``send_offsets_to_transaction`` can wait for good for a group
    coordinator that went down during the transaction, ignoring its timeout: confluentinc/librdkafka
    issues 5456 and 5511), is replaced as an operator's liveness probe would; what it said on
    stderr is kept."""
    if kind == "java":
        _java()
    data_dir = tmp_path / "data"
    values = seed(data_dir, count)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = serve(data_dir, port)
    runs = 0
    failures: list[str] = []

    def new_copier() -> Copier:
        nonlocal runs
        runs += 1
        return copier(bootstrap, tmp_path / f"copier-{runs}", kind=kind, random_aborts=random_aborts).start()

    current = new_copier()

    def replace_if_failed() -> None:
        nonlocal current
        code = current.exit_code()
        stalled = code is None and time.monotonic() - current.last_status_at > STALL_S
        if stalled:  # a liveness probe's restart: librdkafka's send_offsets_to_transaction can hang for good
            current.kill()
        if stalled or (code is not None and code != 0):
            failures.append(("stalled: " if stalled else "") + current.stderr()[-500:])
            current = new_copier()

    kills = [name for i in range(max(broker_kills, copier_kills))
             for name, n in (("broker", broker_kills), ("copier", copier_kills)) if i < n]
    done = Counter[str]()
    try:
        for i, name in enumerate(kills):
            target = count - count * (i + 1) // (len(kills) + 1)

            def progressed() -> bool:
                replace_if_failed()
                remaining = current.remaining
                return remaining is not None and remaining <= target

            wait_until(progressed, f"the copier to get below {target} remaining (kill {i}: {name})", WAIT_S,
                       lambda: current.diagnosis() + "\nbroker:\n" + broker.tail())
            if name == "broker":
                broker.kill()
                broker = serve(data_dir, port)
            else:
                current.kill()
                current = new_copier()
            done[name] += 1

        def finished() -> bool:
            replace_if_failed()
            return current.exit_code() == 0 and current.remaining == 0

        wait_until(finished, "the copier to copy everything and exit", WAIT_S,
                   lambda: current.diagnosis() + "\nbroker:\n" + broker.tail())
        through_broker = read_committed(bootstrap, OUTPUT)
        output_end = log_end(bootstrap, OUTPUT)
        offset = committed_offset(bootstrap)
    finally:
        current.kill()
        if broker.running:
            broker.stop()
    return CopyRun(data_dir, values, through_broker, output_end, offset, done["broker"], done["copier"], failures)


def check_run(run: CopyRun) -> None:
    exactly_once(run.values, run.through_broker)
    assert local_read_committed(run.data_dir) == run.through_broker
    assert run.committed_offset == len(run.values)
    assert run.output_end > len(run.values)  # the markers (and any aborted copies) are in the log too


def aborted_copies(run: CopyRun) -> int:
    """Records of the output a read_uncommitted reader sees and a read_committed one does not."""
    return len(local_read_committed(run.data_dir, "read_uncommitted")) - len(run.values)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> CopyRun:
    """The Java copier's run, aborting about a third of its transactions at random (the Kafka test
    below reads what it left)."""
    return run_with_kills(tmp_path_factory.mktemp("eos"), count=3000, broker_kills=1, copier_kills=1,
                          random_aborts=True)


def test_copier_through_broker_and_copier_kills_copies_exactly_once(short_run: CopyRun) -> None:
    assert (short_run.broker_kills, short_run.copier_kills) == (1, 1)
    check_run(short_run)
    assert aborted_copies(short_run) > 0  # aborted data sits in the log (and in .txnindex) for readers to skip


@pytest.mark.soak
@pytest.mark.parametrize("kind", ["java", "confluent"])
def test_long_copier_run_through_repeated_kills_copies_exactly_once(tmp_path: Path, kind: str) -> None:
    run = run_with_kills(tmp_path, count=20_000, broker_kills=3, copier_kills=3, kind=kind,
                         random_aborts=kind == "java")
    assert (run.broker_kills, run.copier_kills) == (3, 3)
    check_run(run)


def test_a_zombie_copier_is_fenced_by_a_new_one_with_its_id(tmp_path: Path) -> None:
    """The zombie case transactions exist for: copier A is frozen (SIGSTOP) mid-run, copier B
    starts with the same transactional id (its InitProducerId bumps the epoch; a transaction A
    left open is aborted, by B's fencing or by its timeout), copies, and then A wakes up (SIGCONT)
    and carries on with its old epoch: it dies fenced, and nothing it wrote after B started is
    visible. (Two copiers running side by side would duplicate records by the tool's design: it
    reads its start position before it fences the other.)"""
    _java()
    data_dir = tmp_path / "data"
    values = seed(data_dir, 2000)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = serve(data_dir, port)
    try:
        first = copier(bootstrap, tmp_path / "first", transaction_size=10, transaction_timeout_ms=5000).start()
        wait_until(lambda: (first.remaining or 2000) < 1800, "the first copier to be under way", WAIT_S,
                   first.diagnosis)
        assert first.process is not None
        first.process.send_signal(signal.SIGSTOP)
        second = copier(bootstrap, tmp_path / "second", transaction_size=10, transaction_timeout_ms=5000).start()
        try:
            wait_until(lambda: (second.remaining or 2000) < 1000, "the second copier to be under way", WAIT_S,
                       second.diagnosis)
            first.process.send_signal(signal.SIGCONT)
            wait_until(lambda: first.heard_fenced() or first.exit_code() == 0,
                       "the woken copier to hear it is fenced", WAIT_S, first.diagnosis)
            assert first.exit_code() != 0, "the fenced copier ended normally"
            first.kill()  # once fenced, its commit blocks max.block.ms (a minute) before the copier exits
            assert second.wait(WAIT_S) == 0, second.diagnosis()
        finally:
            first.kill()
            second.kill()
        exactly_once(values, read_committed(bootstrap, OUTPUT))
        assert committed_offset(bootstrap) == len(values)
    finally:
        broker.stop()
    exactly_once(values, local_read_committed(data_dir))


# --- Kafka 4.3 opens what tidelog wrote --------------------------------------------------------

@pytest.mark.xdist_group("kafka_broker")
@pytest.mark.parametrize("clean", [True, False], ids=["clean-start", "unclean-start"])
def test_kafka_reads_the_copied_output_as_tidelog_does(short_run: CopyRun, kafka_broker: KafkaBroker,
                                                        clean: bool) -> None:
    """The output partition (segments, ``.txnindex``, leader-epoch checkpoint) is put under a
    Kafka broker that created the same topic, which then starts: cleanly (it serves our
    ``.txnindex`` files as they are) or uncleanly (recovery point 0, no clean-shutdown marker: it
    recovers every segment, rebuilding producer state and the ``.txnindex`` files from our
    markers). Either way its read_committed consumer gets what tidelog's did, offsets included."""
    from test_kafka_broker_loads_tidelog import merge_checkpoint, replace_segments

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers, client_id="eos-adopt")
    try:
        admin.create_topics([NewTopic(OUTPUT, 1, 1, topic_configs={"retention.ms": "-1", "retention.bytes": "-1"})])
    finally:
        admin.close()
    kafka_broker.wait_for(lambda: (kafka_broker.partition_dir(OUTPUT) / "partition.metadata").exists(),
                          "the output partition's dir", 60)
    try:
        kafka_broker.stop()
        replace_segments(kafka_broker.partition_dir(OUTPUT), short_run.data_dir / f"{OUTPUT}-0")
        tp = TopicPartition(OUTPUT, 0)
        for name in (LOG_START_OFFSET_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
                     RECOVERY_POINT_CHECKPOINT_FILE):
            entries = OffsetCheckpointFile(short_run.data_dir / name).read()
            if name == RECOVERY_POINT_CHECKPOINT_FILE and not clean:
                entries = {tp: 0}
            merge_checkpoint(name, kafka_broker.log_dir, entries, [tp])
        if not clean:
            (kafka_broker.log_dir / ".kafka_cleanshutdown").unlink()
        kafka_broker.start()
        assert read_committed(kafka_broker.bootstrap_servers, OUTPUT) == short_run.through_broker
        assert log_end(kafka_broker.bootstrap_servers, OUTPUT) == short_run.output_end
    finally:
        if not kafka_broker.running:
            kafka_broker.start()
        admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers, client_id="eos-adopt")
        try:
            admin.delete_topics([OUTPUT])
        finally:
            admin.close()


def test_tidelog_dump_prints_the_copiers_markers_as_kafkas_dump_log_segments(short_run: CopyRun) -> None:
    """The output partition's segments and ``.txnindex`` files (markers written by tidelog's
    coordinator, aborts indexed by its append path) dumped by Kafka 4.3's DumpLogSegments
    (``--deep-iteration``) and by ``tidelog dump --deep`` parse to the same batches, records,
    COMMIT/ABORT markers with their coordinator epoch, and aborted transactions."""
    from kafka_oracle.dump import dump_log_segments, parse_dump

    partition = short_run.data_dir / f"{OUTPUT}-0"
    paths = sorted(partition.glob("*.log")) + sorted(partition.glob("*.txnindex"))
    kafka = dump_log_segments(KAFKA_4, paths, "--deep-iteration")
    assert kafka.returncode == 0, kafka.stderr[-2000:]
    code, out, err = run_cli(short_run.data_dir, "dump", "--deep", *map(str, paths))
    assert code == 0, err
    theirs, ours = parse_dump(kafka.stdout, kafka.stderr), parse_dump(out.decode(), "")
    assert not theirs.unparsed and not ours.unparsed, (theirs.unparsed[:3], ours.unparsed[:3])
    markers = [r for f in theirs.files.values() for b in f.batches for r in b.records if r.end_txn_marker]
    assert {r.end_txn_marker for r in markers} == {"COMMIT", "ABORT"}
    assert sum(len(f.aborted_txns) for f in theirs.files.values()) > 0
    for path in map(str, paths):
        assert ours.file(path) == theirs.file(path), path
