"""The atheris harness (fuzz/run.py): ``--reproduce`` replays a saved input without atheris (make
test), and every target runs coverage-guided for 20,000 executions without a finding (make soak;
make test does not install the ``fuzz`` extra, see the Makefile)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import run
from fuzz.targets import TARGETS

REPO = Path(__file__).resolve().parents[2]


def test_reproduce_replays_a_saved_input_through_its_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "crash-0"
    for name, target in TARGETS.items():
        saved.write_bytes(target.corpus()[0][:40])
        assert run.main([name, "--reproduce", str(saved)]) == 0
        assert "gives a result or an allowed error" in capsys.readouterr().out


@pytest.mark.soak
def test_every_target_survives_coverage_guided_fuzzing_soak(tmp_path: Path) -> None:
    pytest.importorskip("atheris", reason="the fuzz extra is not installed: pip install -e '.[fuzz]'")
    result = subprocess.run([sys.executable, "-m", "fuzz.run", "all", "--runs", "20000",
                             "--artifacts", f"{tmp_path}/"], capture_output=True, text=True, timeout=3600, cwd=REPO)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert not list(tmp_path.glob("crash-*"))
