"""A real Prometheus on loopback that scrapes given ``/metrics`` URLs, and its HTTP API for tests.

``PrometheusServer(work_dir, ["http://127.0.0.1:PORT/metrics"])`` writes ``prometheus.yml`` (one
scrape job per target, every :data:`SCRAPE_INTERVAL_S`), checks it with ``promtool check config``,
starts ``prometheus`` bound to 127.0.0.1 on a free port with its TSDB in ``work_dir/data`` and
returns once ``/-/ready`` answers. ``stop()`` sends SIGTERM to its process group, waits, then
SIGKILLs it; afterwards nothing it started is left.

The queries go through the HTTP API only, as a dashboard or an alert would read them:
:meth:`~PrometheusServer.query` (``/api/v1/query``, an instant vector or scalar, values as floats),
:meth:`~PrometheusServer.value` (the one value of a query), :meth:`~PrometheusServer.raw_samples` (a
series' scraped values over a window), :meth:`~PrometheusServer.label_values`,
:meth:`~PrometheusServer.targets`
(``/api/v1/targets``: health, last scrape, last error). Waits never sleep a fixed time: they poll
(every :data:`POLL_S`) until a condition holds or a deadline passes, and then fail saying what they
last saw. :meth:`~PrometheusServer.wait_for_scrape_after` is how a test reads figures that match what
its clients did: it returns once the target has been scraped, successfully, by a scrape that
began after the given wall-clock time (``timestamp(up)``: the scrape's own time; ``up`` and the
scraped samples are committed together, so the samples of that scrape are then queryable).

Cost: ready ~0.1-0.5 s after launch with an empty TSDB, but the first scrape comes ~5 s after start
(Prometheus hands discovered targets to its scrapers at most every 5 s, and the first hand-over
waits for that tick), so a test starts one Prometheus and does all its waits against it; ~45-65 MiB
of RSS; SIGTERM ends it in well under a second. Not thread-safe: one owner starts, queries and stops it.

Not part of the installed package: tests import it from the repository root.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType

from kafka_oracle.broker import free_port, stop_process_group
from prometheus_oracle.install import PrometheusBinaries, prometheus_binaries

SCRAPE_INTERVAL_S = 1.0
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
START_ATTEMPTS = 3
WAIT_TIMEOUT_S = 30.0
POLL_S = 0.1
HTTP_TIMEOUT_S = 10.0
_BIND_FAILURE = "address already in use"

_RUNNING: set[PrometheusServer] = set()


@atexit.register
def _kill_leftovers() -> None:
    # a test session that dies must not leave a Prometheus holding a port and a TSDB
    for server in list(_RUNNING):
        server.stop(timeout_s=0.0)


class PrometheusError(RuntimeError):
    """Prometheus did not start, its config was refused, or a query failed; the message says which
    and carries Prometheus's own words (its log tail, promtool's output or the API's error)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One element of an instant vector: its labels (``__name__`` included when kept), its value and
    the evaluation time (unix seconds)."""

    labels: dict[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True, slots=True)
class TargetHealth:
    """One active target of ``/api/v1/targets``: ``health`` is "up", "down" or "unknown" (not yet
    scraped); ``last_scrape`` is unix seconds (0.0 before the first scrape)."""

    scrape_url: str
    health: str
    last_error: str
    last_scrape: float
    last_scrape_duration_s: float
    labels: dict[str, str]


def _target_address(url: str) -> tuple[str, str, str]:
    """(scheme, host:port, path) of a scrape URL; ValueError naming the URL when it has no port."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise ValueError(f"scrape target {url!r}: expected http://host:port[/path]")
    return parts.scheme, f"{parts.hostname}:{parts.port}", parts.path or "/metrics"


class PrometheusServer:
    """One ``prometheus`` on 127.0.0.1 scraping ``targets`` (URLs), data in ``work_dir``; a context
    manager. ``start`` on a running server raises."""

    def __init__(self, work_dir: Path, targets: Sequence[str], *, scrape_interval_s: float = SCRAPE_INTERVAL_S,
                 binaries: PrometheusBinaries | None = None) -> None:
        if not targets:
            raise ValueError("PrometheusServer needs at least one scrape target")
        self.work_dir = Path(work_dir)
        self.targets_urls = tuple(targets)
        self._addresses = [_target_address(url) for url in self.targets_urls]
        self.scrape_interval_s = scrape_interval_s
        self._binaries = binaries
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    # --- where things are ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.work_dir / "prometheus.yml"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "prometheus.log"

    @property
    def pid(self) -> int | None:
        """The prometheus process id (also its process group id) while started, else None."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def instance(self, target_index: int = 0) -> str:
        """The ``instance`` label Prometheus gives the samples of target ``target_index``."""
        return self._addresses[target_index][1]

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Write and check the config, start prometheus, return its URL once ``/-/ready`` answers.
        A port taken between choosing and binding it is retried on a new port."""
        if self.running:
            raise PrometheusError("prometheus is already running")
        binaries = self._binaries or prometheus_binaries()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._write_config(binaries)
        for attempt in range(1, START_ATTEMPTS + 1):
            log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
            try:
                self._start_once(binaries, timeout_s)
                return self.url
            except PrometheusError:
                self.stop(timeout_s=1.0)
                if attempt == START_ATTEMPTS or not self._bind_failed(log_start):
                    raise
        raise PrometheusError(f"START_ATTEMPTS is {START_ATTEMPTS}: no attempt made")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to prometheus's process group, wait up to ``timeout_s``, then SIGKILL; idempotent."""
        if self._process is not None:
            stop_process_group(self._process, timeout_s)
            self._process = None
        _RUNNING.discard(self)

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return "(no log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    # --- the HTTP API -------------------------------------------------------------------------
    def query(self, expr: str) -> list[Sample]:
        """``/api/v1/query`` at now: the instant vector (a scalar comes back as one label-less
        sample). PrometheusError with the API's error for a bad expression."""
        data = self._api("/api/v1/query", {"query": expr})
        kind, result = data["resultType"], data["result"]
        if kind == "vector":
            return [Sample(item["metric"], _number(item["value"][1]), float(item["value"][0])) for item in result]
        if kind == "scalar":
            return [Sample({}, _number(result[1]), float(result[0]))]
        raise PrometheusError(f"query {expr!r}: a {kind}, not an instant vector or scalar")

    def value(self, expr: str) -> float | None:
        """The one value of ``expr`` (None when the vector is empty); PrometheusError when it has
        more than one sample, listing them."""
        samples = self.query(expr)
        if len(samples) > 1:
            raise PrometheusError(f"query {expr!r}: {len(samples)} samples, expected one: {samples}")
        return samples[0].value if samples else None

    def values(self, expr: str, label: str) -> dict[str, float]:
        """``expr``'s samples as ``{value of label: value}``; PrometheusError when two share a label value."""
        found: dict[str, float] = {}
        for sample in self.query(expr):
            key = sample.labels.get(label, "")
            if key in found:
                raise PrometheusError(f"query {expr!r}: two samples with {label}={key!r}")
            found[key] = sample.value
        return found

    def raw_samples(self, selector: str, window_s: float) -> list[tuple[float, float]]:
        """The samples Prometheus stored for the one series ``selector`` picks over the last
        ``window_s`` seconds, oldest first, as (scrape time, value): a range-vector query, so every
        scrape's value, not an evaluation. [] when none; PrometheusError when it picks two series."""
        data = self._api("/api/v1/query", {"query": f"{selector}[{int(window_s * 1000)}ms]"})
        if data["resultType"] != "matrix":
            raise PrometheusError(f"{selector!r} over {window_s} s: a {data['resultType']}, not a range vector")
        if len(data["result"]) > 1:
            raise PrometheusError(f"{selector!r}: {len(data['result'])} series, expected one: "
                                  f"{[series['metric'] for series in data['result']]}")
        return [(float(t), _number(v)) for series in data["result"] for t, v in series["values"]]

    def label_values(self, label: str, match: str) -> list[str]:
        """``/api/v1/label/<label>/values`` of the series ``match`` selects (what Grafana's
        ``label_values(match, label)`` lists)."""
        return list(self._api(f"/api/v1/label/{urllib.parse.quote(label)}/values", {"match[]": match}))

    def targets(self) -> list[TargetHealth]:
        """The active targets of ``/api/v1/targets``."""
        data = self._api("/api/v1/targets", {"state": "active"})
        return [TargetHealth(t["scrapeUrl"], t["health"], t.get("lastError", ""), _unix(t.get("lastScrape", "")),
                             float(t.get("lastScrapeDuration", 0.0)), t.get("labels", {}))
                for t in data["activeTargets"]]

    # --- waiting ------------------------------------------------------------------------------
    def wait_until_up(self, timeout_s: float = WAIT_TIMEOUT_S) -> list[TargetHealth]:
        """Return once every target's last scrape succeeded; PrometheusError with their last errors
        when one is still not up at the deadline."""
        seen: list[TargetHealth] = []

        def all_up() -> bool:
            nonlocal seen
            seen = self.targets()
            return len(seen) == len(self.targets_urls) and all(t.health == "up" for t in seen)

        self._poll(all_up, timeout_s, lambda: f"targets not all up: {seen}")
        return seen

    def wait_for_scrape_after(self, wall_time_s: float, target_index: int = 0,
                              timeout_s: float = WAIT_TIMEOUT_S) -> float:
        """Return the time of the first successful scrape of target ``target_index`` that began
        after ``wall_time_s`` (unix seconds); its samples are queryable then. PrometheusError, with
        the target's last error, when that scrape failed or none came before the deadline."""
        selector = f'up{{instance="{self.instance(target_index)}"}}'
        scraped_at = 0.0

        def scraped() -> bool:
            nonlocal scraped_at
            scraped_at = self.value(f"timestamp({selector})") or 0.0
            return scraped_at > wall_time_s

        self._poll(scraped, timeout_s, lambda: f"no scrape of {self.targets_urls[target_index]} after {wall_time_s:.3f}"
                                                f" (last at {scraped_at:.3f}): {self.targets()}")
        if self.value(selector) != 1.0:
            raise PrometheusError(f"the scrape of {self.targets_urls[target_index]} at {scraped_at:.3f} failed:"
                                  f" {self.targets()}")
        return scraped_at

    def wait_for(self, expr: str, condition: Callable[[float | None], bool], what: str,
                 timeout_s: float = WAIT_TIMEOUT_S) -> float | None:
        """Poll :meth:`value` of ``expr`` until ``condition(value)`` holds and return that value;
        PrometheusError naming ``what`` and the last value seen at the deadline."""
        last: float | None = None

        def holds() -> bool:
            nonlocal last
            last = self.value(expr)
            return condition(last)

        self._poll(holds, timeout_s, lambda: f"{what}: {expr!r} is still {last} after {timeout_s:.0f} s")
        return last

    # --- internals ----------------------------------------------------------------------------
    def _config(self) -> dict[str, object]:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        jobs = [{"job_name": f"target-{i}", "scheme": scheme, "metrics_path": path,
                 "static_configs": [{"targets": [address]}]}
                for i, (scheme, address, path) in enumerate(self._addresses)]
        return {"global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
                "scrape_configs": jobs}

    def _write_config(self, binaries: PrometheusBinaries) -> None:
        # JSON is YAML: no YAML writer needed, and promtool reads it back as Prometheus will
        self.config_file.write_text(json.dumps(self._config(), indent=2) + "\n")
        done = subprocess.run([str(binaries.promtool), "check", "config", str(self.config_file)],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise PrometheusError(f"promtool check config {self.config_file} refused it:\n{done.stdout}{done.stderr}")

    def _start_once(self, binaries: PrometheusBinaries, timeout_s: float) -> None:
        self.port = free_port()
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child owns it
        self._process = subprocess.Popen(
            [str(binaries.prometheus), f"--config.file={self.config_file}",
             f"--storage.tsdb.path={self.work_dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=info"],
            cwd=self.work_dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        _RUNNING.add(self)
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._answers(f"{self.url}/-/ready"):
            if self._process is None or self._process.poll() is not None:
                code = self._process.returncode if self._process is not None else None
                raise PrometheusError(f"prometheus exited with {code} while starting:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise PrometheusError(f"prometheus was not ready within {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(POLL_S)

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _bind_failed(self, log_start: int) -> bool:
        with open(self.log_file, "rb") as log:
            log.seek(log_start)
            return _BIND_FAILURE in log.read().decode(errors="replace").lower()

    def _api(self, path: str, params: dict[str, str]) -> dict:
        if not self.running:
            raise PrometheusError(f"prometheus is not running (GET {path}):\n{self.log_tail()}")
        request = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:  # 400/422: a bad query, with a JSON body saying why
            text = exc.read().decode(errors="replace")
            try:
                answer = json.loads(text)
            except ValueError:
                raise PrometheusError(f"GET {path} {params}: HTTP {exc.code}: {text.strip()}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"GET {path} {params}: {exc}") from exc
        if answer.get("status") != "success":
            raise PrometheusError(f"GET {path} {params}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def _poll(self, condition: Callable[[], bool], timeout_s: float, failure: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise PrometheusError(failure())
            time.sleep(POLL_S)


def _number(text: str) -> float:
    """A sample value as Prometheus writes it ("1", "0.5", "NaN", "+Inf")."""
    return float(text)


def _unix(rfc3339: str) -> float:
    """Unix seconds of an API time ("2026-11-29T04:50:01.123456789Z"); 0.0 for Go's zero time."""
    if not rfc3339 or rfc3339.startswith("0001-"):
        return 0.0
    return datetime.fromisoformat(rfc3339).timestamp()  # 3.11: "Z" and > 6 fraction digits accepted
