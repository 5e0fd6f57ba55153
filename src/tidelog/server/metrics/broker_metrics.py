"""The broker's own counters: Kafka's ``BrokerTopicMetrics`` (per topic and all topics) and
``RequestMetrics`` (per request name), kept as plain ints updated on the event loop thread.

**Why no lock.** Every update runs on the server's event loop thread, after the thread-pool call
of its request returned: one writer, so ``+=`` on an attribute or a dict entry needs no lock. The
scrape thread only reads: an attribute read is atomic under the GIL, and so is ``dict(d)`` and
``list(l)`` (a C-level copy that no bytecode interrupts), so a scrape sees each counter at some
value it really had. Two counters may be read a few updates apart (bytes in vs. messages in of one
produce); a scrape is a sample, not a transaction, as a JMX read of two meters is in Kafka.

**What is counted where** (as Kafka's ``ReplicaManager`` and ``KafkaApis``):

* Produce: per partition of a request that reached the append (acks and transactional refusals
  did not), ``TotalProduceRequests``; when appended, ``BytesIn`` (the partition's record bytes) and
  ``MessagesIn`` (records appended); when it failed for a reason Kafka calls a failed request
  (:data:`PRODUCE_NOT_FAILED` lists the ones it does not), ``FailedProduceRequests``;
  MESSAGE_TOO_LARGE adds the partition's bytes to ``BytesRejected``.
* Fetch: per partition read, ``TotalFetchRequests`` (once for the first read, once more for the
  final read of a delayed fetch, as Kafka reads a delayed fetch again on completion),
  ``FailedFetchRequests`` for an error outside :data:`FETCH_NOT_FAILED`, and ``BytesOut`` (the
  record bytes of every partition of the response).
* A partition whose topic does not exist (UNKNOWN_TOPIC_OR_PARTITION) counts in the all-topics
  series only: Kafka creates a per-topic meter for any name a client sends; tidelog does not, so a
  client cannot grow the series without bound.
* A deleted topic's series are left out of the scrape (the collector shows only topics that exist),
  as Kafka removes a deleted topic's meters; its counts stay in the all-topics series.

**Request time** (Kafka's ``TotalTimeMs``): from the moment a request's frame was read to the
moment its response was written (or the connection closed for it). Each request name keeps the
last :data:`RESERVOIR_SIZE` samples in a ring (Yammer's reservoir size); percentiles are computed
at scrape time over that window with Yammer's ``Snapshot.getValue`` interpolation. Kafka's
histograms use Yammer's exponentially decaying reservoir (biased to the last five minutes) instead:
docs/architecture.md lists the difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

RESERVOIR_SIZE = 1028  # Yammer's default reservoir size
QUANTILES: tuple[tuple[str, float], ...] = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98),
                                            ("0.99", 0.99), ("0.999", 0.999))  # the exporter's label values

# Kafka error codes after which Kafka's ReplicaManager does not mark FailedProduceRequestsPerSec
# (the errors it catches and answers as they are): unknown topic, not leader, message or batch
# too large, corrupt record, storage error; and the internal-topic refusal, decided before the try.
PRODUCE_NOT_FAILED = frozenset({0, 2, 3, 6, 10, 17, 18, 56})
# ... and FailedFetchRequestsPerSec (readFromLog's expected errors): unknown topic, not leader,
# replica not available, fenced or unknown leader epoch, storage error, offset out of range,
# unknown or inconsistent topic id.
FETCH_NOT_FAILED = frozenset({0, 1, 3, 6, 9, 56, 74, 75, 100, 103})
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10


class TopicCounters:
    """The BrokerTopicMetrics counters of one topic (or of all topics). Written on the event loop
    thread only; any thread may read (see the module doc)."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in", "total_produce", "failed_produce", "total_fetch",
                 "failed_fetch", "bytes_rejected")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0
        self.total_produce = 0
        self.failed_produce = 0
        self.total_fetch = 0
        self.failed_fetch = 0
        self.bytes_rejected = 0

    def copy(self) -> TopicCounters:
        """A copy of every counter (each read atomically). Any thread."""
        other = TopicCounters()
        for name in TopicCounters.__slots__:
            setattr(other, name, getattr(self, name))
        return other


class BrokerTopicMetrics:
    """Kafka's BrokerTopicMetrics meters as counts: :attr:`all_topics` and one
    :class:`TopicCounters` per topic, created at its first produce or fetch (Kafka's lazy meters).
    The ``on_*`` methods run on the event loop thread only; :meth:`snapshot` from any thread."""

    def __init__(self) -> None:
        self.all_topics = TopicCounters()
        self._topics: dict[str, TopicCounters] = {}

    def _topic(self, topic: str, error: int) -> TopicCounters | None:
        if error == UNKNOWN_TOPIC_OR_PARTITION:
            return None
        found = self._topics.get(topic)
        if found is None:
            found = self._topics[topic] = TopicCounters()
        return found

    def on_produce(self, topic: str, error: int, size: int, records: int) -> None:
        """One partition of a Produce that reached the append: ``size`` record bytes sent,
        ``records`` appended (0 on error). Event loop thread; O(1), no lock."""
        one = self._topic(topic, error)
        for counters in (self.all_topics, one) if one is not None else (self.all_topics,):
            counters.total_produce += 1
            if error == 0:
                counters.bytes_in += size
                counters.messages_in += records
            else:
                if error not in PRODUCE_NOT_FAILED:
                    counters.failed_produce += 1
                if error == MESSAGE_TOO_LARGE:
                    counters.bytes_rejected += size

    def on_fetch_read(self, topic: str, error: int, size: int = 0) -> None:
        """One partition read by a Fetch; ``size``: the record bytes it puts in the response (0 for
        the first read of a delayed fetch). Event loop thread; O(1), no lock."""
        one = self._topic(topic, error)
        for counters in (self.all_topics, one) if one is not None else (self.all_topics,):
            counters.total_fetch += 1
            counters.bytes_out += size
            if error not in FETCH_NOT_FAILED:
                counters.failed_fetch += 1

    def snapshot(self) -> tuple[TopicCounters, dict[str, TopicCounters]]:
        """Copies of the all-topics counters and of each topic's. Any thread; no lock (atomic
        copies under the GIL); O(topics)."""
        topics = dict(self._topics)
        return self.all_topics.copy(), {name: counters.copy() for name, counters in topics.items()}


class TimeReservoir:
    """The last :data:`RESERVOIR_SIZE` samples of a duration, and how many there were in all.
    :meth:`update` on the event loop thread only; :meth:`snapshot` from any thread."""

    __slots__ = ("_values", "_next", "count")

    def __init__(self) -> None:
        self._values: list[float] = []
        self._next = 0
        self.count = 0

    def update(self, value: float) -> None:
        """Add a sample, replacing the oldest once full. O(1), no lock."""
        if len(self._values) < RESERVOIR_SIZE:
            self._values.append(value)
        else:
            self._values[self._next] = value
            self._next = (self._next + 1) % RESERVOIR_SIZE
        self.count += 1

    def snapshot(self) -> tuple[list[float], int]:
        """``(sorted samples, total count)``. Any thread; O(n log n) for n <= RESERVOIR_SIZE."""
        count = self.count
        return sorted(list(self._values)), count


def quantile(values: list[float], q: float) -> float:
    """Yammer's ``Snapshot.getValue(q)`` over sorted ``values`` (0.0 when empty): the sample at
    rank ``q * (n + 1)``, interpolated between its neighbours, clamped to the first and last."""
    if not values:
        return 0.0
    pos = q * (len(values) + 1)
    if pos < 1:
        return values[0]
    if pos >= len(values):
        return values[-1]
    lower = values[int(pos) - 1]
    upper = values[int(pos)]
    return lower + (pos - int(pos)) * (upper - lower)


class RequestStats:
    """Kafka's RequestMetrics of one request name: requests per version, errors per error code,
    and the TotalTimeMs reservoir. Written on the event loop thread only."""

    __slots__ = ("requests", "errors", "total_time")

    def __init__(self) -> None:
        self.requests: dict[int, int] = {}
        self.errors: dict[int, int] = {}
        self.total_time = TimeReservoir()


@dataclass(frozen=True, slots=True)
class RequestSnapshot:
    """What one request name had at a scrape: copies, safe to read at leisure."""

    requests: dict[int, int]
    errors: dict[int, int]
    times: list[float]
    count: int


class RequestMetrics:
    """RequestMetrics for every request name seen. Event loop thread for the ``on_*`` methods
    (O(1) each, no lock); :meth:`snapshot` from any thread."""

    def __init__(self) -> None:
        self._by_name: dict[str, RequestStats] = {}

    def _stats(self, name: str) -> RequestStats:
        found = self._by_name.get(name)
        if found is None:
            found = self._by_name[name] = RequestStats()
        return found

    def on_request(self, names: tuple[str, ...], version: int, total_ms: float) -> None:
        """A request answered (or closed on) after ``total_ms``, under each of ``names``
        (a consumer's Fetch counts as "FetchConsumer" and "Fetch", as Kafka's). Event loop thread;
        O(1), no lock."""
        for name in names:
            stats = self._stats(name)
            stats.requests[version] = stats.requests.get(version, 0) + 1
            stats.total_time.update(total_ms)

    def on_errors(self, name: str, codes: Iterable[int]) -> None:
        """One count per error code occurrence in a response (NONE included, as Kafka's
        ``errorCounts``). Event loop thread; O(len(codes)), no lock."""
        errors = self._stats(name).errors
        for code in codes:
            errors[code] = errors.get(code, 0) + 1

    def on_error_counts(self, name: str, counts: dict[int, int]) -> None:
        """As :meth:`on_errors`, from counts already summed per code. Event loop thread, no lock."""
        errors = self._stats(name).errors
        for code, n in counts.items():
            errors[code] = errors.get(code, 0) + n

    def snapshot(self) -> dict[str, RequestSnapshot]:
        """A copy of every request name's figures. Any thread; no lock; O(names * reservoir)."""
        result = {}
        for name, stats in dict(self._by_name).items():
            times, count = stats.total_time.snapshot()
            result[name] = RequestSnapshot(dict(stats.requests), dict(stats.errors), times, count)
        return result


class ServerMetrics:
    """Every counter the server keeps for the endpoint: :attr:`topics` (BrokerTopicMetrics) and
    :attr:`requests` (RequestMetrics). Shared by every connection of one server."""

    def __init__(self) -> None:
        self.topics = BrokerTopicMetrics()
        self.requests = RequestMetrics()
