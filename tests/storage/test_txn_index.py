"""TransactionIndex: Kafka's TransactionIndexTest scenarios (reference §4.5), layout, corruption, model checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import CorruptIndexError, InvalidOffsetError
from tidelog.storage.files import transaction_index_file
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

ENTRY = 34

# Kafka's fixture: (producer, first offset, last offset, last stable offset)
FOUR_TXNS = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


def new_index(tmp_path: Path, start_offset: int = 0) -> TransactionIndex:
    return TransactionIndex(transaction_index_file(tmp_path, start_offset), start_offset)


def filled_index(tmp_path: Path, txns: list[AbortedTxn] = FOUR_TXNS) -> TransactionIndex:
    index = new_index(tmp_path)
    for txn in txns:
        index.append(txn)
    return index


# --- entry serde ------------------------------------------------------------------------------


def test_aborted_txn_round_trips_through_34_bytes() -> None:
    txn = AbortedTxn(producer_id=983493, first_offset=137, last_offset=299, last_stable_offset=200)
    data = txn.encode()
    assert len(data) == ENTRY
    assert AbortedTxn.decode(data) == txn
    assert AbortedTxn.decode(b"\xff" * 5 + data, position=5) == txn


def test_aborted_txn_bytes_match_kafka_layout() -> None:
    data = AbortedTxn(producer_id=7, first_offset=0x10, last_offset=0x20, last_stable_offset=0x18).encode()
    assert data == struct.pack(">hqqqq", 0, 7, 16, 32, 24)
    assert data[:2] == b"\x00\x00"


def test_aborted_txn_decode_of_newer_version_raises_corrupt_index() -> None:
    data = struct.pack(">hqqqq", 1, 7, 16, 32, 24)
    with pytest.raises(CorruptIndexError) as raised:
        AbortedTxn.decode(data)
    assert raised.value.version == 1


def test_aborted_txn_decode_of_short_bytes_raises_corrupt_index() -> None:
    with pytest.raises(CorruptIndexError):
        AbortedTxn.decode(b"\x00" * 33)


def test_aborted_txn_field_outside_int64_raises_invalid_offset() -> None:
    with pytest.raises(InvalidOffsetError) as raised:
        AbortedTxn(1, 0, 2**63, 0)
    assert raised.value.field == "last_offset"


# --- lazy file, append order ------------------------------------------------------------------


def test_file_is_created_on_first_append_only(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    assert not index.path.exists()
    assert index.is_empty
    assert index.all_aborted_txns() == []
    assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult((), False)
    index.sanity_check()
    index.flush()
    index.truncate_to(0)
    index.reset()
    assert not index.path.exists()
    index.append(FOUR_TXNS[0])
    assert index.path.stat().st_size == ENTRY
    assert not index.is_empty


def test_position_set_correctly_when_opened(tmp_path: Path) -> None:
    index = filled_index(tmp_path)
    index.close()
    reopened = TransactionIndex(index.path, 0)
    extra = AbortedTxn(producer_id=4, first_offset=55, last_offset=60, last_stable_offset=55)
    reopened.append(extra)
    assert reopened.all_aborted_txns() == FOUR_TXNS + [extra]


@pytest.mark.parametrize("last_offset", [50, 49])
def test_last_offset_must_increase(tmp_path: Path, last_offset: int) -> None:
    index = filled_index(tmp_path)
    with pytest.raises(InvalidOffsetError) as raised:
        index.append(AbortedTxn(9, 45, last_offset, 45))
    assert (raised.value.last_offset, raised.value.previous_last_offset) == (last_offset, 50)
    assert index.all_aborted_txns() == FOUR_TXNS


def test_last_offset_must_increase_over_entries_loaded_from_file(tmp_path: Path) -> None:
    index = filled_index(tmp_path)
    index.close()
    reopened = TransactionIndex(index.path, 0)
    with pytest.raises(InvalidOffsetError):
        reopened.append(AbortedTxn(9, 45, 50, 45))


# --- collect ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fetch_offset", "upper_bound", "expected", "complete"),
    [
        (0, 100, FOUR_TXNS, False),
        (0, 32, FOUR_TXNS[:3], True),
        (11, 35, FOUR_TXNS[1:], True),
        (20, 41, FOUR_TXNS[2:], False),
    ],
)
def test_collect_aborted_transactions(
    tmp_path: Path, fetch_offset: int, upper_bound: int, expected: list[AbortedTxn], complete: bool
) -> None:
    index = filled_index(tmp_path)
    result = index.collect_aborted_txns(fetch_offset, upper_bound)
    assert result == TxnIndexSearchResult(tuple(expected), complete)


def test_collect_stops_at_entry_whose_last_stable_offset_equals_upper_bound(tmp_path: Path) -> None:
    first, second = AbortedTxn(0, 0, 10, 20), AbortedTxn(1, 15, 30, 25)
    index = filled_index(tmp_path, [first, second])
    assert index.collect_aborted_txns(0, 20) == TxnIndexSearchResult((first,), True)
    assert index.collect_aborted_txns(0, 21) == TxnIndexSearchResult((first, second), True)
    assert index.collect_aborted_txns(31, 26) == TxnIndexSearchResult((), False)


# --- truncate, reset --------------------------------------------------------------------------


def test_truncate_to_drops_entries_ending_at_or_after_offset(tmp_path: Path) -> None:
    index = filled_index(tmp_path)
    index.truncate_to(51)
    assert index.all_aborted_txns() == FOUR_TXNS
    index.truncate_to(50)
    assert index.all_aborted_txns() == FOUR_TXNS[:3]
    assert index.path.stat().st_size == 3 * ENTRY
    index.append(AbortedTxn(3, 32, 36, 40))  # last offset now only has to exceed 35
    index.reset()
    assert index.all_aborted_txns() == []
    assert index.is_empty
    index.append(AbortedTxn(5, 0, 1, 0))


def test_truncate_to_after_reopen_tracks_last_offset(tmp_path: Path) -> None:
    index = filled_index(tmp_path)
    index.close()
    reopened = TransactionIndex(index.path, 0)
    reopened.truncate_to(20)
    reopened.append(AbortedTxn(8, 16, 16, 16))
    assert [t.last_offset for t in reopened.all_aborted_txns()] == [10, 15, 16]


# --- sanity check and corruption --------------------------------------------------------------


def test_sanity_check_raises_when_entry_ends_below_start_offset(tmp_path: Path) -> None:
    index = filled_index(tmp_path)
    index.sanity_check()
    index.close()
    with pytest.raises(CorruptIndexError) as raised:
        TransactionIndex(index.path, 100).sanity_check()
    assert (raised.value.path, raised.value.start_offset, raised.value.last_offset) == (index.path, 100, 10)


def test_length_not_whole_entries_raises_corrupt_index(tmp_path: Path) -> None:
    path = transaction_index_file(tmp_path, 0)
    path.write_bytes(FOUR_TXNS[0].encode() + b"\x00" * 10)
    index = TransactionIndex(path, 0)
    for access in (index.sanity_check, index.all_aborted_txns, lambda: index.append(FOUR_TXNS[1])):
        with pytest.raises(CorruptIndexError) as raised:
            access()
        assert (raised.value.path, raised.value.length) == (path, 44)


def test_entry_of_newer_version_raises_corrupt_index(tmp_path: Path) -> None:
    path = transaction_index_file(tmp_path, 0)
    path.write_bytes(FOUR_TXNS[0].encode() + struct.pack(">hqqqq", 1, 1, 5, 15, 13))
    index = TransactionIndex(path, 0)
    with pytest.raises(CorruptIndexError) as raised:
        index.sanity_check()
    assert (raised.value.path, raised.value.position, raised.value.version) == (path, ENTRY, 1)


# --- file operations --------------------------------------------------------------------------


def test_rename_index_keeps_entries(tmp_path: Path) -> None:
    index = filled_index(tmp_path)
    renamed = index.path.with_name(index.path.name + ".swap")
    old = index.path
    index.rename_to(renamed)
    assert (index.path, old.exists(), renamed.exists()) == (renamed, False, True)
    index.append(AbortedTxn(5, 51, 52, 51))
    assert index.all_aborted_txns() == FOUR_TXNS + [AbortedTxn(5, 51, 52, 51)]


def test_rename_of_missing_file_only_changes_path(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.rename_to(tmp_path / "x.txnindex.deleted")
    assert index.path == tmp_path / "x.txnindex.deleted"
    assert not index.path.exists()


def test_update_parent_dir_keeps_file_name(tmp_path: Path) -> None:
    index = filled_index(tmp_path)
    index.close()
    moved = tmp_path / "moved"
    moved.mkdir()
    index.path.rename(moved / index.path.name)
    index.update_parent_dir(moved)
    assert index.path == moved / transaction_index_file(tmp_path, 0).name
    assert index.all_aborted_txns() == FOUR_TXNS


def test_entries_are_in_the_file_back_to_back_and_reopen_equal(tmp_path: Path) -> None:
    # flush is an fsync: what it guarantees (surviving a power cut) cannot be observed here
    index = filled_index(tmp_path)
    index.flush()
    assert index.path.read_bytes() == b"".join(txn.encode() for txn in FOUR_TXNS)
    index.close()
    reopened = new_index(tmp_path)
    assert reopened.all_aborted_txns() == FOUR_TXNS
    reopened.close()


def test_delete_if_exists_reports_whether_file_was_deleted(tmp_path: Path) -> None:
    assert new_index(tmp_path / "nowhere").delete_if_exists() is False
    index = filled_index(tmp_path)
    assert index.delete_if_exists() is True
    assert not index.path.exists()
    assert index.delete_if_exists() is False


# --- model-based ------------------------------------------------------------------------------


@st.composite
def aborted_txns(draw: st.DrawFn) -> list[AbortedTxn]:
    gaps = draw(st.lists(st.integers(1, 40), max_size=40))
    txns, last = [], 0
    for producer, gap in enumerate(gaps):
        last += gap
        first = last - draw(st.integers(0, 60))
        txns.append(AbortedTxn(producer, first, last, last - draw(st.integers(-20, 30))))
    return txns


@settings(max_examples=100, deadline=None)
@given(txns=aborted_txns(), fetch=st.integers(-5, 900), span=st.integers(0, 300), cut=st.integers(-5, 900))
def test_index_matches_list_model(tmp_path_factory, txns: list[AbortedTxn], fetch: int, span: int, cut: int) -> None:
    index = TransactionIndex(transaction_index_file(tmp_path_factory.mktemp("txn"), 0), 0)
    for txn in txns:
        index.append(txn)
    upper = fetch + span
    expected, complete = [], False
    for txn in txns:
        if txn.last_offset >= fetch and txn.first_offset < upper:
            expected.append(txn)
        if txn.last_stable_offset >= upper:
            complete = True
            break
    assert index.collect_aborted_txns(fetch, upper) == TxnIndexSearchResult(tuple(expected), complete)
    index.close()
    reopened = TransactionIndex(index.path, 0)
    assert reopened.all_aborted_txns() == txns
    reopened.truncate_to(cut)
    kept = [txn for txn in txns if txn.last_offset < cut]
    assert reopened.all_aborted_txns() == kept
    assert (reopened.path.stat().st_size if txns else 0) == len(kept) * ENTRY
    assert reopened.path.exists() == bool(txns)
    reopened.delete_if_exists()


def test_a_missing_file_is_searched_without_reopening_and_created_by_an_append(tmp_path: Path, monkeypatch) -> None:
    """The cleaner searches many segments' indexes; a missing file costs one failed open."""
    import os

    index = TransactionIndex(transaction_index_file(tmp_path, 0), 0)
    opens = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: (opens.append(a[0]), real_open(*a, **k))[1])
    for _ in range(3):
        assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult((), False)
    assert len(opens) == 1
    index.append(AbortedTxn(1, 0, 5, 0))
    assert index.collect_aborted_txns(0, 100).aborted_transactions == (AbortedTxn(1, 0, 5, 0),)
    index.close()
