"""Coverage-guided fuzzing of one target with atheris (libFuzzer for Python).

    python -m fuzz.run TARGET --runs N        # N executions, then stop
    python -m fuzz.run TARGET --seconds S     # S seconds, then stop
    python -m fuzz.run all --seconds S        # every target in turn, S seconds each; prints a table

TARGET is a name of :data:`fuzz.targets.TARGETS`. tidelog and kafka-python's protocol code are
instrumented for coverage; libFuzzer starts from the target's corpus (written to a scratch dir) and
keeps what it finds there. An input that makes the target raise anything but its allowed errors
is a crash: libFuzzer writes it to ``crash-<sha1>`` in the current directory (``--artifacts`` to
change), atheris prints the traceback, and the run exits non-zero. Reproduce it with
``python -m fuzz.run TARGET --reproduce crash-<sha1>``. A run also stops (as a crash) on an input
taking longer than ``--timeout`` seconds or on a heap above ``--rss-mb``.

``all`` runs each target in its own process and prints executions per target (libFuzzer's own
count); it exits non-zero if any target found something.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_DONE = re.compile(r"Done (\d+) runs in (\d+) second")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.target == "all":
        return _run_all(args)
    if args.reproduce is not None:
        return _reproduce(args.target, Path(args.reproduce))
    return _fuzz(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="a target name, or 'all'")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--runs", type=int, help="stop after this many executions")
    budget.add_argument("--seconds", type=int, help="stop after this many seconds")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take (a hang otherwise)")
    parser.add_argument("--rss-mb", type=int, default=2048, help="the most memory the run may hold")
    parser.add_argument("--artifacts", default="./", help="where crash inputs are written")
    parser.add_argument("--reproduce", metavar="FILE", help="run one saved input and show what it raises")
    return parser


def _fuzz(args: argparse.Namespace) -> int:
    import atheris

    with atheris.instrument_imports(include=["tidelog", "kafka.protocol"]):
        from fuzz.targets import TARGETS

        target = TARGETS.get(args.target)
        if target is None:
            print(f"unknown target {args.target!r}; targets: {', '.join(sorted(TARGETS))}", file=sys.stderr)
            return 2
        for sample in target.corpus():  # the target imports its modules lazily: instrument them too
            target.check(sample)
    corpus_dir = Path(tempfile.mkdtemp(prefix=f"tidelog-fuzz-{target.name}-"))
    for i, sample in enumerate(target.corpus()):
        (corpus_dir / f"seed-{i:04d}").write_bytes(sample)
    flags = [f"-timeout={args.timeout}", f"-rss_limit_mb={args.rss_mb}", f"-artifact_prefix={args.artifacts}",
             "-print_final_stats=1"]
    if args.runs is not None:
        flags.append(f"-runs={args.runs}")
    if args.seconds is not None:
        flags.append(f"-max_total_time={args.seconds}")
    atheris.Setup([sys.argv[0], *flags, str(corpus_dir)], target.check)
    atheris.Fuzz()  # libFuzzer exits the process when the budget is spent or on a crash
    return 0


def _reproduce(name: str, path: Path) -> int:
    from fuzz.targets import TARGETS

    TARGETS[name].check(path.read_bytes())
    print(f"{name}: {path} gives a result or an allowed error")
    return 0


def _run_all(args: argparse.Namespace) -> int:
    from fuzz.targets import TARGETS

    budget = ["--runs", str(args.runs)] if args.runs is not None else ["--seconds", str(args.seconds or 60)]
    failed = []
    print(f"{'target':<12} {'executions':>11} {'seconds':>8}  result")
    for name in TARGETS:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "fuzz.run", name, *budget, "--timeout", str(args.timeout),
                               "--rss-mb", str(args.rss_mb), "--artifacts", args.artifacts],
                              capture_output=True, text=True)
        runs = _DONE.search(done.stderr)
        result = "ok" if done.returncode == 0 else f"FOUND SOMETHING (exit {done.returncode})"
        print(f"{name:<12} {runs.group(1) if runs else '?':>11} {time.monotonic() - started:>8.1f}  {result}",
              flush=True)
        if done.returncode != 0:
            failed.append(name)
            print(done.stderr[-4000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
