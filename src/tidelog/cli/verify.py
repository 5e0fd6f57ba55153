"""``tidelog verify PATH...``: CRC, offset order and index consistency; exit 1 on any problem."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tidelog.cli.progress import progress_bar
from tidelog.storage.verify import verify_paths

LARGE = 256 << 20  # bytes; smaller checks finish before a bar helps


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def verify(paths: tuple[Path, ...], as_json: bool) -> None:
    """Verify segment and index files, partition dirs or whole data dirs. Changes nothing."""
    with progress_bar("verifying", in_bytes=True, threshold=LARGE) as on_progress:
        report = verify_paths(list(paths), on_progress)
    if as_json:
        click.echo(json.dumps({
            "ok": report.ok,
            "files_checked": report.files_checked,
            "problems": [{"file": str(p.path), "position": p.position, "message": p.message} for p in report.problems],
            "segments": [{"file": str(s.path), "batches": s.batches, "records": s.records,
                          "first_offset": s.first_offset, "last_offset": s.last_offset} for s in report.segments],
        }, indent=2))
    else:
        for problem in report.problems:
            click.echo(str(problem))
        records = sum(s.records for s in report.segments)
        status = "OK" if report.ok else f"{len(report.problems)} problem(s)"
        click.echo(f"{status}: {report.files_checked} file(s), {len(report.segments)} segment(s), {records} record(s) checked")
    if not report.ok:
        sys.exit(1)
