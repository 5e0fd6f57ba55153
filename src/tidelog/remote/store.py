"""The remote store: a handful of object operations over one implementation on ``pyarrow.fs``.

A store is a location (``remote.log.storage.uri``: ``s3://bucket/prefix``, ``gs://``,
``abfs://``, ``hdfs://``, ``file:///path``) plus options (the broker's ``rsm.config.*`` with the
prefix stripped). Keys are relative to the location's prefix, ``/``-separated, never starting
with ``/`` and never holding ``.`` or ``..`` components.

Atomic writes. An object appears under its final key whole or not at all. S3, GCS and Azure
publish an upload only when it completes, so a write goes straight to the key. A local
directory and HDFS show a file while it is written, so there a write goes to a hidden
temporary name beside the key (``.<name>.tidelog-tmp-<hex>``) and is renamed over the key;
:meth:`ArrowRemoteStore.list` never shows those names, and :meth:`delete_prefix` removes any a
crash left behind. On a local directory the temporary file and then its directory are fsynced,
so a finished put survives a power cut too.

Errors. Every failure is a :class:`~tidelog.remote.errors.RemoteStorageError` (or a subclass
saying which kind) naming the operation, the key, the store's URI without credentials and the
cause.

Thread safety. A store holds no mutable state after construction and pyarrow's filesystems
may be shared between threads, so every method is thread-safe and takes no lock. Two writers
putting the same key concurrently leave one of the two objects whole (last rename/PUT wins).
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.fs as pafs

from tidelog.errors import ConfigError
from tidelog.remote.errors import (
    RemoteAccessDeniedError,
    RemoteBucketNotFoundError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStoreServerError,
    RemoteStoreUnreachableError,
)

CHUNK_BYTES = 8 << 20
"""How much :meth:`ArrowRemoteStore.put_file` reads from the local file per write."""

_TEMP_MARK = ".tidelog-tmp-"
_RENAME_PUBLISHED = frozenset({"local", "hdfs"})  # filesystems that show a file while it is written
_SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas", "signature")


@dataclass(frozen=True, slots=True, order=True)
class ObjectInfo:
    """One object of a listing: its key (relative to the store's prefix) and size in bytes."""

    key: str
    size: int


class RemoteStore(Protocol):
    """The operations the remote tier needs of an object store. ``uri`` is the location
    without credentials, for messages. Every failure raises a ``RemoteStorageError``."""

    uri: str

    def put(self, key: str, data: bytes | bytearray | memoryview) -> None: ...

    def put_file(self, key: str, path: str | os.PathLike[str], *, offset: int = 0,
                 length: int | None = None, on_chunk: Callable[[int], object] | None = None,
                 source: BinaryIO | None = None) -> None: ...

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, length: int) -> bytes: ...

    def size(self, key: str) -> int: ...

    def list(self, prefix: str = "") -> list[ObjectInfo]: ...

    def delete(self, key: str) -> None: ...

    def delete_prefix(self, prefix: str) -> None: ...


def open_store(uri: str, options: Mapping[str, Any] | None = None) -> RemoteStore:
    """The store at ``uri`` with ``options`` (``rsm.config.`` stripped); see :class:`ArrowRemoteStore`."""
    return ArrowRemoteStore(uri, options)


class ArrowRemoteStore:
    """A :class:`RemoteStore` on a ``pyarrow.fs`` filesystem.

    Construction makes no request to the store (a wrong bucket or bad credentials show on the
    first operation). Raises :class:`~tidelog.errors.ConfigError` for a URI pyarrow does not
    serve, credentials or a query inside an ``s3://`` URI, or an unknown option.
    """

    def __init__(self, uri: str, options: Mapping[str, Any] | None = None) -> None:
        self.uri = redact_uri(uri)
        self._fs, self._root = _filesystem(uri, dict(options or {}), self.uri)
        self._staged = self._fs.type_name in _RENAME_PUBLISHED
        self._local = self._fs.type_name == "local"
        self._buckets = self._fs.type_name == "s3"  # a LIST of a missing bucket reads as empty

    def __repr__(self) -> str:
        return f"ArrowRemoteStore({self.uri!r})"

    def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` as the object ``key``, replacing any object there; atomic (module
        docstring). One PUT (S3: a multipart upload above pyarrow's part size). Thread-safe, no lock."""
        path = self._path(key)
        with self._translated("put", key):
            self._write(path, lambda out: out.write(data))

    def put_file(self, key: str, path: str | os.PathLike[str], *, offset: int = 0,
                 length: int | None = None, on_chunk: Callable[[int], object] | None = None,
                 source: BinaryIO | None = None) -> None:
        """Upload ``length`` bytes (to the end when ``None``) of the local file ``path`` from
        ``offset`` as the object ``key``, streamed in :data:`CHUNK_BYTES` pieces (never the whole
        file in memory); atomic as :meth:`put`. ``source``: the file already open (a pinned
        segment file), read from ``offset`` (its position moves; it stays open) instead of
        opening ``path``, which then only names it in errors. ``on_chunk(n)`` is called before
        each piece of ``n`` bytes is written (an upload quota waits there); what it raises
        aborts the upload. A local file shorter than asked fails before anything is written. On
        S3/GCS/Azure a read error of the local file mid-upload cannot abort the upload (pyarrow
        completes it on close), so the partial object is then deleted, best effort.
        Thread-safe, no lock (one upload at a time per ``source``)."""
        target = self._path(key)
        with _open_source(self, key, path, source) as reader:
            count = _source_span(self, key, path, reader, offset, length)
            with self._translated("put_file", key):
                try:
                    self._write(target, lambda out: _copy(self, key, path, reader, out, count, on_chunk))
                except _SourceReadError as e:
                    if not self._staged:
                        self._forget(target)
                    raise e.error from e.__cause__

    def get(self, key: str) -> bytes:
        """The whole object ``key``; on S3 one HEAD and one GET. Thread-safe, no lock.
        (A random-access file, not ``open_input_stream``: pyarrow's unbuffered stream reads an
        8 MiB S3 object at ~0.25x of a raw GET, its file at ~1x.)"""
        path = self._path(key)
        with self._translated("get", key), self._fs.open_input_file(path) as stream:
            return stream.read()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from byte ``start``; fewer when the object ends first (an
        empty result at or past the end). On S3 one HEAD and one ranged GET. Thread-safe, no lock."""
        if start < 0 or length < 0:
            raise ValueError(f"a range needs start >= 0 and length >= 0, got start={start} length={length}")
        path = self._path(key)
        with self._translated("get_range", key), self._fs.open_input_file(path) as stream:
            available = stream.size() - start  # S3's reader refuses a position past the end
            return stream.read_at(min(length, available), start) if length and available > 0 else b""

    def size(self, key: str) -> int:
        """The size in bytes of ``key``; one HEAD. Thread-safe, no lock."""
        path = self._path(key)
        with self._translated("size", key):
            info = self._fs.get_file_info(path)
            if info.type != pafs.FileType.File:
                raise RemoteResourceNotFoundError(
                    "remote store size failed: object not found", operation="size", key=key, uri=self.uri,
                    cause=f"no object at this key ({info.type.name})")
        return info.size

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under the directory ``prefix`` ('' = the whole store), recursively,
        ordered by key; empty when nothing is there, :class:`RemoteBucketNotFoundError` when the
        bucket is missing. One LIST (paged by the store), plus a HEAD of the bucket when it comes
        back empty on S3. Thread-safe, no lock."""
        base = self._dir_path(prefix)
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        with self._translated("list", prefix):
            infos = self._fs.get_file_info(selector)
            if not infos:
                self._check_bucket("list", prefix)
        start = len(self._root) + 1 if self._root else 0
        found = (ObjectInfo(i.path[start:], i.size) for i in infos
                 if i.type == pafs.FileType.File and _TEMP_MARK not in i.base_name)
        return sorted(found)

    def _check_bucket(self, operation: str, key: str) -> None:
        """On S3, raise :class:`RemoteBucketNotFoundError` when the bucket is missing: a LIST of
        a missing bucket reads as empty and a HEAD's 404 has no body to tell a missing object
        from a missing bucket. One HEAD of the bucket, only after an empty listing or a not-found."""
        if not self._buckets:
            return
        bucket = self._root.partition("/")[0]
        try:
            missing = self._fs.get_file_info(bucket).type == pafs.FileType.NotFound
        except (OSError, pa.ArrowException):
            return  # the original answer stands
        if missing:
            raise RemoteBucketNotFoundError(
                f"remote store {operation} failed: bucket does not exist", operation=operation, key=key, uri=self.uri,
                cause=f"no bucket {bucket!r} at the endpoint; create it or fix remote.log.storage.uri")

    def delete(self, key: str) -> None:
        """Delete the object ``key``; an absent object is fine (idempotent). Thread-safe, no lock."""
        path = self._path(key)
        with self._translated("delete", key):
            try:
                self._fs.delete_file(path)
            except FileNotFoundError:
                pass

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under the directory ``prefix`` ('' = the whole store's
        content); absent is fine. One LIST and the deletes it implies. Thread-safe, no lock."""
        base = self._dir_path(prefix)
        with self._translated("delete_prefix", prefix):
            if base == self._root:
                self._fs.delete_dir_contents(base, missing_dir_ok=True)
                return
            try:
                self._fs.delete_dir(base)
            except FileNotFoundError:
                pass

    # --- internals ---------------------------------------------------------------------

    def _path(self, key: str) -> str:
        check_key(key)
        return f"{self._root}/{key}" if self._root else key

    def _dir_path(self, prefix: str) -> str:
        prefix = prefix.strip("/")
        if not prefix:
            return self._root
        return self._path(prefix)

    def _write(self, path: str, fill: Callable[[pa.NativeFile], object]) -> None:
        if not self._staged:
            with self._fs.open_output_stream(path) as out:
                fill(out)
            return
        parent, _, name = path.rpartition("/")
        self._fs.create_dir(parent, recursive=True)
        temp = f"{parent}/.{name}{_TEMP_MARK}{uuid.uuid4().hex}"
        try:
            with self._fs.open_output_stream(temp) as out:
                fill(out)
            self._sync(temp)
            self._fs.move(temp, path)
            self._sync(parent)
        except BaseException:
            self._forget(temp)
            raise

    def _sync(self, path: str) -> None:
        if self._local:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _forget(self, path: str) -> None:
        try:
            self._fs.delete_file(path)
        except (OSError, pa.ArrowException):
            pass

    @contextmanager
    def _translated(self, operation: str, key: str) -> Iterator[None]:
        try:
            yield
        except RemoteBucketNotFoundError:
            raise
        except RemoteResourceNotFoundError as e:
            self._check_bucket(operation, key)
            raise e
        except RemoteStorageError:
            raise
        except (OSError, pa.ArrowException) as e:
            error = store_error(e, operation=operation, key=key, uri=self.uri)
            if type(error) is RemoteResourceNotFoundError and operation != "delete":
                self._check_bucket(operation, key)
            raise error from e


# --- errors --------------------------------------------------------------------------------

_KINDS: tuple[tuple[type[RemoteStorageError], str, tuple[str, ...], frozenset[int]], ...] = (
    (RemoteBucketNotFoundError, "bucket does not exist", ("nosuchbucket", "bucket does not exist"), frozenset()),
    (RemoteResourceNotFoundError, "object not found",
     ("does not exist", "nosuchkey", "not found", "resource_not_found"),
     frozenset({errno.ENOENT})),
    (RemoteAccessDeniedError, "access denied",
     ("access_denied", "accessdenied", "access denied", "forbidden", "invalidaccesskeyid",
      "signaturedoesnotmatch", "http status 403", "http response code: 403", "unauthorized"),
     frozenset({errno.EACCES, errno.EPERM})),
    (RemoteStoreUnreachableError, "store unreachable",
     ("network_connection", "could not connect", "couldn't connect", "connection refused",
      "timed out", "timeout", "could not resolve host", "name or service not known"),
     frozenset({errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH})),
    (RemoteStoreServerError, "store failed or overloaded",
     ("http status 5", "http response code: 5", "internal_failure", "service_unavailable", "slow_down",
      "slowdown", "throttl"),
     frozenset()),
)


def store_error(exc: BaseException, *, operation: str, key: str, uri: str) -> RemoteStorageError:
    """The typed error for a failure ``exc`` of ``operation`` on ``key`` (the caller raises it
    ``from exc``): the kind from the exception's class or errno, else from the message's
    well-known markers, compared without case, spaces or underscores (pyarrow's S3 errors are
    plain ``OSError``s naming the AWS error)."""
    kind, what = _classify(exc)
    cause = " ".join(str(exc).split())[:500] or type(exc).__name__
    return kind(f"remote store {operation} failed: {what}", operation=operation, key=key, uri=uri, cause=cause)


def _classify(exc: BaseException) -> tuple[type[RemoteStorageError], str]:
    code = getattr(exc, "errno", None)
    text = _squash(str(exc))
    for kind, what, markers, codes in _KINDS:
        if code in codes or any(_squash(marker) in text for marker in markers):
            return kind, what
    if isinstance(exc, FileNotFoundError):
        return RemoteResourceNotFoundError, "object not found"
    if isinstance(exc, PermissionError):
        return RemoteAccessDeniedError, "access denied"
    if isinstance(exc, ConnectionError | TimeoutError):
        return RemoteStoreUnreachableError, "store unreachable"
    return RemoteStorageError, "I/O error"


def _squash(text: str) -> str:
    """Lower case without spaces and underscores: ``SIGNATURE_DOES_NOT_MATCH`` ~ ``SignatureDoesNotMatch``."""
    return "".join(text.lower().replace("_", " ").split())


# --- put_file's local source ---------------------------------------------------------------

class _SourceReadError(Exception):
    """Carries a local read failure out of pyarrow's output stream unchanged."""

    def __init__(self, error: RemoteStorageError) -> None:
        super().__init__(error.message)
        self.error = error


def _source_error(store: ArrowRemoteStore, key: str, path: object, message: str,
                  cause: str) -> RemoteStorageError:
    return RemoteStorageError(message, operation="put_file", key=key, uri=store.uri, source=str(path), cause=cause)


@contextmanager
def _open_source(store: ArrowRemoteStore, key: str, path: str | os.PathLike[str],
                 given: BinaryIO | None) -> Iterator[BinaryIO]:
    if given is not None:
        yield given
        return
    try:
        source = open(path, "rb")
    except OSError as e:
        raise _source_error(store, key, path, "cannot open the local file to upload", str(e)) from e
    with source:
        yield source


def _source_span(store: ArrowRemoteStore, key: str, path: object, source: BinaryIO, offset: int,
                 length: int | None) -> int:
    """How many bytes to copy; fails before any write when the file is too short."""
    available = os.fstat(source.fileno()).st_size - offset
    if offset < 0 or (length is not None and length < 0):
        raise ValueError(f"put_file needs offset >= 0 and length >= 0, got offset={offset} length={length}")
    wanted = available if length is None else length
    if available < wanted or available < 0:
        raise _source_error(store, key, path, "the local file is shorter than the range to upload",
                            f"{max(available, 0)} bytes from offset {offset}, {wanted} asked")
    source.seek(offset)
    return wanted


def _copy(store: ArrowRemoteStore, key: str, path: object, source: BinaryIO, out: pa.NativeFile,
          count: int, on_chunk: Callable[[int], object] | None = None) -> None:
    while count > 0:
        try:
            chunk = source.read(min(CHUNK_BYTES, count))
        except OSError as e:
            raise _SourceReadError(_source_error(store, key, path, "reading the local file failed", str(e))) from e
        if not chunk:
            error = _source_error(store, key, path, "the local file ended during the upload", f"{count} bytes missing")
            raise _SourceReadError(error)
        if on_chunk is not None:
            on_chunk(len(chunk))
        out.write(chunk)
        count -= len(chunk)


# --- locations -----------------------------------------------------------------------------

def check_key(key: str) -> None:
    """Raise ``ValueError`` unless ``key`` is a relative '/'-separated key without empty, '.'
    or '..' components and without the temporary-write mark."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts) or _TEMP_MARK in key:
        raise ValueError(f"not a valid remote object key: {key!r}")


def redact_uri(uri: str) -> str:
    """``uri`` without user info and without query parameters that look like secrets."""
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2]
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if not any(word in k.lower() for word in _SECRET_WORDS)]
    return urlunsplit((parts.scheme, host, parts.path, urlencode(query), ""))


def _filesystem(uri: str, options: dict[str, Any], shown: str) -> tuple[pafs.FileSystem, str]:
    parts = urlsplit(uri)
    if parts.scheme.lower() == "s3":
        return _s3_filesystem(parts, options, shown)
    if options:
        raise ConfigError("rsm.config options are read for s3:// stores only; give the others' "
                          "settings in the URI or the environment", uri=shown, options=sorted(options))
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ConfigError(f"not a store location pyarrow serves: {e}", config="remote.log.storage.uri", uri=shown) from e
    if not path.strip("/"):
        raise ConfigError("the store needs a directory below the filesystem's root", config="remote.log.storage.uri",
                          uri=shown)
    return fs, path.rstrip("/")


def _s3_filesystem(parts: Any, options: dict[str, Any], shown: str) -> tuple[pafs.FileSystem, str]:
    if "@" in parts.netloc or parts.query or not parts.netloc:
        raise ConfigError("an s3:// location is s3://bucket[/prefix]; give credentials, endpoint and "
                          "region as rsm.config.* options", config="remote.log.storage.uri", uri=shown)
    kwargs: dict[str, Any] = {"allow_bucket_creation": True}
    for name, value in options.items():
        kwargs.update(_s3_option(name, value, shown))
    return pafs.S3FileSystem(**kwargs), f"{parts.netloc}{parts.path}".rstrip("/")


_S3_TEXT = {"access.key": "access_key", "secret.key": "secret_key", "session.token": "session_token",
            "region": "region", "role.arn": "role_arn", "tls.ca.file": "tls_ca_file_path"}
_S3_SECONDS = {"connect.timeout.ms": "connect_timeout", "request.timeout.ms": "request_timeout"}
_S3_FLAGS = {"anonymous": "anonymous", "force.virtual.addressing": "force_virtual_addressing"}
S3_OPTIONS = frozenset({*_S3_TEXT, *_S3_SECONDS, *_S3_FLAGS, "endpoint.url", "retry.max.attempts"})
"""The ``rsm.config.`` options an ``s3://`` store reads (prefix stripped)."""


def _s3_option(name: str, value: Any, shown: str) -> dict[str, Any]:
    """pyarrow ``S3FileSystem`` arguments for one option; ``ConfigError`` for an unknown one."""
    try:
        if name in _S3_TEXT:
            return {_S3_TEXT[name]: str(value)}
        if name in _S3_SECONDS:
            return {_S3_SECONDS[name]: int(value) / 1000}
        if name in _S3_FLAGS:
            return {_S3_FLAGS[name]: _flag(value)}
        if name == "retry.max.attempts":
            return {"retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=int(value))}
        if name == "endpoint.url":
            return _endpoint(str(value))
    except ValueError as e:
        raise ConfigError(f"invalid value for rsm.config.{name}: {e}", config=f"rsm.config.{name}", uri=shown) from e
    raise ConfigError(f"unknown s3 store option rsm.config.{name}; known: {', '.join(sorted(S3_OPTIONS))}",
                      config=f"rsm.config.{name}", uri=shown)


def _flag(value: Any) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return text == "true"


def _endpoint(url: str) -> dict[str, Any]:
    """``http://host:port`` -> pyarrow's ``scheme`` and ``endpoint_override``."""
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected http(s)://host[:port], got {url!r}")
    return {"scheme": parts.scheme, "endpoint_override": parts.netloc + parts.path.rstrip("/")}
