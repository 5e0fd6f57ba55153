"""examples/orders_pipeline.py never deletes a directory it did not create: ``--data-dir`` must be
new, empty, or marked as made by an earlier run of the example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from examples import orders_pipeline

ROOT = Path(__file__).resolve().parents[2]


def test_a_non_empty_dir_it_did_not_create_is_refused_and_kept(tmp_path: Path) -> None:
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "orders_pipeline.py"), "--data-dir", str(precious)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert f"--data-dir {precious} is not empty and was not made by this example" in result.stderr
    assert (precious / "thesis.txt").read_text() == "years of work"


def test_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SystemExit, match="is a file"):
        orders_pipeline.prepare_data_dir(target)
    assert target.read_text() == "x"


def test_new_empty_and_own_dirs_are_prepared(tmp_path: Path) -> None:
    from tidelog.manager import LogManager
    from tidelog.storage.config import BrokerConfig

    new = tmp_path / "new" / "data"
    orders_pipeline.prepare_data_dir(new)
    assert [p.name for p in new.iterdir()] == [orders_pipeline.MARKER]
    orders_pipeline.create_topics(new)  # the marker does not disturb the log dir
    assert (new / "orders-0").is_dir()
    orders_pipeline.prepare_data_dir(new)  # its own earlier run: emptied and reused
    assert [p.name for p in new.iterdir()] == [orders_pipeline.MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    orders_pipeline.prepare_data_dir(empty)
    assert (empty / orders_pipeline.MARKER).is_file()
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(empty)}))
    manager.shutdown()
