"""``configs describe`` of a topic: each config's effective value, where it came from and its
synonyms in precedence order (Kafka's DescribeConfigs with ``include_synonyms``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidelog.storage.config_def import ConfigKey
from tidelog.storage.config_keys import BROKER_CONFIGS, TOPIC_CONFIGS
from tidelog.storage.log_config import LogConfig

if TYPE_CHECKING:
    from tidelog.storage.broker_config import BrokerConfig


class ConfigSource(enum.StrEnum):
    """Where a described value comes from (Kafka's ``DescribeConfigs`` source names)."""

    TOPIC_CONFIG = "TOPIC_CONFIG"
    STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
    DEFAULT_CONFIG = "DEFAULT_CONFIG"


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of ``configs describe``: effective value, where it came from, and all synonyms
    in precedence order (Kafka's DescribeConfigs with ``include_synonyms``)."""

    name: str
    value: str
    source: ConfigSource
    synonyms: tuple[ConfigSynonym, ...]
    doc: str


def describe(config: LogConfig, broker: BrokerConfig | None = None) -> list[ConfigEntry]:
    """Every topic config of ``config``, sorted by name, with its source and synonyms."""
    return [_describe_key(config, key, broker) for key in sorted(TOPIC_CONFIGS.values(), key=lambda k: k.name)]


def _describe_key(config: LogConfig, key: ConfigKey, broker: BrokerConfig | None) -> ConfigEntry:
    value = key.format(getattr(config, key.attribute))
    synonyms = [ConfigSynonym(key.name, value, ConfigSource.TOPIC_CONFIG)] if key.name in config.overridden else []
    synonyms += _broker_synonyms(key, broker)
    if not key.synonyms:
        synonyms.append(ConfigSynonym(key.name, key.format(key.default), ConfigSource.DEFAULT_CONFIG))
    return ConfigEntry(key.name, value, synonyms[0].source, tuple(synonyms), key.doc)


def _broker_synonyms(key: ConfigKey, broker: BrokerConfig | None) -> list[ConfigSynonym]:
    found: list[ConfigSynonym] = []
    for synonym in key.synonyms:
        broker_key = BROKER_CONFIGS[synonym.name]
        if broker is not None and synonym.name in broker.explicit:
            found.append(ConfigSynonym(synonym.name, broker_key.format(broker.explicit[synonym.name]),
                                       ConfigSource.STATIC_BROKER_CONFIG))
        if broker_key.default is not None:
            found.append(ConfigSynonym(synonym.name, broker_key.format(broker_key.default),
                                       ConfigSource.DEFAULT_CONFIG))
    return found
