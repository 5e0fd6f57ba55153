"""When the Python that Spark starts for its workers lacks tidelog, the failure names that
Python, where Spark took it from, and what to install, instead of Spark's bare
``DATA_SOURCE_NOT_FOUND`` (the ``pyspark_tidelog`` lookup runs in that Python) or a task's
``ModuleNotFoundError``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.spark import session
from tidelog.spark.session import WorkerPythonError, check_workers_python, workers_python


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real Python without tidelog (a fresh venv with nothing installed)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import tidelog"], capture_output=True).returncode != 0
    return python


def test_a_python_without_tidelog_is_named_with_its_source_and_the_fix(bare_python: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.raises(WorkerPythonError) as e:
        check_workers_python({"spark.pyspark.python": bare_python})
    message = str(e.value)
    assert f"Spark would start its Python workers with '{bare_python}' (from the Spark conf spark.pyspark.python)" in message
    assert "cannot import tidelog's Spark source (ModuleNotFoundError: No module named 'tidelog')" in message
    assert f"{bare_python} -m pip install 'tidelog[spark]'" in message and sys.executable in message
    monkeypatch.setenv("PYSPARK_PYTHON", bare_python)
    with pytest.raises(WorkerPythonError, match="from the environment variable PYSPARK_PYTHON"):
        check_workers_python({})


def test_a_missing_interpreter_and_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(WorkerPythonError, match="does not exist or is not on PATH"):
        check_workers_python({"spark.pyspark.python": str(tmp_path / "no-python")})
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert workers_python({}) == ("python3", "Spark's default when neither spark.pyspark.python nor PYSPARK_PYTHON is set")


def test_this_python_passes_and_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "_CHECKED", set())
    check_workers_python({"spark.pyspark.python": sys.executable})
    assert sys.executable in session._CHECKED


def test_local_session_fails_before_starting_spark(bare_python: str) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": bare_python}
    done = subprocess.run([sys.executable, "-c", "from tidelog.spark.session import local_session; local_session()"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode != 0
    assert f"WorkerPythonError: Spark would start its Python workers with '{bare_python}'" in done.stderr
