"""Topic names that try to leave the log dir — ``..``, ``.``, absolute paths, ``/``, ``\\``, NUL,
overlong, illegal characters — through every door: CreateTopics, auto-creation on Metadata,
Produce, the CLI, the library, and a crafted topic registry. Each is refused
(INVALID_TOPIC_EXCEPTION or a typed error) and the filesystem around the log dir is unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from abuse_helpers import Served, tidelog, tree
from tidelog.errors import InvalidTopicError
from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig

INVALID_TOPIC_EXCEPTION = 17
ESCAPES = ["..", ".", "../escaped", "../../escaped", "/tmp/tidelog-escaped", "a/b", "a\\b", "a\0b", "x" * 250,
           "spaces are illegal", "ünïcode", "semi;colon", ""]


def _outside(root: Path) -> set[str]:
    """What exists next to the log dir (``root`` holds only ``data``) and at the absolute escape."""
    found = tree(root)
    found |= {str(p) for p in Path("/tmp").glob("tidelog-escaped*")}
    return found


def test_create_topics_refuses_every_escaping_name(serve: Callable[..., Served], tmp_path: Path) -> None:
    served = serve()
    before = _outside(tmp_path)
    client = served.raw()
    names = [n for n in ESCAPES if n]  # an empty name is its own case below
    request = samples.create_topics(names[0])
    request.topics = [samples.create_topics(n).topics[0] for n in names]
    response = client.call(request, CreateTopicsResponse, 7)
    assert {t.name: t.error_code for t in response.topics} == dict.fromkeys(names, INVALID_TOPIC_EXCEPTION)
    assert "illegal" in response.topics[-1].error_message
    assert client.call(samples.create_topics(""), CreateTopicsResponse, 7).topics[0].error_code == \
        INVALID_TOPIC_EXCEPTION
    assert _outside(tmp_path) == before
    assert served.alive()


def test_metadata_auto_creation_and_produce_refuse_escaping_names(serve: Callable[..., Served],
                                                                  tmp_path: Path) -> None:
    served = serve(**{"auto.create.topics.enable": "true"})
    before = _outside(tmp_path)
    client = served.raw()
    names = [n for n in ESCAPES if n]
    response = client.call(samples.metadata(*names, auto_create=True), MetadataResponse, 12)
    assert {t.name: t.error_code for t in response.topics} == dict.fromkeys(names, INVALID_TOPIC_EXCEPTION)
    for name in names:
        answer = client.call(samples.produce(name, records=samples.record_batch(b"v")), ProduceResponse, 9)
        code = answer.responses[0].partition_responses[0].error_code
        assert code in (INVALID_TOPIC_EXCEPTION, 3), (name, code)  # 3: UNKNOWN_TOPIC_OR_PARTITION, as Kafka
    assert _outside(tmp_path) == before
    assert served.alive()


@pytest.mark.parametrize("name", ["../escaped", "/tmp/tidelog-escaped"])
def test_the_cli_refuses_escaping_names_for_topics_create_and_produce(tmp_path: Path, name: str) -> None:
    data = tmp_path / "data"
    for args, refusal in ((("topics", "create", name), ("illegal", "cannot be")), (("produce", name), ("unknown topic",))):
        result = tidelog(*args, data=data, input="v\n")  # produce never creates a topic
        assert result.returncode != 0, result
        assert any(word in result.stderr for word in refusal), result.stderr
    assert tree(tmp_path) <= {"data"} | {f"data/{p}" for p in tree(data)}
    assert not any(Path("/tmp").glob("tidelog-escaped*"))
    assert not any("escaped" in p for p in tree(tmp_path))


def test_the_library_refuses_escaping_names(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        before = _outside(tmp_path)
        for name in ESCAPES:
            with pytest.raises(InvalidTopicError):
                manager.create_topic(name, 1)
        assert _outside(tmp_path) == before
        assert manager.topics() == []


def test_a_registry_naming_an_escaping_topic_creates_nothing_outside(tmp_path: Path) -> None:
    """Found here: LogManager.open created ``../escaped-0`` next to the log dir for a registry
    naming ``../escaped`` (the registry's names were not validated)."""
    data = tmp_path / "data"
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("ok", 1)
    registry = data / "tidelog-topics.json"
    content = json.loads(registry.read_text())
    for name in ("../escaped", "/tmp/tidelog-escaped", "a\0b"):
        content["topics"][name] = {**content["topics"]["ok"], "topic_id": "q9Qo-wkKRAKLDw_iWvRQZg",
                                   "assignments": {}}
    content["epoch"] += 1
    registry.write_text(json.dumps(content))
    before = _outside(tmp_path)
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        assert manager.topics() == ["ok"]
    assert not (tmp_path / "escaped-0").exists()
    assert {p for p in _outside(tmp_path) - before if not p.startswith("data/")} == set()
