"""Prometheus's ``prometheus`` and ``promtool``: found on PATH, or installed from Debian's package.

``prometheus_binaries()`` returns both paths, running ``apt-get install --no-install-recommends
prometheus`` once per machine where they are missing (as root, or through passwordless ``sudo``).
``--no-install-recommends`` keeps out ``prometheus-node-exporter`` (another daemon, on :9100).

**No daemon is left behind.** The package ships ``prometheus.service`` (``/usr/bin/prometheus`` on
``0.0.0.0:9090``, TSDB in ``/var/lib/prometheus``) and its maintainer scripts enable and start it.
The install runs with a ``/usr/sbin/policy-rc.d`` that answers 101 ("action forbidden"), which
``deb-systemd-invoke`` and ``invoke-rc.d`` obey, so nothing is started; a ``policy-rc.d`` already
present (a container's) is left as it is, one this module wrote is removed afterwards. Where
systemd runs, the unit the package enabled is then disabled and stopped (``systemctl disable
--now``), so a reboot does not start it either. The oracle's own servers are
:class:`~prometheus_oracle.server.PrometheusServer`, started and stopped by the tests.

A file lock (``$TIDELOG_CACHE`` or ``~/.cache/tidelog``) makes concurrent callers (xdist workers,
two ``make test`` runs) install once; apt's own lock is waited on too (``DPkg::Lock::Timeout``).

The one case where the Prometheus tests skip, :class:`PrometheusMissing`: the binaries are not on
PATH and cannot be installed here (no ``apt-get``; neither root nor passwordless ``sudo``; apt knows
no ``prometheus`` package even after ``apt-get update``). Any other failure of the install raises
:class:`PrometheusUnavailable` with apt's output, so a broken setup fails instead of skipping.

Cost: a warm call is two PATH lookups. A cold install downloads ~25 MiB and takes ~10-30 s.
Run ``python -m prometheus_oracle`` (``make prometheus``) to install (or find) them and print the paths.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "prometheus"
INSTALL_TIMEOUT_S = 900.0
APT_LOCK_TIMEOUT_S = 300
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
_POLICY_FORBID = "#!/bin/sh\n# written by prometheus_oracle while it installs prometheus: start no daemon\nexit 101\n"
_UNIT = "prometheus.service"


class PrometheusUnavailable(RuntimeError):
    """Installing Prometheus failed; the message carries apt's output."""


class PrometheusMissing(PrometheusUnavailable):
    """Prometheus is not on PATH and cannot be installed here: the one case where its tests skip."""


@dataclass(frozen=True, slots=True)
class PrometheusBinaries:
    """The two executables the oracle runs."""

    prometheus: Path
    promtool: Path


def cache_dir() -> Path:
    """Where the install lock lives: ``$TIDELOG_CACHE`` or ``~/.cache/tidelog`` (as object_store_oracle)."""
    root = os.environ.get("TIDELOG_CACHE") or Path.home() / ".cache" / "tidelog"
    return Path(root)


def find_binaries() -> PrometheusBinaries | None:
    """Both executables from PATH, or None when either is missing."""
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        return None
    return PrometheusBinaries(Path(prometheus), Path(promtool))


def prometheus_binaries() -> PrometheusBinaries:
    """The paths of ``prometheus`` and ``promtool``, installing Debian's package when missing.

    Safe to call from many processes at once: one installs, the rest wait on the lock and then find
    the binaries. Raises :class:`PrometheusMissing` where they cannot be installed,
    :class:`PrometheusUnavailable` when the install fails.
    """
    found = find_binaries()
    if found is not None:
        return found
    prefix = _privilege_prefix()
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "prometheus-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if find_binaries() is None:
            _install(prefix)
    found = find_binaries()
    if found is None:
        raise PrometheusUnavailable(f"apt-get installed {PACKAGE!r} but `prometheus` or `promtool` is still not on PATH"
                                    f" ({os.environ.get('PATH', '')})")
    return found


def _privilege_prefix() -> list[str]:
    """``[]`` as root, ``["sudo", "-n"]`` with passwordless sudo; PrometheusMissing otherwise."""
    if shutil.which("apt-get") is None:
        raise PrometheusMissing("`prometheus` is not on PATH and this machine has no apt-get to install Debian's"
                                f" {PACKAGE!r} package: install Prometheus 2.x (prometheus and promtool) on PATH")
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") is not None and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    raise PrometheusMissing(f"`prometheus` is not on PATH and installing Debian's {PACKAGE!r} package needs root"
                            f" (or passwordless sudo): run `apt-get install --no-install-recommends {PACKAGE}` as root")


def _install(prefix: list[str]) -> None:
    wrote_policy = _forbid_daemon_starts(prefix)
    try:
        if not _has_candidate():
            _run(prefix, ["apt-get", "update"])
            if not _has_candidate():
                raise PrometheusMissing(f"apt knows no {PACKAGE!r} package here (apt-cache policy {PACKAGE}: no"
                                        " candidate, even after apt-get update)")
        _run(prefix, ["apt-get", "install", "-y", "--no-install-recommends",
                      "-o", f"DPkg::Lock::Timeout={APT_LOCK_TIMEOUT_S}", PACKAGE])
    finally:
        if wrote_policy:
            _run(prefix, ["rm", "-f", str(POLICY_RC_D)])
    _disable_unit(prefix)


def _forbid_daemon_starts(prefix: list[str]) -> bool:
    """Write a policy-rc.d forbidding service starts unless one exists; True when this wrote it."""
    if POLICY_RC_D.exists():
        return False
    _run(prefix, ["tee", str(POLICY_RC_D)], stdin=_POLICY_FORBID)
    _run(prefix, ["chmod", "755", str(POLICY_RC_D)])
    return True


def _disable_unit(prefix: list[str]) -> None:
    """Where systemd runs, disable and stop the unit the package enabled (a no-op without systemd)."""
    if not Path("/run/systemd/system").is_dir() or shutil.which("systemctl") is None:
        return
    _run(prefix, ["systemctl", "disable", "--now", _UNIT])


def _has_candidate() -> bool:
    done = subprocess.run(["apt-cache", "policy", PACKAGE], capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.strip().startswith("Candidate:"):
            return line.split(":", 1)[1].strip() not in ("", "(none)")
    return False


def _run(prefix: list[str], args: list[str], stdin: str | None = None) -> str:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = [*prefix, *(["env", "DEBIAN_FRONTEND=noninteractive"] if prefix else []), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S,
                              input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise PrometheusUnavailable(f"`{' '.join(args)}` did not finish in {INSTALL_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise PrometheusUnavailable(f"`{' '.join(args)}` failed ({done.returncode}):\n{tail}")
    return done.stdout


def main() -> int:
    """Install or find Prometheus; print the paths and how long that took. Exit 1 with apt's output
    when the install fails; exit 0 with a note where it cannot be installed (its tests then skip)."""
    started = time.monotonic()
    try:
        found = prometheus_binaries()
    except PrometheusMissing as exc:
        print(f"prometheus_oracle: no Prometheus, the observability tests will skip: {exc}", file=sys.stderr)
        return 0
    except PrometheusUnavailable as exc:
        print(f"prometheus_oracle: {exc}", file=sys.stderr)
        return 1
    version = subprocess.run([str(found.prometheus), "--version"], capture_output=True, text=True)
    first = (version.stdout or version.stderr).splitlines()[:1]
    print(f"{found.prometheus} {found.promtool} ({first[0] if first else 'version unknown'};"
          f" {time.monotonic() - started:.1f} s)")
    return 0
