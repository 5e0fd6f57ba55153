"""Copying a real log's segments to a real S3 server (SeaweedFS on loopback, the ``object_store``
and ``bucket`` fixtures of ``tests/conftest.py``): every object equals the local file, a restart
sees the same finished segments, a failed copy leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.remote.copy import clean_unreferenced, copy_log
from tidelog.remote.errors import RemoteStorageError
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore
from tidelog.testing import FakeClock
from copy_helpers import assert_matches_local, expected_epochs_text, make_log
from remote_helpers import FlakyStore


def s3_store(object_store: object, bucket: str) -> ArrowRemoteStore:
    credentials = object_store.credentials  # type: ignore[attr-defined]
    return ArrowRemoteStore(f"s3://{bucket}/tier", {
        "endpoint.url": credentials.endpoint_url, "access.key": credentials.access_key,
        "secret.key": credentials.secret_key, "region": credentials.region,
        "retry.max.attempts": "1", "connect.timeout.ms": "2000"})


@pytest.fixture
def remote(object_store: object, bucket: str) -> ArrowRemoteStore:
    return s3_store(object_store, bucket)


def test_a_log_is_copied_to_s3_byte_for_byte(tmp_path: Path, remote: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 3, batches=20, records=50, epochs=(0, 2), aborted_in=(2,))
    metadata = RemotePartitionMetadata.load(remote, tip, clock=FakeClock(), broker_id=1)
    copied = copy_log(log, remote, metadata, epochs=log.leader_epoch_cache.entries)
    bases = [s.base_offset for s in log.segments]
    assert [c.start_offset for c in copied] == bases[:3]
    for segment, next_base in zip(copied, bases[1:]):
        assert_matches_local(remote, segment, log.dir, next_base, expected_epochs_text(log, next_base))
    assert [c.txn_idx_empty for c in copied] == [True, True, False]
    assert RemotePartitionMetadata.load(remote, tip).finished_segments() == copied
    log.close()


def test_a_failed_copy_to_s3_leaves_nothing(tmp_path: Path, remote: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 1)
    flaky = FlakyStore(remote, lambda op, key: "before" if op == "put_file" and key.endswith(".snapshot") else None)
    metadata = RemotePartitionMetadata.load(flaky, tip)
    with pytest.raises(RemoteStorageError) as raised:
        copy_log(log, flaky, metadata, epochs=log.leader_epoch_cache.entries)
    assert raised.value.object.endswith(".snapshot")
    restarted = RemotePartitionMetadata.load(remote, tip)
    assert restarted.segments() == [] and clean_unreferenced(remote, restarted) == []
    assert [i.key for i in remote.list() if "/metadata/" not in i.key] == []
    [again] = copy_log(log, remote, restarted, epochs=log.leader_epoch_cache.entries)
    assert_matches_local(remote, again, log.dir, log.segments[1].base_offset)
    log.close()
