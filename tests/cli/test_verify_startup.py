"""``tidelog verify DATA_DIR`` checks every file the broker reads at start-up, not just the
segments, and says for each finding what ``tidelog serve`` will do with it; exit 1 on a problem,
the same in ``--json``.

Each case damages one file of a healthy data dir (a topic of several segments written by the
LogManager, stopped cleanly) the way the broker's start-up would act on, and checks the finding
and its action; the same dir untouched verifies OK.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.manager.topic_copies import TOPIC_COPY_FILE
from tidelog.manager.topics import REGISTRY_FILE
from tidelog.records import BatchBuilder
from tidelog.storage import files
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

BATCHES = 8


def build(data: Path, **configs: str) -> None:
    """Topic ``t``: 8 batches of 3 records in 300-byte segments, and an idempotent producer's
    batch so the clean shutdown leaves a producer snapshot."""
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("t", 1, {"segment.bytes": "300", **configs})
        for b in range(BATCHES):
            producer = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 3 * b}
            builder = BatchBuilder(**producer)
            for i in range(3):
                builder.append(i, 1_700_000_000_000, b"k%d-%d" % (b, i), b"v")
            manager.append(TopicPartition("t", 0), builder.build())


def verify(data: Path) -> tuple[int, dict]:
    code, out, err = run_cli(data, "verify", "--json", str(data))
    return code, json.loads(out)


def startup(report: dict, file: str) -> list[dict]:
    return [f for f in report["startup"] if Path(f["file"]).name == file]


def segment_names(data: Path) -> list[str]:
    return sorted(p.name for p in (data / "t-0").glob("*.log"))


def write_checkpoint(path: Path, offset: int) -> None:
    path.write_text(f"0\n1\nt 0 {offset}\n")


def test_a_healthy_dir_verifies_ok(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    assert len(segment_names(data)) > 2 and list((data / "t-0").glob("*.snapshot"))
    code, report = verify(data)
    assert (code, report["ok"], report["startup"]) == (0, True, [])
    code, out, _ = run_cli(data, "verify", str(data))
    assert code == 0 and out.decode().startswith("OK:")


# (file damaged, damage, words of the finding, words of what serve does)
Case = tuple[str, Callable[[Path], None], str, str]
CASES: dict[str, Case] = {
    "registry-cut": (REGISTRY_FILE, lambda d: (d / REGISTRY_FILE).write_bytes((d / REGISTRY_FILE).read_bytes()[:40]),
                     "unreadable (epoch", "kept aside as tidelog-topics.json.damaged"),
    "registry-missing": (REGISTRY_FILE, lambda d: (d / REGISTRY_FILE).unlink(), "missing",
                         "rebuilds it from the other log dirs' copies and from the topic copies"),
    "epoch-garbage": ("leader-epoch-checkpoint",
                      lambda d: (d / "t-0" / "leader-epoch-checkpoint").write_bytes(b"garbage\n\x00"),
                      "unreadable", "sets the partition aside"),
    "log-start-beyond-end": ("log-start-offset-checkpoint",
                             lambda d: write_checkpoint(d / "log-start-offset-checkpoint", 1000),
                             "log start offset 1000 is past the log end 24",
                             "deletes every segment of t-0 and restarts it empty at offset 1000"),
    "log-start-garbage": ("log-start-offset-checkpoint",
                          lambda d: (d / "log-start-offset-checkpoint").write_text("zz"),
                          "unreadable", "records removed by DeleteRecords above it are served again"),
    "recovery-point-beyond-end": ("recovery-point-offset-checkpoint",
                                  lambda d: write_checkpoint(d / "recovery-point-offset-checkpoint", 30),
                                  "records [24, 30) that were flushed are gone", "carries on from the log end 24"),
    "high-watermark-beyond-end": ("replication-offset-checkpoint",
                                  lambda d: write_checkpoint(d / "replication-offset-checkpoint", 30),
                                  "acknowledged records [24, 30) are gone", "high watermark to the log end 24"),
    "cleaner-offset-beyond-end": ("cleaner-offset-checkpoint",
                                  lambda d: write_checkpoint(d / "cleaner-offset-checkpoint", 99),
                                  "cleaner offset 99 is outside the log", "cleans t-0 again"),
    "snapshot-garbage": (".snapshot", lambda d: [p.write_bytes(b"junk") for p in (d / "t-0").glob("*.snapshot")],
                         "unreadable producer snapshot", "rebuilds the producer state from the segments"),
    "partition-metadata-garbage": ("partition.metadata", lambda d: (d / "t-0" / "partition.metadata").write_text("x"),
                                   "unreadable", "rewrites it with the registry's topic id"),
    "topic-copy-garbage": (TOPIC_COPY_FILE, lambda d: (d / "t-0" / TOPIC_COPY_FILE).write_text("{"),
                           "unreadable", "rewrites it from the registry"),
}


@pytest.mark.parametrize("case", CASES)
def test_verify_reports_what_serve_will_do(tmp_path: Path, case: str) -> None:
    data = tmp_path / "data"
    build(data)
    file, damage, message, action = CASES[case]
    damage(data)
    code, report = verify(data)
    found = [f for f in report["startup"] if Path(f["file"]).name.endswith(file)]
    assert code == 1 and not report["ok"], report
    assert len(found) >= 1 and message in found[0]["message"] and action in found[0]["broker_action"], found
    assert found[0]["problem"]
    code, out, _ = run_cli(data, "verify", str(data))
    assert code == 1 and "serve: " in out.decode() and "problem(s)" in out.decode()


def test_verify_reports_the_offset_hole_of_a_deleted_middle_segment(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    middle = segment_names(data)[1]
    base = files.offset_from_file_name(middle)
    for path in (data / "t-0").glob(middle.split(".")[0] + ".*"):
        path.unlink()
    code, report = verify(data)
    [hole] = [f for f in report["startup"] if "missing before this segment" in f["message"]]
    assert code == 1 and f"offsets [{base}, " in hole["message"]
    assert "consumers skip offsets" in hole["broker_action"]


def test_a_compacted_topic_s_gaps_between_segments_are_not_holes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data, **{"cleanup.policy": "compact"})
    middle = segment_names(data)[1]
    for path in (data / "t-0").glob(middle.split(".")[0] + ".*"):  # as if the cleaner had emptied it
        path.unlink()
    code, report = verify(data)
    assert code == 0 and report["startup"] == []


def test_a_topic_held_for_unconfirmed_configs_is_reported(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    (data / REGISTRY_FILE).unlink()
    (data / "t-0" / TOPIC_COPY_FILE).unlink()
    with LogManager.open(BrokerConfig.from_properties({}), [data]):
        pass  # adopted with the defaults, held
    code, report = verify(data)
    [held] = startup(report, REGISTRY_FILE)
    assert code == 1 and "configs unconfirmed for topic(s) t" in held["message"]
    assert "tidelog topics confirm-configs" in held["broker_action"]


def test_verify_reports_what_reconciliation_with_the_registry_will_do(tmp_path: Path) -> None:
    """A dir whose name is not a partition's, a partition past its topic's count, a registered
    partition whose dir is missing (an interrupted create) and a leftover cleaner swap."""
    data = tmp_path / "data"
    build(data)
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("grown", 2)
    (data / "no_partition_number").mkdir()
    (data / "grown-1").rename(data / "t-5")  # t has 1 partition
    (data / "t-0" / "00000000000000000099.log.swap").write_bytes(b"")
    code, report = verify(data)
    found = {Path(f["file"]).name: f for f in report["startup"]}
    assert code == 1
    assert "sets it aside" in found["no_partition_number"]["broker_action"]
    assert "stray" in found["t-5"]["broker_action"] and found["t-5"]["problem"]
    assert "creates it empty" in found["grown-1"]["broker_action"]
    assert "completes the cleaner's swap" in found["00000000000000000099.log.swap"]["broker_action"]
    assert not found["00000000000000000099.log.swap"]["problem"]
