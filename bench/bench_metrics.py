"""The Prometheus endpoint's cost (``metrics.listener`` of ``tidelog serve``), against a
``tidelog serve`` process (bench_kafka_wire.TidelogServe).

* ``metrics_scrape_produce``: produce throughput of the lean wire client (pre-encoded 500-record
  batches, 8 Produce requests in flight: bench_kafka_wire.lean_produce) while a scraper process
  GETs ``/metrics`` every 100 ms, against the same produce with no scraper, in the same broker and
  the same run. Rounds alternate which goes first; each run writes a topic of its own; the figure
  and baseline are medians of the rounds. The broker also holds a topic of 1,000 partitions (100
  with ``--quick``), so each scrape has real work to do. Target: ratio >= 0.97.
* ``metrics_scrape_10k``: the time of one scrape of a broker holding 10,000 partitions (500 with
  ``--quick``): half of a topic with the default delete policy, half of a compacted one, so the
  per-partition cleaner and retention series are there too (the scrape waits for the first
  cleaner and retention passes). Each scrape asks for gzip as Prometheus does; the details also
  give the uncompressed scrape and the bytes of both. Figure: partitions per second of one scrape
  (median); target "10,000 partitions in < 1 s" = at least 10,000/s. Baseline: the partitions per
  second of prometheus_client's ``generate_latest`` run in this process on the same samples (parsed
  back from a scrape), i.e. the library's own cost of writing them, with no collection and no HTTP.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_kafka import BROKER_OVERRIDES, load_average
from bench.bench_kafka_wire import PF_BATCH_RECORDS, TidelogServe, lean_batches, lean_produce
from bench.bench_storage import Row, Settings, Target, _copy_partition, _template_partition, median, scratch_dir
from tidelog.manager import LogManager
from tidelog.scheduler import ThreadScheduler
from tidelog.storage.config import BrokerConfig

SCRAPE_INTERVAL_S = 0.1
SCRAPE_RATIO_TARGET = 0.97
SCRAPE_ROUNDS = (7, 5)  # full, quick: medians of at least 5
METRICS_LISTENER = "http://127.0.0.1:0"
ADDRESS_FILE = "tidelog-serve.json"  # tidelog.server.staged_api.SERVE_ADDRESS_FILE: its "metrics" key
ADDRESS_TIMEOUT_S = 60.0
PASSES_TIMEOUT_S = 120.0  # the first cleaner and retention passes over 10,000 partitions
# the first retention pass at once and no other during the scrapes (the cleaner weighs every log at start and
# then every log.cleaner.backoff.ms, Kafka's 15 s: a shorter backoff would have the scrapes measure its passes);
# every scrape renders (the 1 s default would serve most of them from one rendering)
PASS_OVERRIDES = {"log.retention.check.interval.ms": "3600000", "log.initial.task.delay.ms": "0",
                  "tidelog.metrics.min.render.interval.ms": "0"}
SCRAPE_10K_TARGET = 10_000  # partitions per second: 10,000 partitions in < 1 s
SCRAPES_10K = (7, 3)


# --- the endpoint ---------------------------------------------------------------------------------

def metrics_url(log_dir: Path, timeout: float = ADDRESS_TIMEOUT_S) -> str:
    """The ``/metrics`` URL ``tidelog serve`` left in the address file of ``log_dir``."""
    deadline = time.monotonic() + timeout
    path = log_dir / ADDRESS_FILE
    while True:
        try:
            url = json.loads(path.read_text()).get("metrics")
        except (OSError, ValueError):
            url = None
        if url:
            return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"
        if time.monotonic() > deadline:
            raise RuntimeError(f"no metrics URL in {path} after {timeout:.0f} s")
        time.sleep(0.05)


@dataclass(frozen=True, slots=True)
class Scrape:
    """One GET of ``/metrics``: how long it took and what came back (decompressed text, bytes sent)."""

    seconds: float
    text: str
    wire_bytes: int


def scrape(url: str, gzip_ok: bool) -> Scrape:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        encoding = response.headers.get("Content-Encoding", "")
    seconds = time.perf_counter() - began
    if response.status != 200:
        raise RuntimeError(f"GET {url} answered {response.status}")
    text = (gzip.decompress(body) if encoding == "gzip" else body).decode()
    return Scrape(seconds, text, len(body))


_SCRAPER = """
import os, sys, time, urllib.request
url, interval, stop = sys.argv[1], float(sys.argv[2]), sys.argv[3]
request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
count = total = 0
slowest = 0.0
due = time.monotonic()
while not os.path.exists(stop):
    began = time.monotonic()
    with urllib.request.urlopen(request, timeout=20) as response:
        total += len(response.read())
    count += 1
    slowest = max(slowest, time.monotonic() - began)
    if count == 1:
        print("scraping", flush=True)
    due += interval
    time.sleep(max(0.0, due - time.monotonic()))
print(count, total, slowest, flush=True)
"""


@dataclass(frozen=True, slots=True)
class ScraperReport:
    scrapes: int
    bytes: int
    slowest_s: float


@contextmanager
def scraper(url: str) -> Iterator[list[ScraperReport]]:
    """A separate process GETting ``url`` every :data:`SCRAPE_INTERVAL_S` (gzip, as Prometheus asks)
    for the ``with`` body, started and past its first scrape before the body runs; the list it
    yields gets its report when it stops."""
    stop_dir = tempfile.TemporaryDirectory(prefix="tidelog-scraper-")
    stop = Path(stop_dir.name) / "stop"  # the scraper stops before its next scrape once this exists
    process = subprocess.Popen([sys.executable, "-c", _SCRAPER, url, str(SCRAPE_INTERVAL_S), str(stop)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    report: list[ScraperReport] = []
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "scraping":
            raise RuntimeError(f"the scraper of {url} failed: {process.communicate(timeout=30)[1][-2000:]}")
        yield report
        stop.touch()
        out, err = process.communicate(timeout=60)
        fields = out.split()
        if process.returncode != 0 or len(fields) != 3:
            raise RuntimeError(f"the scraper of {url} failed (exit {process.returncode}): {err[-2000:]}")
        report.append(ScraperReport(int(fields[0]), int(fields[1]), float(fields[2])))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        stop_dir.cleanup()


# --- produce with and without a scraper --------------------------------------------------------------

def bench_metrics_scrape_produce(settings: Settings) -> list[Row]:
    # ~4 s / ~0.3 s a run here: long enough to hold a few renderings (one per 1-2 s) and average out the noise
    rounds, requests = settings.pick(*SCRAPE_ROUNDS), settings.pick(6_000, 400)
    background = settings.pick(1_000, 100)
    batches = lean_batches(seed=11)
    with scratch_dir(settings.work_dir / "metrics-scrape-produce") as root:
        serve = TidelogServe(root / "data", root / "serve.stderr",
                             {**BROKER_OVERRIDES, "metrics.listener": METRICS_LISTENER})
        serve.start()
        try:
            url = metrics_url(root / "data")
            _create_topics(serve.bootstrap_servers, {"background": background,
                                                     **{_topic(n, s): 1 for n in range(rounds + 1) for s in (0, 1)}})
            for scraped in (False, True):  # round 0: the warm-up, not counted
                _produce_run(serve.bootstrap_servers, url, _topic(0, int(scraped)), batches, requests, scraped)
            runs = _alternate(serve.bootstrap_servers, url, rounds, batches, requests)
            sample = scrape(url, gzip_ok=True)
            serve.stop()
        finally:
            serve.kill()
    return [_scrape_produce_row(runs, requests, background, sample)]


def _topic(number: int, scraped: int) -> str:
    return f"bench-scraped-{number}" if scraped else f"bench-quiet-{number}"


def _create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tidelog-bench", request_timeout_ms=120_000)
    try:
        admin.create_topics([NewTopic(topic, count, 1) for topic, count in partitions.items()], timeout_ms=120_000)
    finally:
        admin.close()


@dataclass(frozen=True, slots=True)
class ProduceRun:
    scraped: bool
    records_per_s: float
    seconds: float
    scraper: ScraperReport | None
    load: float | None


def _produce_run(bootstrap: str, url: str, topic: str, batches: Sequence[bytes], requests: int,
                 scraped: bool) -> ProduceRun:
    if not scraped:
        transfer = lean_produce(bootstrap, topic, batches, requests)
        return ProduceRun(False, transfer.records_per_s, transfer.seconds, None, load_average())
    with scraper(url) as report:
        transfer = lean_produce(bootstrap, topic, batches, requests)
    return ProduceRun(True, transfer.records_per_s, transfer.seconds, report[0], load_average())


def _alternate(bootstrap: str, url: str, rounds: int, batches: Sequence[bytes], requests: int) -> list[ProduceRun]:
    """Rounds 1..``rounds``: the scraped run first in odd rounds, the quiet one first in even ones."""
    runs = []
    for number in range(1, rounds + 1):
        for scraped in ((True, False) if number % 2 else (False, True)):
            runs.append(_produce_run(bootstrap, url, _topic(number, int(scraped)), batches, requests, scraped))
    return runs


def _scrape_produce_row(runs: Sequence[ProduceRun], requests: int, background: int, sample: Scrape) -> Row:
    scraped = [run for run in runs if run.scraped]
    quiet = [run for run in runs if not run.scraped]
    reports = [run.scraper for run in scraped if run.scraper is not None]
    records = requests * PF_BATCH_RECORDS
    details: dict[str, Any] = {
        "records_per_run": records, "background_partitions": background, "scrape_interval_s": SCRAPE_INTERVAL_S,
        "scraped_records_per_s": [run.records_per_s for run in scraped],
        "quiet_records_per_s": [run.records_per_s for run in quiet],
        "scraped_seconds": [run.seconds for run in scraped], "quiet_seconds": [run.seconds for run in quiet],
        "scrapes_per_run": [report.scrapes for report in reports],
        "slowest_scrape_s": max((report.slowest_s for report in reports), default=None),
        "scrape_bytes_gzip": sample.wire_bytes, "scrape_bytes": len(sample.text.encode()),
        "scrape_samples": _sample_count(sample.text), "load_average_1m": [run.load for run in runs],
    }
    label = (f"lean produce of {records:,} x 100 B while /metrics is scraped every {SCRAPE_INTERVAL_S * 1000:.0f} ms "
             f"({background:,} more partitions; median of {len(scraped)})")
    return Row("metrics_scrape_produce", label, median(details["scraped_records_per_s"]), "records/s",
               median(details["quiet_records_per_s"]), "same produce, same broker, no scraper (alternating)",
               Target("ratio", SCRAPE_RATIO_TARGET, f">= {SCRAPE_RATIO_TARGET}x without a scraper"), details)


def _sample_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


# --- one scrape of 10,000 partitions -------------------------------------------------------------------

def bench_metrics_scrape_10k(settings: Settings) -> list[Row]:
    count = settings.pick(10_000, 500)
    with scratch_dir(settings.work_dir / "metrics-scrape-10k") as root:
        log_dir = _populate(root, count)
        serve = TidelogServe(log_dir, root / "serve.stderr", {**PASS_OVERRIDES, "metrics.listener": METRICS_LISTENER})
        serve.start()
        try:
            url = metrics_url(log_dir)
            waited = _wait_for_passes(url, count)
            gzipped = [scrape(url, gzip_ok=True) for _ in range(settings.pick(*SCRAPES_10K))]
            plain = [scrape(url, gzip_ok=False) for _ in range(settings.pick(*SCRAPES_10K))]
            serve.stop()
        finally:
            serve.kill()
    library = [_library_seconds(plain[-1].text) for _ in range(settings.pick(*SCRAPES_10K))]
    return [_scrape_10k_row(count, waited, gzipped, plain, library)]


def _populate(root: Path, count: int) -> Path:
    """``count`` partitions, copies of one small partition: half in topic ``bench`` (delete policy),
    half in ``compacted`` (cleanup.policy=compact), adopted into the topic registry and their configs
    confirmed (all untimed)."""
    log_dir = root / "data"
    log_dir.mkdir()
    scheduler = ThreadScheduler(name="bench-metrics")
    try:
        template = _template_partition(root / "template-0", scheduler)
        names = [f"bench-{i}" for i in range(count - count // 2)] + [f"compacted-{i}" for i in range(count // 2)]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda name: _copy_partition(log_dir / name, template), names))
        manager = LogManager.open(BrokerConfig.from_properties({}), [log_dir], scheduler=scheduler)
        try:
            manager.alter_topic_config("compacted", {"cleanup.policy": "compact"})
            for topic in ("bench", "compacted"):  # adopted with default configs: confirmed, as an operator would
                manager.confirm_topic_configs(topic)
        finally:
            manager.shutdown()
    finally:
        scheduler.shutdown()
    return log_dir


def _wait_for_passes(url: str, count: int) -> float:
    """Seconds until a scrape shows a retention reason for every partition and a cleaner reason
    for every compacted one (the first passes ran); an error after :data:`PASSES_TIMEOUT_S`."""
    began = time.monotonic()
    wanted = {"tidelog_log_retention_reason": count, "tidelog_log_cleaner_reason": count // 2}
    while True:
        found = _series_counts(scrape(url, gzip_ok=True).text, wanted)
        if all(found[name] >= need for name, need in wanted.items()):
            return time.monotonic() - began
        if time.monotonic() - began > PASSES_TIMEOUT_S:
            raise RuntimeError(f"after {PASSES_TIMEOUT_S:.0f} s the scrape has {found} reason series, expected {wanted}")
        time.sleep(0.5)


def _series_counts(text: str, names: Sequence[str]) -> dict[str, int]:
    counts = dict.fromkeys(names, 0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in counts:
            counts[name] += 1
    return counts


def _library_seconds(text: str) -> float:
    """prometheus_client's ``generate_latest`` of the families parsed from ``text``, timed alone."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(text))

    class Replay:
        def collect(self) -> list[Any]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Replay())  # type: ignore[arg-type]
    began = time.perf_counter()
    generate_latest(registry)
    return time.perf_counter() - began


def _scrape_10k_row(count: int, waited: float, gzipped: Sequence[Scrape], plain: Sequence[Scrape],
                    library: Sequence[float]) -> Row:
    seconds = median([s.seconds for s in gzipped])
    details = {
        "partitions": count, "compacted_partitions": count // 2, "first_passes_waited_s": waited,
        "scrape_seconds_gzip": [s.seconds for s in gzipped], "scrape_seconds_plain": [s.seconds for s in plain],
        "median_scrape_s": seconds, "median_scrape_plain_s": median([s.seconds for s in plain]),
        "bytes_gzip": gzipped[-1].wire_bytes, "bytes_plain": plain[-1].wire_bytes,
        "samples": _sample_count(plain[-1].text), "generate_latest_seconds": list(library),
    }
    label = (f"one gzip scrape of {count:,} partitions: {seconds * 1000:.0f} ms median, "
             f"{gzipped[-1].wire_bytes / 1024:,.0f} KiB gzip / {plain[-1].wire_bytes / 1024:,.0f} KiB text, "
             f"{details['samples']:,} samples")
    return Row("metrics_scrape_10k", label, count / seconds, "partitions/s", count / median(library),
               "prometheus_client generate_latest of the same samples, in process",
               Target("at_least", SCRAPE_10K_TARGET, "10,000 partitions in < 1 s (>= 10,000/s)"), details)


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "metrics_scrape_produce": ("produce through tidelog serve with /metrics scraped every 100 ms vs without",
                               bench_metrics_scrape_produce),
    "metrics_scrape_10k": ("one /metrics scrape of tidelog serve holding 10,000 partitions", bench_metrics_scrape_10k),
}

