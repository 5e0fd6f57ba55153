"""What :func:`check_startup_files` (``tidelog verify``) says the broker will do is what the
LogManager's start-up then does: each case damages one file of a stopped dir, takes the finding,
opens the manager and checks the effect named in the finding."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from manager_helpers import Opener, batch, tp

from tidelog.manager import LogManager
from tidelog.manager.startup_check import Finding, check_startup_files
from tidelog.manager.topics import REGISTRY_FILE
from tidelog.storage.verify import verify_paths

SEGMENT_BYTES = {"segment.bytes": "300"}


def fill(broker: Opener, dirs: list[Path]) -> Path:
    manager = broker.open(dirs)
    manager.create_topic("t", 1, {**SEGMENT_BYTES, "retention.ms": "-1"})
    for _ in range(8):
        manager.append(tp("t"), batch(3))
    manager.shutdown()
    return dirs[0]


def findings(root: Path) -> list[Finding]:
    return check_startup_files([root], verify_paths([root]).segments)


def log_start_beyond_end(root: Path, manager: LogManager) -> None:
    lg = manager.log(tp("t"))
    assert (lg.log_start_offset, lg.log_end_offset, lg.num_segments) == (1000, 1000, 1)


def set_aside(root: Path, manager: LogManager) -> None:
    assert manager.get_log(tp("t")) is None and manager.set_aside()[0].path == root / "t-0"


def registry_kept_aside(root: Path, manager: LogManager) -> None:
    assert len(list(root.glob(REGISTRY_FILE + ".damaged-*"))) == 1
    assert manager.topic_overrides("t") == {**SEGMENT_BYTES, "retention.ms": "-1"}


def hole_served(root: Path, manager: LogManager) -> None:
    lg = manager.log(tp("t"))
    assert (lg.log_start_offset, lg.log_end_offset) == (0, 24)  # served across the hole, nothing said


def remove_middle_segment(root: Path) -> None:
    middle = sorted((root / "t-0").glob("*.log"))[1].name.split(".")[0]
    for path in (root / "t-0").glob(middle + ".*"):
        path.unlink()


CASES: dict[str, tuple[Callable[[Path], object], str, Callable[[Path, LogManager], None]]] = {
    "log-start-beyond-end": (lambda r: (r / "log-start-offset-checkpoint").write_text("0\n1\nt 0 1000\n"),
                             "deletes every segment", log_start_beyond_end),
    "epoch-garbage": (lambda r: (r / "t-0" / "leader-epoch-checkpoint").write_text("garbage"),
                      "sets the partition aside", set_aside),
    "registry-cut": (lambda r: (r / REGISTRY_FILE).write_bytes((r / REGISTRY_FILE).read_bytes()[:50]),
                     "kept aside", registry_kept_aside),
    "middle-segment-deleted": (remove_middle_segment, "across the hole", hole_served),
}


@pytest.mark.parametrize("case", CASES)
def test_the_action_verify_names_is_what_start_up_does(broker: Opener, one_dir: list[Path], case: str) -> None:
    damage, action, effect = CASES[case]
    root = fill(broker, one_dir)
    damage(root)
    [finding] = [f for f in findings(root) if f.problem]
    assert action in finding.action
    effect(root, broker.open(one_dir))


def test_a_healthy_dir_has_no_finding(broker: Opener, one_dir: list[Path]) -> None:
    assert findings(fill(broker, one_dir)) == []
