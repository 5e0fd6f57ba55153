"""The config tables: every topic config (Kafka's ``LogConfig``/``TopicConfig``) and every
``server.properties`` key tidelog reads (Kafka's ``ServerLogConfigs`` and friends), as :class:`ConfigKey` rows.

Defaults are Kafka 4.x's (``message.timestamp.after.max.ms`` = 3600000,
``num.recovery.threads.per.data.dir`` = 2), with these deliberate deviations:

* ``segment.bytes`` / ``log.segment.bytes`` minimum is **14** (Kafka 3.x), not 4.0's 1 MiB
  (KIP-1030): tests and users rely on tiny segments, and 4.0 itself needs the test-only
  ``internal.segment.bytes`` for that, which we do not offer.
* ``segment.index.bytes`` / ``log.index.size.max.bytes`` minimum is **12**, not Kafka's 4: the
  size of one time-index entry, the larger of the two entries. Below it a segment's time index
  holds no entry, so a partition cannot be created, or every roll fails (Kafka's 5.0 raises the
  minimum to 1 KiB).
* ``cleanup.policy``, ``message.timestamp.type`` and ``compression.type`` accept any letter case
  and are normalized to Kafka's spelling (Kafka's validators are case-sensitive).
* ``cleanup.policy`` may be empty (neither delete nor compact), as Kafka 4.2 allows (KAFKA-19112).
* ``log.dirs`` items: empty items are dropped, duplicates rejected.

Keys removed in Kafka 4.0 (``message.timestamp.difference.max.ms``, ``message.format.version``,
``message.downconversion.enable`` and their ``log.`` broker forms) are rejected with a message
naming the replacement, at topic and broker level alike. Unknown topic keys are rejected
("Unknown topic config name: x").

tidelog-only broker keys (a Kafka broker only warns about them):
``tidelog.cleaner.engine`` (``in-process`` or ``spark``: where the log cleaner dedupes and rewrites),
``tidelog.cleaner.spark.master`` (the Spark master URL of the ``spark`` engine),
``tidelog.produce.decompression.memory.bytes``, ``tidelog.server.allocator.retain.bytes`` (freed memory
``tidelog serve``'s C allocator keeps), ``tidelog.server.event.loop`` (``asyncio`` or ``uvloop``:
the event loop of ``tidelog serve``), ``tidelog.spark.staging.lease.ms`` (the time lease
of a Spark job's staging dir staged through the broker), ``metrics.listener`` (where ``tidelog serve``
serves its Prometheus endpoint; Kafka has none), and ``remote.log.storage.uri`` (the remote store's
location, named as the tiered-storage keys are; Kafka names a RemoteStorageManager class instead).

Tiered storage: the broker keys are Kafka's ``RemoteLogManagerConfig`` ones with 4.x defaults;
keys under ``remote.log.storage.manager.impl.prefix`` (``rsm.config.``) are the store's options,
kept as text (:attr:`BrokerConfig.rsm_config <tidelog.storage.broker_config.BrokerConfig.rsm_config>`).
The topic keys' refusals (Kafka's ``LogConfig.validateTopicLogConfigValues``) are in
:func:`tidelog.storage.log_config.check_tiered_storage`, except one: compacted topics may be tiered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from tidelog.errors import ConfigError
from tidelog.records.varint import INT64_MAX
from tidelog.storage.config_def import (
    DOUBLE_MAX,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    ConfigKey,
    ConfigType,
    DirList,
    EachOneOf,
    NonEmptyString,
    OneOf,
    RangeOrSentinel,
    Synonym,
    ThrottledReplicas,
    UriScheme,
    Validator,
    at_least,
    between,
    invalid_value,
)


def _key(name: str, type: ConfigType, default: Any, validator: Validator | None, doc: str, *synonyms: Synonym,
         **flags: Any) -> ConfigKey:
    return ConfigKey(name, type, default, validator, doc, tuple(synonyms), **flags)


_INT, _LONG, _DOUBLE, _BOOL, _STR, _LIST = (
    ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE, ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST,
)
_S = Synonym
_CLEANUP_POLICIES = ("compact", "delete")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_GZIP_LEVEL = RangeOrSentinel(1, 9, -1)
_LZ4_LEVEL = between(1, 17)
_ZSTD_LEVEL = between(-131072, 22)
SEGMENT_BYTES_MIN = 14  # Kafka 3.x's RECORD_OVERHEAD_V0; see the module docstring
SEGMENT_INDEX_BYTES_MIN = 12  # one time-index entry; see the module docstring
CLEANER_ENGINES = ("in-process", "spark")  # tidelog.cleaner.engine
EVENT_LOOPS = ("asyncio", "uvloop")  # tidelog.server.event.loop
REMOTE_STORE_SCHEMES = ("s3", "gs", "abfs", "abfss", "hdfs", "file")  # remote.log.storage.uri
CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
SHARE_GROUP_STATE = "__share_group_state"
#: Kafka's internal topics (``Topic.isInternal``): the one list of their names, which the manager
#: (:mod:`tidelog.manager.internal_topics`: what clients may not do to them) takes from here.
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE})
#: Kafka's ``UnifiedLog.isRemoteLogEnabled`` never tiers these: the internal topics and the two metadata topics.
NEVER_TIERED_TOPICS = INTERNAL_TOPICS | {"__remote_log_metadata", "__cluster_metadata"}

_TOPIC_KEYS = (
    _key("segment.bytes", _INT, 1073741824, at_least(SEGMENT_BYTES_MIN),
         "Maximum size of one segment file; a single append larger than this is rejected.",
         _S("log.segment.bytes")),
    _key("segment.ms", _LONG, 604800000, at_least(1),
         "Roll a non-empty segment this long after its first record (or its creation).",
         _S("log.roll.ms"), _S("log.roll.hours", MS_PER_HOUR)),
    _key("segment.jitter.ms", _LONG, 0, at_least(0),
         "Random amount subtracted from segment.ms per segment, to spread rolls out.",
         _S("log.roll.jitter.ms"), _S("log.roll.jitter.hours", MS_PER_HOUR)),
    _key("segment.index.bytes", _INT, 10485760, at_least(SEGMENT_INDEX_BYTES_MIN),
         "Maximum size of each offset and time index file.", _S("log.index.size.max.bytes")),
    _key("index.interval.bytes", _INT, 4096, at_least(0),
         "Bytes appended between two offset-index entries.", _S("log.index.interval.bytes")),
    _key("retention.bytes", _LONG, -1, None,
         "Maximum size of the whole partition log before old segments go; negative = unlimited.",
         _S("log.retention.bytes")),
    _key("retention.ms", _LONG, 604800000, at_least(-1),
         "Age after which a segment's records may be deleted; -1 = unlimited.",
         _S("log.retention.ms"), _S("log.retention.minutes", MS_PER_MINUTE), _S("log.retention.hours", MS_PER_HOUR),
         negative_means_unlimited=True),
    _key("cleanup.policy", _LIST, ("delete",), EachOneOf(_CLEANUP_POLICIES),
         "delete (retention), compact (keep the latest record per key), both, or neither.",
         _S("log.cleanup.policy"), as_set=True),
    _key("min.cleanable.dirty.ratio", _DOUBLE, 0.5, between(0, 1),
         "Dirty/total ratio above which a compacted log is cleaned.", _S("log.cleaner.min.cleanable.ratio")),
    _key("min.compaction.lag.ms", _LONG, 0, at_least(0),
         "Minimum age of a record before it may be compacted.", _S("log.cleaner.min.compaction.lag.ms")),
    _key("max.compaction.lag.ms", _LONG, INT64_MAX, at_least(1),
         "Maximum age of an uncompacted record before the log is cleaned regardless of ratio.",
         _S("log.cleaner.max.compaction.lag.ms")),
    _key("delete.retention.ms", _LONG, 86400000, at_least(0),
         "How long tombstones and transaction markers survive after the delete horizon is set.",
         _S("log.cleaner.delete.retention.ms")),
    _key("file.delete.delay.ms", _LONG, 60000, at_least(0),
         "Delay between renaming a segment to .deleted and unlinking it.", _S("log.segment.delete.delay.ms")),
    _key("flush.messages", _LONG, INT64_MAX, at_least(1),
         "Force an fsync after this many appended messages.", _S("log.flush.interval.messages")),
    _key("flush.ms", _LONG, INT64_MAX, at_least(0),
         "Force an fsync when the last one is older than this.",
         _S("log.flush.interval.ms"), _S("log.flush.scheduler.interval.ms")),
    _key("message.timestamp.type", _STR, "CreateTime", OneOf(_TIMESTAMP_TYPES),
         "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock.",
         _S("log.message.timestamp.type")),
    _key("message.timestamp.before.max.ms", _LONG, INT64_MAX, at_least(0),
         "How far in the past a CreateTime timestamp may lie.", _S("log.message.timestamp.before.max.ms")),
    _key("message.timestamp.after.max.ms", _LONG, 3600000, at_least(0),
         "How far in the future a CreateTime timestamp may lie.", _S("log.message.timestamp.after.max.ms")),
    _key("max.message.bytes", _INT, 1048588, at_least(0),
         "Largest record batch accepted, including the 12-byte log overhead.", _S("message.max.bytes")),
    _key("preallocate", _BOOL, False, None,
         "Create new .log files at full segment.bytes length.", _S("log.preallocate")),
    _key("compression.type", _STR, "producer", OneOf(_COMPRESSION_TYPES),
         "Codec of stored batches; producer keeps the producer's.", _S("compression.type")),
    _key("compression.gzip.level", _INT, -1, _GZIP_LEVEL,
         "gzip level when compression.type=gzip.", _S("compression.gzip.level")),
    _key("compression.lz4.level", _INT, 9, _LZ4_LEVEL,
         "lz4 level when compression.type=lz4.", _S("compression.lz4.level")),
    _key("compression.zstd.level", _INT, 3, _ZSTD_LEVEL,
         "zstd level when compression.type=zstd.", _S("compression.zstd.level")),
    _key("unclean.leader.election.enable", _BOOL, False, None,
         "Replication setting; accepted for compatibility, unused by storage.",
         _S("unclean.leader.election.enable")),
    _key("min.insync.replicas", _INT, 1, at_least(1),
         "Replication setting; accepted for compatibility, unused by storage.", _S("min.insync.replicas")),
    _key("leader.replication.throttled.replicas", _LIST, (), ThrottledReplicas(),
         "Replication throttle; accepted for compatibility, unused by storage."),
    _key("follower.replication.throttled.replicas", _LIST, (), ThrottledReplicas(),
         "Replication throttle; accepted for compatibility, unused by storage."),
    _key("remote.storage.enable", _BOOL, False, None,
         "Tiered storage: copy sealed segments to the remote store (remote.log.storage.uri) and keep only "
         "local.retention.* on local disk; retention.* and the log start offset delete remote segments too "
         "(both tiers). Needs "
         "remote.log.storage.system.enable=true on the broker. Compacted topics may be tiered too (Kafka "
         "refuses them): the cleaner compacts their remote segments as well; internal topics never are."),
    _key("local.retention.ms", _LONG, -2, at_least(-2),
         "Tiered topics: age after which a segment already copied to the remote store leaves local disk; "
         "-2 = retention.ms. Must not be -1 or more than retention.ms when retention.ms is not -1.",
         _S("log.local.retention.ms"), field_name="configured_local_retention_ms"),
    _key("local.retention.bytes", _LONG, -2, at_least(-2),
         "Tiered topics: local size above which segments already copied to the remote store leave local "
         "disk; -2 = retention.bytes. Must not be -1 or more than retention.bytes when retention.bytes is "
         "not -1.", _S("log.local.retention.bytes"), field_name="configured_local_retention_bytes"),
    _key("remote.log.copy.disable", _BOOL, False, None,
         "Tiered topics: stop copying to the remote store; local data follows retention.* (so "
         "local.retention.* must be -2 or equal to it). Remote data becomes read-only: retention.* still "
         "deletes remote segments."),
    _key("remote.log.delete.on.disable", _BOOL, False, None,
         "Must be true to turn remote.storage.enable from true to false; the topic's remote data is then "
         "deleted (crash-safe: a pending-deletion object in the store, finished by the next start) and "
         "each partition's log start offset moves to its local log start offset, as Kafka does."),
)

TOPIC_CONFIGS: Mapping[str, ConfigKey] = MappingProxyType({key.name: key for key in _TOPIC_KEYS})

_BROKER_KEYS = (
    # broker synonyms of topic configs (same types; validators as Kafka's broker definitions)
    _key("log.segment.bytes", _INT, 1073741824, at_least(SEGMENT_BYTES_MIN), "Default of segment.bytes."),
    _key("log.roll.ms", _LONG, None, None, "Default of segment.ms; wins over log.roll.hours."),
    _key("log.roll.hours", _INT, 168, at_least(1), "Default of segment.ms, in hours."),
    _key("log.roll.jitter.ms", _LONG, None, None, "Default of segment.jitter.ms; wins over log.roll.jitter.hours."),
    _key("log.roll.jitter.hours", _INT, 0, at_least(0), "Default of segment.jitter.ms, in hours."),
    _key("log.index.size.max.bytes", _INT, 10485760, at_least(SEGMENT_INDEX_BYTES_MIN),
         "Default of segment.index.bytes."),
    _key("log.index.interval.bytes", _INT, 4096, at_least(0), "Default of index.interval.bytes."),
    _key("log.retention.bytes", _LONG, -1, None, "Default of retention.bytes."),
    _key("log.retention.ms", _LONG, None, None, "Default of retention.ms; wins over minutes and hours."),
    _key("log.retention.minutes", _INT, None, None, "Default of retention.ms, in minutes; wins over hours."),
    _key("log.retention.hours", _INT, 168, None, "Default of retention.ms, in hours."),
    _key("log.cleanup.policy", _LIST, ("delete",), EachOneOf(_CLEANUP_POLICIES), "Default of cleanup.policy."),
    _key("log.cleaner.min.cleanable.ratio", _DOUBLE, 0.5, between(0, 1), "Default of min.cleanable.dirty.ratio."),
    _key("log.cleaner.min.compaction.lag.ms", _LONG, 0, at_least(0), "Default of min.compaction.lag.ms."),
    _key("log.cleaner.max.compaction.lag.ms", _LONG, INT64_MAX, at_least(1), "Default of max.compaction.lag.ms."),
    _key("log.cleaner.delete.retention.ms", _LONG, 86400000, at_least(0), "Default of delete.retention.ms."),
    _key("log.segment.delete.delay.ms", _LONG, 60000, at_least(0), "Default of file.delete.delay.ms."),
    _key("log.flush.interval.messages", _LONG, INT64_MAX, at_least(1), "Default of flush.messages."),
    _key("log.flush.interval.ms", _LONG, None, None, "Default of flush.ms; wins over the scheduler interval."),
    _key("log.flush.scheduler.interval.ms", _LONG, INT64_MAX, None,
         "Period of the time-based flush task; also the last fallback of flush.ms."),
    _key("log.message.timestamp.type", _STR, "CreateTime", OneOf(_TIMESTAMP_TYPES),
         "Default of message.timestamp.type."),
    _key("log.message.timestamp.before.max.ms", _LONG, INT64_MAX, at_least(0),
         "Default of message.timestamp.before.max.ms."),
    _key("log.message.timestamp.after.max.ms", _LONG, 3600000, at_least(0),
         "Default of message.timestamp.after.max.ms."),
    _key("message.max.bytes", _INT, 1048588, at_least(0),
         "Default of max.message.bytes; also the cleaner's largest I/O buffer."),
    _key("log.preallocate", _BOOL, False, None, "Default of preallocate."),
    _key("compression.type", _STR, "producer", OneOf(_COMPRESSION_TYPES), "Default of compression.type."),
    _key("compression.gzip.level", _INT, -1, _GZIP_LEVEL, "Default of compression.gzip.level."),
    _key("compression.lz4.level", _INT, 9, _LZ4_LEVEL, "Default of compression.lz4.level."),
    _key("compression.zstd.level", _INT, 3, _ZSTD_LEVEL, "Default of compression.zstd.level."),
    _key("unclean.leader.election.enable", _BOOL, False, None, "Default of unclean.leader.election.enable."),
    _key("min.insync.replicas", _INT, 1, at_least(1), "Default of min.insync.replicas."),
    _key("log.local.retention.ms", _LONG, -2, at_least(-2), "Default of local.retention.ms."),
    _key("log.local.retention.bytes", _LONG, -2, at_least(-2), "Default of local.retention.bytes."),
    # tiered storage (Kafka's RemoteLogManagerConfig, 4.x defaults)
    _key("remote.log.storage.system.enable", _BOOL, False, None,
         "Run tiered storage on this broker; required before any topic sets remote.storage.enable. Needs "
         "remote.log.storage.uri."),
    _key("remote.log.storage.uri", _STR, "", UriScheme(REMOTE_STORE_SCHEMES),
         "tidelog only: the remote store's location, e.g. s3://bucket/prefix, gs://bucket/prefix, "
         "abfs://container@account.dfs.core.windows.net/prefix, hdfs://namenode/path or file:///path. "
         "Its options (endpoint, credentials, region ...) are the rsm.config.* keys. Sensitive (an abfs "
         "SAS token may ride in its query): DescribeConfigs hides its value.", sensitive=True),
    _key("remote.log.storage.manager.impl.prefix", _STR, "rsm.config.", NonEmptyString(),
         "Prefix of the keys passed, prefix stripped, to the remote store as its options."),
    _key("remote.log.manager.task.interval.ms", _LONG, 30000, at_least(1),
         "Delay between two runs of each partition's copy and remote-retention tasks."),
    _key("remote.log.manager.task.retry.backoff.ms", _LONG, 500, at_least(1),
         "Wait before retrying a partition's copy after a retriable store error (unreachable, 5xx, "
         "throttled); doubles per failure in a row. Internal in Kafka, which reads none of the three retry keys."),
    _key("remote.log.manager.task.retry.backoff.max.ms", _LONG, 30000, at_least(1),
         "Longest wait before retrying a partition's copy."),
    _key("remote.log.manager.task.retry.jitter", _DOUBLE, 0.2, between(0, 0.5),
         "Random factor range [1 - jitter, 1 + jitter) applied to each retry wait."),
    _key("remote.log.manager.copier.thread.pool.size", _INT, 10, at_least(1),
         "Threads copying segments to the remote store."),
    _key("remote.log.manager.expiration.thread.pool.size", _INT, 10, at_least(1),
         "Threads running remote retention (deleting remote segments past retention.*, below the log "
         "start offset), after each copy pass."),
    _key("remote.log.reader.threads", _INT, 10, at_least(1),
         "Threads serving fetches and ListOffsets by timestamp that need the remote tier (started on the "
         "first remote read)."),
    _key("remote.log.reader.max.pending.tasks", _INT, 100, at_least(1),
         "Remote reads waiting for a reader thread at most; past it a fetch of a remote-only offset fails "
         "(UNKNOWN_SERVER_ERROR)."),
    _key("remote.log.index.file.cache.total.size.bytes", _LONG, 1073741824, at_least(1),
         "Local disk budget of the cache of remote segments' indexes (<first log dir>/remote-log-index-cache, "
         "least recently used evicted)."),
    _key("remote.log.manager.copy.max.bytes.per.second", _LONG, INT64_MAX, at_least(1),
         "Broker-wide upload quota to the remote store."),
    _key("remote.log.manager.fetch.max.bytes.per.second", _LONG, INT64_MAX, at_least(1),
         "Broker-wide read quota from the remote store. Accepted; not used yet (remote reads)."),
    _key("remote.fetch.max.wait.ms", _INT, 500, at_least(1),
         "Longest wait of a fetch for its remote reads; a read not done by then comes back empty without an "
         "error."),
    _key("remote.list.offsets.request.timeout.ms", _LONG, 30000, at_least(1),
         "Timeout of a ListOffsets by timestamp in the remote tier (REQUEST_TIMED_OUT past it)."),
    # broker-only
    _key("log.dirs", _LIST, None, DirList(), "Log directories; wins over log.dir."),
    _key("log.dir", _LIST, ("/tmp/kafka-logs",), DirList(), "Log directory used when log.dirs is unset."),
    _key("log.retention.check.interval.ms", _LONG, 300000, at_least(1), "Period of the retention task."),
    _key("log.flush.offset.checkpoint.interval.ms", _INT, 60000, at_least(0),
         "Period of the recovery-point checkpoint."),
    _key("log.flush.start.offset.checkpoint.interval.ms", _INT, 60000, at_least(0),
         "Period of the log-start-offset checkpoint."),
    _key("replica.high.watermark.checkpoint.interval.ms", _LONG, 5000, None,
         "Period of the high-watermark (replication-offset) checkpoint."),
    _key("num.recovery.threads.per.data.dir", _INT, 2, at_least(1),
         "Threads per log dir for loading and closing logs."),
    _key("log.initial.task.delay.ms", _LONG, 30000, at_least(0),
         "Delay before the first run of retention, flush and checkpoint tasks."),
    _key("log.dir.failure.timeout.ms", _LONG, 30000, at_least(1),
         "How long a failed log dir may go unreported before the broker stops."),
    _key("num.partitions", _INT, 1, at_least(1), "Partitions of an automatically created topic."),
    _key("auto.create.topics.enable", _BOOL, True, None, "Create topics on first use."),
    _key("log.cleaner.enable", _BOOL, True, None,
         "Run the cleaner; if false compacted logs are neither compacted nor deleted (deprecated in 4.1)."),
    _key("log.cleaner.threads", _INT, 1, at_least(0), "Cleaner threads."),
    _key("log.cleaner.dedupe.buffer.size", _LONG, 134217728, None,
         "Offset-map memory, in bytes, summed over all cleaner threads."),
    _key("log.cleaner.io.buffer.load.factor", _DOUBLE, 0.9, None, "Maximum fill ratio of the offset map."),
    _key("log.cleaner.io.buffer.size", _INT, 524288, at_least(0),
         "Read plus write buffer memory, summed over all cleaner threads."),
    _key("log.cleaner.io.max.bytes.per.second", _DOUBLE, DOUBLE_MAX, None,
         "Throttle of the cleaner's read plus write I/O."),
    _key("log.cleaner.backoff.ms", _LONG, 15000, at_least(0), "Cleaner sleep when nothing was cleanable."),
    # the Kafka-protocol server's keys (tidelog.server.config parses the listener syntax)
    _key("listeners", _STR, "PLAINTEXT://127.0.0.1:9092", None,
         "Comma-separated NAME://host:port the server listens on (loopback only by default)."),
    _key("advertised.listeners", _STR, "", None, "NAME://host:port told to clients, per listener name."),
    _key("listener.security.protocol.map", _STR, "", None, "NAME:PROTOCOL pairs (a name is its protocol by default)."),
    _key("socket.request.max.bytes", _INT, 104857600, at_least(1),
         "Largest request size prefix accepted; a larger one closes the connection."),
    _key("queued.max.request.bytes", _LONG, 209715200, None,
         "Bytes of requests being received or handled at once, over every connection; beyond it the broker "
         "stops reading request bodies until some are done (<= 0: unbounded, Kafka's default -1). At least "
         "socket.request.max.bytes when set; frames up to 64 KiB do not count."),
    _key("fetch.max.bytes", _INT, 57671680, at_least(1024),  # Kafka's minimum
         "Most bytes of records one Fetch response holds (min with the request's max_bytes); the first "
         "batch is returned whole even when larger."),
    _key("producer.id.expiration.ms", _INT, 86400000, at_least(1),
         "Inactivity after which a producer id expires; until then the cleaner keeps its last batch."),
    _key("producer.id.expiration.check.interval.ms", _INT, 600000, at_least(1),
         "Period of each log's check for expired producer ids."),
    # tidelog-only keys (Kafka has none of these; a Kafka broker ignores them with a warning)
    _key("tidelog.cleaner.engine", _STR, "in-process", OneOf(CLEANER_ENGINES),
         "tidelog only: where the log cleaner dedupes and rewrites: in-process (this process's cleaner "
         "threads) or spark (a Spark job per pass; needs pyspark, the 'spark' extra). Same bytes either way."),
    _key("tidelog.cleaner.spark.master", _STR, "local[2]", None,
         "tidelog only: the Spark master URL of the spark cleaner engine (executors must see the log dirs)."),
    _key("tidelog.produce.decompression.memory.bytes", _LONG, 67108864, at_least(1 << 20),
         "tidelog only: decompressed records Produce validation may hold at once, over every connection. "
         "A compressed batch reserves what max.message.bytes allows it uncompressed (at most all of this) "
         "before it is decompressed; beyond it, produces of compressed batches wait their turn. At least 1 MiB."),
    _key("tidelog.server.event.loop", _STR, "uvloop", OneOf(EVENT_LOOPS),
         "tidelog only: the event loop tidelog serve runs its connections on: asyncio (Python's own) or "
         "uvloop (libuv's, the uvloop package). Same protocol and behaviour either way."),
    _key("tidelog.server.allocator.retain.bytes", _INT, 8388608, at_least(0),
         "tidelog only: freed memory tidelog serve's C allocator (glibc) keeps for reuse instead of returning "
         "it to the kernel, with blocks up to 4 MiB served from its heap: large requests then reuse warm pages "
         "rather than fault in fresh ones. 0 keeps glibc's own thresholds; no effect with another C library."),
    _key("tidelog.spark.staging.lease.ms", _LONG, 1800000, at_least(1),
         "tidelog only: how long a Spark job staged through this broker (format(\"tidelog\") with "
         "kafka.bootstrap.servers) keeps its staging dir without staging anything more; an expired dir "
         "that no pending commit needs is deleted (periodically, and at start-up). It must outlast the longest "
         "pause of a job between two chunks and before its commit."),
    # the group coordinator's keys (tidelog.server.groups)
    _key("group.initial.rebalance.delay.ms", _INT, 3000, at_least(0),
         "How long the first rebalance of an empty group waits for more members to join."),
    _key("group.min.session.timeout.ms", _INT, 6000, at_least(0), "Smallest session timeout a member may ask for."),
    _key("group.max.session.timeout.ms", _INT, 1800000, at_least(0), "Largest session timeout a member may ask for."),
    _key("group.max.size", _INT, 2147483647, at_least(1), "Most members one classic group may hold."),
    _key("offsets.topic.num.partitions", _INT, 50, at_least(1),
         "Partitions of __consumer_offsets when it is created (a group's partition is hash(group) mod this)."),
    _key("offsets.topic.segment.bytes", _INT, 104857600, at_least(1), "segment.bytes of __consumer_offsets."),
    _key("offsets.retention.minutes", _INT, 10080, at_least(1),
         "How long the committed offsets of an empty group are kept after it emptied (or after the commit)."),
    _key("offsets.retention.check.interval.ms", _LONG, 600000, at_least(1), "Period of the offsets expiration task."),
    # the transaction coordinator's keys (tidelog.server.transactions)
    _key("transaction.max.timeout.ms", _INT, 900000, at_least(1),
         "Largest transaction.timeout.ms a transactional producer may ask for (INVALID_TRANSACTION_TIMEOUT above)."),
    _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _INT, 10000, at_least(1),
         "Period of the scan that fences and aborts transactions open longer than their timeout."),
    _key("transactional.id.expiration.ms", _INT, 604800000, at_least(1),
         "How long a transactional id with no transaction open and no request is kept before it expires."),
    _key("transaction.remove.expired.transaction.cleanup.interval.ms", _INT, 3600000, at_least(1),
         "Period of the task that removes expired transactional ids."),
    _key("transaction.state.log.num.partitions", _INT, 50, at_least(1),
         "Partitions of __transaction_state when it is created (an id's partition is hash(id) mod this)."),
    _key("transaction.state.log.replication.factor", _INT, 3, at_least(1),
         "Replication factor of __transaction_state; a single node keeps one replica whatever it says."),
    _key("transaction.state.log.min.isr", _INT, 2, at_least(1),
         "min.insync.replicas of __transaction_state in Kafka; a single node is its own ISR, so unused."),
    _key("transaction.state.log.segment.bytes", _INT, 104857600, at_least(1), "segment.bytes of __transaction_state."),
    _key("transaction.state.log.load.buffer.size", _INT, 5242880, at_least(1),
         "Bytes read at a time when __transaction_state is loaded at start-up."),
    _key("transaction.partition.verification.enable", _BOOL, True, None,
         "Whether a transactional batch is checked with the coordinator (its partition in the producer's "
         "transaction, its epoch current) before it is appended."),
    # security of the server's listeners (tidelog.server.security); secrets (ssl.key.password,
    # ssl.keystore.key, ssl.keystore.certificate.chain, ssl.truststore.certificates) stay untyped so
    # DescribeConfigs never shows them
    _key("ssl.keystore.type", _STR, "JKS", OneOf(("JKS", "PKCS12", "PEM")),
         "Format of the TLS listeners' keystore; tidelog serves PEM only."),
    _key("ssl.keystore.location", _STR, None, None,
         "PEM file holding the TLS listeners' private key and certificate chain."),
    _key("ssl.truststore.type", _STR, "JKS", OneOf(("JKS", "PKCS12", "PEM")),
         "Format of the truststore that verifies client certificates; tidelog reads PEM only."),
    _key("ssl.truststore.location", _STR, None, None,
         "PEM file of the CA certificates trusted for client certificates."),
    _key("ssl.client.auth", _STR, "none", OneOf(("required", "requested", "none")),
         "Whether TLS listeners ask clients for a certificate: required, requested or none."),
    _key("ssl.enabled.protocols", _LIST, ("TLSv1.2", "TLSv1.3"), EachOneOf(("TLSv1.2", "TLSv1.3")),
         "TLS versions the TLS listeners accept."),
    _key("sasl.enabled.mechanisms", _LIST, ("GSSAPI",), None,
         "SASL mechanisms of SASL listeners; tidelog serves PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512."),
    _key("sasl.server.max.receive.size", _INT, 524288, at_least(1),
         "Largest request accepted before a SASL client has authenticated; a larger one closes the connection."),
    # connection limits of the server (tidelog.server.server, tidelog.server.connection)
    _key("connections.max.idle.ms", _LONG, 600000, None,
         "A connection with no request for this long is closed (negative: never)."),
    _key("max.connections", _INT, 2147483647, at_least(0),
         "Most client connections open at once, over every listener (listener.name.<name>.max.connections: "
         "per listener); beyond it a new connection is closed as soon as it is accepted."),
    _key("max.connections.per.ip", _INT, 2147483647, at_least(0),
         "Most connections open at once from one IP address; beyond it a new one from there is closed."),
    _key("max.connections.per.ip.overrides", _STR, "", None,
         "Comma-separated host:count (IP or host name) overriding max.connections.per.ip for those hosts."),
    # the Prometheus endpoint of tidelog serve (tidelog.server.metrics)
    _key("metrics.listener", _STR, "", None,
         "tidelog only (Kafka has no Prometheus endpoint of its own): http://host:port where tidelog serve "
         "answers GET /metrics in Prometheus's text format; port 0 takes a free port; empty: no endpoint."),
    _key("tidelog.metrics.min.render.interval.ms", _LONG, 1000, at_least(0),
         "tidelog only: a scrape of the metrics endpoint within this many ms of its last rendering (longer when "
         "rendering is costly: it takes at most 2% of a core) gets the same bytes, so however many scrapers come, "
         "and however often, the broker builds at most one exposition per interval; 0: every scrape renders."),
)

BROKER_CONFIGS: Mapping[str, ConfigKey] = MappingProxyType({key.name: key for key in _BROKER_KEYS})

_TIMESTAMP_REPLACEMENT = "use {0}message.timestamp.before.max.ms and {0}message.timestamp.after.max.ms instead"
_FORMAT_GONE = "the v2 record format is always used (KIP-724)"
_DOWNCONVERSION_GONE = "brokers no longer down-convert records (KIP-724)"
REMOVED_CONFIGS: Mapping[str, str] = MappingProxyType({
    "message.timestamp.difference.max.ms": _TIMESTAMP_REPLACEMENT.format(""),
    "log.message.timestamp.difference.max.ms": _TIMESTAMP_REPLACEMENT.format("log."),
    "message.format.version": _FORMAT_GONE,
    "log.message.format.version": _FORMAT_GONE,
    "message.downconversion.enable": _DOWNCONVERSION_GONE,
    "log.message.downconversion.enable": _DOWNCONVERSION_GONE,
})


def check_not_removed(name: str) -> None:
    """Raise :class:`ConfigError` if ``name`` is a key Kafka 4.0 removed, naming the replacement."""
    if name in REMOVED_CONFIGS:
        raise ConfigError(f"Config {name} was removed in Kafka 4.0: {REMOVED_CONFIGS[name]}", config=name)


def check_topic_config_names(names: Iterable[str]) -> None:
    """Raise :class:`ConfigError` for the first removed or unknown topic config name."""
    for name in names:
        check_not_removed(name)
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {name}", config=name)



def check_local_retention(local_name: str, local_value: int, retention_name: str, retention_value: int,
                          *, config: str | None = None) -> None:
    """Kafka's ``validateRemoteStorageRetentionSize``/``Time``: when ``retention_value`` is limited
    (not negative), ``local_value`` must be -2, or neither -1 nor more than it. Kafka's message,
    naming the topic configs; ``config`` names the key to report instead (a broker synonym)."""
    if retention_value < 0 or local_value == -2:
        return
    if local_value == -1:
        reason = f"Value must not be -1 as {retention_name} value is set as {retention_value}."
    elif local_value > retention_value:
        reason = f"Value must not be more than {retention_name} property value: {retention_value}"
    else:
        return
    raise invalid_value(config or local_name, local_value, reason, shown_name=local_name)


def check_compaction_lags(min_lag_ms: int, max_lag_ms: int) -> None:
    """Raise :class:`ConfigError` if ``min.compaction.lag.ms`` > ``max.compaction.lag.ms``."""
    if min_lag_ms > max_lag_ms:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag_ms}) > "
            f"max.compaction.lag.ms ({max_lag_ms})",
            config="min.compaction.lag.ms",
        )

