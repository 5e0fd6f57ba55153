"""Running the ``tidelog`` command line inside the test process."""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

from tidelog.cli.main import main


def run_cli(data_dir: Path, *args: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
    """``tidelog --data-dir DATA_DIR ARGS`` in this process with ``stdin``: (exit code, stdout
    bytes, stderr text). Faster than a subprocess; the command sees real binary stdio."""
    with CliRunner().isolation(input=stdin) as (out, err, _):
        try:
            main(["--data-dir", str(data_dir), *args])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue(), err.getvalue().decode()
