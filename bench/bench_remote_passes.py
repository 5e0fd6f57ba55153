"""Remote-tier passes over many tiered partitions: how many store requests each pass makes.

``remote_passes_10k``: issue 21's target "retention and copy passes over 10,000 tiered
partitions: one remote LIST per partition per pass at most". A LogManager holds one tiered topic
of 10,000 partitions (200 with ``--quick``), each with two sealed one-batch segments, on a
``file://`` store in the scratch dir (the request counts do not depend on the store; the times
are those of a local directory, whose every PUT is a write, two fsyncs and a rename). Every
store call goes through :class:`CountingStore`, and each pass is counted and timed alone:

1. ``copy_first``: the first copy pass of the process, which loads each partition's remote
   metadata (one LIST of its ``metadata/`` prefix) and copies the first segment (the high
   watermark holds the second back);
2. ``copy_steady``: the high watermark raised (untimed), the next copy pass copies the second
   segment on the cached metadata: no LIST;
3. ``retention_first``: the first ``LogManager.run_retention()``, over both tiers: remote
   retention (``retention.bytes`` is one segment, so the oldest remote segment of each partition
   goes: DELETEs and metadata PUTs), then local retention (``local.retention.bytes=1``: the local
   copies of copied segments go, no request). Its one LIST in all is the listing of pending
   partition deletions that the first retention of a process makes, not one per partition;
4. ``retention_steady``: the next ``run_retention()``, nothing left to delete: no request.

The cost of the cache: each partition's :class:`RemotePartitionMetadata` stays in memory (the
growth of the process's peak RSS over the first pass is in the details, per partition; an upper
bound, as the pass's own garbage counts too). The figure is the
partitions per LIST of the worst pass (target >= 1, that is at most one LIST per partition per
pass); the baseline is the steady copy pass's partitions per second (a rate, for the table).
Run alone: ``python -m bench.bench_remote_passes [--quick]``.
"""

from __future__ import annotations

import logging
import resource
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.bench_storage import Row, Settings, Target, scratch_dir

TOPIC = "bench"
PARTITIONS = (10_000, 200)  # full, quick


class CountingStore:
    """A :class:`~tidelog.remote.store.RemoteStore` that counts its calls by operation
    (``put``, ``put_file``, ``get``, ``get_range``, ``size``, ``list``, ``delete``,
    ``delete_prefix``) and delegates each to ``inner``. Thread-safe: the counter has a lock."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self) -> Counter[str]:
        """The counts since the last call, reset."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts

    def _count(self, operation: str) -> None:
        with self._lock:
            self.counts[operation] += 1

    def put(self, key: str, data: Any) -> None:
        self._count("put")
        self.inner.put(key, data)

    def put_file(self, key: str, path: Any, **kwargs: Any) -> None:
        self._count("put_file")
        self.inner.put_file(key, path, **kwargs)

    def get(self, key: str) -> bytes:
        self._count("get")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._count("get_range")
        return self.inner.get_range(key, start, length)

    def size(self, key: str) -> int:
        self._count("size")
        return self.inner.size(key)

    def list(self, prefix: str = "") -> list[Any]:
        self._count("list")
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self._count("delete")
        self.inner.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        self._count("delete_prefix")
        self.inner.delete_prefix(prefix)


def counted_manager(root: Path, partitions: int, **open_kwargs: Any) -> tuple[Any, CountingStore]:
    """A LogManager over ``root/data`` with the remote tier on ``root/store`` (file://) behind a
    :class:`CountingStore`, and one tiered topic of ``partitions`` partitions
    (``local.retention.bytes=1``, ``retention.bytes`` one segment), each holding two sealed
    one-batch segments and an empty active one, its high watermark at the second segment (so a
    copy pass copies one segment; :func:`release_second_segment` lets the next copy the other).

    The partitions are written as files before the manager opens them (a template partition
    copied into each dir): a log holds no file descriptor until it is written to, while 10,000
    active segments appended to would hold 3 each, past this machine's limit of 20,000. Counts
    start at zero."""
    from tidelog.manager import LogManager
    from tidelog.storage.config import BrokerConfig

    broker = BrokerConfig.from_properties({
        "log.dirs": str(root / "data"), "remote.log.storage.system.enable": "true",
        "remote.log.storage.uri": (root / "store").resolve().as_uri(),
        "remote.log.manager.task.interval.ms": "3600000"})
    template = _template(root / "template-0")
    creator = LogManager.open(broker, [root / "data"], **open_kwargs)
    try:
        creator.create_topic(TOPIC, partitions, {"remote.storage.enable": "true", "local.retention.bytes": "1",
                                                 "retention.bytes": str(_segment_bytes(template))})
        dirs = [lg.dir for _, lg in creator.logs(TOPIC)]
    finally:
        creator.shutdown()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda d: _fill(d, template), dirs))
    manager = LogManager.open(broker, [root / "data"], **open_kwargs)
    tier = manager.remote_tier
    store = CountingStore(tier.store)
    tier.store = tier.retention.store = store  # every remote request of the passes goes through it
    for _, lg in manager.logs(TOPIC):
        lg.update_high_watermark(lg.segments[1].base_offset)
    store.take()
    return manager, store


def _template(dir: Path) -> dict[str, bytes]:
    """The files of a partition with two sealed one-batch segments and an empty active one."""
    from tidelog.clock import SYSTEM_CLOCK
    from tidelog.records.builder import build_batch
    from tidelog.storage.log import Log

    log = Log.open(dir)
    for _ in range(2):
        log.append_as_leader(build_batch([(b"k", b"v" * 100)], timestamp=SYSTEM_CLOCK.milliseconds()), leader_epoch=0)
        log.roll()
    log.close()
    files = {p.name: p.read_bytes() for p in dir.iterdir() if p.is_file()}
    shutil.rmtree(dir)
    return files


def _segment_bytes(template: dict[str, bytes]) -> int:
    return len(template[f"{0:020d}.log"])


def _fill(dir: Path, template: dict[str, bytes]) -> None:
    for name, data in template.items():
        (dir / name).write_bytes(data)


def release_second_segment(manager: Any) -> None:
    """Raise every partition's high watermark to its log end: its second sealed segment becomes
    copyable. No file is opened."""
    for _, lg in manager.logs(TOPIC):
        lg.update_high_watermark(lg.log_end_offset)


def run_passes(manager: Any, store: CountingStore) -> dict[str, dict[str, Any]]:
    """The four passes of the module doc, each counted and timed alone (the sealing before the
    steady copy pass is neither)."""
    tier = manager.remote_tier
    passes: list[tuple[str, Callable[[], object]]] = [
        ("copy_first", tier.copy_pass),
        ("copy_steady", tier.copy_pass),
        ("retention_first", manager.run_retention),
        ("retention_steady", manager.run_retention),
    ]
    results: dict[str, dict[str, Any]] = {}
    for name, action in passes:
        if name == "copy_steady":  # the second sealed segment becomes copyable, untimed and uncounted
            release_second_segment(manager)
            store.take()
        rss = _rss_bytes()
        began = time.perf_counter()
        action()
        seconds = time.perf_counter() - began
        results[name] = {"seconds": seconds, "requests": dict(store.take()), "rss_growth_bytes": _rss_bytes() - rss}
    return results


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB; the peak, which only grows


def bench_remote_passes(settings: Settings) -> list[Row]:
    logging.getLogger("tidelog").setLevel(logging.ERROR)
    count = settings.pick(*PARTITIONS)
    with scratch_dir(settings.work_dir / "remote-passes") as root:
        began = time.perf_counter()
        manager, store = counted_manager(root, count)
        setup = time.perf_counter() - began
        try:
            results = run_passes(manager, store)
        finally:
            manager.shutdown()
    lists = {name: r["requests"].get("list", 0) for name, r in results.items()}
    per_partition = {name: {op: round(n / count, 3) for op, n in r["requests"].items()} for name, r in results.items()}
    worst = max(lists.values())
    steady = results["copy_steady"]["seconds"]
    details = {"partitions": count, "store": "file:// (scratch dir)", "lists_per_pass": lists,
               "requests_per_partition_per_pass": per_partition,
               "seconds_per_pass": {name: round(r["seconds"], 3) for name, r in results.items()},
               "seconds_per_pass_for_10k": {name: round(r["seconds"] * 10_000 / count, 1) for name, r in results.items()},
               "peak_rss_growth_bytes_per_partition_first_pass": round(results["copy_first"]["rss_growth_bytes"] / count),
               "setup_seconds": round(setup, 1)}
    label = (f"store LISTs over {count:,} tiered partitions (file:// store): first copy pass {lists['copy_first']}, "
             f"steady copy {lists['copy_steady']}, first retention (both tiers) {lists['retention_first']}, steady "
             f"retention {lists['retention_steady']}; partitions per LIST of the worst pass")
    return [Row("remote_passes_10k", label, count / max(worst, 1), "partitions/LIST", count / steady,
                "partitions/s of the steady copy pass (one segment each)",
                Target("at_least", 1.0, "<= 1 LIST per partition per pass"), details)]


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "remote_passes_10k": ("store requests (LIST above all) of copy and retention passes over 10,000 tiered "
                          "partitions, counted per pass", bench_remote_passes),
}


if __name__ == "__main__":
    import json
    import sys

    work = Path("bench/.work")
    work.mkdir(parents=True, exist_ok=True)
    for row in bench_remote_passes(Settings(work, quick="--quick" in sys.argv)):
        print(f"{row.benchmark}: {row.figure:.2f} {row.unit} | baseline {row.baseline:.1f} | {row.label}")
        print(json.dumps(row.details, indent=2))
