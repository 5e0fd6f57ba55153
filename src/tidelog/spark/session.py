"""A local SparkSession wired to this Python, for tests, the CLI and the examples.

Spark starts its Python workers with ``python3`` from ``PATH`` unless told otherwise; that
interpreter usually lacks pyarrow and tidelog, and the first Python task then fails with an
import error far from its cause. :func:`local_session` points both the driver's and the
executors' workers at ``sys.executable`` (the environment tidelog is installed in).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
PYTHON_CONF = "spark.pyspark.python"
# What a Python worker must import for format("tidelog") (the source module pulls in pyspark and pyarrow).
_WORKER_IMPORTS = "import tidelog.spark.source, pyarrow"
_CHECKED: set[str] = set()  # worker Pythons found able to import tidelog, in this process


class WorkerPythonError(RuntimeError):
    """The Python that Spark launches for its workers cannot import tidelog (message names it)."""


def workers_python(conf: dict[str, str] | None = None) -> tuple[str, str]:
    """``(executable, where it came from)``: the Python Spark starts for its Python workers (the
    data-source lookup on the driver and every executor task): the ``spark.pyspark.python`` conf,
    else ``PYSPARK_PYTHON`` in this (the driver's) environment, else ``python3`` from ``PATH``."""
    if conf and conf.get(PYTHON_CONF):
        return conf[PYTHON_CONF], f"the Spark conf {PYTHON_CONF}"
    if os.environ.get("PYSPARK_PYTHON"):
        return os.environ["PYSPARK_PYTHON"], "the environment variable PYSPARK_PYTHON"
    return "python3", "Spark's default when neither spark.pyspark.python nor PYSPARK_PYTHON is set"


def check_workers_python(conf: dict[str, str] | None = None) -> None:
    """Fail with :class:`WorkerPythonError` when the workers' Python (:func:`workers_python`)
    cannot import tidelog: Spark would then report only ``DATA_SOURCE_NOT_FOUND`` or a
    ``ModuleNotFoundError`` from a task, naming neither the interpreter nor the fix.

    Checks the interpreter on this machine (one ``python -c import`` subprocess, ~1 s; remembered
    per interpreter for the process), so it speaks for local masters and for cluster workers only
    where they run the same path with the same packages (:func:`check_cluster_workers_python`
    asks the executors themselves). Not thread-safe (a plain set); no lock."""
    python, source = workers_python(conf)
    if python in _CHECKED:
        return
    fix = (f"Install tidelog there ({python} -m pip install 'tidelog[spark]'), or point {PYTHON_CONF} / "
           f"PYSPARK_PYTHON at a Python that has it (this driver runs {sys.executable}).")
    found = shutil.which(python)
    if found is None:
        raise WorkerPythonError(f"Spark would start its Python workers with {python!r} (from {source}), which "
                                f"does not exist or is not on PATH. {fix}")
    try:
        done = subprocess.run([found, "-c", _WORKER_IMPORTS], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise WorkerPythonError(f"Spark would start its Python workers with {python!r} (from {source}), which "
                                f"could not be run: {e}. {fix}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise WorkerPythonError(
            f"Spark would start its Python workers with {python!r} (from {source}), which cannot import "
            f"tidelog's Spark source ({last}); format(\"tidelog\") would fail with DATA_SOURCE_NOT_FOUND or "
            f"ModuleNotFoundError. {fix}")
    _CHECKED.add(python)


def check_cluster_workers_python(spark: SparkSession) -> None:
    """On a cluster master, fail with :class:`WorkerPythonError` when the executors' Python cannot
    import tidelog: one small job (one task per default-parallelism slot) runs a probe that needs
    nothing but the standard library, so a task on a host without tidelog answers with its host,
    interpreter and import error instead of a task's bare ``ModuleNotFoundError``.

    Speaks for the executors the probe's tasks landed on (all of them when each has a slot's worth
    of tasks, as on a freshly started application); remembered per master and interpreter for the
    process. Not thread-safe (a plain set); no lock."""
    context = spark.sparkContext
    python, source = workers_python(dict(context.getConf().getAll()))
    remembered = f"{context.master} {python}"
    if remembered in _CHECKED:
        return
    imports = _WORKER_IMPORTS

    def probe(_: object) -> list[tuple[str, str, str | None]]:
        # defined here so that cloudpickle ships it by value: unpickling it must not import tidelog
        import socket
        import sys as worker_sys
        try:
            exec(imports, {})
            error = None
        except Exception as e:  # what the import raised is the finding, whatever it is
            error = f"{type(e).__name__}: {e}"
        return [(socket.gethostname(), worker_sys.executable, error)]

    slots = max(1, context.defaultParallelism)
    found = context.parallelize(range(slots), slots).mapPartitions(probe).collect()
    failed = sorted({(host, exe, error) for host, exe, error in found if error is not None})
    if failed:
        where = "; ".join(f"on {host}, {exe}: {error}" for host, exe, error in failed)
        raise WorkerPythonError(
            f"the executors of {context.master} start their Python workers with {python!r} (from {source}), "
            f"which cannot import tidelog's Spark source ({where}); every format(\"tidelog\") task would fail. "
            f"Install tidelog on every worker host ({python} -m pip install 'tidelog[spark]'), or point "
            f"{PYTHON_CONF} / PYSPARK_PYTHON at a Python that has it there.")
    _CHECKED.add(remembered)


def use_this_python() -> None:
    """Make Spark's Python workers run this interpreter (unless the user chose one)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(master: str = DEFAULT_MASTER, app_name: str = "tidelog", **conf: str) -> SparkSession:
    """Get (or create) a SparkSession on ``master`` with tidelog's source registered.

    ``conf`` entries are Spark confs (dots spelled as given, e.g. ``{"spark.sql.shuffle.partitions":
    "4"}`` passed as ``**{...}``). The UI is off: on a shared machine its port is one more thing
    to collide on. On a local master, first checks that the workers' Python can import tidelog
    (:func:`check_workers_python`; raises :class:`WorkerPythonError` naming it).
    """
    use_this_python()
    if master.startswith("local"):
        check_workers_python(conf)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from pyspark_tidelog import register

    register(spark)
    return spark
