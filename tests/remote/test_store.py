"""The remote store against a real ``file://`` location (pyarrow's LocalFileSystem): every
operation, its edges, its typed errors, and the atomic write."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tidelog.errors import ConfigError, TidelogError
from tidelog.remote.errors import (
    RemoteAccessDeniedError,
    RemoteBucketNotFoundError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStoreServerError,
    RemoteStoreUnreachableError,
)
from tidelog.remote.store import CHUNK_BYTES, ArrowRemoteStore, ObjectInfo, open_store, redact_uri, store_error

# --- put / get -------------------------------------------------------------------------------


def test_put_then_get_returns_the_bytes(store: ArrowRemoteStore) -> None:
    store.put("t-id/0/00000000000000000000-abc.log", b"hello")
    assert store.get("t-id/0/00000000000000000000-abc.log") == b"hello"


def test_put_accepts_a_memoryview_and_an_empty_object(store: ArrowRemoteStore) -> None:
    store.put("a/view", memoryview(b"0123456789")[2:5])
    store.put("a/empty", b"")
    assert store.get("a/view") == b"234"
    assert store.get("a/empty") == b""
    assert store.size("a/empty") == 0


def test_put_replaces_an_existing_object(store: ArrowRemoteStore) -> None:
    store.put("k", b"first, longer")
    store.put("k", b"second")
    assert store.get("k") == b"second"


def test_an_object_lands_under_the_uri_prefix(tmp_path: Path) -> None:
    store = ArrowRemoteStore((tmp_path / "bucket" / "prefix").as_uri() + "/")
    store.put("x/y.log", b"data")
    assert (tmp_path / "bucket" / "prefix" / "x" / "y.log").read_bytes() == b"data"


def test_open_store_serves_a_file_uri(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    store.put("k", b"v")
    assert store.list() == [ObjectInfo("k", 1)]


# --- put_file --------------------------------------------------------------------------------


def test_put_file_uploads_the_whole_file_by_default(store: ArrowRemoteStore, tmp_path: Path) -> None:
    source = tmp_path / "00000000000000000042.log"
    source.write_bytes(b"segment bytes")
    store.put_file("p/0/seg.log", source)
    assert store.get("p/0/seg.log") == b"segment bytes"


def test_put_file_uploads_a_range(store: ArrowRemoteStore, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.write_bytes(b"0123456789")
    store.put_file("r", source, offset=3, length=4)
    store.put_file("tail", source, offset=7)
    assert store.get("r") == b"3456"
    assert store.get("tail") == b"789"


def test_put_file_streams_files_larger_than_one_chunk(store: ArrowRemoteStore, tmp_path: Path) -> None:
    source = tmp_path / "big"
    data = os.urandom(1024) * (CHUNK_BYTES // 1024) + b"tail!"
    source.write_bytes(data)
    store.put_file("big", source)
    assert store.size("big") == len(data)
    assert store.get_range("big", CHUNK_BYTES - 2, 7) == data[CHUNK_BYTES - 2:CHUNK_BYTES + 5]


def test_put_file_of_a_range_past_the_end_fails_before_writing(store: ArrowRemoteStore, tmp_path: Path) -> None:
    source = tmp_path / "short"
    source.write_bytes(b"abc")
    with pytest.raises(RemoteStorageError, match="shorter than the range") as raised:
        store.put_file("k", source, offset=1, length=5)
    assert raised.value.key == "k" and raised.value.source == str(source)
    assert store.list() == []


def test_put_file_of_a_missing_local_file_names_it_and_is_not_a_remote_not_found(
        store: ArrowRemoteStore, tmp_path: Path) -> None:
    with pytest.raises(RemoteStorageError, match="cannot open the local file") as raised:
        store.put_file("k", tmp_path / "absent")
    assert not isinstance(raised.value, RemoteResourceNotFoundError)
    assert raised.value.operation == "put_file"


# --- get_range / size ------------------------------------------------------------------------


def test_get_range_reads_the_bytes_asked(store: ArrowRemoteStore) -> None:
    store.put("k", b"0123456789")
    assert store.get_range("k", 0, 3) == b"012"
    assert store.get_range("k", 4, 2) == b"45"


def test_get_range_is_short_at_the_end_and_empty_past_it(store: ArrowRemoteStore) -> None:
    store.put("k", b"0123456789")
    assert store.get_range("k", 8, 100) == b"89"
    assert store.get_range("k", 10, 5) == b""
    assert store.get_range("k", 20, 5) == b""
    assert store.get_range("k", 3, 0) == b""


def test_get_range_refuses_a_negative_range(store: ArrowRemoteStore) -> None:
    store.put("k", b"x")
    with pytest.raises(ValueError):
        store.get_range("k", -1, 1)


def test_size_is_the_object_length(store: ArrowRemoteStore) -> None:
    store.put("a/b", b"12345")
    assert store.size("a/b") == 5


# --- list ------------------------------------------------------------------------------------


def test_list_is_recursive_ordered_and_relative_to_the_prefix(store: ArrowRemoteStore) -> None:
    for key in ("t-x/1/b.log", "t-x/0/metadata/00000000000000000001.json", "t-x/0/a.log", "t-y/0/z"):
        store.put(key, key.encode())
    assert [i.key for i in store.list()] == [
        "t-x/0/a.log", "t-x/0/metadata/00000000000000000001.json", "t-x/1/b.log", "t-y/0/z"]
    assert store.list("t-x/0/") == [ObjectInfo("t-x/0/a.log", 11),
                                     ObjectInfo("t-x/0/metadata/00000000000000000001.json", 40)]
    assert store.list("t-x/0") == store.list("t-x/0/")


def test_list_of_an_absent_prefix_or_store_is_empty(store: ArrowRemoteStore) -> None:
    assert store.list() == []
    assert store.list("nothing/here/") == []


def test_list_hides_temporary_writes_a_crash_left(store: ArrowRemoteStore, store_root: Path) -> None:
    store.put("p/k", b"v")
    (store_root / "p" / ".k.tidelog-tmp-0123abcd").write_bytes(b"half")
    assert store.list("p") == [ObjectInfo("p/k", 1)]


# --- delete ----------------------------------------------------------------------------------


def test_delete_removes_the_object_and_is_idempotent(store: ArrowRemoteStore) -> None:
    store.put("a/b", b"x")
    store.delete("a/b")
    store.delete("a/b")
    store.delete("never/was")
    assert store.list() == []


def test_delete_prefix_removes_everything_under_it_only(store: ArrowRemoteStore, store_root: Path) -> None:
    for key in ("t/0/a", "t/0/metadata/b", "t/1/c"):
        store.put(key, b"x")
    (store_root / "t" / "0" / ".a.tidelog-tmp-ff").write_bytes(b"left by a crash")
    store.delete_prefix("t/0/")
    store.delete_prefix("t/0/")
    assert [i.key for i in store.list()] == ["t/1/c"]
    assert not (store_root / "t" / "0").exists()


def test_delete_prefix_of_the_whole_store_keeps_its_root(store: ArrowRemoteStore, store_root: Path) -> None:
    store.put("t/0/a", b"x")
    store.delete_prefix("")
    assert store.list() == [] and store_root.is_dir()


# --- keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "./a", "a/", "a/.x.tidelog-tmp-1"])
def test_a_malformed_key_is_refused(store: ArrowRemoteStore, key: str) -> None:
    with pytest.raises(ValueError, match="not a valid remote object key"):
        store.put(key, b"x")


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda s: s.get("no/such"), lambda s: s.get_range("no/such", 0, 1), lambda s: s.size("no/such")])
def test_a_missing_object_is_not_found_naming_key_uri_and_operation(store: ArrowRemoteStore, call) -> None:
    with pytest.raises(RemoteResourceNotFoundError) as raised:
        call(store)
    error = raised.value
    assert error.key == "no/such" and error.uri == store.uri and error.operation in ("get", "get_range", "size")
    assert "no/such" in str(error) and store.uri in str(error) and error.cause
    assert isinstance(error, TidelogError) and not error.retriable


def test_size_of_a_directory_is_not_found(store: ArrowRemoteStore) -> None:
    store.put("dir/k", b"x")
    with pytest.raises(RemoteResourceNotFoundError):
        store.size("dir")


def _access_denied_calls(store: ArrowRemoteStore) -> str:
    """Run the calls on the locked directory; ``"denied"`` when each was refused as access denied."""
    for call in (lambda: store.list("locked"), lambda: store.get("locked/k"), lambda: store.put("locked/n", b"x")):
        try:
            call()
        except RemoteAccessDeniedError as e:
            if not (e.key.startswith("locked") and "access denied" in str(e)):
                return f"badly named: {e}"
        except Exception as e:  # reported to the parent as text
            return f"wrong error: {type(e).__name__}: {e}"
        else:
            return "no error"
    return "denied"


def _as_nobody(run: Callable[[], str]) -> str:
    """``run()`` in a forked child whose effective user is ``nobody`` (root reads anything)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setegid(65534)
            os.seteuid(65534)
            os.write(write_end, run().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        text = answer.read().decode()
    os.waitpid(pid, 0)
    return text


def test_an_unreadable_directory_is_access_denied() -> None:
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        store = ArrowRemoteStore(Path(top).as_uri())
        store.put("locked/k", b"secret")
        os.chmod(Path(top) / "locked", 0o000)
        try:
            outcome = _as_nobody(lambda: _access_denied_calls(store)) if os.geteuid() == 0 else _access_denied_calls(store)
        finally:
            os.chmod(Path(top) / "locked", 0o755)
    assert outcome == "denied"


def test_connection_refused_is_unreachable_and_retriable() -> None:
    store = ArrowRemoteStore("s3://bucket/prefix", {
        "endpoint.url": "http://127.0.0.1:9", "access.key": "AKIDEXAMPLE", "secret.key": "wJalrXUtnFEMI",
        "region": "us-east-1", "retry.max.attempts": "1", "connect.timeout.ms": "2000"})
    with pytest.raises(RemoteStoreUnreachableError) as raised:
        store.get("t/0/k.log")
    error = raised.value
    assert error.retriable and error.uri == "s3://bucket/prefix" and error.key == "t/0/k.log"
    assert "wJalrXUtnFEMI" not in str(error)


@pytest.mark.parametrize(("exc", "kind"), [
    (FileNotFoundError(errno.ENOENT, "gone"), RemoteResourceNotFoundError),
    (PermissionError(errno.EACCES, "Permission denied"), RemoteAccessDeniedError),
    (OSError("When reading key 'k': AWS Error ACCESS_DENIED during GetObject operation: Access Denied"),
     RemoteAccessDeniedError),
    (OSError("AWS Error UNKNOWN (HTTP status 403) during HeadObject operation: No response body."),
     RemoteAccessDeniedError),
    (OSError("AWS Error UNKNOWN (HTTP status 503) during PutObject operation: Service Unavailable"),
     RemoteStoreServerError),
    (OSError("AWS Error SLOW_DOWN during UploadPart operation: Please reduce your request rate."),
     RemoteStoreServerError),
    (OSError("AWS Error SIGNATURE_DOES_NOT_MATCH during CreateMultipartUpload operation: The request signature"),
     RemoteAccessDeniedError),
    (OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Could not connect"),
     RemoteStoreUnreachableError),
    (OSError("Bucket 'b' not found; AWS Error NO_SUCH_BUCKET"), RemoteBucketNotFoundError),
    (OSError(errno.EIO, "Input/output error"), RemoteStorageError),
])
def test_failures_are_classified(exc: OSError, kind: type) -> None:
    error = store_error(exc, operation="get", key="k", uri="s3://b/p")
    assert type(error) is kind
    assert error.operation == "get" and error.key == "k" and error.uri == "s3://b/p"


# --- atomic writes ---------------------------------------------------------------------------


def test_a_write_that_fails_before_its_rename_leaves_no_object(
        store: ArrowRemoteStore, store_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The temporary file is complete and synced when the rename would come: fail there."""
    store.put("p/k", b"old")
    seen: list[list[str]] = []

    def failing_fsync(fd: int) -> None:
        seen.append(sorted(os.listdir(store_root / "p")))
        raise OSError(errno.EIO, "injected fsync failure")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(RemoteStorageError, match="I/O error") as raised:
        store.put("p/k", b"new, never visible")
    monkeypatch.undo()
    assert raised.value.key == "p/k"
    assert len(seen[0]) == 2 and seen[0][1] == "k" and ".tidelog-tmp-" in seen[0][0]
    assert store.get("p/k") == b"old"
    assert sorted(os.listdir(store_root / "p")) == ["k"]


def test_a_new_object_is_absent_until_complete(
        store: ArrowRemoteStore, store_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_fsync(fd: int) -> None:
        assert store.list() == []
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(RemoteStorageError):
        store.put("n/k", b"payload")
    monkeypatch.undo()
    assert store.list() == [] and os.listdir(store_root / "n") == []


# --- configuration ---------------------------------------------------------------------------


def test_redact_uri_drops_credentials() -> None:
    assert redact_uri("s3://AKID:SECRET@bucket/p?region=eu&secret_key=s&access_key=a") == "s3://bucket/p?region=eu"
    assert redact_uri("file:///data/tier") == "file:///data/tier"


@pytest.mark.parametrize("uri", ["s3://AKID:SECRET@bucket/p", "s3://bucket/p?region=us-east-1", "s3:///p"])
def test_an_s3_uri_with_credentials_or_query_is_refused_without_echoing_secrets(uri: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ArrowRemoteStore(uri)
    assert "SECRET" not in str(raised.value)


def test_an_unknown_s3_option_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="rsm.config.endpoint.uri"):
        ArrowRemoteStore("s3://bucket/p", {"endpoint.uri": "http://x"})


@pytest.mark.parametrize("options", [{"connect.timeout.ms": "soon"}, {"anonymous": "yes"},
                                     {"endpoint.url": "ftp://host"}])
def test_a_bad_s3_option_value_is_refused(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="invalid value"):
        ArrowRemoteStore("s3://bucket/p", options)


def test_options_for_a_non_s3_store_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="s3:// stores only"):
        ArrowRemoteStore(tmp_path.as_uri(), {"region": "x"})


def test_a_store_at_the_filesystem_root_is_refused() -> None:
    with pytest.raises(ConfigError, match="directory below"):
        ArrowRemoteStore("file:///")


def test_an_unknown_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="remote.log.storage.uri"):
        ArrowRemoteStore("nope://bucket/p")


# --- threads ---------------------------------------------------------------------------------


def test_concurrent_puts_and_gets_of_one_store(store: ArrowRemoteStore) -> None:
    def work(n: int) -> bytes:
        key = f"t/{n % 4}/{n:04d}"
        store.put(key, str(n).encode() * 100)
        return store.get(key)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(200)))
    assert results == [str(n).encode() * 100 for n in range(200)]
    assert len(store.list()) == 200


def test_put_file_reads_an_open_source_and_names_the_path(tmp_path: Path, store: ArrowRemoteStore) -> None:
    """A pinned segment file: the upload reads the open file (its inode), whatever the path names now."""
    path = tmp_path / "seg.log"
    path.write_bytes(b"0123456789")
    with open(path, "rb", buffering=0) as pinned:
        path.unlink()
        path.write_bytes(b"another file")
        store.put_file("t/0/seg.log", path, offset=2, length=5, source=pinned)
        assert store.get("t/0/seg.log") == b"23456"
        with pytest.raises(RemoteStorageError) as raised:
            store.put_file("t/0/seg.log", path, offset=8, length=5, source=pinned)
    assert raised.value.source == str(path) and "shorter" in str(raised.value)
    assert store.get("t/0/seg.log") == b"23456"
