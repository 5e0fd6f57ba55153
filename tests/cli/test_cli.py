"""End-to-end tests of the `tidelog` command: demo, dump and verify on real files."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from tidelog.cli.main import hoist_global_options, main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One demo data dir per module (500 records); tests get their own copy."""
    base = tmp_path_factory.mktemp("demo")
    with contextlib.redirect_stdout(io.StringIO()):
        main(["--data-dir", str(base), "demo", "--records", "500"])
    return base


@pytest.fixture
def data_dir(demo_data: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(demo_data, copy)
    return copy


def first_log(data_dir: Path) -> Path:
    return sorted((data_dir / "demo-0").glob("*.log"))[0]


def test_demo_appends_reads_back_and_verifies(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--data-dir", str(data_dir), "demo", "--records", "200")
    assert code == 0
    assert "offsets 500..699" in out and "read back 200" in out and "verify: OK" in out


def test_verify_passes_on_clean_data(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", str(data_dir))
    assert code == 0
    assert out.startswith("OK:") and "700" not in out and "500 record(s)" in out


def test_verify_names_file_and_byte_position_of_a_corrupt_batch(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = first_log(data_dir)
    data = bytearray(log_file.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's CRC-covered bytes
    log_file.write_bytes(bytes(data))
    code, out, _ = run(capsys, "verify", str(log_file))
    assert code == 1
    assert f"{log_file} at byte 0: batch at offset 0 fails its CRC check" in out


def test_verify_reports_a_torn_tail(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = first_log(data_dir)
    size = log_file.stat().st_size
    with log_file.open("r+b") as f:
        f.truncate(size - 10)
    code, out, _ = run(capsys, "verify", "--json", str(log_file))
    assert code == 1
    report = json.loads(out)
    assert not report["ok"]
    assert "bytes after the last complete batch" in report["problems"][0]["message"]


def test_verify_reports_an_index_entry_pointing_inside_a_batch(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = first_log(data_dir)
    index = log_file.with_suffix(".index")
    index.write_bytes((5).to_bytes(4, "big") + (3).to_bytes(4, "big"))
    code, out, _ = run(capsys, "verify", str(index))
    assert code == 1
    assert "points to byte 3, not a batch start" in out


def test_dump_prints_batches_in_kafka_dump_log_wording(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", str(first_log(data_dir)))
    assert code == 0
    lines = out.splitlines()
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith("baseOffset: 0 lastOffset: 99 count: 100 ")
    assert "compresscodec: none" in lines[2] and "isvalid: true" in lines[2]
    assert any("compresscodec: gzip" in line for line in lines)


def test_dump_deep_prints_every_record_with_data(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump", "--print-data", "--json", str(first_log(data_dir)))
    assert code == 0
    records = [json.loads(line) for line in out.splitlines() if '"kind": "record"' in line]
    assert [r["offset"] for r in records] == list(range(500))
    assert records[7]["key"] == "key-7" and records[7]["payload"] == "value 7"


def test_dump_index_files(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = first_log(data_dir)
    code, out, _ = run(capsys, "dump", "--json", str(log_file.with_suffix(".index")), str(log_file.with_suffix(".timeindex")))
    assert code == 0
    items = [json.loads(line) for line in out.splitlines()]
    index, time_index = str(log_file.with_suffix(".index")), str(log_file.with_suffix(".timeindex"))
    starts = [i for i, item in enumerate(items) if item["kind"] == "file"]
    assert [items[i]["file"] for i in starts] == [index, time_index] and starts[0] == 0
    entries = [item for item in items if item["kind"] != "file"]
    assert entries and all(e["kind"] == "entry" for e in entries)
    assert {e["file"] for e in items[:starts[1]]} == {index} and {e["file"] for e in items[starts[1]:]} == {time_index}
    assert "position" in items[1] and "timestamp" in items[-1]
    code, out, _ = run(capsys, "dump", "--verify-index", str(log_file.with_suffix(".index")))
    assert code == 0 and "index is consistent with its log" in out


def test_dump_refuses_a_file_that_is_not_a_segment_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    code, _, err = run(capsys, "dump", str(other))
    assert code != 0 and "not a .log" in err


def test_global_options_may_follow_the_subcommand() -> None:
    assert hoist_global_options(["verify", "x", "--data-dir", "d", "--override=a=b"]) == [
        "--data-dir", "d", "--override=a=b", "verify", "x",
    ]


def test_bad_override_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--data-dir", str(tmp_path), "--override", "novalue", "demo")
    assert code == 2 and "KEY=VALUE" in err


def test_verify_of_a_data_dir_reports_a_corrupt_batch_once(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = first_log(data_dir)
    data = bytearray(log_file.read_bytes())
    data[100] ^= 0xFF
    log_file.write_bytes(bytes(data))
    code, out, _ = run(capsys, "verify", str(data_dir))
    assert code == 1
    assert out.count("fails its CRC check") == 1  # the .index check reuses the .log scan


def test_broker_overrides_shape_the_logs_commands_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "demo", "--records", "1000",
                       "--override", "log.segment.bytes=4096")
    assert code == 0 and "verify: OK" in out
    assert len(list((tmp_path / "demo-0").glob("*.log"))) > 1


def test_server_properties_file_is_read_and_validated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("# broker\nlog.segment.bytes=4096\nlisteners=PLAINTEXT://127.0.0.1:9092\n")
    code, _, _ = run(capsys, "--data-dir", str(tmp_path / "data"), "--config", str(properties), "demo", "--records", "1000")
    assert code == 0 and len(list((tmp_path / "data" / "demo-0").glob("*.log"))) > 1
    properties.write_text("log.segment.bytes=-5\n")
    code, _, err = run(capsys, "--data-dir", str(tmp_path / "data"), "--config", str(properties), "demo")
    assert code == 1 and "log.segment.bytes" in err and "-5" in err


def test_demo_goes_through_the_owner_of_the_log_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """demo opened the partition directly once, writing into a dir another process had locked."""
    from tidelog.manager import LogManager
    from tidelog.storage.config import BrokerConfig

    owner = LogManager.open(BrokerConfig.from_properties({}), [tmp_path])
    try:
        code, _, err = run(capsys, "--data-dir", str(tmp_path), "demo", "--records", "10")
        assert code != 0 and "lock" in err.lower()
        assert not (tmp_path / "demo-0").exists()
    finally:
        owner.shutdown()
    code, out, _ = run(capsys, "--data-dir", str(tmp_path), "demo", "--records", "10")
    assert code == 0 and "read back 10" in out
