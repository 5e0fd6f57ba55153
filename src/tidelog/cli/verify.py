"""``tidelog verify PATH...``: CRC, offset order and index consistency of the segments, and every
other file the broker reads at start-up (topic registry, checkpoints, producer snapshots,
``partition.metadata``, topic copies; :mod:`tidelog.manager.startup_check`), each finding with what
``tidelog serve`` will do with it; exit 1 on any problem."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tidelog.cli.progress import progress_bar
from tidelog.manager.startup_check import Finding, check_startup_files
from tidelog.storage.verify import verify_paths

LARGE = 256 << 20  # bytes; smaller checks finish before a bar helps


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def verify(paths: tuple[Path, ...], as_json: bool) -> None:
    """Verify segment and index files, partition dirs or whole data dirs, and what the broker reads
    at start-up there, saying what `tidelog serve` will do with each finding. Changes nothing."""
    with progress_bar("verifying", in_bytes=True, threshold=LARGE) as on_progress:
        report = verify_paths(list(paths), on_progress)
    findings = check_startup_files(list(paths), report.segments)
    problems = len(report.problems) + sum(1 for f in findings if f.problem)
    if as_json:
        click.echo(json.dumps({
            "ok": problems == 0,
            "files_checked": report.files_checked,
            "problems": [{"file": str(p.path), "position": p.position, "message": p.message} for p in report.problems],
            "startup": [_finding_json(f) for f in findings],
            "segments": [{"file": str(s.path), "batches": s.batches, "records": s.records,
                          "first_offset": s.first_offset, "last_offset": s.last_offset} for s in report.segments],
        }, indent=2))
    else:
        for problem in report.problems:
            click.echo(str(problem))
        for finding in (f for f in findings if f.problem):
            click.echo(_finding_text(finding))
        records = sum(s.records for s in report.segments)
        status = "OK" if problems == 0 else f"{problems} problem(s)"
        click.echo(f"{status}: {report.files_checked} file(s), {len(report.segments)} segment(s), {records} record(s) checked")
        for finding in (f for f in findings if not f.problem):  # after the verdict line, which stays first on OK
            click.echo("note: " + _finding_text(finding))
    if problems:
        sys.exit(1)


def _finding_text(finding: Finding) -> str:
    return f"{finding.path}: {finding.message}\n  serve: {finding.action}"


def _finding_json(finding: Finding) -> dict[str, object]:
    return {"file": str(finding.path), "message": finding.message, "broker_action": finding.action,
            "problem": finding.problem}
