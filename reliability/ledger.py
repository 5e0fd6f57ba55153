"""What the clients were told and what they saw, and the checks a read must pass against it.

Per partition the ledger keeps:

* ``acked``: every record acknowledged with acks=-1, by the offset the broker gave it. Values are
  unique (``topic/partition/sequence``), so a record is recognised wherever it lands.
* ``sent``: every value sent, acknowledged or not (a kill leaves sends whose fate is unknown:
  they may be in the log or not; anything else found in the log is a stray).
* ``start_floor``: the highest log start offset a client observed (ListOffsets earliest after a
  read, a DeleteRecords low watermark). It must never go back, and nothing below it may reappear.
* ``gone``: offsets a complete read found absent below its end although they had been
  acknowledged or seen (the cleaner removed them): they must never reappear.

A :class:`Read` is one complete read of a partition: every record in ``[start, end)``, ``start``
taken after the read (retention may move it during the read) and ``end`` before. :meth:`Ledger.check`
compares a read with the ledger and returns violations; :meth:`Ledger.observe` then learns from
it. The rules per record kind:

* delete-policy partition: every acknowledged offset at or above ``start`` is present with its
  value; below ``start`` only when the partition may lose its head (retention, DeleteRecords);
* compacted partition: an acknowledged record may be absent only when a later record of its key
  is present, or a tombstone of its key was sent at or after it (the cleaner drops tombstones
  after ``delete.retention.ms``); a present record always carries the value acknowledged there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Read:
    """Every record of ``tp`` in ``[start, end)``, by offset."""

    tp: TP
    start: int
    end: int
    records: dict[int, Record]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str  # "lost", "resurrected", "stray", "start-went-back", "topic-resurrected", "verify", "resume"
    tp: TP | None
    offset: int | None
    detail: str

    def __str__(self) -> str:
        where = f"{self.tp[0]}-{self.tp[1]}" if self.tp else "-"
        at = f" offset {self.offset}" if self.offset is not None else ""
        return f"{self.kind}: {where}{at}: {self.detail}"


@dataclass
class PartitionLedger:
    compacted: bool
    may_lose_head: bool
    acked: dict[int, Record] = field(default_factory=dict)
    sent: set[bytes] = field(default_factory=set)
    pending_tombstones: set[bytes] = field(default_factory=set)  # keys of tombstones sent, not yet acknowledged
    unknown_tombstones: dict[bytes, int] = field(default_factory=dict)  # key -> acked offsets it may follow
    acked_tombstones: dict[bytes, int] = field(default_factory=dict)  # key -> highest acked tombstone offset
    seen: set[int] = field(default_factory=set)
    gone: set[int] = field(default_factory=set)
    start_floor: int = 0


@dataclass
class Ledger:
    partitions: dict[TP, PartitionLedger] = field(default_factory=dict)
    deleted_topics: set[str] = field(default_factory=set)  # DeleteTopics answered: never to come back
    deleting: set[str] = field(default_factory=set)  # DeleteTopics sent, answer unknown

    def add_partition(self, tp: TP, compacted: bool, may_lose_head: bool) -> None:
        self.partitions.setdefault(tp, PartitionLedger(compacted, may_lose_head))

    def topic_deleted(self, topic: str) -> None:
        """DeleteTopics answered (or the topic found gone after an unanswered one): it must never
        come back, and its records are no longer expected anywhere."""
        self.deleted_topics.add(topic)
        self.deleting.discard(topic)
        for tp in [tp for tp in self.partitions if tp[0] == topic]:
            del self.partitions[tp]

    # --- what the clients were told ---------------------------------------------------------------

    def sending(self, tp: TP, record: Record) -> None:
        part = self.partitions[tp]
        if record.value is not None:
            part.sent.add(record.value)
        elif record.key is not None:
            part.pending_tombstones.add(record.key)

    def acknowledged(self, tp: TP, offset: int, record: Record) -> None:
        part = self.partitions[tp]
        part.acked[offset] = record
        if record.value is None and record.key is not None:
            part.pending_tombstones.discard(record.key)
            part.acked_tombstones[record.key] = max(offset, part.acked_tombstones.get(record.key, -1))

    def sends_unknown(self) -> None:
        """The producer died: tombstones still pending may or may not be in the log, after any
        record acknowledged so far."""
        for part in self.partitions.values():
            end = max(part.acked, default=-1)
            for key in part.pending_tombstones:
                part.unknown_tombstones[key] = max(end, part.unknown_tombstones.get(key, -1))
            part.pending_tombstones.clear()

    def start_at_least(self, tp: TP, offset: int) -> None:
        part = self.partitions.get(tp)
        if part is not None:
            part.start_floor = max(part.start_floor, offset)

    @property
    def acknowledged_count(self) -> int:
        return sum(len(p.acked) for p in self.partitions.values())

    # --- checks ------------------------------------------------------------------------------------

    def check(self, read: Read) -> list[Violation]:
        """Violations of ``read`` against what the ledger knows (nothing is learnt from it)."""
        part = self.partitions[read.tp]
        found: list[Violation] = []
        if read.start < part.start_floor:
            found.append(Violation("start-went-back", read.tp, read.start,
                                   f"log start offset {read.start} below the {part.start_floor} observed before"))
        for offset in sorted(o for o in read.records if o < part.start_floor or o in part.gone):
            found.append(Violation("resurrected", read.tp, offset,
                                   "below an observed log start offset" if offset < part.start_floor
                                   else "removed by the cleaner before, observed gone"))
        found += self._check_values(part, read)
        found += self._check_acked(part, read)
        return found

    def _check_values(self, part: PartitionLedger, read: Read) -> list[Violation]:
        found = []
        for offset, record in read.records.items():
            acked = part.acked.get(offset)
            if acked is not None and acked != record:
                found.append(Violation("lost", read.tp, offset, f"acknowledged {acked}, found {record}"))
            elif acked is None and record.value is not None and record.value not in part.sent:
                found.append(Violation("stray", read.tp, offset, f"a record nobody sent: {record}"))
        return found

    def _check_acked(self, part: PartitionLedger, read: Read) -> list[Violation]:
        latest = _latest_offset_by_key(read) if part.compacted else {}
        found = []
        for offset, record in part.acked.items():
            if offset in read.records:
                continue
            if offset < read.start and part.may_lose_head:
                continue
            if part.compacted and offset >= read.start and _superseded(part, latest, offset, record):
                continue
            found.append(Violation("lost", read.tp, offset,
                                   f"acknowledged {record} missing (log {read.start}..{read.end})"))
        return found

    # --- learning ----------------------------------------------------------------------------------

    def observe(self, read: Read) -> None:
        """Learn from a complete read: its start is a floor, and what it lacks below its end is gone."""
        part = self.partitions[read.tp]
        part.start_floor = max(part.start_floor, read.start)
        known = part.seen | part.acked.keys()
        part.gone |= {o for o in known if read.start <= o < read.end and o not in read.records}
        part.seen |= read.records.keys()


def _latest_offset_by_key(read: Read) -> dict[bytes | None, int]:
    latest: dict[bytes | None, int] = {}
    for offset, record in read.records.items():
        latest[record.key] = max(offset, latest.get(record.key, -1))
    return latest


def _superseded(part: PartitionLedger, latest: dict[bytes | None, int], offset: int, record: Record) -> bool:
    """A compacted record may be gone: a later record of its key is present, or a tombstone of its
    key was sent at or after it (acknowledged at a higher offset, or of unknown fate)."""
    key = record.key
    if key is None:
        return False
    if latest.get(key, -1) > offset:
        return True
    return max(part.acked_tombstones.get(key, -1), part.unknown_tombstones.get(key, -1)) >= offset
