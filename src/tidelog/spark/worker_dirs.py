"""Per-process scratch dirs of Spark's Python workers (the remote index cache's,
:mod:`tidelog.spark.remote_source`). Spark's Python workers end with ``os._exit`` (no exit hooks
run), so a dir outlives its process; the next worker removes the dirs of processes gone."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def index_dir() -> Path:
    """``<tmp>/tidelog-spark-remote-index-<uid>/<pid>``: this process's index cache dir. Spark's
    Python workers end with ``os._exit`` (no exit hooks run), so the dirs of processes no longer
    alive are removed here, when a worker makes its own."""
    root = Path(tempfile.gettempdir()) / f"tidelog-spark-remote-index-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    for child in root.iterdir():
        if child.name.isdigit() and int(child.name) != os.getpid() and not _alive(int(child.name)):
            shutil.rmtree(child, ignore_errors=True)
    return root / str(os.getpid())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
