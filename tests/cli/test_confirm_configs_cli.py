"""``tidelog topics confirm-configs``: the operator's way out of the hold a topic whose configs
nothing recorded starts in (retention and cleaning paused)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.manager.topic_copies import TOPIC_COPY_FILE
from tidelog.manager.topics import REGISTRY_FILE
from tidelog.storage.config import BrokerConfig


def held_topics(data: Path, *names: str) -> None:
    """``names`` created, then their registry entries and partition copies lost."""
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        for name in names:
            manager.create_topic(name, 1, {"retention.ms": "-1"})
    (data / REGISTRY_FILE).unlink()
    for copy in data.glob(f"*/{TOPIC_COPY_FILE}"):
        copy.unlink()


def described(data: Path) -> dict[str, bool]:
    code, out, err = run_cli(data, "topics", "describe", "--json")
    assert code == 0, err
    return {d["topic"]: d["configs_unconfirmed"] for d in json.loads(out)}


def test_confirm_all_ends_every_hold_and_says_with_which_configs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    held_topics(data, "a", "b")
    assert described(data) == {"a": True, "b": True}
    code, out, err = run_cli(data, "topics", "confirm-configs", "--all")
    assert code == 0, err
    assert out.decode().splitlines() == [
        f"Confirmed the configs of topic {name} (the broker defaults): retention and cleaning resume." for name in "ab"]
    assert described(data) == {"a": False, "b": False}
    code, out, _ = run_cli(data, "topics", "confirm-configs", "a")
    assert code == 0 and "its configs were not unconfirmed; nothing changed" in out.decode()


def test_confirm_needs_a_topic_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    held_topics(data, "a")
    code, _, err = run_cli(data, "topics", "confirm-configs")
    assert code != 0 and "name a topic, or pass --all" in err
    code, _, err = run_cli(data, "topics", "confirm-configs", "nope")
    assert code == 1 and "unknown topic 'nope'" in err
    assert described(data) == {"a": True}
