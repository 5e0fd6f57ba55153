"""The part of a read not yet tiered, through the broker's Fetch API, for reads of a store path
given ``kafka.bootstrap.servers`` (:mod:`tidelog.spark.remote_source`), through the Spark side's
one broker client (:mod:`tidelog.spark.broker_client`).

* **options** (:func:`parse_broker_options`): ``kafka.bootstrap.servers``,
  ``kafkaConsumer.pollTimeoutMs`` and ``kafka.isolation.level``; no other ``kafka.`` option applies.
* **driver** (:class:`BrokerPartitions`): the partitions are the broker's (Metadata), earliest is
  the broker's log start offset (ListOffsets -2: ``delete-records`` and retention move it, the
  first remote segment does not), latest its high watermark (ListOffsets -1), or under
  read_committed its last stable offset (ListOffsets -1 with isolation level 1, as Kafka's
  read_committed consumer asks); timestamps are resolved by the broker's ListOffsets (which
  searches both tiers). The remote/broker boundary of each partition is its highest tiered
  offset + 1, from the remote metadata (the caller's).
* **executors** (:func:`read_tail`): Fetch requests (8 MiB, the read's isolation level) from the
  offset asked for; the raw batches are turned into rows by the local reader's
  :func:`~tidelog.spark.arrow_rows.record_batches` (the one row builder), keeping offsets in
  ``[lo, hi)`` (Fetch returns whole batches, compaction leaves gaps). A response ending in a
  partial batch is read up to its last whole batch. Under read_committed each response's aborted
  transactions feed a fresh :class:`~tidelog.storage.read_committed.AbortedBatchFilter` for that
  response's batches, as Kafka's consumer does per fetched partition; read_uncommitted sends the
  same requests as before read_committed existed, and no other.
* **the store part's straddling aborts** (:func:`aborted_past_boundary`): a transaction whose
  data lies in the remote tier but whose ABORT marker lies past the boundary is indexed in a
  local ``.txnindex`` only; one read_committed Fetch of one batch at the boundary lists it (the
  broker lists every aborted transaction whose marker is at or past the fetch offset and whose
  first offset is below the end of the data returned).

**The boundary moving.** When a range planned for the broker has been tiered and deleted
locally since planning, the broker answers ``OFFSET_MOVED_TO_TIERED_STORAGE`` (a broker that
does not serve the remote tier to consumers) or, from tidelog's broker, serves it from the
remote tier itself, or answers empty when its remote read took longer than
``remote.fetch.max.wait.ms``. The first and the last make the task reload the partition's remote
metadata and read what the store now holds from the store (``store_read``), then go on with the
broker: every offset is read once, from one tier.

**Faults.** A broker that does not answer, or answers with a retriable error, is asked again
for up to ``kafkaConsumer.pollTimeoutMs`` (as Spark's Kafka source, default 120 s), then the task fails with :class:`BrokerReadError` naming the
partition, the offset range and the broker. Offsets below the log start (``OFFSET_OUT_OF_RANGE``)
and a partition gone are data loss under ``failOnDataLoss``, as in Spark's Kafka source.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.spark import broker_client as bc
from tidelog.spark import options as o
from tidelog.spark.arrow_rows import record_batches
from tidelog.storage.log_view import PartitionBounds
from tidelog.storage.read_committed import AbortedBatchFilter
from tidelog.storage.txn_index import AbortedTxn
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

    _Step = tuple[Iterator[pa.RecordBatch], int] | None

log = logging.getLogger(__name__)

FETCH_BYTES = 8 << 20
"""Bytes of records asked for per Fetch (the broker may send less, or one larger batch)."""
BOUNDARY_FETCH_BYTES = 1
"""Bytes asked for by the Fetch at the boundary (:func:`aborted_past_boundary`): its first batch
only, sent whole; only its aborted transactions are used."""
BACKOFF_MS = 100
"""The wait between two tries (doubled up to 1 s)."""

BOOTSTRAP = "kafka.bootstrap.servers"
POLL_TIMEOUT = "kafkaconsumer.polltimeoutms"
POLL_TIMEOUT_MS = 120_000
"""Spark's default for ``kafkaConsumer.pollTimeoutMs`` (``spark.network.timeout``)."""

StoreRead = Callable[[int, int], "tuple[int, Iterator[pa.RecordBatch]] | None"]
"""``store_read(lo, hi)``: None when the remote tier does not hold ``lo``, else the end of what it
holds in ``[lo, hi)`` and the rows of ``[lo, that end)`` read from the store."""

_CLIENTS: dict[str, bc.BrokerClient] = {}  # per executor process: connections kept across tasks


class BrokerReadError(RuntimeError):
    """The broker part of a read failed (no answer, an error code that is not data loss); the
    message names the partition, the offset range and the broker."""


def executor_client(bootstrap: str) -> bc.BrokerClient:
    """This process's client of ``bootstrap`` (reused by later tasks of a reused worker)."""
    client = _CLIENTS.get(bootstrap)
    if client is None:
        client = _CLIENTS[bootstrap] = bc.BrokerClient(bootstrap)
    return client


def parse_broker_options(lowered: dict[str, str]) -> tuple[str, int]:
    """The broker options of a store read, popped from ``lowered`` (option names lowercased):
    ``kafka.bootstrap.servers`` ('' when not given) and ``kafkaConsumer.pollTimeoutMs``.
    :class:`~tidelog.spark.options.SourceOptionError` for a malformed one or any other
    ``kafka.`` option (the tail's client takes no other), ``kafka.isolation.level`` excepted
    (left in ``lowered``: the source's options parse it)."""
    from tidelog.errors import InvalidRequestError

    given = BOOTSTRAP in lowered
    bootstrap = lowered.pop(BOOTSTRAP, "").strip()
    if given:
        try:
            bc.parse_bootstrap(bootstrap)
        except InvalidRequestError as e:
            raise o.SourceOptionError(str(e)) from None
    poll_timeout_ms = POLL_TIMEOUT_MS
    if bootstrap and POLL_TIMEOUT in lowered:
        text = lowered.pop(POLL_TIMEOUT).strip()
        if not text.isdigit() or int(text) <= 0:
            raise o.SourceOptionError(f"Option 'kafkaConsumer.pollTimeoutMs' must be a positive number of "
                                      f"milliseconds, got '{text}'")
        poll_timeout_ms = int(text)
    others = sorted(k for k in lowered if k.startswith("kafka.") and k != o.ISOLATION_LEVEL)
    if others:
        key = others[0]
        raise o.SourceOptionError(
            f"Kafka option '{key}' is not supported with a store path: the tail is read by tidelog's own "
            f"Fetch client, which takes only '{BOOTSTRAP}' (PLAINTEXT listeners). Remove '{key}'.")
    return bootstrap, poll_timeout_ms


# --- driver ---------------------------------------------------------------------------------

class BrokerPartitions:
    """The subscribed topics' partitions and topic ids (``topic_ids``: by name, Kafka's base64
    form) as the broker has them, their bounds and timestamp searches at the read's isolation
    level (driver side; each call one short-lived connection)."""

    def __init__(self, bootstrap: str, parsed: o.SourceOptions) -> None:
        self.bootstrap = bootstrap
        self.isolation_level = bc.READ_COMMITTED if parsed.read_committed else bc.READ_UNCOMMITTED
        sub = parsed.subscription
        topics = (None if sub.kind == o.SUBSCRIBE_PATTERN else
                  sorted(set(sub.topics) if sub.kind == o.SUBSCRIBE else {tp.topic for tp in sub.assigned}))
        def ask(c: bc.BrokerClient) -> tuple[dict[str, list[int]], dict[str, str]]:
            return c.metadata(topics), c.topic_ids

        found, self.topic_ids = self._ask("read the topics' metadata", ask)
        self.existing = {TopicPartition(t, p) for t, ps in found.items() for p in ps}

    def bounds(self, partitions: list[TopicPartition]) -> dict[TopicPartition, PartitionBounds]:
        """Per partition: the broker's log start offset and high watermark, or last stable offset
        under read_committed (two ListOffsets)."""
        earliest = self.offsets(partitions, bc.EARLIEST_TIMESTAMP)
        latest = self.offsets(partitions, bc.LATEST_TIMESTAMP)
        return {tp: PartitionBounds(tp, earliest[tp], latest[tp]) for tp in partitions}

    def offsets(self, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """One ListOffsets of ``partitions`` for ``timestamp`` (-2 log start, -1 high watermark
        or, under read_committed, last stable offset)."""
        if not partitions:
            return {}
        return self._ask("list the partitions' offsets", lambda c: c.list_offsets(
            {tp: timestamp for tp in partitions}, self.isolation_level))

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> int | None:
        """ListOffsets by time of ``tp`` (both tiers, searched by the broker); None: no match."""
        found = self._ask(f"find the offset of {tp} for timestamp {timestamp}",
                          lambda c: c.list_offsets({tp: timestamp}, self.isolation_level))[tp]
        return None if found < 0 else found

    def _ask(self, what: str, call):  # type: ignore[no-untyped-def]
        try:
            with bc.BrokerClient(self.bootstrap) as client:
                return call(client)
        except (bc.BrokerUnreachableError, bc.BrokerReplyError) as e:
            raise BrokerReadError(f"Cannot {what} from the broker at {self.bootstrap} (option "
                                  f"'kafka.bootstrap.servers'): {e}") from e


class BrokerView:
    """One partition's timestamp search through the broker (for :func:`~tidelog.spark.ranges.resolve`)."""

    def __init__(self, broker: BrokerPartitions, tp: TopicPartition) -> None:
        self.broker, self.tp = broker, tp

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        return self.broker.offset_for_timestamp(self.tp, timestamp)


# --- executors ------------------------------------------------------------------------------

def read_tail(parsed: o.SourceOptions, client: bc.BrokerClient, tp: TopicPartition, lo: int, hi: int,
              store_read: StoreRead, retry_ms: int, clock: Clock = SYSTEM_CLOCK) -> Iterator[pa.RecordBatch]:
    """Rows of offsets ``[lo, hi)`` of ``tp`` through Fetch (see the module doc); a broker not
    answering (or answering a retriable error) is asked again for ``retry_ms``."""
    reader = _TailRead(parsed, client, tp, hi, store_read, retry_ms, clock)
    offset = lo
    while offset < hi:
        step = reader.step(offset)
        if step is None:
            return  # the rest is lost and failOnDataLoss is false
        rows, offset = step
        yield from rows


def aborted_past_boundary(parsed: o.SourceOptions, client: bc.BrokerClient, tp: TopicPartition, boundary: int,
                          retry_ms: int, clock: Clock = SYSTEM_CLOCK) -> list[AbortedTxn] | None:
    """The aborted transactions of ``tp`` whose ABORT marker lies at or past ``boundary`` and
    whose first offset is below the end of the first batch there: the aborted list of one
    read_committed Fetch of one batch at ``boundary`` (see the module doc). Entries carry the
    producer id and first offset only (what :class:`AbortedBatchFilter` reads). Returns ``[]``
    when the log ends at ``boundary`` (no marker lies past it), None when the broker answers
    ``OFFSET_MOVED_TO_TIERED_STORAGE`` (the boundary was tiered since: the caller searches the
    store again). When the broker's last stable offset is at ``boundary`` (a transaction begins
    there and is open) the Fetch at ``boundary`` answers no records and no list; the batch
    before it is asked for then (:func:`_last_tiered_batch`), and failing that the broker is
    asked again, for up to ``retry_ms``, then :class:`BrokerReadError`; likewise a broker not
    answering."""
    reader = _TailRead(parsed, client, tp, boundary + 1, lambda lo, hi: None, retry_ms, clock)
    while True:
        try:
            got = client.fetch(tp, boundary, BOUNDARY_FETCH_BYTES, isolation_level=bc.READ_COMMITTED)
        except bc.BrokerUnreachableError as e:
            reader.retry(boundary, str(e))
            continue
        if got.error == bc.OFFSET_MOVED_TO_TIERED_STORAGE:
            return None
        if got.error == bc.NONE:
            if got.records:
                return [AbortedTxn(pid, first, -1, -1) for pid, first in got.aborted]
            if boundary >= got.high_watermark:
                return []
            before = _last_tiered_batch(client, tp, boundary)
            if before is not None:
                return before
            reader.retry(boundary, f"the last stable offset ({got.last_stable_offset}) is at the boundary between "
                                   f"the remote tier and the broker and the batch before it is not served: the "
                                   f"aborted transactions of the records below the boundary are not known")
            continue
        if got.error in bc.RETRIABLE:
            client.forget_leaders()
            reader.retry(boundary, bc.error_name(got.error))
            continue
        raise BrokerReadError(f"Cannot fetch the aborted transactions at offset {boundary} of {tp} (the boundary "
                              f"between the remote tier and the broker at {client.bootstrap}): "
                              f"{bc.error_name(got.error)}")


def _last_tiered_batch(client: bc.BrokerClient, tp: TopicPartition, boundary: int) -> list[AbortedTxn] | None:
    """The aborted list of a read_committed Fetch of the one batch ending at ``boundary - 1``
    (the last tiered offset): the broker lists every aborted transaction whose marker is at or
    past ``boundary - 1`` and whose first offset is below ``boundary``, which covers those
    straddling the boundary. None when that batch is not served (no records, an error, no
    answer): the caller asks again later."""
    if boundary <= 0:
        return None
    try:
        got = client.fetch(tp, boundary - 1, BOUNDARY_FETCH_BYTES, isolation_level=bc.READ_COMMITTED)
    except bc.BrokerUnreachableError:
        return None
    if got.error != bc.NONE or not got.records:
        return None
    return [AbortedTxn(pid, first, -1, -1) for pid, first in got.aborted]


_NOTHING: tuple = ()


class _TailRead:
    """One :func:`read_tail` call's retries and error handling. Each step gives the rows it read
    and the offset to go on from (the same one after a wait), or None when the rest is lost."""

    def __init__(self, parsed: o.SourceOptions, client: bc.BrokerClient, tp: TopicPartition, hi: int,
                 store_read: StoreRead, retry_ms: int, clock: Clock) -> None:
        self.parsed, self.client, self.tp, self.hi, self.store_read, self.clock = parsed, client, tp, hi, store_read, clock
        self.retry_ms = retry_ms
        self.failing_since: int | None = None
        self.backoff = BACKOFF_MS

    def where(self, offset: int) -> str:
        return f"offsets [{offset}, {self.hi}) of {self.tp} from the broker at {self.client.bootstrap}"

    def fetch(self, offset: int, max_bytes: int) -> bc.PartitionFetched:
        """One Fetch at the read's isolation level (read_uncommitted: the request as always)."""
        if self.parsed.read_committed:
            return self.client.fetch(self.tp, offset, max_bytes, isolation_level=bc.READ_COMMITTED)
        return self.client.fetch(self.tp, offset, max_bytes)

    def step(self, offset: int) -> _Step:
        try:
            got = self.fetch(offset, FETCH_BYTES)
        except bc.BrokerUnreachableError as e:
            return self.retry(offset, str(e))
        if got.error == bc.NONE:
            return self.records(offset, got)
        if got.error == bc.OFFSET_MOVED_TO_TIERED_STORAGE:
            return self.from_store(offset, "the broker answered OFFSET_MOVED_TO_TIERED_STORAGE")
        if got.error == bc.OFFSET_OUT_OF_RANGE:
            return self.out_of_range(offset)
        if got.error in bc.RETRIABLE or got.error == bc.UNKNOWN_TOPIC_OR_PARTITION:
            self.client.forget_leaders()
            if got.error == bc.UNKNOWN_TOPIC_OR_PARTITION and self.gone():
                return self.lost(offset, self.hi, "the partition does not exist any more")
            return self.retry(offset, bc.error_name(got.error))
        raise BrokerReadError(f"Cannot fetch {self.where(offset)}: {bc.error_name(got.error)}")

    def records(self, offset: int, got: bc.PartitionFetched) -> _Step:
        from tidelog.records.scan import walk_batch_headers

        walk = walk_batch_headers(got.records)
        last = walk.batches["last_offset"]
        if len(last) == 0:
            end, which = ((got.last_stable_offset, "last stable offset") if self.parsed.read_committed
                          else (got.high_watermark, "high watermark"))
            if offset >= end:
                return self.lost(offset, self.hi, f"the log now ends at {end}")
            return self.from_store(offset, f"the broker answered no records below its {which}", retry=True)
        self.failing_since, self.backoff = None, BACKOFF_MS
        aborted = (AbortedBatchFilter(AbortedTxn(pid, first, -1, -1) for pid, first in got.aborted)
                   if self.parsed.read_committed else None)
        rows = record_batches(got.records[:walk.end_position], self.tp.topic, self.tp.partition, offset, self.hi,
                              include_headers=self.parsed.include_headers, aborted=aborted)
        return rows, int(last[-1]) + 1

    def from_store(self, offset: int, why: str, retry: bool = False) -> _Step:
        """What the store now holds from ``offset``; else wait and ask the broker again
        (``retry``) or fail."""
        found = self.store_read(offset, self.hi)
        if found is not None:
            self.failing_since, self.backoff = None, BACKOFF_MS
            end, rows = found
            return rows, end
        if not retry:
            raise BrokerReadError(f"Cannot fetch {self.where(offset)}: {why}, and the remote tier does "
                                  f"not hold offset {offset}")
        return self.retry(offset, why)

    def out_of_range(self, offset: int) -> _Step:
        try:
            earliest = self.client.list_offsets({self.tp: bc.EARLIEST_TIMESTAMP})[self.tp]
            latest = self.client.list_offsets({self.tp: bc.LATEST_TIMESTAMP},
                                              bc.READ_COMMITTED if self.parsed.read_committed else bc.READ_UNCOMMITTED)[self.tp]
        except bc.BrokerUnreachableError as e:
            return self.retry(offset, str(e))
        except bc.BrokerReplyError as e:
            raise BrokerReadError(f"Cannot fetch {self.where(offset)}: OFFSET_OUT_OF_RANGE, then {e}") from e
        if offset < earliest:
            self.lost(offset, min(earliest, self.hi), f"the log start offset is now {earliest}")
            return (iter(_NOTHING), earliest) if earliest < self.hi else None
        if offset >= latest:
            return self.lost(offset, self.hi, f"the log now ends at {latest}")
        return self.retry(offset, "OFFSET_OUT_OF_RANGE within the log's bounds")

    def gone(self) -> bool:
        try:
            return self.tp.partition not in self.client.metadata([self.tp.topic]).get(self.tp.topic, [])
        except (bc.BrokerUnreachableError, bc.BrokerReplyError):
            return False

    def lost(self, lo: int, hi: int, why: str) -> None:
        from tidelog.spark.reader import loss

        loss(self.parsed, f"Cannot fetch offsets [{lo}, {hi}) of {self.tp}: {why}.")
        return None

    def retry(self, offset: int, why: str) -> _Step:
        """Wait and ask again, unless the broker has been failing for ``retry_ms``."""
        now = self.clock.milliseconds()
        if self.failing_since is None:
            self.failing_since = now
        elif now - self.failing_since >= self.retry_ms:
            raise BrokerReadError(f"Cannot fetch {self.where(offset)}: {why} (asked again for "
                                  f"{self.retry_ms} ms, option 'kafkaConsumer.pollTimeoutMs')")
        self.clock.sleep(self.backoff)
        self.backoff = min(self.backoff * 2, 1000)
        return iter(_NOTHING), offset
