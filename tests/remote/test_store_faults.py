"""The remote store's answers to a faulty S3 server: the real SeaweedFS S3 server behind the
fault proxy (``object_store_oracle/fault_proxy.py``, the ``fault_proxy`` fixture). Each fault
is the right typed error (retriable or not) naming the operation, the object and the cause;
the proxy itself passes everything through untouched and leaves nothing behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tidelog.remote.errors import (
    RemoteAccessDeniedError,
    RemoteMetadataError,
    RemoteStorageError,
    RemoteStoreServerError,
    RemoteStoreUnreachableError,
)
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import CHUNK_BYTES, ArrowRemoteStore
from remote_helpers import TOPIC_ID_PARTITION, segment_meta


@pytest.fixture
def remote(object_store, fault_proxy, bucket: str) -> ArrowRemoteStore:
    return ArrowRemoteStore(f"s3://{bucket}/tier", fault_proxy.store_options(object_store.credentials))


def test_the_proxy_passes_everything_through(remote: ArrowRemoteStore, fault_proxy, tmp_path: Path) -> None:
    source = tmp_path / "big.log"
    data = bytes(range(256)) * ((CHUNK_BYTES + 4096) // 256)
    source.write_bytes(data)
    remote.put_file("t/0/big.log", source)  # a multipart upload: POST, PUT parts, POST complete
    remote.put("t/0/small", b"hello")
    assert remote.get("t/0/big.log") == data and remote.get_range("t/0/small", 1, 3) == b"ell"
    assert [i.key for i in remote.list("t/")] == ["t/0/big.log", "t/0/small"]
    remote.delete("t/0/small")
    methods = {r.method for r in fault_proxy.requests}
    assert {"GET", "PUT", "HEAD", "POST", "DELETE"} <= methods
    assert all(r.outcome.startswith("forwarded") for r in fault_proxy.requests)


@pytest.mark.parametrize(("status", "kind", "what"), [
    (503, RemoteStoreServerError, "store failed or overloaded"),
    (500, RemoteStoreServerError, "store failed or overloaded"),
    (403, RemoteAccessDeniedError, "access denied"),
])
def test_an_error_answer_is_its_typed_error(remote: ArrowRemoteStore, fault_proxy, status: int,
                                            kind: type[RemoteStorageError], what: str) -> None:
    fault_proxy.fail(status)
    for operation, key, call in [("put", "t/0/a", lambda: remote.put("t/0/a", b"x")),
                                 ("get", "t/0/a", lambda: remote.get("t/0/a")),
                                 ("list", "t/0/", lambda: remote.list("t/0/"))]:
        with pytest.raises(kind) as raised:
            call()
        error = raised.value
        assert type(error) is kind and error.retriable == (status != 403)
        assert (error.operation, error.key) == (operation, key)
        assert what in str(error) and error.cause and error.uri.startswith("s3://")
    fault_proxy.pass_through()
    remote.put("t/0/a", b"x")
    assert remote.get("t/0/a") == b"x"


def test_the_next_n_requests_fail_then_the_store_answers(remote: ArrowRemoteStore, fault_proxy) -> None:
    fault_proxy.fail(503, count=2)
    for _ in range(2):
        with pytest.raises(RemoteStoreServerError):
            remote.put("t/0/a", b"x")
    remote.put("t/0/a", b"x")
    assert [r.outcome for r in fault_proxy.requests][:2] == ["injected 503"] * 2


def test_a_fault_matches_method_and_key(remote: ArrowRemoteStore, fault_proxy) -> None:
    remote.put("t/0/a.log", b"a")
    fault_proxy.fail(500, key=r"\.log$", method="HEAD")
    remote.put("t/0/b.index", b"b")
    assert remote.get("t/0/b.index") == b"b"
    with pytest.raises(RemoteStoreServerError) as raised:
        remote.get("t/0/a.log")
    assert raised.value.key == "t/0/a.log"


def test_a_dropped_connection_is_unreachable(remote: ArrowRemoteStore, fault_proxy) -> None:
    fault_proxy.drop(count=1)
    with pytest.raises(RemoteStoreUnreachableError) as raised:
        remote.put("t/0/a", b"x")
    assert raised.value.retriable and raised.value.key == "t/0/a"
    remote.put("t/0/a", b"x")


def test_connection_refused_is_unreachable_until_the_store_is_back(remote: ArrowRemoteStore, fault_proxy) -> None:
    fault_proxy.refuse()
    with pytest.raises(RemoteStoreUnreachableError) as raised:
        remote.list("t/")
    assert "store unreachable" in str(raised.value) and "connect" in raised.value.cause.lower()
    fault_proxy.resume()
    remote.put("t/0/a", b"x")
    assert remote.get("t/0/a") == b"x"


def test_a_slow_store_answers_late_and_a_stalled_one_times_out(object_store, fault_proxy, bucket: str) -> None:
    remote = ArrowRemoteStore(f"s3://{bucket}/tier",
                              fault_proxy.store_options(object_store.credentials, **{"request.timeout.ms": "1500"}))
    remote.put("t/0/a", b"x")
    fault_proxy.delay(0.3)
    started = time.monotonic()
    assert remote.get("t/0/a") == b"x"  # a HEAD and a GET, each 0.3 s late
    assert time.monotonic() - started >= 0.6
    fault_proxy.pass_through()
    fault_proxy.delay(3.0, count=1)
    with pytest.raises(RemoteStoreUnreachableError) as raised:
        remote.get("t/0/a")
    assert raised.value.retriable and "time" in raised.value.cause.lower()


def test_a_wrong_secret_is_access_denied_naming_the_object(object_store, fault_proxy, bucket: str) -> None:
    options = fault_proxy.store_options(object_store.credentials, **{"secret.key": "not-the-secret"})
    store = ArrowRemoteStore(f"s3://{bucket}/tier", options)
    with pytest.raises(RemoteAccessDeniedError) as raised:
        store.put("t/0/a", b"x")
    assert raised.value.key == "t/0/a" and not raised.value.retriable
    assert "SIGNATURE_DOES_NOT_MATCH" in raised.value.cause and "not-the-secret" not in str(raised.value)
    assert [r.outcome for r in fault_proxy.requests] == ["forwarded 403"], "one request: the SDK does not retry a 403"


def test_a_metadata_load_failure_names_the_partition(remote: ArrowRemoteStore, fault_proxy) -> None:
    writer = RemotePartitionMetadata.load(remote, TOPIC_ID_PARTITION)
    writer.finish_copy(writer.begin_copy(segment_meta(0, 9)))
    fault_proxy.fail(503, method="GET", key="/metadata/")
    with pytest.raises(RemoteStoreServerError) as raised:
        RemotePartitionMetadata.load(remote, TOPIC_ID_PARTITION)
    assert raised.value.partition == "orders-2" and "orders-2" in str(raised.value)
    assert "/metadata/" in raised.value.key and raised.value.retriable


def test_a_corrupt_metadata_object_names_partition_and_object(remote: ArrowRemoteStore) -> None:
    writer = RemotePartitionMetadata.load(remote, TOPIC_ID_PARTITION)
    writer.begin_copy(segment_meta(0, 9))
    key = writer.store.list("")[0].key
    remote.put(key, b"{not json")
    with pytest.raises(RemoteMetadataError) as raised:
        RemotePartitionMetadata.load(remote, TOPIC_ID_PARTITION)
    assert raised.value.key == key and raised.value.partition == "orders-2" and "corrupt" in str(raised.value)


def test_stopping_the_proxy_leaves_no_thread_or_listener(object_store) -> None:
    from object_store_oracle import FaultProxy

    before = set(threading.enumerate())
    proxy = FaultProxy(object_store.endpoint_url)
    proxy.start()
    store = ArrowRemoteStore("s3://no-bucket-needed/tier", proxy.store_options(object_store.credentials))
    proxy.delay(0.2)
    with pytest.raises(RemoteStorageError):
        store.get("t/0/a")
    proxy.stop()
    leftover = [t for t in threading.enumerate() if t not in before and t.name.startswith("fault-proxy")]
    assert leftover == []
    with pytest.raises(RemoteStoreUnreachableError):
        store.list()
