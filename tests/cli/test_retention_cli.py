"""End to end through the command line (issue 3's scenarios): a topic with small segments, records
produced with old and new timestamps, ``retention run``, then which segment files remain, the new
log start offset (checkpoint file and ``offsets --time -2``) and where consuming starts. The same
for ``retention.bytes`` and ``delete-records``; ``explain`` and ``--dry-run`` change nothing.

Real time: timestamps are days away from now, so a slow machine cannot flip a decision.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import orjson
from test_produce import run

from tidelog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.topic_partition import TopicPartition

DAY_MS = 86_400_000
SEGMENT_BYTES = "600"  # about 8 records of ~70 bytes per segment


def lines(count: int, timestamp: int, start: int = 0) -> bytes:
    return b"".join(orjson.dumps({"key": f"k{i}", "value": f"value-{i:04d}", "timestamp": timestamp}) + b"\n"
                    for i in range(start, start + count))


def ok(data_dir: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run(data_dir, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def live_segments(partition_dir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))


def deleted_segments(partition_dir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log.deleted"))


def earliest(data_dir: Path, topic: str) -> int:
    out = ok(data_dir, "offsets", topic, "--time", "-2")
    [line] = out.splitlines()
    return int(line.rsplit(":", 1)[1])


def first_consumed(data_dir: Path, topic: str) -> int:
    out = ok(data_dir, "consume", topic, "--from-beginning", "--format", "json", "--max-messages", "1")
    return json.loads(out.splitlines()[0])["offset"]


def checkpointed_log_start(data_dir: Path, topic: str) -> int | None:
    return OffsetCheckpointFile(data_dir / LOG_START_OFFSET_CHECKPOINT_FILE).read().get(TopicPartition(topic, 0))


def test_time_retention_deletes_old_segments_and_moves_the_log_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    now = int(time.time() * 1000)
    ok(data, "topics", "create", "events", "--config", f"segment.bytes={SEGMENT_BYTES}",
       "--config", f"retention.ms={DAY_MS}")
    ok(data, "produce", "events", "--format", "json", "--batch-size", "1", stdin=lines(30, now - 3 * DAY_MS))
    ok(data, "produce", "events", "--format", "json", "--batch-size", "1", stdin=lines(10, now, start=30))
    before = live_segments(data / "events-0")
    assert len(before) > 3

    explained = ok(data, "explain", "events")
    dry = ok(data, "retention", "run", "--dry-run")
    assert live_segments(data / "events-0") == before, "explain and --dry-run change nothing"
    assert "would delete" in explained and "would delete" in dry

    out = ok(data, "retention", "run")
    assert "retention.ms" in out and "deleted" in out
    remaining = live_segments(data / "events-0")
    first_kept = remaining[0]
    assert deleted_segments(data / "events-0") == [b for b in before if b < first_kept]
    assert 0 < first_kept <= 30, "every segment of only-old records goes, the one holding new records stays"
    assert remaining == [b for b in before if b >= first_kept]
    assert earliest(data, "events") == first_kept
    assert first_consumed(data, "events") == first_kept
    # The log start offset is the first segment's base: Kafka lists only starts past it.
    assert checkpointed_log_start(data, "events") is None
    assert "would delete 0 segments" in ok(data, "explain", "events")
    assert live_segments(data / "events-0") == remaining and deleted_segments(data / "events-0") == [], \
        "the .deleted files go at the next start-up at the latest"


def test_future_timestamp_protects_its_segment_and_all_newer(tmp_path: Path) -> None:
    data = tmp_path / "data"
    now = int(time.time() * 1000)
    ok(data, "topics", "create", "events", "--config", f"segment.bytes={SEGMENT_BYTES}",
       "--config", f"retention.ms={DAY_MS}", "--config", "message.timestamp.after.max.ms=9223372036854775807")
    ok(data, "produce", "events", "--format", "json", "--batch-size", "1", stdin=lines(10, now - 3 * DAY_MS))
    ok(data, "produce", "events", "--format", "json", "--batch-size", "1", stdin=lines(10, now + 3 * DAY_MS, 10))
    ok(data, "produce", "events", "--format", "json", "--batch-size", "1", stdin=lines(20, now - 3 * DAY_MS, 20))
    explained = ok(data, "explain", "events")
    assert "in the future" in explained
    ok(data, "retention", "run")
    assert earliest(data, "events") <= 10, "segments after the future one stay although they are old"


def test_size_retention_keeps_retention_bytes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    now = int(time.time() * 1000)
    ok(data, "topics", "create", "sized", "--config", f"segment.bytes={SEGMENT_BYTES}",
       "--config", "retention.bytes=1500")
    ok(data, "produce", "sized", "--format", "json", "--batch-size", "1", stdin=lines(60, now))
    before = live_segments(data / "sized-0")
    sizes = {b: (data / "sized-0" / f"{b:020d}.log").stat().st_size for b in before}

    out = ok(data, "retention", "run", "--json")
    [plan] = json.loads(out)
    assert {s["cause"] for s in plan["segments"]} == {"retention.bytes"}
    remaining = live_segments(data / "sized-0")
    assert sum(sizes[b] for b in remaining) >= 1500, "never below retention.bytes"
    assert sum(sizes[b] for b in remaining) - sizes[remaining[0]] < 1500, "the oldest kept one could not go"
    assert earliest(data, "sized") == remaining[0] == first_consumed(data, "sized")


def test_delete_records_then_retention_frees_the_segments_below(tmp_path: Path) -> None:
    data = tmp_path / "data"
    now = int(time.time() * 1000)
    ok(data, "topics", "create", "trimmed", "--config", f"segment.bytes={SEGMENT_BYTES}")
    ok(data, "produce", "trimmed", "--format", "json", "--batch-size", "1", stdin=lines(40, now))
    before = live_segments(data / "trimmed-0")

    out = ok(data, "delete-records", "trimmed", "--partition", "0", "--offset", "25")
    assert out.strip() == "partition: trimmed-0\tlow_watermark: 25"
    assert checkpointed_log_start(data, "trimmed") == 25, "written at shutdown, above the first segment's base"
    assert earliest(data, "trimmed") == 25 == first_consumed(data, "trimmed")
    assert live_segments(data / "trimmed-0") == before, "DeleteRecords touches no file"

    ok(data, "retention", "run")
    remaining = live_segments(data / "trimmed-0")
    assert remaining[0] <= 25 and all(b <= 25 for b in deleted_segments(data / "trimmed-0"))
    assert [b for b in before if b not in remaining] == deleted_segments(data / "trimmed-0") != []
    assert earliest(data, "trimmed") == 25 == first_consumed(data, "trimmed")


def test_delete_records_refused_on_a_compacted_topic_and_past_the_end(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "topics", "create", "compacted", "--config", "cleanup.policy=compact")
    code, _, err = run(data, "delete-records", "compacted", "--partition", "0", "--offset", "0")
    assert code == 1 and "cleanup.policy" in err
    ok(data, "topics", "create", "plain")
    code, _, err = run(data, "delete-records", "plain", "--partition", "0", "--offset", "5")
    assert code == 1 and "high watermark" in err
    code, _, err = run(data, "delete-records", "plain", "--partition", "3", "--offset", "0")
    assert code == 1 and "no partition 3" in err
