"""SeaweedFS's ``weed`` binary, built from the Go module proxy once and cached outside the repository.

``weed_binary()`` returns the path of ``weed`` for :data:`WEED_VERSION`, building it on first use:
``go mod download`` of the module (``go install`` refuses it: its go.mod has replace directives),
a writable copy of the module's directory, ``go build ./weed`` inside it, and an atomic rename of
the binary into ``<cache>/seaweedfs-<version>/weed``. The cache is ``$TIDELOG_CACHE`` or
``~/.cache/tidelog``. A file lock makes concurrent callers (xdist workers, two ``make test`` runs)
build once; the others wait and reuse the result.

Cost: a warm call is one ``stat``. A cold build is minutes of CPU (the figure measured on a 2-core
machine is in the Makefile beside ``make weed``) plus ~150 MiB in Go's module cache and ~1 GiB in
Go's build cache; the binary itself is ~150 MiB.

Run ``python -m object_store_oracle`` (``make weed``) to build (or find) it and print its path.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WEED_MODULE = "github.com/seaweedfs/seaweedfs"
WEED_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
BUILD_TIMEOUT_S = 3600.0


class WeedUnavailable(RuntimeError):
    """``weed`` could not be downloaded or built; the message carries Go's output."""


class WeedToolMissing(WeedUnavailable):
    """``go`` is not on PATH: the one case where the object-store tests skip."""


def cache_dir() -> Path:
    """Where built binaries live: ``$TIDELOG_CACHE`` or ``~/.cache/tidelog`` (created on demand)."""
    root = os.environ.get("TIDELOG_CACHE") or Path.home() / ".cache" / "tidelog"
    return Path(root)


def binary_path(version: str = WEED_VERSION) -> Path:
    """The cached binary's path for ``version`` (it may not exist yet)."""
    return cache_dir() / f"seaweedfs-{version}" / "weed"


def weed_binary(version: str = WEED_VERSION) -> Path:
    """The path of a built ``weed`` for ``version``; builds it under a file lock when missing.

    Safe to call from many processes at once: one builds, the rest wait on the lock and then find
    the binary. Raises :class:`WeedToolMissing` without ``go``, :class:`WeedUnavailable` when the
    download or the build fails.
    """
    target = binary_path(version)
    if _is_executable(target):
        return target
    if shutil.which("go") is None:
        raise WeedToolMissing("no `go` on PATH: SeaweedFS's weed is built from the Go module proxy")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_executable(target):
            _build(version, target)
    return target


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _go(args: list[str], cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise WeedUnavailable(f"`go {' '.join(args)}` did not finish in {BUILD_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise WeedUnavailable(f"`go {' '.join(args)}` failed ({done.returncode}):\n{tail}")
    return done.stdout


def _module_dir(version: str) -> Path:
    """``go mod download`` the module (a no-op when Go's module cache has it); its read-only dir."""
    info = json.loads(_go(["mod", "download", "-json", f"{WEED_MODULE}@{version}"]))
    if info.get("Error") or not info.get("Dir"):
        raise WeedUnavailable(f"go mod download {WEED_MODULE}@{version}: {info.get('Error', 'no Dir')}")
    return Path(info["Dir"])


def _build(version: str, target: Path) -> None:
    source = _module_dir(version)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix="build-") as scratch:
        tree = Path(scratch) / "src"
        # the module cache is read-only, and building the module as the main module may write
        # (go.sum, vendor checks): build in a writable copy
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
        _make_writable(tree)
        built = Path(scratch) / "weed"
        _go(["build", "-buildvcs=false", "-trimpath", "-ldflags=-s -w", "-o", str(built), "./weed"],
            cwd=tree)
        os.replace(built, target)  # readers outside the lock see no binary or a whole one


def _make_writable(tree: Path) -> None:
    for root, dirs, files in os.walk(tree):
        for name in dirs + files:
            path = Path(root) / name
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
    tree.chmod(tree.stat().st_mode | stat.S_IWUSR)


def main() -> int:
    """Build or find ``weed``; print its path and how long that took. Exit 1 with Go's output on
    failure; exit 0 with a note where Go is missing (the object-store tests then skip, saying why)."""
    started = time.monotonic()
    try:
        path = weed_binary()
    except WeedToolMissing as exc:
        print(f"object_store_oracle: no weed, the object-store tests will skip: {exc}", file=sys.stderr)
        return 0
    except WeedUnavailable as exc:
        print(f"object_store_oracle: {exc}", file=sys.stderr)
        return 1
    print(f"{path} ({time.monotonic() - started:.1f} s)")
    return 0
