"""Tabular output for every command: a rich table on a terminal (plain aligned text otherwise),
or, with ``--json``, one JSON document with the same rows."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table


def echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, default=str))


def echo_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None) -> None:
    """Print ``rows`` (dicts keyed by column name) as a table with ``columns`` in that order."""
    table = Table(title=title, box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        # Values are data, never rich markup (a path or a metric name may hold "[...]").
        table.add_row(*("" if row.get(c) is None else escape(str(row.get(c))) for c in columns))
    # Piped output is never folded to 80 columns: scripts and tests read whole lines.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 100_000)
    console.print(table)


def parse_key_values(items: Sequence[str], option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a usage error naming ``option`` otherwise."""
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        parsed[key.strip()] = value.strip()
    return parsed
