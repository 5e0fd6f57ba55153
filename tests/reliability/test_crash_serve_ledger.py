"""The crash harness's judgement (:mod:`reliability.ledger`): what counts as lost, resurrected or
stray, for delete-policy and compacted partitions. Pure: no broker."""

from __future__ import annotations

from reliability.ledger import Ledger, Read, Record

TP = ("t", 0)


def ledger(compacted: bool = False, may_lose_head: bool = False) -> Ledger:
    found = Ledger()
    found.add_partition(TP, compacted=compacted, may_lose_head=may_lose_head)
    return found


def ack(book: Ledger, offset: int, key: bytes | None, value: bytes | None) -> Record:
    record = Record(key, value)
    book.sending(TP, record)
    book.acknowledged(TP, offset, record)
    return record


def kinds(book: Ledger, read: Read) -> list[tuple[str, int | None]]:
    return [(v.kind, v.offset) for v in book.check(read)]


def test_every_acknowledged_record_present_passes() -> None:
    book = ledger()
    records = {o: ack(book, o, None, b"v%d" % o) for o in range(3)}
    assert kinds(book, Read(TP, 0, 3, records)) == []


def test_a_missing_acknowledged_record_is_lost() -> None:
    book = ledger()
    records = {o: ack(book, o, None, b"v%d" % o) for o in range(3)}
    del records[1]
    assert kinds(book, Read(TP, 0, 3, records)) == [("lost", 1)]


def test_a_log_start_moved_over_acknowledged_records_is_loss_unless_retention_may_move_it() -> None:
    for may_lose_head, expected in ((False, [("lost", 0)]), (True, [])):
        book = ledger(may_lose_head=may_lose_head)
        records = {o: ack(book, o, None, b"v%d" % o) for o in range(2)}
        assert kinds(book, Read(TP, 1, 2, {1: records[1]})) == expected


def test_another_value_at_an_acknowledged_offset_is_lost() -> None:
    book = ledger()
    ack(book, 0, None, b"mine")
    book.sending(TP, Record(None, b"other"))
    assert kinds(book, Read(TP, 0, 1, {0: Record(None, b"other")})) == [("lost", 0)]


def test_a_record_nobody_sent_is_a_stray_and_an_unacknowledged_send_is_not() -> None:
    book = ledger()
    book.sending(TP, Record(None, b"in flight at the kill"))
    read = Read(TP, 0, 2, {0: Record(None, b"in flight at the kill"), 1: Record(None, b"garbage")})
    assert kinds(book, read) == [("stray", 1)]


def test_records_below_an_observed_log_start_must_not_reappear() -> None:
    book = ledger(may_lose_head=True)
    records = {o: ack(book, o, None, b"v%d" % o) for o in range(4)}
    book.observe(Read(TP, 2, 4, {2: records[2], 3: records[3]}))
    assert kinds(book, Read(TP, 0, 4, records)) == [("start-went-back", 0), ("resurrected", 0), ("resurrected", 1)]


def test_a_compacted_record_observed_gone_must_not_reappear() -> None:
    book = ledger(compacted=True)
    old, new = ack(book, 0, b"k", b"old"), ack(book, 1, b"k", b"new")
    book.observe(Read(TP, 0, 2, {1: new}))  # the cleaner removed offset 0
    assert kinds(book, Read(TP, 0, 2, {1: new})) == []
    assert kinds(book, Read(TP, 0, 2, {0: old, 1: new})) == [("resurrected", 0)]


def test_a_compacted_record_may_go_only_when_its_key_has_a_later_record_or_tombstone() -> None:
    book = ledger(compacted=True)
    ack(book, 0, b"a", b"a0")
    a1 = ack(book, 1, b"a", b"a1")
    ack(book, 2, b"b", b"b0")
    ack(book, 3, b"b", None)  # tombstone, itself removable after delete.retention.ms
    ack(book, 4, b"c", b"c0")
    assert kinds(book, Read(TP, 0, 5, {1: a1})) == [("lost", 4)]


def test_a_tombstone_of_unknown_fate_lets_earlier_records_of_its_key_go() -> None:
    book = ledger(compacted=True)
    ack(book, 0, b"k", b"v")
    book.sending(TP, Record(b"k", None))  # the broker died before answering
    assert kinds(book, Read(TP, 0, 1, {})) == [("lost", 0)]
    book.sends_unknown()
    assert kinds(book, Read(TP, 0, 2, {})) == []
