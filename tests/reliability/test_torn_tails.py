"""Torn writes and zeroed tails in a data dir that ``tidelog serve`` left behind when SIGKILLed.

One real broker (kafka-python load over the crash harness's topics: preallocated and fsync-per-
message, page cache only, compacted with the cleaner running) is killed once; each case copies
its data dir and damages it as a crash of the machine could: a ``.log`` cut at a random byte, a
``.log`` whose tail is zeros at its full size (delayed allocation: the size reached the disk, the
data did not), random bytes from a position on, and index files whose tail is zeroed. Damage lands
only where recovery looks (segments at or after the partition's recovery point: what was
fsynced is not torn by a crash). Opening the copy must keep every complete, unchanged batch before
the damage and nothing after it (later segments of that partition go), rebuild the indexes so that
``verify`` passes after a clean shutdown, and take appends again.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from reliability.broker import ServeProcess
from reliability.ledger import Ledger
from reliability.workload import Clients, Workload
from tidelog.manager import LogManager
from tidelog.records import build_batch
from tidelog.storage import files
from tidelog.storage.checkpoints import RECOVERY_POINT_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.storage.config import BrokerConfig
from tidelog.storage.verify import verify_log_file, verify_paths
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

CASES = 16
MODES = ("cut", "zeros", "garbage", "index-zeros")


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir of a broker SIGKILLed under load, with no cleaner temp files left in it."""
    work = tmp_path_factory.mktemp("torn")
    broker = ServeProcess(work / "data")
    broker.start()
    try:
        ledger = Ledger()
        workload = Workload(ledger, lambda: broker.running)
        clients = Clients.connect(broker.bootstrap)
        workload.create_topics(clients)
        clients.close()
        clients = Clients.connect(broker.bootstrap)
        rng = random.Random(8)
        for _ in range(40):
            workload.produce(clients, rng, "fill")
            workload.overwrite(clients, rng, "fill")
        clients.close()
        assert ledger.acknowledged_count > 500
        deadline = time.monotonic() + 20
        while _temporary_files(work / "data") and time.monotonic() < deadline:
            time.sleep(0.01)
        broker.kill()
    finally:
        broker.kill()
    assert not _temporary_files(work / "data"), "a clean was caught mid-swap; its crash points are tested elsewhere"
    return work / "data"


def _temporary_files(data: Path) -> list[Path]:
    return [p for p in data.rglob("*") if p.name.endswith(files.TEMPORARY_SUFFIXES)]


@dataclass(frozen=True, slots=True)
class Batch:
    position: int
    size: int
    base: int
    last: int


def segment_batches(log_path: Path) -> list[Batch]:
    summary = verify_log_file(log_path, [])
    ends = sorted(summary.batch_starts) + [summary.valid_bytes]
    return [Batch(p, ends[i + 1] - p, *summary.batch_starts[p]) for i, p in enumerate(ends[:-1])]


def partition_batches(dir: Path) -> dict[int, list[Batch]]:
    """Batches of every segment of a partition dir, by segment base offset."""
    return {files.offset_from_file_name(p.name): segment_batches(p) for p in sorted(dir.glob("*.log"))}


def damage(dir: Path, recovery_point: int, rng: random.Random, mode: str) -> list[tuple[int, int]]:
    """Damage one segment recovery will look at; return the (base, last) offsets of the batches
    recovery must keep in ``dir``."""
    segments = partition_batches(dir)
    bases = sorted(segments)
    floor = max([b for b in bases if b <= recovery_point], default=bases[0])
    base = rng.choice([b for b in bases if b >= floor])
    log_path = files.log_file(dir, base)
    original = log_path.read_bytes()
    if mode == "index-zeros":
        for index in (files.offset_index_file(dir, base), files.time_index_file(dir, base)):
            if index.exists() and index.stat().st_size:
                data = index.read_bytes()
                cut = rng.randrange(len(data))
                index.write_bytes(data[:cut] + bytes(len(data) - cut))
        damaged = original
    else:
        valid = sum(b.size for b in segments[base])
        position = rng.randint(0, max(valid - 1, 0))
        tail = len(original) - position
        damaged = original[:position] + {
            "cut": b"",
            "zeros": bytes(tail),
            "garbage": bytes(rng.randrange(256) for _ in range(tail)),
        }[mode]
        log_path.write_bytes(damaged)
    kept: list[tuple[int, int]] = []
    for b in bases:
        intact = [x for x in segments[b]
                  if b != base or damaged[x.position:x.position + x.size] == original[x.position:x.position + x.size]]
        if b == base:
            intact = intact[:next((i for i, x in enumerate(intact) if x != segments[b][i]), len(intact))]
            kept += [(x.base, x.last) for x in intact]
            if len(intact) < len(segments[b]):
                return kept  # recovery truncates here and drops every later segment
        else:
            kept += [(x.base, x.last) for x in intact]
    return kept


def open_manager(data: Path) -> LogManager:
    broker = BrokerConfig.from_properties({"log.dirs": str(data), "log.cleaner.enable": "false"})
    return LogManager.open(broker, scheduler=FakeScheduler(FakeClock()))


@pytest.mark.parametrize("case", range(CASES))
def test_recovery_keeps_exactly_the_intact_batches_before_a_torn_or_zeroed_tail(
    crashed: Path, tmp_path: Path, case: int
) -> None:
    rng = random.Random(case)
    data = tmp_path / "data"
    shutil.copytree(crashed, data)
    recovery_points = {tp.topic + "-" + str(tp.partition): offset for tp, offset in
                       OffsetCheckpointFile(data / RECOVERY_POINT_CHECKPOINT_FILE).read().items()}
    dirs = sorted(p for p in data.iterdir() if p.is_dir() and any(p.glob("*.log")))
    expected = {}
    for dir in rng.sample(dirs, 3):
        mode = MODES[(case + len(expected)) % len(MODES)]
        expected[dir.name] = (mode, damage(dir, recovery_points.get(dir.name, 0), rng, mode))

    manager = open_manager(data)
    manager.shutdown()
    report = verify_paths([data])
    assert report.ok, [str(p) for p in report.problems]
    for name, (mode, kept) in expected.items():
        found = [(b.base, b.last) for segment in partition_batches(data / name).values() for b in segment]
        assert found == kept, f"{name} after {mode}"

    manager = open_manager(data)
    try:
        for name in expected:
            topic, _, partition = name.rpartition("-")
            log = manager.log(TopicPartition(topic, int(partition)))
            end = log.log_end_offset
            info = log.append_as_leader(build_batch([(b"k", b"after the crash")], timestamp=int(time.time() * 1000)))
            assert info.first_offset == end
    finally:
        manager.shutdown()
    assert verify_paths([data]).ok
