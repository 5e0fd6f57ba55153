"""The object store the tiered-storage tests run against: a real SeaweedFS S3 through pyarrow.

These pin what tidelog's remote tier will rely on: objects round-trip, listings, ranged reads,
deletes, and the faults the issue names (bad credentials, store down, missing bucket) surfacing as
errors that name the cause; and that stopping the server leaves no process or listener behind.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from pyarrow import fs as pafs

from object_store_oracle import WeedS3Server

S3FilesystemFactory = Callable[..., pafs.S3FileSystem]  # the s3_filesystem fixture


def _put(s3: pafs.S3FileSystem, path: str, data: bytes) -> None:
    with s3.open_output_stream(path) as out:
        out.write(data)


def test_put_then_get_returns_the_same_bytes(s3: pafs.S3FileSystem, bucket: str) -> None:
    data = random.Random(1).randbytes(3 * 1024 * 1024 + 17)
    _put(s3, f"{bucket}/topic-abc/0/00000000000000000000-seg.log", data)
    with s3.open_input_stream(f"{bucket}/topic-abc/0/00000000000000000000-seg.log") as stream:
        assert stream.read() == data


def test_list_shows_every_object_under_a_prefix_with_sizes(s3: pafs.S3FileSystem, bucket: str) -> None:
    names = {f"{bucket}/t-id/0/{offset:020d}-s.log": offset + 1 for offset in (0, 100, 250)}
    for name, size in names.items():
        _put(s3, name, b"x" * size)
    _put(s3, f"{bucket}/t-id/1/00000000000000000000-s.log", b"other partition")
    listed = s3.get_file_info(pafs.FileSelector(f"{bucket}/t-id/0", recursive=True))
    assert {info.path: info.size for info in listed if info.type == pafs.FileType.File} == names


def test_ranged_read_returns_exactly_the_range(s3: pafs.S3FileSystem, bucket: str) -> None:
    data = random.Random(2).randbytes(4 * 1024 * 1024)
    _put(s3, f"{bucket}/segment.log", data)
    with s3.open_input_file(f"{bucket}/segment.log") as file:
        assert file.size() == len(data)
        for offset, length in ((0, 1), (1_000_003, 65_536), (len(data) - 10, 10), (123, 1024 * 1024)):
            assert file.read_at(length, offset) == data[offset:offset + length]


def test_delete_removes_the_object_and_only_it(s3: pafs.S3FileSystem, bucket: str) -> None:
    _put(s3, f"{bucket}/a.log", b"a")
    _put(s3, f"{bucket}/b.log", b"b")
    s3.delete_file(f"{bucket}/a.log")
    assert s3.get_file_info(f"{bucket}/a.log").type == pafs.FileType.NotFound
    with pytest.raises(FileNotFoundError):
        s3.open_input_stream(f"{bucket}/a.log").read()
    assert s3.get_file_info(f"{bucket}/b.log").size == 1


def test_wrong_secret_is_refused_with_403_naming_the_cause(
        object_store: WeedS3Server, s3_filesystem: S3FilesystemFactory, s3: pafs.S3FileSystem,
        bucket: str) -> None:
    _put(s3, f"{bucket}/a.log", b"a")
    intruder = s3_filesystem(object_store.credentials, secret_key="not-the-secret")
    with pytest.raises(OSError) as refused:
        intruder.open_input_stream(f"{bucket}/a.log").read()
    assert "ACCESS_DENIED" in str(refused.value)  # a HEAD first: a 403 without a body
    with pytest.raises(OSError, match="SIGNATURE_DOES_NOT_MATCH"):
        intruder.get_file_info(pafs.FileSelector(bucket))
    with pytest.raises(OSError, match="SIGNATURE_DOES_NOT_MATCH"):
        _put(intruder, f"{bucket}/b.log", b"b")
    assert s3.get_file_info(f"{bucket}/b.log").type == pafs.FileType.NotFound


def test_bucket_that_does_not_exist_is_an_error(object_store: WeedS3Server,
                                               s3_filesystem: S3FilesystemFactory) -> None:
    s3 = s3_filesystem(object_store.credentials)
    with pytest.raises(OSError, match="NoSuchBucket|NOT_FOUND|does not exist"):
        s3.open_input_stream("no-such-bucket-here/a.log").read()
    with pytest.raises(OSError, match="NoSuchBucket|NOT_FOUND|does not exist"):
        s3.get_file_info(pafs.FileSelector("no-such-bucket-here"))
    with pytest.raises(OSError, match="NoSuchBucket|NOT_FOUND|does not exist"):
        _put(s3, "no-such-bucket-here/a.log", b"a")


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_stopped_server_refuses_connections_and_leaves_no_process(
        tmp_path: Path, s3_filesystem: S3FilesystemFactory) -> None:
    server = WeedS3Server(tmp_path / "weed")
    credentials = server.start()
    try:
        s3 = s3_filesystem(credentials)
        s3.create_dir("short-lived")
        pid = server.pid
        assert pid is not None and _processes_mentioning(str(tmp_path))
    finally:
        server.stop(timeout_s=2.0)  # then SIGKILL of the group: what is checked below holds either way
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert _processes_mentioning(str(tmp_path)) == []
    for port in server.ports.values():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
    with pytest.raises(OSError, match="(?i)connect|refused"):
        s3.get_file_info(pafs.FileSelector("short-lived"))
    server.stop()  # idempotent
