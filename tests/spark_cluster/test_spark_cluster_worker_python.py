"""On a cluster master, registering tidelog's source asks the executors themselves whether their
Python can import tidelog, and a worker Python without it fails the session naming the host, the
interpreter and the fix (soak: a driver on the cluster plus its executors cost ~30-60 s)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from spark_cluster_oracle import SparkStandaloneCluster
from tidelog.spark.session import WorkerPythonError

pytestmark = pytest.mark.soak


def test_executors_without_tidelog_fail_the_session_naming_their_python(spark_cluster: SparkStandaloneCluster,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # session() sets it; restored afterwards
    # outside the pytest tmp tree, which the workers cannot see
    with tempfile.TemporaryDirectory(prefix="tidelog-bare-python-") as where:
        venv = Path(where) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        bare = str(venv / "bin" / "python")
        try:
            with pytest.raises(WorkerPythonError) as e:
                spark_cluster.session("tidelog-bare-workers", **{"spark.pyspark.python": bare})
        finally:
            active = SparkContext._active_spark_context
            if active is not None:
                active.stop()
    message = str(e.value)
    assert f"the executors of {spark_cluster.master_url} start their Python workers with {bare!r}" in message
    assert "ModuleNotFoundError: No module named 'tidelog'" in message
    assert f"{bare} -m pip install 'tidelog[spark]'" in message
