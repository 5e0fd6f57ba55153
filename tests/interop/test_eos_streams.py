"""Exactly-once through ``tidelog serve`` with Kafka Streams (kafka-streams 4.3.1 from Maven
Central): a word count (``EosWordCount.java``, run by Java's single-file launcher) with
``processing.guarantee=exactly_once_v2``. Streams creates its repartition and changelog topics
with CreateTopics and runs every task's output, changelog writes and input offsets in one
transaction per commit (the V1 transaction protocol: tidelog does not advertise
``transaction.version``, so the 4.x client adds partitions with AddPartitionsToTxn and commits
offsets with AddOffsetsToTxn/TxnOffsetCommit).

Lines of words are produced (kafka-python, paced over some seconds) while the broker is SIGKILLed
and restarted and the application itself is SIGKILLed mid-transaction and restarted; afterwards
the last count per word that a read_committed consumer sees on the output topic equals the count
of the words the input topic holds. A record counted twice (reprocessed after a kill) or lost
shows as a different number: the same application with ``at_least_once`` fails this check
(over-counts) through the application kill.

The short run (one broker kill, about 15 s) is in ``make test``; the run with two broker kills and an
application kill (about 25 s: the killed instance's member holds its partitions for the 6 s session
timeout) and the long run (more lines, four broker kills, two application kills) are soak tests.
Skipped, saying why, where Java or Maven is missing.
"""

from __future__ import annotations

import random
import signal
import struct
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from kafka_oracle import KAFKA_4, KafkaToolMissing
from kafka_oracle.broker import free_port
from reliability.broker import ServeProcess

APP = Path(__file__).with_name("EosWordCount.java")
LOG4J2 = Path(__file__).resolve().parents[2] / "kafka_oracle" / "log4j2.properties"
INPUT, OUTPUT, APPLICATION_ID = "wc-lines", "wc-counts", "eos-word-count"
INPUT_PARTITIONS = 2
FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx384m")
SERVE_OVERRIDES = {
    "log.segment.bytes": "262144",  # the harness's 4 KiB segments would refuse Streams' 16 KiB batches
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
WORDS = [f"w{i:02d}" for i in range(40)]
WAIT_S = 180.0


def _streams_classpath() -> str:
    try:
        return KAFKA_4.streams_classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka Streams needs Java and Maven: {missing}")


def wait_until(condition, what: str, timeout_s: float, diagnosis=lambda: "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{diagnosis()}")
        time.sleep(0.2)


class WordCountApp:
    """One ``EosWordCount`` JVM; its stdout lines (state changes, errors) are read as they come."""

    def __init__(self, classpath: str, bootstrap: str, work_dir: Path) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir = work_dir
        self.lines: list[str] = []
        self._stderr = open(work_dir / "stderr.txt", "a")
        self.process = subprocess.Popen(
            ["java", *FAST_START, f"-Dlog4j2.configurationFile={LOG4J2}", f"-Dkafka.logs.dir={work_dir}",
             "-cp", classpath, str(APP), bootstrap, APPLICATION_ID, INPUT, OUTPUT, str(work_dir / "state")],
            stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def running(self) -> bool:
        """Whether the application's last state change was to RUNNING."""
        states = [line for line in self.lines if line.startswith("STATE ")]
        return bool(states) and states[-1].endswith(" RUNNING")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._reader.join(5)
        self._stderr.close()

    def diagnosis(self) -> str:
        log = self.work_dir / "server.log"
        client_log = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        stderr = (self.work_dir / "stderr.txt").read_text(errors="replace")[-2000:]
        return f"app stdout: {self.lines[-10:]}\napp stderr:\n{stderr}\nclient log:\n{client_log}"


def serve(data_dir: Path, port: int) -> ServeProcess:
    broker = ServeProcess(data_dir, overrides={"listeners": f"PLAINTEXT://127.0.0.1:{port}", **SERVE_OVERRIDES})
    broker.start()
    return broker


def lines_of(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(count)]


class LineProducer:
    """A kafka-python producer sending ``lines`` to the input topic from its own thread, paced to
    take about ``duration_s`` so that the broker and application kills land while the word count
    works. Sends a broker kill fails are not retried by the test: what the input topic holds in the
    end is read back, and that is what the counts must equal."""

    def __init__(self, bootstrap: str, lines: list[str], duration_s: float) -> None:
        self.bootstrap, self.lines, self.duration_s = bootstrap, lines, duration_s
        self.sent = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", retries=50, retry_backoff_ms=200,
                                 linger_ms=5, request_timeout_ms=10_000, max_block_ms=60_000)
        start = time.monotonic()
        try:
            for i, line in enumerate(self.lines):
                due = start + self.duration_s * i / len(self.lines)
                if due > time.monotonic():
                    time.sleep(due - time.monotonic())
                producer.send(INPUT, key=str(i).encode(), value=line.encode()).add_errback(self._failed)
                self.sent = i + 1
            producer.flush(120)
        finally:
            producer.close()

    def _failed(self, _error: Exception) -> None:
        self.failures += 1

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the producer did not finish ({self.sent} of {len(self.lines)} sent)"


def input_counts(bootstrap: str) -> Counter[str]:
    """The words of every line the input topic holds (read_uncommitted, every partition)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30_000)
    try:
        partitions = [KafkaTopicPartition(INPUT, p) for p in range(INPUT_PARTITIONS)]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        consumer.seek_to_beginning(*partitions)
        words: Counter[str] = Counter()
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, f"reading the input stalled: {ends}"
            for batch in consumer.poll(timeout_ms=500).values():
                for r in batch:
                    words.update(r.value.decode().split())
        return words
    finally:
        consumer.close()


def committed_counts(bootstrap: str) -> dict[str, int]:
    """The last count per word of the output topic, read read_committed up to its LSO."""
    return read_output(bootstrap)[0]


def read_output(bootstrap: str) -> tuple[dict[str, int], int, int]:
    """(the last count per word, the records, the sum of the partitions' log end offsets) of the
    output topic, read read_committed up to its LSO."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             request_timeout_ms=30_000)
    try:
        partitions = [KafkaTopicPartition(OUTPUT, p) for p in sorted(consumer.partitions_for_topic(OUTPUT) or ())]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        consumer.seek_to_beginning(*partitions)
        counts: dict[str, int] = {}
        records = 0
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, f"read_committed stalled: {ends}"
            for batch in consumer.poll(timeout_ms=500).values():
                for r in batch:
                    counts[r.key.decode()] = struct.unpack(">q", r.value)[0]
                records += len(batch)
        return counts, records, sum(ends.values())
    finally:
        consumer.close()


def run_word_count(tmp_path: Path, lines: int, broker_kills: int, app_kills: int, produce_s: float) -> None:
    """Produce ``lines`` lines over about ``produce_s`` seconds; at evenly spaced points of the
    production, once the committed counts have grown since the last kill, SIGKILL and restart the
    broker (the first ``app_kills`` times the application too, just before the broker); then
    wait until the committed counts equal the words of the input topic, failing with the
    difference if they do not within ``WAIT_S``."""
    classpath = _streams_classpath()
    data_dir = tmp_path / "data"
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = serve(data_dir, port)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="wc-setup")
    try:
        admin.create_topics([NewTopic(INPUT, INPUT_PARTITIONS, 1), NewTopic(OUTPUT, 1, 1)])
    finally:
        admin.close()
    runs = 0

    def new_app() -> WordCountApp:
        nonlocal runs
        runs += 1
        return WordCountApp(classpath, bootstrap, tmp_path / f"app-{runs}")

    app = new_app()
    wait_until(app.running, "the application to run", WAIT_S, lambda: app.diagnosis() + "\nbroker:\n" + broker.tail())
    producer = LineProducer(bootstrap, lines_of(lines, seed=lines), produce_s)
    try:
        counted = 0
        for i in range(broker_kills):
            point = lines * (i + 1) // (broker_kills + 1)

            def grown() -> bool:
                return producer.sent >= point and sum(committed_counts(bootstrap).values()) > counted

            wait_until(grown, f"{point} lines sent and the counts grown past {counted} words (kill {i})", WAIT_S,
                       lambda: app.diagnosis() + "\nbroker:\n" + broker.tail())
            counted = sum(committed_counts(bootstrap).values())
            if i < app_kills:  # mid-transaction: the broker then dies holding the dead instance's open one
                app.kill()
            broker.kill()
            broker = serve(data_dir, port)
            if i < app_kills:
                app = new_app()
        producer.join(WAIT_S)
        expected = input_counts(bootstrap)
        assert sum(expected.values()) > 0
        last: dict[str, int] = {}

        def settled() -> bool:
            nonlocal last
            last = committed_counts(bootstrap)
            return last == dict(expected)

        def difference() -> str:
            wrong = {w: (last.get(w), n) for w, n in expected.items() if last.get(w) != n}
            return (f"(word: (committed, expected)) {dict(sorted(wrong.items())[:10])}\n"
                    + app.diagnosis() + "\nbroker:\n" + broker.tail())

        wait_until(settled, "the committed counts to equal the input's", WAIT_S, difference)
        assert app.process.poll() is None, app.diagnosis()  # it ran through the kills
        _, records, end = read_output(bootstrap)
        assert end > records, "no transaction markers in the output"  # COMMIT markers take offsets too
    finally:
        app.kill()
        if broker.running:
            broker.stop()


def test_streams_word_count_through_a_broker_kill_counts_exactly_once(tmp_path: Path) -> None:
    run_word_count(tmp_path, lines=1000, broker_kills=1, app_kills=0, produce_s=4)


@pytest.mark.soak
def test_streams_word_count_through_broker_and_app_kills_counts_exactly_once(tmp_path: Path) -> None:
    run_word_count(tmp_path, lines=3000, broker_kills=2, app_kills=1, produce_s=12)


@pytest.mark.soak
def test_long_streams_word_count_through_repeated_kills_counts_exactly_once(tmp_path: Path) -> None:
    run_word_count(tmp_path, lines=20_000, broker_kills=4, app_kills=2, produce_s=40)
