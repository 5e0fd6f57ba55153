"""``tidelog dump`` of producer state and transactions, in kafka-dump-log's words: ``.snapshot``
files, each record's sequence (wrapping past 2^31-1), COMMIT/ABORT markers, a corrupt snapshot
reported while the next file is still dumped, and ``--json`` lines that name their file.
(tests/interop/test_kafka_dump_log_segments.py compares the whole output with Kafka's.)"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_helpers import run_cli
from tidelog.records import BatchBuilder, build_end_txn_marker_batch
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler

T0 = 1_700_000_000_000
INT32_MAX = 2**31 - 1


def write_partition(path: Path) -> None:
    """pid 7: three records from sequence 2^31-2 (so 2^31-2, 2^31-1, 0); pid 9: a transaction
    of two records, aborted. Closed cleanly: a snapshot at the log end."""
    clock = FakeClock(T0)
    log = Log.open(path, clock=clock, scheduler=FakeScheduler(clock), had_clean_shutdown=True)
    idempotent = BatchBuilder(producer_id=7, producer_epoch=1, base_sequence=INT32_MAX - 1)
    for i in range(3):
        idempotent.append(i, T0 + i, b"k%d" % i, b"v%d" % i)
    log.append_as_leader(idempotent.build())
    txn = BatchBuilder(base_offset=3, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    for i in range(2):
        txn.append(3 + i, T0 + 3 + i, None, b"t%d" % i)
    log.append_as_follower(txn.build())
    log.append_as_follower(build_end_txn_marker_batch(commit=False, producer_id=9, producer_epoch=0,
                                                      coordinator_epoch=5, base_offset=5, timestamp=T0 + 5))
    log.close()


def test_records_show_their_sequence_and_markers_their_type(tmp_path: Path) -> None:
    write_partition(tmp_path / "t-0")
    code, out, err = run_cli(tmp_path, "dump", "--deep", str(tmp_path / "t-0" / "00000000000000000000.log"))
    assert code == 0, err
    records = [line for line in out.decode().splitlines() if line.startswith("| offset: ")]
    assert [line.split(" sequence: ")[1].split(" ")[0] for line in records] == [
        str(INT32_MAX - 1), str(INT32_MAX), "0", "0", "1", "-1"]
    assert records[0] == f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 2 sequence: {INT32_MAX - 1} headerKeys: []"
    assert records[-1].endswith("endTxnMarker: ABORT coordinatorEpoch: 5")


def test_a_snapshot_prints_each_producer(tmp_path: Path) -> None:
    """(The ABORT marker moved pid 9's timestamp, as Kafka's producer state does.)"""
    write_partition(tmp_path / "t-0")
    [snapshot] = sorted((tmp_path / "t-0").glob("*.snapshot"))
    code, out, err = run_cli(tmp_path, "dump", str(snapshot))
    assert code == 0, err
    lines = sorted(out.decode().splitlines()[1:])
    assert lines == [
        f"producerId: 7 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {T0 + 2} firstSequence: {INT32_MAX - 1} lastSequence: 0 lastOffset: 2 offsetDelta: 2 "
        f"timestamp: {T0 + 2}",
        f"producerId: 9 producerEpoch: 0 coordinatorEpoch: 5 currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {T0 + 5} firstSequence: 0 lastSequence: 1 lastOffset: 4 offsetDelta: 1 timestamp: {T0 + 5}",
    ]


def test_json_names_each_file_and_a_corrupt_snapshot_does_not_stop_the_dump(tmp_path: Path) -> None:
    write_partition(tmp_path / "t-0")
    [snapshot] = sorted((tmp_path / "t-0").glob("*.snapshot"))
    corrupt = snapshot.with_name("00000000000000000099.snapshot")
    data = bytearray(snapshot.read_bytes())
    data[12] ^= 0xFF
    corrupt.write_bytes(data)
    code, out, err = run_cli(tmp_path, "dump", "--json", str(corrupt), str(snapshot))
    assert code == 0, err
    items = [json.loads(line) for line in out.decode().splitlines()]
    assert [(i["kind"], i["file"]) for i in items if i["kind"] in ("file", "problem")] == [
        ("file", str(corrupt)), ("problem", str(corrupt)), ("file", str(snapshot))]
    assert sorted(i["producerId"] for i in items if i["kind"] == "producer" and i["file"] == str(snapshot)) == [7, 9]
