"""A broker's static configuration (Kafka's ``KafkaConfig``): ``server.properties`` parsed into
typed, validated values, and the broker-level defaults of every topic config.

Precedence of a topic config's broker-level default (Kafka's ``extractLogConfigMap``): the first
broker synonym that is SET wins (``log.retention.ms`` > ``log.retention.minutes`` >
``log.retention.hours``), else the built-in default. Synonyms in another unit are converted
(``log.roll.hours`` × 3 600 000 → ``segment.ms``). A broker-derived ``retention.ms`` that comes out
negative becomes -1 (unlimited), as in Kafka's ``logRetentionTimeMillis``. ``flush.ms`` falls back
to ``log.flush.interval.ms`` then ``log.flush.scheduler.interval.ms``. Dynamic broker configs do
not exist here; the LogManager is given a new :class:`BrokerConfig` instead. Unknown broker keys
(``node.id`` ...) are kept, untyped, in :attr:`BrokerConfig.unknown`; those under
``remote.log.storage.manager.impl.prefix`` (``rsm.config.``) are the remote store's options, also
offered prefix stripped as :attr:`BrokerConfig.rsm_config`.

Tiered storage at load time: ``remote.log.storage.system.enable=true`` needs
``remote.log.storage.uri``; the URI's scheme must be one the store serves; and, with the system
on, ``log.local.retention.*`` must fit ``log.retention.*`` as a topic's must (Kafka's
``validateBrokerLogConfigValues``). :meth:`BrokerConfig.checked_topic_config` is what topic
creation and config changes accept (:func:`~tidelog.storage.log_config.check_tiered_storage`).

``server.properties`` is read with Java ``Properties.load`` syntax
(:func:`~tidelog.storage.properties.read_properties_file`).

A :class:`BrokerConfig` is immutable, so every method is thread-safe and takes no lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from tidelog.errors import ConfigError
from tidelog.storage.config_def import ConfigKey, Synonym, invalid_value
from tidelog.storage.config_keys import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    check_compaction_lags,
    check_local_retention,
    check_not_removed,
)
from tidelog.storage.log_config import LogConfig, check_tiered_storage
from tidelog.storage.properties import read_properties_file

T = TypeVar("T")


class _Setting(Generic[T]):
    """Typed read-only attribute of :class:`BrokerConfig` backed by one broker key."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Setting[T]: ...

    @overload
    def __get__(self, obj: BrokerConfig, owner: type) -> T: ...

    def __get__(self, obj: BrokerConfig | None, owner: type) -> T | _Setting[T]:
        return self if obj is None else obj.get(self.name)


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """A broker's static configuration: known keys typed and validated, unknown keys kept as text.

    ``explicit`` holds the known keys that were set; :meth:`get` falls back to the default.
    Topic-level defaults are resolved by :meth:`topic_default` / :meth:`log_config`. Immutable:
    every method is thread-safe and takes no lock.
    """

    explicit: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    unknown: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    log_retention_check_interval_ms = _Setting[int]("log.retention.check.interval.ms")
    log_flush_scheduler_interval_ms = _Setting[int]("log.flush.scheduler.interval.ms")
    log_flush_offset_checkpoint_interval_ms = _Setting[int]("log.flush.offset.checkpoint.interval.ms")
    log_flush_start_offset_checkpoint_interval_ms = _Setting[int]("log.flush.start.offset.checkpoint.interval.ms")
    replica_high_watermark_checkpoint_interval_ms = _Setting[int]("replica.high.watermark.checkpoint.interval.ms")
    num_recovery_threads_per_data_dir = _Setting[int]("num.recovery.threads.per.data.dir")
    log_initial_task_delay_ms = _Setting[int]("log.initial.task.delay.ms")
    log_dir_failure_timeout_ms = _Setting[int]("log.dir.failure.timeout.ms")
    num_partitions = _Setting[int]("num.partitions")
    auto_create_topics_enable = _Setting[bool]("auto.create.topics.enable")
    message_max_bytes = _Setting[int]("message.max.bytes")
    listeners = _Setting[str]("listeners")
    advertised_listeners = _Setting[str]("advertised.listeners")
    listener_security_protocol_map = _Setting[str]("listener.security.protocol.map")
    socket_request_max_bytes = _Setting[int]("socket.request.max.bytes")
    log_cleaner_enable = _Setting[bool]("log.cleaner.enable")
    log_cleaner_threads = _Setting[int]("log.cleaner.threads")
    log_cleaner_dedupe_buffer_size = _Setting[int]("log.cleaner.dedupe.buffer.size")
    log_cleaner_io_buffer_load_factor = _Setting[float]("log.cleaner.io.buffer.load.factor")
    log_cleaner_io_buffer_size = _Setting[int]("log.cleaner.io.buffer.size")
    log_cleaner_io_max_bytes_per_second = _Setting[float]("log.cleaner.io.max.bytes.per.second")
    log_cleaner_backoff_ms = _Setting[int]("log.cleaner.backoff.ms")
    producer_id_expiration_ms = _Setting[int]("producer.id.expiration.ms")
    producer_id_expiration_check_interval_ms = _Setting[int]("producer.id.expiration.check.interval.ms")
    tidelog_cleaner_engine = _Setting[str]("tidelog.cleaner.engine")
    tidelog_cleaner_spark_master = _Setting[str]("tidelog.cleaner.spark.master")
    remote_log_storage_system_enable = _Setting[bool]("remote.log.storage.system.enable")
    remote_log_storage_uri = _Setting[str]("remote.log.storage.uri")
    remote_log_storage_manager_impl_prefix = _Setting[str]("remote.log.storage.manager.impl.prefix")
    remote_log_manager_task_interval_ms = _Setting[int]("remote.log.manager.task.interval.ms")
    remote_log_manager_task_retry_backoff_ms = _Setting[int]("remote.log.manager.task.retry.backoff.ms")
    remote_log_manager_task_retry_backoff_max_ms = _Setting[int]("remote.log.manager.task.retry.backoff.max.ms")
    remote_log_manager_task_retry_jitter = _Setting[float]("remote.log.manager.task.retry.jitter")
    remote_log_manager_copier_thread_pool_size = _Setting[int]("remote.log.manager.copier.thread.pool.size")
    remote_log_manager_expiration_thread_pool_size = _Setting[int]("remote.log.manager.expiration.thread.pool.size")
    remote_log_reader_threads = _Setting[int]("remote.log.reader.threads")
    remote_log_reader_max_pending_tasks = _Setting[int]("remote.log.reader.max.pending.tasks")
    remote_log_index_file_cache_total_size_bytes = _Setting[int]("remote.log.index.file.cache.total.size.bytes")
    remote_log_manager_copy_max_bytes_per_second = _Setting[int]("remote.log.manager.copy.max.bytes.per.second")
    remote_log_manager_fetch_max_bytes_per_second = _Setting[int]("remote.log.manager.fetch.max.bytes.per.second")
    remote_fetch_max_wait_ms = _Setting[int]("remote.fetch.max.wait.ms")
    remote_list_offsets_request_timeout_ms = _Setting[int]("remote.list.offsets.request.timeout.ms")

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> BrokerConfig:
        """Parse and validate; raises :class:`ConfigError` naming the key and value."""
        explicit: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for name, raw in props.items():
            check_not_removed(name)
            key = BROKER_CONFIGS.get(name)
            if key is None:
                unknown[name] = raw if isinstance(raw, str) else str(raw)
            else:
                explicit[name] = key.parse(raw)
        config = cls(MappingProxyType(explicit), MappingProxyType(unknown))
        config._validate()
        return config

    def _validate(self) -> None:
        """What only the whole config can break, found at load time: no log dir, a synonym that
        breaks its topic config's rule, derived compaction lags in conflict, tiered storage on
        without a store, or local retention defaults that do not fit retention's."""
        _ = self.log_dirs
        defaults = {key.name: self.topic_default(key)[0] for key in TOPIC_CONFIGS.values()}
        check_compaction_lags(defaults["min.compaction.lag.ms"], defaults["max.compaction.lag.ms"])
        if not self.remote_log_storage_system_enable:
            return
        if not self.remote_log_storage_uri.strip():
            raise ConfigError("remote.log.storage.system.enable=true needs remote.log.storage.uri, the remote "
                              "store's location (e.g. s3://bucket/prefix or file:///path)",
                              config="remote.log.storage.system.enable")
        for unit in ("bytes", "ms"):
            local = TOPIC_CONFIGS[f"local.retention.{unit}"]
            check_local_retention(local.name, defaults[local.name], f"retention.{unit}", defaults[f"retention.{unit}"],
                                  config=self.topic_default(local)[1])

    @property
    def rsm_config(self) -> Mapping[str, str]:
        """The remote store's options: every key under ``remote.log.storage.manager.impl.prefix``
        (``rsm.config.`` by default) that is no known broker key, prefix stripped, as text (Kafka
        passes them to ``RemoteStorageManager.configure``). A new read-only mapping per call."""
        prefix = self.remote_log_storage_manager_impl_prefix
        return MappingProxyType({name[len(prefix):]: value for name, value in sorted(self.unknown.items())
                                 if name.startswith(prefix) and len(name) > len(prefix)})

    @classmethod
    def load(cls, path: Path, overrides: Mapping[str, object] | None = None) -> BrokerConfig:
        """Read a ``server.properties`` file; ``overrides`` (e.g. ``--override k=v``) win over it."""
        props: dict[str, object] = dict(read_properties_file(path))
        props.update(overrides or {})
        try:
            return cls.from_properties(props)
        except ConfigError as e:
            raise ConfigError(e.message, path=path, **e.context) from e

    def get(self, name: str) -> Any:
        """Typed value of a known key (explicit or default), or the text of an unknown key present."""
        if name in self.explicit:
            return self.explicit[name]
        if name in BROKER_CONFIGS:
            return BROKER_CONFIGS[name].default
        if name in self.unknown:
            return self.unknown[name]
        raise ConfigError(f"Unknown broker config name: {name}", config=name)

    def is_set(self, name: str) -> bool:
        return name in self.explicit or name in self.unknown

    @property
    def log_dirs(self) -> list[str]:
        """``log.dirs`` if set (even to nothing), else ``log.dir``; never empty."""
        dirs = self.get("log.dirs") if self.is_set("log.dirs") else self.get("log.dir")
        if not dirs:
            raise ConfigError("At least one log directory must be defined via log.dirs or log.dir", config="log.dirs")
        return list(dirs)

    def topic_default(self, key: ConfigKey) -> tuple[Any, str | None]:
        """The broker-level value of topic config ``key`` and the broker key that supplied it
        (None when it is the built-in default). First synonym that is set wins."""
        for synonym in key.synonyms:
            if synonym.name in self.explicit:
                return self._converted(key, synonym), synonym.name
        return key.default, None

    def _converted(self, key: ConfigKey, synonym: Synonym) -> Any:
        raw = self.explicit[synonym.name]
        value = raw * synonym.ms_per_unit if synonym.ms_per_unit != 1 else raw
        if key.negative_means_unlimited and value < 0:
            value = -1
        try:
            return key.parse(value)
        except ConfigError as e:
            raise invalid_value(synonym.name, raw, f"{getattr(e, 'reason', e.message)} (as {key.name})") from e

    def log_config(self, overrides: Mapping[str, object] | None = None) -> LogConfig:
        """This broker's defaults for a topic, with ``overrides`` applied."""
        return LogConfig.from_props(self, overrides)

    def checked_topic_config(self, topic: str, overrides: Mapping[str, object] | None = None, *,
                             current: Mapping[str, object] | None = None) -> LogConfig:
        """What topic creation and a config change accept: :meth:`log_config` of ``overrides``
        (the topic's whole new override set), then Kafka's tiered-storage refusals
        (:func:`~tidelog.storage.log_config.check_tiered_storage`); ``current`` is the topic's
        override set before a change (None at creation). Raises :class:`ConfigError`."""
        config = self.log_config(overrides)
        was = (current or {}).get("remote.storage.enable", False)  # Kafka's Boolean.parseBoolean
        was_tiered = was is True or (isinstance(was, str) and was.strip().lower() == "true")
        check_tiered_storage(topic, config, system_enabled=self.remote_log_storage_system_enable,
                             was_tiered=was_tiered)
        return config
