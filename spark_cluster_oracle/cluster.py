"""A real Spark standalone cluster on loopback: one master and N workers from PySpark's own jars.

``SparkStandaloneCluster(work_dir, workers=2, hidden=[...])`` runs
``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``
(the pip wheel ships the classes but not ``sbin/start-master.sh``), each daemon in its own session,
on 127.0.0.1 with free ports (RPC and web UI; the REST submission port is turned off), one core and
``worker_memory`` each, its own ``--work-dir`` and scratch dir under ``work_dir``. ``start()``
returns once the master's ``/json/`` reports itself and every worker ``ALIVE``.

Each worker runs in a mount namespace of its own (``unshare --mount``; as a non-root user also
``--user --map-root-user``) in which every path of ``hidden`` is covered by an empty, read-only
tmpfs: the worker, its executors and their Python workers (all its descendants) see an empty
directory there, while the driver and everything else on the host see the real contents. The
namespace goes away with its last process; nothing is left mounted on the host.

``stop()`` sends SIGTERM to every daemon's process group and to every descendant (pyspark's
daemon moves to a group of its own), waits, then SIGKILLs what is left; afterwards no process it
started and no port it listened on is left. An ``atexit`` hook stops clusters a dying process
leaves running.

Cost (2 shared cores): ``start()`` ~8-12 s (two JVMs per daemon: spark-class's launcher, then the
daemon); RSS ~230 MiB per daemon, plus ~250 MiB per executor JVM (``spark.executor.memory=512m``)
and ~100 MiB of Python per executor once a job runs; ``stop()`` ~2-3 s.

Not part of the installed package: tests import it from the repository root.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kafka_oracle.broker import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"

_RUNNING: set[SparkStandaloneCluster] = set()


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_RUNNING):
        cluster.stop(timeout_s=2.0)


class SparkClusterError(RuntimeError):
    """The cluster did not start or stop; the message names the daemon and carries its log's tail."""


class SparkClusterUnavailable(SparkClusterError):
    """What a cluster needs is missing here (Java, PySpark's ``spark-class``); message says what."""


def spark_home() -> Path:
    """PySpark's package directory, which is ``SPARK_HOME`` for the pip wheel (``bin/spark-class``, ``jars/``)."""
    try:
        import pyspark
    except ImportError as e:
        raise SparkClusterUnavailable(f"PySpark is not installed in {sys.executable}: {e}") from None
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file():
        raise SparkClusterUnavailable(f"{home} has no bin/spark-class: not a PySpark distribution with Spark's jars")
    return home


def check_java() -> str:
    """The ``java`` Spark's launcher will run (``JAVA_HOME/bin/java`` or ``java`` on PATH); raises
    :class:`SparkClusterUnavailable` when there is none."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise SparkClusterUnavailable("no Java: Spark's daemons need Java 17+ (JAVA_HOME or java on PATH)")
    return java


def namespace_command() -> list[str]:
    """The ``unshare`` prefix that gives a process a private mount namespace here: plain
    ``--mount`` as root, with ``--user --map-root-user`` otherwise. Raises :class:`SparkClusterError`
    when neither works (a container without CAP_SYS_ADMIN or user namespaces)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SparkClusterError("unshare (util-linux) is not on PATH: workers cannot get a mount namespace "
                                "that hides the broker's data dir")
    options = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        options = ["--user", "--map-root-user", *options]
    probe = subprocess.run([unshare, *options, "--", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        raise SparkClusterError(f"{unshare} {' '.join(options)} failed (exit {probe.returncode}: "
                                f"{probe.stderr.strip()}): workers cannot hide the broker's data dir here")
    return [unshare, *options, "--"]


# A worker's namespace: cover each hidden path with an empty read-only tmpfs, then become the worker.
_HIDE_AND_EXEC = """set -e
n=$1; shift
i=0
while [ "$i" -lt "$n" ]; do
  mount -t tmpfs -o ro,size=4k,mode=0555 tidelog-hidden "$1"
  shift; i=$((i + 1))
done
exec "$@"
"""


@dataclass(frozen=True, slots=True)
class Daemon:
    """One started daemon: its name, its process (also its process group) and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_file: Path
    ports: tuple[int, ...]


class SparkStandaloneCluster:
    """A standalone master and ``workers`` workers on loopback; a context manager.

    Not thread-safe: one owner starts and stops it. ``start`` on a running cluster raises.
    """

    def __init__(self, work_dir: Path, *, workers: int = 2, worker_cores: int = 1,
                 worker_memory: str = "1g", daemon_memory: str = "256m",
                 hidden: tuple[Path, ...] | list[Path] = ()) -> None:
        self.work_dir = Path(work_dir)
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.hidden = tuple(Path(path).resolve() for path in hidden)
        self.master_port = 0
        self.master_ui_port = 0
        self._daemons: list[Daemon] = []

    # --- where things are ---------------------------------------------------------------------
    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, what ``SparkSession.builder.master`` takes."""
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def master_json_url(self) -> str:
        return f"http://127.0.0.1:{self.master_ui_port}/json/"

    @property
    def pids(self) -> list[int]:
        """The daemons' (java) process ids, master first, while started."""
        return [daemon.process.pid for daemon in self._daemons]

    @property
    def ports(self) -> list[int]:
        """Every port a daemon was told to listen on (RPC and web UI)."""
        return [port for daemon in self._daemons for port in daemon.ports]

    def worker_dir(self, index: int) -> Path:
        """Worker ``index``'s ``--work-dir`` (executors run in ``<it>/app-…/<executor id>``)."""
        return self.work_dir / f"worker{index}"

    def master_state(self) -> dict[str, Any]:
        """The master's ``/json/`` answer (``status``, ``workers`` with each one's ``state``, ``activeapps``)."""
        with urllib.request.urlopen(self.master_json_url, timeout=5.0) as response:
            return json.loads(response.read())

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master reports ``ALIVE`` (an empty list when it does not answer)."""
        try:
            state = self.master_state()
        except (urllib.error.URLError, OSError, ValueError):
            return []
        return [worker for worker in state.get("workers", []) if worker.get("state") == "ALIVE"]

    @property
    def running(self) -> bool:
        return bool(self._daemons) and all(daemon.process.poll() is None for daemon in self._daemons)

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the master, then the workers, and return the master URL once the master reports
        every worker ALIVE. On failure stops what it started and raises :class:`SparkClusterError`
        with the failing daemon's log tail."""
        if self._daemons:
            raise SparkClusterError("the cluster is already started")
        home = spark_home()
        check_java()
        namespace = namespace_command() if self.hidden else []
        for path in self.hidden:
            if not path.is_dir():
                raise SparkClusterError(f"hidden path {path} is not a directory: a tmpfs can only cover a directory")
        work = self.work_dir.resolve()
        for path in self.hidden:
            if work == path or path in work.parents:
                raise SparkClusterError(f"the cluster's work dir {work} is inside hidden path {path}: the workers "
                                        f"could not write their executors' directories")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "conf").mkdir(exist_ok=True)  # empty SPARK_CONF_DIR: no stray spark-defaults
        _RUNNING.add(self)
        deadline = time.monotonic() + timeout_s
        try:
            self._start_master(home)
            self._wait(deadline, "master", lambda: self._master_alive())
            for index in range(1, self.workers + 1):
                self._start_worker(home, index, namespace)
            self._wait(deadline, f"{self.workers} ALIVE workers", lambda: len(self.alive_workers()) >= self.workers)
        except BaseException:
            self.stop(timeout_s=2.0)
            raise
        return self.master_url

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the workers, then the master (each one's group and every descendant), wait up to
        ``timeout_s``, then SIGKILL whatever is left; idempotent. Afterwards no process it started runs."""
        daemons = list(reversed(self._daemons))  # workers first: a worker outlives a killed master
        family = {pid for daemon in daemons for pid in _descendants(daemon.process.pid)}
        for daemon in daemons:
            _signal_group(daemon.process.pid, signal.SIGTERM)
        for pid in family:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for daemon in daemons:
            try:
                daemon.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        while any(_alive(pid) for pid in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        for daemon in daemons:
            _signal_group(daemon.process.pid, signal.SIGKILL)
            daemon.process.wait()
        for pid in family:
            _signal(pid, signal.SIGKILL)
        self._daemons = []
        _RUNNING.discard(self)

    def __enter__(self) -> SparkStandaloneCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def session(self, app_name: str = "tidelog-cluster-test", **conf: str) -> SparkSession:
        """A SparkSession whose master is this cluster (client mode, driver on loopback, UI off),
        with tidelog's source registered. Executors run this interpreter (``spark.pyspark.python``),
        512m and 1 core each, ``spark.cores.max`` = all the workers' cores. ``conf`` overrides.

        Returns once every executor the cluster can give it has registered (so a first job spreads over
        both workers). Sets ``PYSPARK_PYTHON`` in this process's environment (PySpark reads it, not the
        conf, for the executors' Python). One SparkContext per process: an active context on another
        master (a ``local[*]`` session) is stopped first, so the session returned is never a local one.
        The caller stops it. Not thread-safe."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        active = SparkContext._active_spark_context
        if active is not None and active.master != self.master_url:
            active.stop()
        settings = {
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC",
            "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable,
            "spark.executor.memory": "512m", "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers * self.worker_cores),
            "spark.sql.shuffle.partitions": "4", "spark.default.parallelism": str(self.workers * self.worker_cores),
            **conf}
        cores_each = int(settings["spark.executor.cores"])
        executors = min(int(settings["spark.cores.max"]) // cores_each, self.workers * (self.worker_cores // cores_each))
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # read when the driver's JVM starts (if it is not up yet)
        # PySpark ships the executors' Python with each function from the driver's PYSPARK_PYTHON
        # (else "python3" from the executor's PATH); the conf alone was not enough here (4.3.0)
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
        builder = SparkSession.builder.master(self.master_url).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        if spark.sparkContext.master != self.master_url:
            raise SparkClusterError(f"getOrCreate returned a session on {spark.sparkContext.master}, "
                                    f"not on the cluster {self.master_url}")
        from pyspark_tidelog import register

        register(spark)
        self._wait_for_executors(spark, executors)
        return spark

    def _wait_for_executors(self, spark: SparkSession, executors: int, timeout_s: float = 120.0) -> None:
        """Return once ``executors`` executors have registered with the driver, so a first job
        spreads over all of them (one that starts late would otherwise find the tasks done)."""
        deadline = time.monotonic() + timeout_s
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # the driver's block manager counts too
        while status().size() - 1 < executors:
            if time.monotonic() > deadline:
                raise SparkClusterError(f"{status().size() - 1} of {executors} executors registered with the "
                                        f"driver within {timeout_s:.0f} s; executor logs are in "
                                        f"{self.work_dir}/worker*/app-*/*/stderr")
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 30) -> str:
        log = self.work_dir / "logs" / f"{name}.log"
        if not log.exists():
            return "(no log)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    # --- internals ----------------------------------------------------------------------------
    def _environment(self, name: str) -> dict[str, str]:
        local = self.work_dir / "local" / name
        local.mkdir(parents=True, exist_ok=True)
        return {**os.environ,
                "SPARK_HOME": str(spark_home()),
                "SPARK_LOCAL_IP": "127.0.0.1",          # web UIs bind here too (--host covers RPC only)
                "SPARK_LOCAL_DIRS": str(local),        # executor scratch, not /tmp
                "SPARK_CONF_DIR": str(self.work_dir / "conf"),
                "SPARK_LOG_DIR": str(self.work_dir / "logs"),
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                # no REST submission server: it would take 6066, one fixed port for every master
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                "PYSPARK_PYTHON": sys.executable}

    def _launch(self, name: str, command: list[str], ports: tuple[int, ...]) -> None:
        logs = self.work_dir / "logs"
        logs.mkdir(exist_ok=True)
        log_file = logs / f"{name}.log"
        with open(log_file, "ab") as log:
            process = subprocess.Popen(command, cwd=self.work_dir, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=self._environment(name),
                                       start_new_session=True)
        self._daemons.append(Daemon(name, process, log_file, ports))

    def _start_master(self, home: Path) -> None:
        self.master_port = free_port()
        self.master_ui_port = free_port(exclude=(self.master_port,))
        self._launch("master", [str(home / "bin" / "spark-class"), MASTER, "--host", "127.0.0.1",
                                "--port", str(self.master_port), "--webui-port", str(self.master_ui_port)],
                     (self.master_port, self.master_ui_port))

    def _start_worker(self, home: Path, index: int, namespace: list[str]) -> None:
        taken = (*self.ports,)
        port = free_port(exclude=taken)
        ui_port = free_port(exclude=(*taken, port))
        work = self.worker_dir(index)
        work.mkdir(parents=True, exist_ok=True)
        worker = [str(home / "bin" / "spark-class"), WORKER, "--host", "127.0.0.1", "--port", str(port),
                  "--webui-port", str(ui_port), "--cores", str(self.worker_cores),
                  "--memory", self.worker_memory, "--work-dir", str(work), self.master_url]
        if namespace:
            worker = [*namespace, "/bin/sh", "-c", _HIDE_AND_EXEC, "hide", str(len(self.hidden)),
                      *map(str, self.hidden), *worker]
        self._launch(f"worker{index}", worker, (port, ui_port))

    def _master_alive(self) -> bool:
        try:
            return self.master_state().get("status") == "ALIVE"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait(self, deadline: float, what: str, ready: Any) -> None:
        while not ready():
            for daemon in self._daemons:
                if daemon.process.poll() is not None:
                    raise SparkClusterError(f"Spark {daemon.name} exited with {daemon.process.returncode} while "
                                            f"waiting for {what}:\n{self.log_tail(daemon.name)}")
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {d.name}\n{self.log_tail(d.name, 10)}" for d in self._daemons)
                raise SparkClusterError(f"no {what} at {self.master_json_url} in time:\n{tails}")
            time.sleep(0.2)


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, read from ``/proc``."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry))
    return tree


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (executors, pyspark daemons, their Python workers)."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def listeners() -> dict[int, str]:
    """Port -> local address (hex as in ``/proc/net/tcp*``, e.g. ``0100007F`` for 127.0.0.1) of every
    TCP socket listening in this network namespace."""
    found: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                address, port = fields[1].split(":")
                found[int(port, 16)] = address
    return found


def is_loopback(address: str) -> bool:
    """Whether a ``/proc/net/tcp*`` hex address is 127.0.0.1 (IPv4, or IPv4-mapped IPv6 as the JVM binds)."""
    return address in ("0100007F", "0000000000000000FFFF00000100007F")
