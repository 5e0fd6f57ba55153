"""The effective configuration of one topic's logs (Kafka's ``LogConfig``).

Precedence of a topic config (Kafka's ``LogConfig.fromProps`` over ``extractLogConfigMap``)::

    topic-level override                      e.g. retention.ms=86400000 on the topic
      > broker synonyms, in order, first SET  log.retention.ms > log.retention.minutes > log.retention.hours
      > built-in default                      604800000

At topic level a ``retention.ms`` below -1 is rejected. Stored overrides that no longer validate
are made loadable by :mod:`.stored_overrides`. A :class:`LogConfig` is immutable: every method is
thread-safe and takes no lock.

Tiered storage: a :class:`LogConfig` holds ``local.retention.*`` as configured
(``configured_local_retention_ms``/``_bytes``, -2 meaning "as retention.*") and answers the
effective values as :attr:`LogConfig.local_retention_ms`/``_bytes`` (Kafka's
``localRetentionMs()``/``localRetentionBytes()``). What CreateTopics and AlterConfigs refuse of a
tiered topic (Kafka's ``validateTopicLogConfigValues``, with Kafka's messages) is
:func:`check_tiered_storage`; a config is not refused at construction, so a stored one always loads.
"""

from __future__ import annotations

import dataclasses
import random as _random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidelog.errors import ConfigError
from tidelog.records.varint import INT32_MAX, INT32_MIN
from tidelog.storage.config_keys import (
    BROKER_CONFIGS,
    NEVER_TIERED_TOPICS,
    TOPIC_CONFIGS,
    check_compaction_lags,
    check_local_retention,
    check_topic_config_names,
)

if TYPE_CHECKING:
    from tidelog.storage.broker_config import BrokerConfig


def _default(name: str) -> Any:
    return TOPIC_CONFIGS[name].default


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Effective configuration of one topic's logs; every value validated at construction.

    Build with :meth:`from_props` (broker defaults + topic overrides), :meth:`defaults`, or
    :meth:`with_overrides`. Direct construction also validates and normalizes (a
    ``cleanup_policy`` string becomes a frozenset). ``overridden`` names the topic-level keys
    that were set explicitly (what gets persisted and what ``describe`` reports as TOPIC_CONFIG);
    it does not take part in equality. Immutable: every method is thread-safe and takes no lock.
    """

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    cleanup_policy: frozenset[str] = _default("cleanup.policy")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    delete_retention_ms: int = _default("delete.retention.ms")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    max_message_bytes: int = _default("max.message.bytes")
    preallocate: bool = _default("preallocate")
    compression_type: str = _default("compression.type")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_zstd_level: int = _default("compression.zstd.level")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    min_insync_replicas: int = _default("min.insync.replicas")
    leader_replication_throttled_replicas: tuple[str, ...] = _default("leader.replication.throttled.replicas")
    follower_replication_throttled_replicas: tuple[str, ...] = _default("follower.replication.throttled.replicas")
    remote_storage_enable: bool = _default("remote.storage.enable")  # the topic is tiered
    configured_local_retention_ms: int = _default("local.retention.ms")  # -2: see local_retention_ms
    configured_local_retention_bytes: int = _default("local.retention.bytes")  # -2: see local_retention_bytes
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")  # tiered but read-only
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")
    overridden: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overridden", frozenset(self.overridden))
        check_topic_config_names(self.overridden)
        for key in TOPIC_CONFIGS.values():
            object.__setattr__(self, key.attribute, key.parse(getattr(self, key.attribute)))
        check_compaction_lags(self.min_compaction_lag_ms, self.max_compaction_lag_ms)

    @classmethod
    def defaults(cls) -> LogConfig:
        """Built-in defaults, no broker, no overrides."""
        return cls()

    @classmethod
    def from_props(
        cls, broker: BrokerConfig | Mapping[str, str] | None = None, overrides: Mapping[str, object] | None = None
    ) -> LogConfig:
        """Topic override > broker synonyms (first set wins) > default, for every topic config.

        ``broker`` may be raw ``server.properties`` keys. ``overrides`` are topic-level keys
        (strings or typed values); unknown or removed ones raise :class:`ConfigError`.
        """
        broker_config = _broker_from_mapping(broker or {}) if broker is None or isinstance(broker, Mapping) else broker
        overrides = overrides or {}
        values = {
            key.attribute: overrides[key.name] if key.name in overrides else broker_config.topic_default(key)[0]
            for key in TOPIC_CONFIGS.values()
        }
        return cls(**values, overridden=frozenset(overrides))

    def with_overrides(self, overrides: Mapping[str, object] | None = None, /, **attributes: object) -> LogConfig:
        """A copy with topic-level overrides, given by Kafka name and/or as snake_case keywords:
        ``config.with_overrides({"segment.bytes": "1024"}, retention_ms=-1)``."""
        changes = dict(overrides or {})
        for attribute, value in attributes.items():
            changes[attribute.replace("_", ".")] = value
        check_topic_config_names(changes)
        fields = {TOPIC_CONFIGS[name].attribute: value for name, value in changes.items()}
        overridden = self.overridden | changes.keys()
        return dataclasses.replace(self, **fields, overridden=overridden)  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, str]:
        """Every topic config as Kafka strings, keyed by Kafka name."""
        return {key.name: key.format(getattr(self, key.attribute)) for key in TOPIC_CONFIGS.values()}

    def overrides_as_properties(self) -> dict[str, str]:
        """Only the topic-level overrides, as Kafka strings: what a topic's config file persists."""
        return {name: value for name, value in self.to_properties().items() if name in self.overridden}

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def local_retention_ms(self) -> int:
        """Effective local retention by age (Kafka's ``localRetentionMs()``): ``local.retention.ms``,
        or ``retention.ms`` when that is -2. Meaningful for a tiered topic only."""
        configured = self.configured_local_retention_ms
        return self.retention_ms if configured == -2 else configured

    @property
    def local_retention_bytes(self) -> int:
        """Effective local retention by size (Kafka's ``localRetentionBytes()``):
        ``local.retention.bytes``, or ``retention.bytes`` when that is -2. Tiered topics only."""
        configured = self.configured_local_retention_bytes
        return self.retention_bytes if configured == -2 else configured

    @property
    def remote_copy_enabled(self) -> bool:
        """Whether sealed segments are to be copied to the remote store: the topic is tiered
        (``remote.storage.enable``) and not read-only (``remote.log.copy.disable``)."""
        return self.remote_storage_enable and not self.remote_log_copy_disable

    @property
    def max_segment_ms(self) -> int:
        """Roll age: ``min(segment.ms, max.compaction.lag.ms)`` for compacted topics, else ``segment.ms``."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def init_file_size(self) -> int:
        """Initial length of a new ``.log`` file: ``segment.bytes`` when preallocating, else 0."""
        return self.segment_bytes if self.preallocate else 0

    def random_segment_jitter(self, rng: _random.Random | None = None) -> int:
        """Kafka's per-segment jitter: ``abs(random int32) % min(segment.jitter.ms, segment.ms)``, or 0."""
        if self.segment_jitter_ms == 0:
            return 0
        draw = (rng or _random).randint(INT32_MIN, INT32_MAX)
        magnitude = 0 if draw == INT32_MIN else abs(draw)  # Kafka's Utils.abs maps MIN_VALUE to 0
        return magnitude % min(self.segment_jitter_ms, self.segment_ms)


DISABLE_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. "
    "If you want to keep the remote data and turn to read only, please set "
    "`remote.storage.enable=true,remote.log.copy.disable=true`. "
    "If you want to disable remote storage and delete all remote data, please set "
    "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
)
SYSTEM_DISABLED = ("Tiered Storage functionality is disabled in the broker. "
                   "Topic cannot be configured with remote log storage.")
_COPY_DISABLED = ("When `remote.log.copy.disable` is set to true, the `local.retention.{0}` and `retention.{0}` "
                  "must be set to the identical value because there will be no more logs copied to the remote storage.")


def check_tiered_storage(topic: str, config: LogConfig, *, system_enabled: bool,
                         was_tiered: bool = False) -> None:
    """Raise :class:`ConfigError` if CreateTopics or AlterConfigs must refuse ``config`` for
    ``topic`` (Kafka's ``LogConfig.validateTopicLogConfigValues``, Kafka's messages):

    * a tiered topic on a broker whose ``remote.log.storage.system.enable`` is false;
    * an internal topic with ``remote.storage.enable=true`` (Kafka never tiers them);
    * ``local.retention.*`` of -1, or above ``retention.*``, when ``retention.*`` is not -1;
    * ``remote.log.copy.disable=true`` with ``local.retention.*`` neither -2 nor ``retention.*``;
    * ``was_tiered`` (the topic's current config) turned off without ``remote.log.delete.on.disable=true``.

    Unlike Kafka, compacted topics (``compact``, ``compact,delete``) may be tiered. Pure: no lock.
    """
    if not config.remote_storage_enable:
        if was_tiered and not config.remote_log_delete_on_disable:
            raise ConfigError(DISABLE_WITHOUT_DELETE, config="remote.storage.enable", topic=topic)
        return
    if topic in NEVER_TIERED_TOPICS:
        raise ConfigError(f"Topic {topic} is internal and is never tiered: remote.storage.enable=true is not "
                          "allowed on it", config="remote.storage.enable", topic=topic)
    if not system_enabled:
        raise ConfigError(SYSTEM_DISABLED, config="remote.storage.enable", topic=topic)
    check_local_retention("local.retention.bytes", config.configured_local_retention_bytes,
                          "retention.bytes", config.retention_bytes)
    check_local_retention("local.retention.ms", config.configured_local_retention_ms,
                          "retention.ms", config.retention_ms)
    if config.remote_log_copy_disable:
        for unit, local, total in (("bytes", config.configured_local_retention_bytes, config.retention_bytes),
                                   ("ms", config.configured_local_retention_ms, config.retention_ms)):
            if local not in (-2, total):
                raise ConfigError(_COPY_DISABLED.format(unit), config=f"local.retention.{unit}", topic=topic)


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    """The per-segment knobs taken from the topic's :class:`LogConfig` (``index.interval.bytes``,
    ``segment.index.bytes``, the new ``.log``'s length and preallocation). Immutable."""

    index_interval_bytes: int = 4096
    max_index_size: int = 10485760
    init_file_size: int = 0
    preallocate: bool = False


def segment_config(config: LogConfig) -> SegmentConfig:
    """What one segment needs of a topic's config."""
    return SegmentConfig(
        index_interval_bytes=config.index_interval_bytes, max_index_size=config.segment_index_bytes,
        init_file_size=config.init_file_size, preallocate=config.preallocate,
    )


def _broker_from_mapping(props: Mapping[str, object]) -> BrokerConfig:
    """Raw broker properties; a topic-only key here is a caller mix-up, not a broker setting."""
    from tidelog.storage.broker_config import BrokerConfig  # broker_config imports this module

    for name in props:
        if name in TOPIC_CONFIGS and name not in BROKER_CONFIGS:
            raise ConfigError(f"{name} is a topic config, not a broker config: pass it in overrides", config=name)
    return BrokerConfig.from_properties(props)

