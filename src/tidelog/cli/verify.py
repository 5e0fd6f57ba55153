"""``tidelog verify PATH...``: CRC, offset order and index consistency of the segments, and every
other file the broker reads at start-up (topic registry, checkpoints, producer snapshots,
``partition.metadata``, topic copies; :mod:`tidelog.manager.startup_check`), each finding with what
``tidelog serve`` will do with it; exit 1 on any problem.

``tidelog verify --remote [URI]``: the remote tier at ``URI`` (default: the broker's
``remote.log.storage.uri``; store options from ``--override rsm.config.*``), checked from the
store alone (:mod:`tidelog.remote.verify`): metadata, objects present, every batch's CRC, offsets
and indexes against the metadata; one line per problem or warning, then the verdict; exit 1 when
a problem (not a warning) was found. With PATHs too, both are checked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tidelog.cli.progress import progress_bar
from tidelog.manager.startup_check import Finding, check_startup_files
from tidelog.remote.store import open_store
from tidelog.remote.verify import RemoteVerifyReport, verify_store
from tidelog.storage.config import BrokerConfig
from tidelog.storage.verify import verify_paths

LARGE = 256 << 20  # bytes; smaller checks finish before a bar helps


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, exists=True))
@click.option("--remote", "remote_uri", is_flag=False, flag_value="", default=None, metavar="[URI]",
              help="Also verify the remote tier at URI (default: remote.log.storage.uri; options from "
                   "--override rsm.config.*): metadata, objects, CRCs.")
@click.option("--topic", help="With --remote: only this topic's partitions.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@click.pass_context
def verify(ctx: click.Context, paths: tuple[Path, ...], remote_uri: str | None, topic: str | None,
           as_json: bool) -> None:
    """Verify segment and index files, partition dirs or whole data dirs, and what the broker reads
    at start-up there, saying what `tidelog serve` will do with each finding; with --remote, the
    remote tier's metadata, objects and batches. Changes nothing."""
    if not paths and remote_uri is None:
        raise click.UsageError("give PATH... (local segments) and/or --remote [URI] (the remote tier)")
    if topic is not None and remote_uri is None:
        raise click.UsageError("--topic goes with --remote")
    remote = None if remote_uri is None else _verify_remote(ctx.find_root().obj["broker"], remote_uri, topic)
    problems = _verify_local(paths, as_json, remote) if paths else 0
    if not paths and remote is not None:
        click.echo(json.dumps(remote.to_json(), indent=2) if as_json else _remote_text(remote))
    if problems or (remote is not None and not remote.ok):
        sys.exit(1)


def _verify_remote(broker: BrokerConfig, uri: str, topic: str | None) -> RemoteVerifyReport:
    uri = uri or broker.remote_log_storage_uri.strip()
    if not uri:
        raise click.UsageError("--remote needs a URI, or --override remote.log.storage.uri=... to default to")
    store = open_store(uri, dict(broker.rsm_config))
    with progress_bar("verifying remote partitions", threshold=50) as on_progress:
        return verify_store(store, topic=topic, on_partition=on_progress)


def _remote_text(report: RemoteVerifyReport) -> str:
    lines = [str(f) for f in report.errors] + [str(f) for f in report.warnings]
    return "\n".join([*lines, report.summary()])


def _verify_local(paths: tuple[Path, ...], as_json: bool, remote: RemoteVerifyReport | None) -> int:
    """Verify the local paths and print their report (with ``remote``'s after it); the local problems."""
    with progress_bar("verifying", in_bytes=True, threshold=LARGE) as on_progress:
        report = verify_paths(list(paths), on_progress)
    findings = check_startup_files(list(paths), report.segments)
    problems = len(report.problems) + sum(1 for f in findings if f.problem)
    if as_json:
        click.echo(json.dumps({
            "ok": problems == 0 and (remote is None or remote.ok),
            "files_checked": report.files_checked,
            "problems": [{"file": str(p.path), "position": p.position, "message": p.message} for p in report.problems],
            "startup": [_finding_json(f) for f in findings],
            "segments": [{"file": str(s.path), "batches": s.batches, "records": s.records,
                          "first_offset": s.first_offset, "last_offset": s.last_offset} for s in report.segments],
            **({} if remote is None else {"remote": remote.to_json()}),
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
        if remote is not None:
            click.echo(_remote_text(remote))
    return problems


def _finding_text(finding: Finding) -> str:
    return f"{finding.path}: {finding.message}\n  serve: {finding.action}"


def _finding_json(finding: Finding) -> dict[str, object]:
    return {"file": str(finding.path), "message": finding.message, "broker_action": finding.action,
            "problem": finding.problem}
