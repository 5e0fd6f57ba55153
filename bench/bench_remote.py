"""Remote-tier benchmarks against a real S3 server (SeaweedFS on loopback, ``object_store_oracle``).

``remote_upload``: issue 21's target "upload throughput >= 0.8x of a raw PUT of the same bytes to
the same store". One sealed segment (128 MiB; 16 MiB with ``--quick``) is uploaded by
:func:`tidelog.remote.copy.copy_segment` (its whole file set, the metadata events before and
after) and, as the baselines, its ``.log`` by ``RemoteStore.put_file`` and by a plain pyarrow
``open_output_stream`` write in the same 8 MiB chunks. Each round runs the three in alternating
order after one warm-up (SeaweedFS's first write to a new bucket costs seconds); figures are
medians in MiB/s of the ``.log``'s bytes. Needs weed (``make weed``); without it the row says
"skipped". Run alone: ``python -m bench.bench_remote [--quick]``.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_storage import Row, Settings, Target, alternate, scratch_dir, seconds_of

MIB = 1 << 20
SEGMENT_MIB = (128, 16)  # full, quick
ROUNDS = (5, 1)


@contextmanager
def weed_server(root: Path) -> Iterator[Any]:
    """A SeaweedFS S3 server under ``root``, stopped on exit; ``WeedToolMissing`` without weed."""
    from object_store_oracle import WeedS3Server

    server = WeedS3Server(root / "weed")
    server.start()
    try:
        yield server
    finally:
        server.stop(timeout_s=5.0)


def bench_bucket(server: Any) -> tuple[Any, dict[str, str]]:
    """A pyarrow S3 filesystem on ``server`` and its store options (``rsm.config.*`` names without
    the prefix), bucket ``bench`` created (pyarrow creates buckets only when allowed to)."""
    import pyarrow.fs as pafs

    c = server.credentials
    fs = pafs.S3FileSystem(access_key=c.access_key, secret_key=c.secret_key, region=c.region, scheme="http",
                           endpoint_override=c.endpoint_url.removeprefix("http://"), allow_bucket_creation=True)
    fs.create_dir("bench")
    return fs, {"endpoint.url": c.endpoint_url, "access.key": c.access_key, "secret.key": c.secret_key,
                "region": c.region}


def tier_overrides(server: Any) -> dict[str, str]:
    """A broker's overrides tiering to ``s3://bench/tier`` on ``server`` (copy passes only when asked)."""
    return {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": "s3://bench/tier",
            **{f"rsm.config.{key}": value for key, value in bench_bucket(server)[1].items()},
            "remote.log.manager.task.interval.ms": "3600000"}


def skipped_row(name: str, missing: Exception) -> Row:
    """The row of a remote benchmark that cannot run here (no weed)."""
    return Row(name, f"skipped: {missing}", 0.0, "MiB/s", details={"skipped": str(missing)})


def timed_rounds(runs: list[tuple[str, Callable[[], None]]], rounds: int) -> dict[str, list[float]]:
    """Each named action run once to warm up, then timed ``rounds`` times, the actions in turn
    (:func:`~bench.bench_storage.alternate`) so a change in the machine's state hits all alike.
    Returns each name's seconds."""
    for _, action in runs:
        action()
    samples = alternate(rounds, *(lambda _, action=action: seconds_of(action) for _, action in runs))
    return {name: own for (name, _), own in zip(runs, samples)}


def bench_remote_upload(settings: Settings) -> list[Row]:
    from object_store_oracle import WeedToolMissing

    with scratch_dir(settings.work_dir / "remote-upload") as root:
        try:
            with weed_server(root) as server:
                times, size = _measure(server, root, settings.pick(*SEGMENT_MIB) * MIB, settings.pick(*ROUNDS))
        except WeedToolMissing as missing:
            return [skipped_row("remote_upload", missing)]
    rate = {name: size / statistics.median(ts) / MIB for name, ts in times.items()}
    details = {"segment_bytes": size, **{f"{name}_seconds": [round(t, 3) for t in ts] for name, ts in times.items()},
               "open_output_stream_mib_s": round(rate["open_output_stream"], 1)}
    label = (f"copy_segment of a {size / MIB:.0f} MiB segment (every object + metadata) to SeaweedFS S3, "
             f"MiB/s of its .log")
    return [Row("remote_upload", label, rate["copy_segment"], "MiB/s", rate["put_file"],
                "MiB/s of RemoteStore.put_file of the same .log to the same store",
                Target("ratio", 0.8, ">= 0.8x of a raw PUT of the same bytes"), details)]


def _measure(server: Any, root: Path, segment_bytes: int, rounds: int) -> tuple[dict[str, list[float]], int]:
    from tidelog.remote.copy import copy_segment
    from tidelog.remote.metadata import TopicIdPartition
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    from tidelog.remote.store import CHUNK_BYTES, ArrowRemoteStore
    from tidelog.storage import files
    from tidelog.storage.metadata import new_topic_id
    from tidelog.topic_partition import TopicPartition

    fs, options = bench_bucket(server)
    store = ArrowRemoteStore("s3://bench/tier", options)
    log = _sealed_segment(root / "orders-0", segment_bytes)
    segment, next_base = log.segments[0], log.segments[1].base_offset
    path = files.log_file(log.dir, segment.base_offset)

    def copy() -> None:
        tip = TopicIdPartition(new_topic_id(), TopicPartition("orders", 0))
        copy_segment(store, RemotePartitionMetadata.load(store, tip), segment, next_base, dir=log.dir,
                     epochs=log.leader_epoch_cache.entries)

    def put_file() -> None:
        store.put_file(f"raw/{new_topic_id()}.log", path)

    def stream() -> None:
        with open(path, "rb") as source, fs.open_output_stream(f"bench/stream/{new_topic_id()}.log") as out:
            while chunk := source.read(CHUNK_BYTES):
                out.write(chunk)

    runs: list[tuple[str, Callable[[], None]]] = [("copy_segment", copy), ("put_file", put_file),
                                                  ("open_output_stream", stream)]
    times = timed_rounds(runs, rounds)
    size = path.stat().st_size
    log.close()
    return times, size


def _sealed_segment(dir: Path, segment_bytes: int) -> Any:
    """A log whose first segment holds ``segment_bytes`` of 64 KiB incompressible records, sealed."""
    from tidelog.records import BatchBuilder
    from tidelog.storage.log import Log
    from tidelog.storage.log_config import LogConfig

    config = LogConfig.defaults().with_overrides({"segment.bytes": 1 << 30, "max.message.bytes": 4 * MIB})
    log = Log.open(dir, config)
    payload = os.urandom(MIB)
    while log.active_segment.size < segment_bytes:
        builder = BatchBuilder(base_offset=0)
        for i in range(16):
            builder.append(i, 1_700_000_000_000, None, payload[i * 65536:(i + 1) * 65536])
        log.append_as_leader(builder.build(), leader_epoch=0)
    log.roll()
    return log


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "remote_upload": ("copy_segment of a sealed segment to a SeaweedFS S3 server vs RemoteStore.put_file of its .log",
                      bench_remote_upload),
}


if __name__ == "__main__":
    import sys

    quick = "--quick" in sys.argv
    work = Path(sys.argv[sys.argv.index("--work-dir") + 1]) if "--work-dir" in sys.argv else Path("bench/.work")
    work.mkdir(parents=True, exist_ok=True)
    for name in [a for a in sys.argv[1:] if a in BENCHMARKS] or list(BENCHMARKS):
        for row in BENCHMARKS[name][1](Settings(work, quick=quick)):
            print(f"{row.benchmark}: {row.figure:.1f} {row.unit} | ratio {row.ratio} | {row.label} | {row.details}")
