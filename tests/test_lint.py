"""Static checks that belong in every run: pyflakes over the package and the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyflakes_finds_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pyflakes", str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "bench"),
         str(ROOT / "kafka_oracle"), str(ROOT / "object_store_oracle"), str(ROOT / "prometheus_oracle"),
         str(ROOT / "spark_cluster_oracle"),
         str(ROOT / "reliability")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
