"""A write that fails mid-produce (the file-size limit stands in for a full disk: the same
``pwritev`` error path): one clear error line and a non-zero exit, every batch acknowledged before
it intact, nothing half-written left in the segment, and the partition still verifies and serves."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

from test_produce import run

LIMIT = 300_000  # bytes any file of the producing process may reach


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_failed_write_mid_produce_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run(data, "topics", "create", "t", "--config", "segment.index.bytes=4096")[0] == 0
    lines = b"".join(b"%06d-" % i + b"x" * 200 + b"\n" for i in range(3000))
    produced = subprocess.run(
        [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), "produce", "t"],
        input=lines, preexec_fn=_limit_file_size, capture_output=True, timeout=120,
    )
    err = produced.stderr.decode()
    assert produced.returncode == 1, err
    [error] = [line for line in err.splitlines() if line.startswith("error:")]
    assert "File too large" in error and "were written" in error
    written = int(error.split(" record(s) from the lines before")[0].rsplit(";", 1)[1])
    assert 0 < written < 3000

    segment = data / "t-0" / "00000000000000000000.log"
    assert segment.stat().st_size <= LIMIT
    code, out, _ = run(data, "verify", str(data))
    assert code == 0, out.decode()
    code, out, _ = run(data, "consume", "t", "--from-beginning")
    assert code == 0 and out.splitlines() == lines.splitlines()[:written]
    assert run(data, "produce", "t", stdin=b"after\n")[0] == 0, "the partition keeps serving"
