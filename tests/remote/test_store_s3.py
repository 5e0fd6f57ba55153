"""The remote store and a metadata round trip against a real S3 server (SeaweedFS on loopback,
the ``object_store`` and ``bucket`` fixtures of ``tests/conftest.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidelog.remote.errors import RemoteAccessDeniedError, RemoteBucketNotFoundError, RemoteResourceNotFoundError
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import CHUNK_BYTES, ArrowRemoteStore, ObjectInfo
from tidelog.testing import FakeClock
from remote_helpers import TOPIC_ID_PARTITION, segment_meta


def _options(object_store: object, **changes: str) -> dict[str, str]:
    credentials = object_store.credentials  # type: ignore[attr-defined]
    options = {"endpoint.url": credentials.endpoint_url, "access.key": credentials.access_key,
               "secret.key": credentials.secret_key, "region": credentials.region,
               "retry.max.attempts": "1", "connect.timeout.ms": "2000"}
    return {**options, **changes}


@pytest.fixture
def remote(object_store: object, bucket: str) -> ArrowRemoteStore:
    return ArrowRemoteStore(f"s3://{bucket}/tier", _options(object_store))


def test_every_operation_on_s3(remote: ArrowRemoteStore, tmp_path: Path) -> None:
    remote.put("t-id/0/a.log", b"0123456789")
    remote.put("t-id/0/metadata/00000000000000000000.json", memoryview(b"{}"))
    remote.put("t-id/1/b.log", b"b")
    assert remote.get("t-id/0/a.log") == b"0123456789"
    assert remote.get_range("t-id/0/a.log", 3, 4) == b"3456"
    assert remote.get_range("t-id/0/a.log", 8, 10) == b"89"
    assert remote.get_range("t-id/0/a.log", 10, 5) == remote.get_range("t-id/0/a.log", 50, 5) == b""
    assert remote.size("t-id/0/a.log") == 10
    assert remote.list("t-id/0/") == [ObjectInfo("t-id/0/a.log", 10),
                                      ObjectInfo("t-id/0/metadata/00000000000000000000.json", 2)]
    remote.delete("t-id/0/a.log")
    remote.delete("t-id/0/a.log")
    remote.delete_prefix("t-id/0/")
    assert [i.key for i in remote.list()] == ["t-id/1/b.log"]


def test_put_file_streams_a_multipart_upload(remote: ArrowRemoteStore, tmp_path: Path) -> None:
    source = tmp_path / "segment.log"
    data = os.urandom(CHUNK_BYTES + 12345)
    source.write_bytes(data)
    remote.put_file("t/0/seg.log", source, offset=5)
    assert remote.size("t/0/seg.log") == len(data) - 5
    assert remote.get_range("t/0/seg.log", CHUNK_BYTES - 10, 20) == data[CHUNK_BYTES - 5:CHUNK_BYTES + 15]


def test_a_missing_object_is_not_found(remote: ArrowRemoteStore) -> None:
    with pytest.raises(RemoteResourceNotFoundError) as raised:
        remote.get("t/0/absent.log")
    assert raised.value.key == "t/0/absent.log" and raised.value.uri.startswith("s3://")


def test_a_wrong_secret_is_access_denied(object_store: object, bucket: str) -> None:
    store = ArrowRemoteStore(f"s3://{bucket}/tier", _options(object_store, **{"secret.key": "wrong-secret"}))
    with pytest.raises(RemoteAccessDeniedError) as raised:
        store.put("t/0/k", b"x")
    assert "wrong-secret" not in str(raised.value)


def test_metadata_round_trip_on_s3(remote: ArrowRemoteStore) -> None:
    writer = RemotePartitionMetadata.load(remote, TOPIC_ID_PARTITION, clock=FakeClock(), broker_id=1,
                                          snapshot_interval=2)
    first = writer.begin_copy(segment_meta(0, 99))
    writer.finish_copy(first)
    second = writer.begin_copy(segment_meta(100, 199))
    writer.finish_copy(second)
    writer.swap([first, second], [segment_meta(0, 199)])
    reader = RemotePartitionMetadata.load(remote, TOPIC_ID_PARTITION)
    assert reader.segments() == writer.segments()
    assert [(s.start_offset, s.end_offset) for s in reader.finished_segments()] == [(0, 199)]
    assert reader.next_sequence == writer.next_sequence == 5


def test_a_bucket_that_does_not_exist_is_named_by_every_operation(object_store: object) -> None:
    """S3 lists a missing bucket as empty; the store asks for the bucket then, so a wrong bucket in
    remote.log.storage.uri is an error, never an empty remote tier."""
    store = ArrowRemoteStore("s3://no-such-bucket-tidelog/tier", _options(object_store))
    for operation in (store.list, lambda: store.list("t/0/"), lambda: store.put("t/0/k", b"x"),
                      lambda: store.get("t/0/k"), lambda: store.get_range("t/0/k", 0, 1), lambda: store.size("t/0/k")):
        with pytest.raises(RemoteBucketNotFoundError) as raised:
            operation()
        assert "bucket does not exist" in str(raised.value) and raised.value.uri == "s3://no-such-bucket-tidelog/tier"
    store.delete("t/0/k")  # deleting what is not there is fine


def test_an_empty_prefix_of_an_existing_bucket_lists_as_empty(remote: ArrowRemoteStore) -> None:
    assert remote.list() == [] and remote.list("t/0/") == []
    with pytest.raises(RemoteResourceNotFoundError) as raised:
        remote.size("t/0/absent")
    assert type(raised.value) is RemoteResourceNotFoundError
