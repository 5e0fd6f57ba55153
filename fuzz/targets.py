"""The fuzz targets: one decoder or loader each, a corpus of valid inputs, and the errors it may raise.

A target's ``one_input(data)`` feeds ``data`` to its decoder and walks everything the decoder
returns (every header field, every record), so lazy decoding is exercised too. Its contract:
it returns, or raises one of ``target.allowed`` (typed errors: :class:`~tidelog.errors.TidelogError`
subclasses). Anything else escaping — ``IndexError``, ``struct.error``, ``MemoryError``,
``OverflowError``, a numpy error — is a bug the fuzzer reports. Hangs are caught by the callers'
time limits (Hypothesis' deadline, libFuzzer's ``-timeout``).

Targets whose input is several things at once take them from the first byte(s) (which codec,
which kind of file), so one byte string drives the whole target and a crash reproduces from
the bytes alone. The corpus holds valid encodings: mutating those reaches deep code that random
bytes never get past the first length check of.

Used by :mod:`fuzz.run` (atheris, coverage-guided) and tests/fuzz (Hypothesis, property-based).
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tidelog.errors import TidelogError

CODEC_COUNT = 5  # none, gzip, snappy, lz4, zstd


@dataclass(frozen=True)
class Target:
    """One fuzz target: ``one_input(data)`` returns or raises one of ``allowed``."""

    name: str
    one_input: Callable[[bytes], None]
    corpus: Callable[[], list[bytes]]
    allowed: tuple[type[BaseException], ...] = (TidelogError,)

    def check(self, data: bytes) -> None:
        """Run one input; allowed errors are swallowed, anything else propagates (a finding)."""
        try:
            self.one_input(data)
        except self.allowed:
            pass


# --- record batches (records/batch.py, legacy.py, record.py) ----------------------------------

def _walk_batch(batch: object) -> None:
    for name in ("base_offset", "last_offset", "next_offset", "records_count", "max_timestamp", "magic",
                 "compression", "timestamp_type", "crc", "size_in_bytes"):
        getattr(batch, name)
    batch.is_valid()  # type: ignore[attr-defined]
    for record in batch.records():  # type: ignore[attr-defined]
        (record.offset, record.timestamp, record.key, record.value, record.headers)


def batch_input(data: bytes) -> None:
    """Every batch of a ``.log`` byte string, decoded to its records (v2 and legacy v0/v1)."""
    from tidelog.records import iter_batches

    for _, batch in iter_batches(data):
        _walk_batch(batch)


@cache
def batch_corpus() -> list[bytes]:
    from tidelog.records import build_batch, build_end_txn_marker_batch, build_legacy_batch

    rows = [(b"k%d" % i, b"value-%d" % i * 3, [("h", b"x")] if i % 2 else []) for i in range(5)]
    samples = [build_batch(rows, base_offset=100, timestamp=1_700_000_000_000, compression=codec)
               for codec in range(CODEC_COUNT)]
    samples.append(build_batch([(None, None)], producer_id=7, producer_epoch=1, base_sequence=0))
    samples.append(build_end_txn_marker_batch(commit=False, producer_id=7, producer_epoch=1, coordinator_epoch=0,
                                              base_offset=9, timestamp=5))
    legacy = [(i, 1_700_000_000_000 + i, b"k", b"v%d" % i) for i in range(3)]
    for magic in (0, 1):
        samples += [build_legacy_batch(legacy, magic=magic, compression=codec) for codec in range(4)]
    samples.append(b"".join(samples[:3]))
    return samples


# --- compression framing (records/compression.py) ---------------------------------------------

def compression_input(data: bytes) -> None:
    """``data[0]`` picks the codec (mod 5), ``data[1]`` the magic (mod 3); the rest is the stream."""
    from tidelog.records import decompress

    if len(data) < 2:
        return
    decompress(data[0] % CODEC_COUNT, data[2:], magic=data[1] % 3)


@cache
def compression_corpus() -> list[bytes]:
    from tidelog.records import compress

    payload = b"".join(b"record %d, " % i for i in range(200))
    return [bytes((codec, magic)) + compress(codec, payload, magic=max(magic, 1) if codec == 3 else magic)
            for codec in range(CODEC_COUNT) for magic in (0, 1, 2)]


# --- the scan kernels (records/scan.py), interpreted so every error is visible ----------------

def scan_input(data: bytes) -> None:
    """scan_batches, walk_batch_headers and summarize_batch_records over ``data``, interpreted twin."""
    from tidelog.records import RecordBatch
    from tidelog.records.scan import get_kernels, scan_batches, summarize_batch_records, walk_batch_headers

    pure = get_kernels(True)
    walk_batch_headers(data, kernels=pure)
    scan_batches(data, verify_crc=False, stop_at_legacy=True, kernels=pure)
    if len(data) >= 61 and data[16] == 2:
        summarize_batch_records(RecordBatch(data), kernels=pure)


def scan_corpus() -> list[bytes]:
    return [sample for sample in batch_corpus() if sample[16] == 2]


# --- Kafka requests (server/codec.py) ---------------------------------------------------------

def request_input(data: bytes) -> None:
    """One request frame (without its size prefix), decoded as the server decodes it."""
    from tidelog.server.codec import decode_request

    decode_request(data)


@cache
def request_corpus() -> list[bytes]:
    """A valid frame of every API and version the server advertises (tests/server's samples)."""
    from fuzz import requests

    return requests.sample_frames()


# --- index files (storage/index.py, txn_index.py) ---------------------------------------------

_INDEX_KINDS = ("index", "timeindex", "txnindex")


def index_input(data: bytes) -> None:
    """``data[0]`` picks the kind (mod 3): the rest is written as that file and loaded, sanity-checked
    and searched as a segment's index is."""
    if not data:
        return
    kind = _INDEX_KINDS[data[0] % 3]
    path = _scratch() / f"00000000000000000100.{kind}"
    path.write_bytes(data[1:])
    _load_index(kind, path)


def _load_index(kind: str, path: Path) -> None:
    from tidelog.storage.index import OffsetIndex, TimeIndex
    from tidelog.storage.txn_index import TransactionIndex

    if kind == "txnindex":
        index = TransactionIndex(path, 100)
        try:
            index.sanity_check()
            index.collect_aborted_txns(100, 1 << 40)
        finally:
            index.close()
        return
    cls = OffsetIndex if kind == "index" else TimeIndex
    cls.check_file(path, 100)
    opened = cls(path, 100, writable=False)
    try:
        opened.sanity_check()
        if kind == "index":
            opened.lookup(150)  # type: ignore[attr-defined]
        else:
            opened.lookup(1_700_000_000_000)  # type: ignore[attr-defined]
    finally:
        opened.close()


@cache
def index_corpus() -> list[bytes]:
    offsets = b"".join(struct.pack(">ii", i * 3, i * 4096) for i in range(8))
    times = b"".join(struct.pack(">qi", 1_700_000_000_000 + i, i * 3) for i in range(8))
    txns = b"".join(struct.pack(">hqqqq", 0, 7, 100 + i, 110 + i, 100 + i) for i in range(4))
    return [b"\x00" + offsets, b"\x01" + times, b"\x02" + txns]


@cache
def _scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="tidelog-fuzz-"))


# --- checkpoints and small metadata files (storage/checkpoints.py, metadata.py, manager/topics.py) --

def checkpoint_input(data: bytes) -> None:
    """``data[0]`` picks the file kind (mod 7); the rest is its content."""
    from tidelog.manager.topics import decode_registry
    from tidelog.storage.checkpoints import EPOCH_ENTRY_FORMAT, OFFSET_ENTRY_FORMAT, parse_checkpoint
    from tidelog.storage.metadata import MetaProperties, decode_clean_shutdown, decode_partition_metadata
    from tidelog.storage.properties import parse_properties

    if not data:
        return
    kind, content, path = data[0] % 7, data[1:], Path("fuzzed")
    if kind in (0, 1):
        parse_checkpoint(_text(content), OFFSET_ENTRY_FORMAT if kind == 0 else EPOCH_ENTRY_FORMAT, path)
    elif kind == 2:
        decode_partition_metadata(content, path)
    elif kind == 3:
        MetaProperties.from_properties(parse_properties(_text(content)), path)
    elif kind == 4:
        decode_clean_shutdown(content, path)
    elif kind == 5:
        decode_registry(content, path)
    else:
        _load_credentials(content)


def _load_credentials(content: bytes) -> None:
    from tidelog.server.security.credentials import load_credentials

    path = _scratch() / "credentials.json"
    path.write_bytes(content)
    load_credentials(path)


def _text(content: bytes) -> str:
    """The file's text as the properties loaders read it: UTF-8, else ISO-8859-1 as Java does."""
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return content.decode("latin-1")


@cache
def checkpoint_corpus() -> list[bytes]:
    return [
        b"\x00" + b"0\n2\norders 3 1520\norders 0 977\n",
        b"\x01" + b"0\n2\n0 0\n3 1520\n",
        b"\x02" + b"version: 0\ntopic_id: q9Qo-wkKRAKLDw_iWvRQZg\n",
        b"\x03" + b"#\n#Sun Nov 22 05:00:00 UTC 2026\nnode.id=1\nversion=1\n"
                  b"cluster.id=MkU3OEVBNTcwNTJENDM2Qk\ndirectory.id=MGbXSbxGRAGQxqo3sB9U0g\n",
        b"\x04" + b'{"version":0,"brokerEpoch":-1}',
        b"\x05" + b'{"version": 0, "epoch": 3, "topics": {"orders": {"topic_id": "q9Qo-wkKRAKLDw_iWvRQZg", '
                  b'"partitions": 2, "configs": {"cleanup.policy": "compact"}, "assignments": {"0": "d"}}}, '
                  b'"deleted_topic_ids": []}',
        b"\x06" + _credentials_sample(),
    ]


def _credentials_sample() -> bytes:
    from tidelog.server.security.credentials import credentials_path, load_credentials, save_credentials
    from tidelog.server.security.credentials import new_user_credential

    path = credentials_path(_scratch())
    save_credentials(path, {"alice": {m: new_user_credential(m, "secret") for m in ("PLAIN", "SCRAM-SHA-256")}})
    data = path.read_bytes()
    assert load_credentials(path)
    return data


# --- server.properties and topic configs (storage/properties.py, config.py) ----------------------

def properties_input(data: bytes) -> None:
    """``data`` as a server.properties file: parsed, then validated as broker and as topic configs."""
    from tidelog.storage.config import BrokerConfig, LogConfig, TOPIC_CONFIGS
    from tidelog.storage.properties import format_properties, parse_properties

    props = parse_properties(_text(data))
    BrokerConfig.from_properties(props).log_config()
    LogConfig.from_props(None, {k: v for k, v in props.items() if k in TOPIC_CONFIGS})
    assert parse_properties(format_properties(props)) == props, "format/parse must round-trip"


@cache
def properties_corpus() -> list[bytes]:
    return [
        b"# broker\nnode.id=1\nlog.dirs=/tmp/a,/tmp/b\nlisteners=PLAINTEXT://:9092,SSL://:9093\n"
        b"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL\nlog.retention.hours=168\n"
        b"segment.bytes=1048576\ncleanup.policy=compact,delete\nmax.connections.per.ip.overrides=127.0.0.1:5\n",
        b"key\\ with\\ spaces = value \\u0041\\\n   continued\n! comment\nmin.cleanable.dirty.ratio=0.5\n",
        b"compression.type=zstd\nmessage.timestamp.type=LogAppendTime\nretention.ms=-1\n",
    ]


# --- KRaft metadata records (manager/kraft_metadata.py) --------------------------------------------

def kraft_input(data: bytes) -> None:
    """One metadata record value, decoded as the KRaft reader decodes it."""
    from tidelog.manager.kraft_metadata import decode_metadata_record

    decode_metadata_record(data, Path("fuzzed"), 0)


@cache
def kraft_corpus() -> list[bytes]:
    from tidelog.records.varint import encode_unsigned_varint as uv

    topic_id = bytes(range(16))

    def string(text: bytes) -> bytes:
        return uv(len(text) + 1) + text

    def framed(api_key: int, version: int, message: bytes) -> bytes:
        return uv(1) + uv(api_key) + uv(version) + message + b"\x00"

    return [
        framed(2, 0, string(b"orders") + topic_id),
        framed(3, 2, struct.pack(">i", 3) + topic_id),
        framed(4, 0, b"\x02" + string(b"orders") + string(b"cleanup.policy") + string(b"compact")),
        framed(9, 0, topic_id),
        framed(23, 0, b""),
    ]


# --- __consumer_offsets records (server/groups/records.py), read back when the coordinator loads ----

def groups_input(data: bytes) -> None:
    """``data[0]`` picks a record key, an OffsetCommitValue or a GroupMetadataValue (mod 3)."""
    from tidelog.server.groups.records import decode_group_metadata_value, decode_key, decode_offset_commit_value

    if not data:
        return
    decoder = (decode_key, decode_offset_commit_value, decode_group_metadata_value)[data[0] % 3]
    decoder(data[1:])


@cache
def groups_corpus() -> list[bytes]:
    from tidelog.server.groups import records as r

    member = r.MemberMetadata("m-1", None, "client", "/127.0.0.1", 30000, 10000, b"sub", b"assigned")
    group = r.GroupMetadataValue("consumer", 3, "range", "m-1", 1_700_000_000_000, (member,))
    return [
        b"\x00" + r.encode_offset_commit_key("g", "orders", 3),
        b"\x00" + r.encode_group_metadata_key("g"),
        b"\x01" + r.encode_offset_commit_value(r.OffsetCommitValue(42, "meta", 1_700_000_000_000, 5)),
        b"\x02" + r.encode_group_metadata_value(group),
    ]


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("batch", batch_input, batch_corpus),
    Target("compression", compression_input, compression_corpus),
    Target("scan", scan_input, scan_corpus),
    Target("request", request_input, request_corpus),
    Target("index", index_input, index_corpus),
    Target("checkpoint", checkpoint_input, checkpoint_corpus),
    Target("properties", properties_input, properties_corpus),
    Target("kraft", kraft_input, kraft_corpus),
    Target("groups", groups_input, groups_corpus),
)}
