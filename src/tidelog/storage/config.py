"""Every Kafka config the storage layer reads: the one import for callers.

The parts, one job each:

* :mod:`.config_def`: config types, Kafka-style value parsing, validators, :class:`ConfigKey`.
* :mod:`.config_keys`: the tables :data:`TOPIC_CONFIGS` and :data:`BROKER_CONFIGS` (types,
  defaults, synonyms, docs) and the keys Kafka 4.0 removed.
* :mod:`.broker_config`: :class:`BrokerConfig`, a parsed ``server.properties``.
* :mod:`.log_config`: :class:`LogConfig`, the effective configuration of one topic's logs.
* :mod:`.config_describe`: :func:`describe`, each config's value, source and synonyms.
"""

from tidelog.storage.broker_config import BrokerConfig
from tidelog.storage.config_def import (
    ConfigKey,
    ConfigType,
    Synonym,
    format_value,
    invalid_value,
    java_double_string,
)
from tidelog.storage.config_describe import ConfigEntry, ConfigSource, ConfigSynonym, describe
from tidelog.storage.config_keys import (
    BROKER_CONFIGS,
    CLEANER_ENGINES,
    REMOVED_CONFIGS,
    SEGMENT_BYTES_MIN,
    SEGMENT_INDEX_BYTES_MIN,
    TOPIC_CONFIGS,
    check_not_removed,
    check_topic_config_names,
)
from tidelog.storage.log_config import LogConfig

__all__ = [
    "BROKER_CONFIGS",
    "CLEANER_ENGINES",
    "REMOVED_CONFIGS",
    "SEGMENT_BYTES_MIN",
    "SEGMENT_INDEX_BYTES_MIN",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "LogConfig",
    "Synonym",
    "check_not_removed",
    "check_topic_config_names",
    "describe",
    "format_value",
    "invalid_value",
    "java_double_string",
]
