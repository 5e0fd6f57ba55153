"""The JSON objects of the remote metadata log: round trips, names, and what a reader refuses."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.remote.errors import RemoteMetadataError, RemoteMetadataVersionError
from tidelog.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tidelog.remote.metadata_codec import (
    FORMAT_VERSION,
    SegmentAdded,
    SegmentsSwapped,
    SegmentUpdated,
    Snapshot,
    decode_event,
    decode_snapshot,
    encode_event,
    encode_snapshot,
    event_name,
    parse_name,
    snapshot_name,
)
from tidelog.storage.metadata import new_topic_id
from tidelog.topic_partition import TopicPartition
from remote_helpers import TOPIC_ID_PARTITION

TIP = TOPIC_ID_PARTITION
URI = "file:///store"
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@st.composite
def segments(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, 2**62))
    end = start + draw(st.integers(0, 10**6))
    firsts = sorted(draw(st.sets(st.integers(start + 1, end), max_size=3))) if end > start else []
    epochs = tuple(zip(range(draw(st.integers(0, 100)), 10**6), [start, *firsts]))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, new_topic_id()), start, end, draw(INT64), draw(st.integers(-1, 2**31 - 1)),
        draw(INT64), draw(st.integers(0, 2**31 - 1)), epochs, draw(st.booleans()),
        draw(st.sampled_from(RemoteLogSegmentState)))


EVENTS = st.one_of(
    st.builds(SegmentAdded, segments()),
    st.builds(SegmentUpdated, st.builds(new_topic_id), st.sampled_from(RemoteLogSegmentState), INT64, INT64),
    st.builds(SegmentsSwapped, st.lists(st.builds(new_topic_id), max_size=4).map(tuple),
              st.lists(segments(), max_size=4).map(tuple), INT64, INT64),
)


@given(st.integers(0, 10**19 - 1), EVENTS)
def test_an_event_round_trips(sequence: int, event: object) -> None:
    data = encode_event(sequence, event)  # type: ignore[arg-type]
    assert decode_event(data, key="k", uri=URI, sequence=sequence, tip=TIP) == event


@given(st.integers(0, 10**6), st.lists(segments(), max_size=6).map(tuple))
def test_a_snapshot_round_trips(sequence: int, segs: tuple[RemoteLogSegmentMetadata, ...]) -> None:
    snapshot = Snapshot(sequence, TIP, segs)
    assert decode_snapshot(encode_snapshot(snapshot), key="k", uri=URI, sequence=sequence, tip=TIP) == snapshot


def test_an_event_is_sorted_json_with_a_version() -> None:
    data = encode_event(7, SegmentUpdated("AAAAAAAAAAAAAAAAAAAAAQ", RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 5, 1))
    assert data == (b'{"broker_id":1,"event_timestamp_ms":5,"segment_id":"AAAAAAAAAAAAAAAAAAAAAQ",'
                    b'"sequence":7,"state":1,"type":"update","version":1}')


def test_names_carry_20_digit_sequences() -> None:
    assert event_name(42) == "00000000000000000042.json"
    assert snapshot_name(42) == "00000000000000000042.snapshot.json"
    assert parse_name(event_name(42)) == ("event", 42)
    assert parse_name(snapshot_name(99)) == ("snapshot", 99)
    for other in ("42.json", "x.json", "00000000000000000042.log", ".00000000000000000042.json.tidelog-tmp-1"):
        assert parse_name(other) is None


def _update(**changes: object) -> bytes:
    body = orjson.loads(encode_event(3, SegmentUpdated("AAAAAAAAAAAAAAAAAAAAAQ", RemoteLogSegmentState(1), 5, 1)))
    body.update(changes)
    return orjson.dumps({k: v for k, v in body.items() if v is not None})


@pytest.mark.parametrize("data", [
    b"", b"{not json", b"[]", b'{"version": 1}', _update(version="1"), _update(type="rename"),
    _update(state=9), _update(segment_id="short"), _update(event_timestamp_ms=None), _update(broker_id=1.5),
])
def test_a_corrupt_event_is_an_error_naming_its_key(data: bytes) -> None:
    with pytest.raises(RemoteMetadataError, match="corrupt remote metadata object") as raised:
        decode_event(data, key="t/0/metadata/00000000000000000003.json", uri=URI, sequence=3, tip=TIP)
    assert raised.value.key == "t/0/metadata/00000000000000000003.json" and raised.value.uri == URI


def test_an_event_holding_another_sequence_than_its_name_is_corrupt() -> None:
    with pytest.raises(RemoteMetadataError, match="holds sequence 3, named 4"):
        decode_event(_update(), key="k", uri=URI, sequence=4, tip=TIP)


def test_a_newer_version_is_refused_as_written_by_a_newer_tidelog() -> None:
    with pytest.raises(RemoteMetadataVersionError, match="written by a newer tidelog") as raised:
        decode_event(_update(version=FORMAT_VERSION + 1, type="something new"), key="k", uri=URI, sequence=3, tip=TIP)
    assert (raised.value.version, raised.value.supported, raised.value.key) == (FORMAT_VERSION + 1, FORMAT_VERSION, "k")


def test_a_snapshot_of_another_partition_is_refused() -> None:
    other = TopicIdPartition(TIP.topic_id, TopicPartition("orders", 3))
    data = encode_snapshot(Snapshot(5, other, ()))
    with pytest.raises(RemoteMetadataError, match="another partition"):
        decode_snapshot(data, key="k", uri=URI, sequence=5, tip=TIP)
