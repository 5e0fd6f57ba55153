"""DescribeConfigs of a key that may carry a secret, and the alter path's single check: called
as the request handlers call them (:func:`describe_configs`, :func:`alter_configs`), on a real
LogManager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import tidelog.storage.broker_config as broker_config
from tidelog.manager import LogManager
from tidelog.manager.internal_topics import INTERNAL_TOPICS
from tidelog.server.configs import BROKER, SET, TOPIC, alter_configs, describe_configs
from tidelog.storage.config import BrokerConfig
from tidelog.storage.config_keys import NEVER_TIERED_TOPICS


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "data"), "remote.log.storage.system.enable": "true",
                                           "remote.log.storage.uri": (tmp_path / "store").as_uri()})
    opened = LogManager.open(broker, [tmp_path / "data"])
    yield opened
    opened.shutdown()


def broker_entries(manager: LogManager) -> dict[str, object]:
    resource = SimpleNamespace(resource_type=BROKER, resource_name="1", configuration_keys=None)
    [result] = describe_configs(manager, 1, [resource], synonyms=True, docs=False)
    assert result.error_code == 0, result.error_message
    return {e.name: e for e in result.configs}


def test_the_remote_store_uri_is_described_as_sensitive_without_its_value(manager: LogManager) -> None:
    """It may carry a credential (an abfs SAS token in its query): hidden as Kafka hides a PASSWORD key."""
    entries = broker_entries(manager)
    uri = entries["remote.log.storage.uri"]
    assert uri.is_sensitive and uri.value is None and all(s.value is None for s in uri.synonyms)
    assert uri.config_source == entries["remote.log.storage.system.enable"].config_source  # still says it is set
    others = [e for name, e in entries.items() if name != "remote.log.storage.uri"]
    assert not any(e.is_sensitive for e in others)
    assert entries["remote.log.storage.system.enable"].value == "true"


def test_an_alter_checks_the_tiered_refusals_once(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = broker_config.check_tiered_storage

    def counted(topic: str, *args: object, **kwargs: object) -> None:
        calls.append(topic)
        real(topic, *args, **kwargs)

    monkeypatch.setattr(broker_config, "check_tiered_storage", counted)
    manager.create_topic("orders", 1, {})
    calls.clear()
    change = [(TOPIC, "orders", [("remote.storage.enable", SET, "true")])]
    assert alter_configs(manager, 1, change, validate_only=True, replace=False)[0]["error_code"] == 0
    assert calls == ["orders"] and manager.topic_overrides("orders") == {}
    calls.clear()
    assert alter_configs(manager, 1, change, validate_only=False, replace=False)[0]["error_code"] == 0
    assert calls == ["orders"] and manager.topic_overrides("orders") == {"remote.storage.enable": "true"}
    assert manager.topic_config("orders").remote_storage_enable
    calls.clear()
    off = [(TOPIC, "orders", [("remote.storage.enable", SET, "false")])]  # Kafka's refusal, its message, once
    result = alter_configs(manager, 1, off, validate_only=False, replace=False)[0]
    assert result["error_code"] == 40 and "remote.log.delete.on.disable" in result["error_message"]
    assert calls == ["orders"] and manager.topic_overrides("orders") == {"remote.storage.enable": "true"}


def test_internal_topic_names_have_one_owner() -> None:
    assert INTERNAL_TOPICS < NEVER_TIERED_TOPICS
    assert NEVER_TIERED_TOPICS - INTERNAL_TOPICS == {"__remote_log_metadata", "__cluster_metadata"}
