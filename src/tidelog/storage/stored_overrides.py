"""Topic overrides read back from storage, made loadable.

An override read back from a topic registry written under older rules (or adopted from a Kafka
broker, whose minimums are lower, e.g. ``segment.index.bytes``) is never a reason to leave a
partition unloaded: a number outside its range loads as the nearest bound, and anything else
unusable is left out, each with a note the caller logs. New overrides (AlterConfigs, CreateTopics)
are still refused by :mod:`.config`'s validation.

A stored ``remote.storage.enable=true`` on a broker whose ``remote.log.storage.system.enable`` is
false is left out too (Kafka refuses to start then): the topic loads untiered, so its local
segments follow ``retention.*`` and nothing is copied or read remotely; its remote data stays in
the store, and the override comes back when tiered storage is switched on again.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidelog.errors import ConfigError
from tidelog.storage.config import TOPIC_CONFIGS, BrokerConfig, check_topic_config_names

_SYSTEM_OFF = ("You have to delete all topics with the property remote.storage.enable=true before disabling "
               "tiered storage cluster-wide")  # Kafka's startup refusal


def loadable_overrides(broker: BrokerConfig, overrides: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """``(overrides, notes)``: ``overrides`` where a number out of range is replaced by the
    nearest bound and any other unusable override is dropped (a compaction lag in conflict with
    the other one too, the minimum first), each change explained by one note. What comes back
    passes ``broker.log_config``."""
    usable: dict[str, str] = {}
    notes: list[str] = []
    for name, raw in sorted(overrides.items()):
        try:
            check_topic_config_names([name])
            value = TOPIC_CONFIGS[name].parse(raw)
            if name == "remote.storage.enable" and value and not broker.remote_log_storage_system_enable:
                notes.append(f"{name}={raw} left out (remote.log.storage.system.enable is false): {_SYSTEM_OFF}")
                continue
            usable[name] = raw
        except ConfigError as e:
            key = TOPIC_CONFIGS.get(name)
            nearest = None if key is None else key.nearest_bound(raw)
            if key is None or nearest is None:
                notes.append(f"{name}={raw} left out: {e.message}")
            else:
                usable[name] = key.format(nearest)
                notes.append(f"{name}={raw} loaded as {usable[name]}: {e.message}")
    for lag in ("min.compaction.lag.ms", "max.compaction.lag.ms"):
        try:
            broker.log_config(usable)
            break
        except ConfigError as e:
            if lag in usable:
                notes.append(f"{lag}={usable.pop(lag)} left out: {e.message}")
    return usable, notes
