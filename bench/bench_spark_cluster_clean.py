"""Compaction of a tiered compacted topic on the two-worker standalone cluster vs the in-process
cleaner on local segments of the same bytes.

``spark_cluster_remote_clean``: issue 22's performance item "compaction of a remote compacted topic
of >= 1 GB on the cluster vs the in-process cleaner on local segments of the same bytes: report
both and where the cluster's time goes". One partition of ``RECORDS`` records (16-byte keys over a
quarter as many distinct keys, 100-byte values) is written twice: to a tiered compacted topic whose
sealed segments are copied to the S3 server (SeaweedFS on loopback) and freed locally, and to a
plain compacted topic. ``tidelog clean run --force``'s path (``LogCleaner.clean_now``) cleans the
first with the Spark engine on the cluster (executors cannot see the data dir) and the second
in process. Figures are MB/s of log cleaned (bytes before the clean / seconds of the pass), one
pass each (a pass rewrites the remote tier: it cannot be repeated on the same input). Details say
where the cluster's pass went: ``list`` (the partition's remote metadata loaded from the store:
a LIST and GETs), ``walk`` (the executors' header walk: every remote segment read once),
``job`` (key scan, shuffle, rewrite and upload in one Spark job; ``rewrite`` and ``upload`` sum
the executors' group times inside it), ``local_scan`` and ``local_rewrite`` (the local tier, in
the owner's process), and ``owner`` (the rest: planning, reservations, the fence, the swap).
Informational (no target). Sizes: ``RECORDS`` (about 1.1 GB of log), 40 k with ``--quick``.
Skipped, saying why, without weed (``make weed``) or Java. Run alone:
``python -m bench.bench_spark_cluster_clean [--quick]``; do not measure while the machine is shared.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_remote import weed_server
from bench.bench_spark_cluster import _cluster, _Missing, _store_options
from bench.bench_storage import Row, Settings, scratch_dir

RECORDS = (8_000_000, 40_000)  # full (~1.1 GB of log), quick
SEGMENT_BYTES = (128 << 20, 256 << 10)
RECORDS_PER_BATCH = 500
KEY_SPACE = 4  # distinct keys = records / KEY_SPACE
VALUE_BYTES = 100
ROW = "spark_cluster_remote_clean"


def bench_spark_cluster_remote_clean(settings: Settings) -> list[Row]:
    from object_store_oracle import WeedToolMissing

    records = settings.pick(*RECORDS)
    segment_bytes = settings.pick(*SEGMENT_BYTES)
    with scratch_dir(settings.work_dir / "spark-cluster-clean") as root:
        try:
            with weed_server(root) as server:
                options = _store_options(server)
                tiered, plain = root / "tiered", root / "plain"
                _fill(tiered, options, records, segment_bytes)
                _fill(plain, {}, records, segment_bytes)
                with _cluster(root, hidden=tiered) as cluster:
                    spark = cluster.session("tidelog bench cluster clean")
                    spark.sparkContext.setLogLevel("ERROR")
                    cluster_run = _clean_on_cluster(tiered, options, cluster.master_url)
                local_run = _clean_in_process(plain)
        except (WeedToolMissing, _Missing) as missing:
            return [Row(ROW, f"skipped: {missing}", 0.0, "MB/s", details={"skipped": str(missing)})]
    if cluster_run["kept"] != local_run["kept"]:
        raise RuntimeError(f"{ROW}: the cluster kept {cluster_run['kept']} records, in process {local_run['kept']}")
    figure = cluster_run["bytes"] / cluster_run["seconds"] / 1e6
    baseline = local_run["bytes"] / local_run["seconds"] / 1e6
    label = f"clean of a tiered compacted topic on a 2-worker cluster (S3 tier), {records:,} records"
    return [Row(ROW, label, figure, "MB/s", baseline, "in-process cleaner on local segments of the same bytes",
                None, {"records": records, "cluster": cluster_run, "in_process": local_run})]


def _fill(data: Path, options: dict[str, str], records: int, segment_bytes: int) -> None:
    """Topic ``t`` (1 partition, compacted): ``records`` records; with ``options`` (a remote tier)
    every sealed segment but the last batch of updates copied and freed locally."""
    from tidelog.manager import LogManager
    from tidelog.records.builder import build_batch
    from tidelog.storage.config import BrokerConfig
    from tidelog.topic_partition import TopicPartition

    tiered = bool(options)
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data), **options}))
    try:
        config = {"segment.bytes": str(segment_bytes), "cleanup.policy": "compact"}
        if tiered:
            config.update({"remote.storage.enable": "true", "local.retention.bytes": "1"})
        manager.create_topic("t", 1, config)
        tp = TopicPartition("t", 0)
        value = b"v" * VALUE_BYTES
        keys = max(1, records // KEY_SPACE)
        stamp = 1_767_225_600_000
        old = records - records // 10
        for first in range(0, records, RECORDS_PER_BATCH):
            count = min(RECORDS_PER_BATCH, records - first)
            manager.append(tp, build_batch([(b"k%015d" % ((first + i) % keys), value) for i in range(count)],
                                           timestamp=stamp))
            if tiered and first + count >= old > first:  # the first 90% only remote, the rest local
                manager.log(tp).roll()
                manager.remote_tier.copy_pass()  # type: ignore[union-attr]
                manager.run_retention()
        manager.log(tp).roll()
    finally:
        manager.shutdown()


@contextmanager
def _spark_timings() -> Iterator[list[Any]]:
    """The tiered engines the passes use (their ``timings``)."""
    from tidelog.spark.compaction import SparkCleaningEngine

    engines: list[Any] = []
    original = SparkCleaningEngine.for_tiered_pass

    def keep(self: Any, tier: Any) -> Any:
        engines.append(original(self, tier))
        return engines[-1]

    SparkCleaningEngine.for_tiered_pass = keep  # type: ignore[method-assign]
    try:
        yield engines
    finally:
        SparkCleaningEngine.for_tiered_pass = original  # type: ignore[method-assign]


def _clean_on_cluster(data: Path, options: dict[str, str], master: str) -> dict[str, Any]:
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    from tidelog.spark.engine import CLEANER_ENGINES

    def list_metadata(manager: Any) -> dict[str, float]:
        store = manager.remote_tier.store
        tip = next(iter(_tips(store)))
        began = time.perf_counter()
        metadata = RemotePartitionMetadata.load(store, tip)
        return {"list": time.perf_counter() - began, "remote_bytes": metadata.total_size()}

    with _spark_timings() as engines:
        run = _clean(data, options, lambda cleaner: cleaner.use_engine("spark", master=master), CLEANER_ENGINES,
                     list_metadata)
    timings = {k: round(v, 3) for e in engines for k, v in e.timings.items()}
    inside = sum(timings.get(k, 0.0) for k in ("walk", "job", "local_scan", "local_rewrite"))
    extra = run.pop("extra")
    run["bytes"] += extra["remote_bytes"]
    run["where"] = {"list": round(extra["list"], 3), **timings,
                    "owner": round(max(run["seconds"] - inside, 0.0), 3)}
    return run


def _clean_in_process(data: Path) -> dict[str, Any]:
    run = _clean(data, {}, lambda cleaner: None, {}, lambda manager: {})
    run.pop("extra")
    return run


def _clean(data: Path, options: dict[str, str], choose: Callable[[Any], None], engines: Any,
           extra: Callable[[Any], dict[str, float]]) -> dict[str, Any]:
    """One forced clean of ``t-0`` (the cleaner's threads not started): the local bytes before,
    seconds, records kept, and ``extra(manager)``'s figures (the remote tier's)."""
    from tidelog.manager import LogManager
    from tidelog.storage.config import BrokerConfig
    from tidelog.topic_partition import TopicPartition

    tp = TopicPartition("t", 0)
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data), **options}), cleaner_engines=engines)
    try:
        size = sum(s.size for s in manager.log(tp).segments)
        figure = extra(manager)
        cleaner = manager.cleaner
        assert cleaner is not None
        choose(cleaner)
        began = time.perf_counter()
        result = cleaner.clean_now(tp, force=True)
        seconds = time.perf_counter() - began
        if result is None or result.error is not None or result.stats is None:
            raise RuntimeError(f"{ROW}: the clean of {data} did not run: {result}")
        return {"bytes": size, "seconds": round(seconds, 3), "kept": result.stats.messages_written, "extra": figure}
    finally:
        manager.shutdown()


def _tips(store: Any) -> set[Any]:
    from tidelog.remote.metadata import TopicIdPartition
    from tidelog.topic_partition import TopicPartition

    found = set()
    for info in store.list():
        top, partition, *_ = info.key.split("/")  # <topic>-<topic id>: an id may hold "-" too
        found.add(TopicIdPartition(top.removeprefix("t-"), TopicPartition("t", int(partition))))
    return found


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    ROW: ("Spark on a 2-worker cluster: compaction of a tiered topic's S3 tier vs the in-process cleaner",
          bench_spark_cluster_remote_clean),
}


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    work = Path(sys.argv[sys.argv.index("--work-dir") + 1]) if "--work-dir" in sys.argv else Path("bench/.work")
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for row in bench_spark_cluster_remote_clean(Settings(work, quick=quick)):
        print(f"{row.benchmark}: {row.figure:,.2f} {row.unit} | ratio {row.ratio} | {row.label} | {row.details}")
