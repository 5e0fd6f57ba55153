"""The weed build step's promises, with a stand-in ``go`` on PATH that counts builds.

The real build takes ~10 minutes of CPU, so these check the caching and the file lock around it,
not SeaweedFS: two processes asking at once build once; a failed build raises with Go's output
and leaves no binary; a cached binary is returned without running ``go``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from object_store_oracle import WEED_VERSION, WeedUnavailable, weed_binary

ROOT = Path(__file__).resolve().parents[2]

# `go mod download -json` prints the module dir; `go build ... -o OUT ./weed` logs a line, waits,
# writes OUT. FAIL_BUILD=1 makes the build fail with a compiler-like message.
FAKE_GO = """#!/bin/sh
if [ "$1" = mod ]; then printf '{"Dir": "%s"}' "$FAKE_MODULE_DIR"; exit 0; fi
if [ "$1" = build ]; then
  echo built >> "$FAKE_BUILD_LOG"
  if [ "$FAIL_BUILD" = 1 ]; then echo "weed/main.go:1: syntax error" >&2; exit 2; fi
  sleep 1
  while [ "$1" != -o ]; do shift; done
  printf '#!/bin/sh\\necho weed\\n' > "$2"; chmod +x "$2"; exit 0
fi
exit 1
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, module = tmp_path / "bin", tmp_path / "module"
    bin_dir.mkdir()
    (module / "weed").mkdir(parents=True)
    (module / "weed" / "main.go").write_text("package main\n")
    (module / "weed" / "main.go").chmod(0o444)  # read-only, as Go's module cache is
    (bin_dir / "go").write_text(FAKE_GO)
    (bin_dir / "go").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TIDELOG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_MODULE_DIR", str(module))
    monkeypatch.setenv("FAKE_BUILD_LOG", str(tmp_path / "builds.log"))
    return tmp_path / "builds.log"


def test_two_processes_asking_at_once_build_once(fake_go: Path) -> None:
    ask = [sys.executable, "-c", "from object_store_oracle import weed_binary; print(weed_binary())"]
    askers = [subprocess.Popen(ask, cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    paths = {asker.communicate(timeout=60)[0].strip() for asker in askers}
    assert all(asker.returncode == 0 for asker in askers)
    assert len(paths) == 1 and WEED_VERSION in paths.pop()
    assert fake_go.read_text().splitlines() == ["built"]


def test_cached_binary_is_returned_without_running_go(fake_go: Path) -> None:
    first = weed_binary()
    assert weed_binary() == first
    assert fake_go.read_text().splitlines() == ["built"]


def test_failed_build_raises_with_gos_output_and_leaves_no_binary(
        fake_go: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_BUILD", "1")
    with pytest.raises(WeedUnavailable, match="syntax error"):
        weed_binary()
    cache = Path(os.environ["TIDELOG_CACHE"])
    assert not any(path.name == "weed" for path in cache.rglob("*"))
    assert not list(cache.rglob("build-*"))
