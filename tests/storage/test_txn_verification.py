"""The log's half of transaction verification (storage/txn_verification.py): a batch that would
open its producer's transaction must carry the token its verification took; a marker written in
between (the transaction ended) makes it stale and the append is refused, changing nothing."""

from __future__ import annotations

import pytest
from storage_helpers import T0, MakeLog, batch

from tidelog.errors import InvalidTxnStateError
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.log import Log
from tidelog.storage.txn_verification import verification_token

PID = 7


def txn_data(seq: int, pid: int = PID) -> bytes:
    return batch(b"v%d" % seq, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)


def abort(log: Log, pid: int = PID) -> None:
    log.append_as_leader(build_end_txn_marker_batch(commit=False, producer_id=pid, producer_epoch=0,
                                                    coordinator_epoch=0, base_offset=0, timestamp=T0),
                         origin=AppendOrigin.COORDINATOR)


def token(log: Log, pid: int = PID) -> int:
    return verification_token(log.producer_state.last_entry(pid))


def test_a_marker_between_verification_and_append_refuses_the_batch(make_log: MakeLog) -> None:
    log = make_log()
    verified = {PID: token(log)}
    log.append_as_leader(txn_data(0), verified=verified)  # opens the transaction
    stale = {PID: token(log)}
    log.append_as_leader(txn_data(1), verified=stale)  # continues it: nothing to check
    abort(log)  # the transaction ends (a client's abort after a produce timed out)
    end = log.log_end_offset
    with pytest.raises(InvalidTxnStateError, match="has ended"):
        log.append_as_leader(txn_data(2), verified=stale)
    assert log.log_end_offset == end and log.producer_state.last_entry(PID).current_txn_first_offset is None
    log.append_as_leader(txn_data(2), verified={PID: token(log)})  # verified after the marker: a new transaction
    assert log.producer_state.last_entry(PID).current_txn_first_offset == end


def test_an_unverified_producer_is_refused_and_no_tokens_means_no_check(make_log: MakeLog) -> None:
    log = make_log()
    with pytest.raises(InvalidTxnStateError, match="not verified"):
        log.append_as_leader(txn_data(0), verified={PID + 1: 0})
    assert log.log_end_offset == 0
    log.append_as_leader(txn_data(0))  # no verification asked (verification disabled): appended
    assert log.log_end_offset == 1


def test_tokens_count_markers_per_producer(make_log: MakeLog) -> None:
    log = make_log()
    assert token(log) == token(log, PID + 1) == 0
    log.append_as_leader(txn_data(0), verified={PID: 0})
    abort(log)
    assert (token(log), token(log, PID + 1)) == (1, 0)
    log.append_as_leader(txn_data(0, PID + 1), verified={PID + 1: 0})  # another producer's token did not move
