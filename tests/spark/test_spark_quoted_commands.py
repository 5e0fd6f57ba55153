"""Every ``tidelog ...`` command that an error message or docstring under src/tidelog/spark and
src/tidelog/cli quotes parses with the real command line (``tidelog.cli.main.cli``): a user who
copies it gets the command, not ``No such option``/``No such command``."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import click
import pytest

from tidelog.cli.main import cli

SRC = Path(__file__).resolve().parents[2] / "src" / "tidelog"
PLACEHOLDER = "PLACEHOLDER"
_QUOTED = re.compile(r"`(tidelog\s[^`]+)`")
_BARE = re.compile(r"\btidelog((?:\s+(?!tidelog\b)[^\s;,)`'\"]+)+)")


def _is_error(node: ast.AST) -> bool:
    """A ``raise`` or a call of an error class (``...Error(...)``, ``...Exception(...)``)."""
    if isinstance(node, ast.Raise):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name.endswith(("Error", "Exception"))
    return False


def _texts(path: Path) -> list[str]:
    """The texts of ``path``'s error messages; an f-string's fields become a placeholder word."""
    out = []
    for error in (n for n in ast.walk(ast.parse(path.read_text())) if _is_error(n)):
        for node in ast.walk(error):
            if isinstance(node, ast.JoinedStr):
                out.append("".join(v.value if isinstance(v, ast.Constant) else PLACEHOLDER for v in node.values))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
    return list(dict.fromkeys(out))


def _command_words(tokens: list[str], strict: bool) -> list[str] | None:
    """The tokens of one quoted command, or None when ``tidelog`` starts prose ("the tidelog sink").

    Global options come first; then subcommand names are followed while they name one (``strict``,
    for commands in backticks: the next word must be a subcommand when the command is a group);
    everything after the last subcommand up to the end of the clause is its arguments."""
    words: list[str] = []
    i = 0
    while i < len(tokens) and tokens[i].startswith("-"):
        words.append(tokens[i])
        if "=" not in tokens[i] and i + 1 < len(tokens):
            words.append(tokens[i + 1])
            i += 1
        i += 1
    command: click.Command = cli
    if i >= len(tokens) or (not strict and tokens[i] not in cli.commands and not words):
        return None
    while isinstance(command, click.Group) and i < len(tokens):
        sub = command.commands.get(tokens[i])
        if sub is None and not strict:
            return words
        words.append(tokens[i])
        i += 1
        if sub is None:
            return words
        command = sub
    if strict:
        return words + tokens[i:]
    # a bare mention ends where the prose goes on: keep options, their values and placeholders
    args: list[str] = []
    for token in tokens[i:]:
        after_option = bool(args) and args[-1].startswith("--") and "=" not in args[-1]
        if not (token.startswith("-") or after_option or token.isupper()):
            break
        args.append(token)
    return words + args


def quoted_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in sorted([*(SRC / "spark").glob("*.py"), *(SRC / "cli").glob("*.py")]):
        for text in _texts(path):
            spans = [(m.group(1), True) for m in _QUOTED.finditer(text)]
            rest = _QUOTED.sub(" ", text)
            spans += [("tidelog" + m.group(1), False) for m in _BARE.finditer(rest)]
            for span, strict in spans:
                clause = re.split(r"[;)]|\.\s|\.$|:\s", span)[0]
                words = _command_words(shlex.split(clause.replace("'", ""))[1:], strict)
                if words is not None:
                    found.append((f"{path.relative_to(SRC)}: {span.strip()}", words))
    return found


def _parse(words: list[str]) -> None:
    """Parse ``words`` as ``tidelog`` would, down to the leaf command (placeholders such as ``N``
    or an f-string's fields stand for a value the user fills in: they become ``1``). Naming a
    command without its required arguments (``tidelog consume``) is fine; an unknown command or
    option, or a bad value, raises click's UsageError."""
    words = ["1" if w in ("N", PLACEHOLDER) else w for w in words]
    ctx = cli.make_context("tidelog", list(words))
    command: click.Command = cli
    while isinstance(command, click.Group):
        args = [*ctx._protected_args, *ctx.args] if hasattr(ctx, "_protected_args") else [*ctx.protected_args, *ctx.args]
        if not args:
            return
        name, command, rest = command.resolve_command(ctx, args)
        if isinstance(command, click.Group) and not rest:
            return
        try:
            ctx = command.make_context(name, rest, parent=ctx)
        except click.MissingParameter:
            return


COMMANDS = quoted_commands()


def test_the_extraction_finds_the_commands_errors_quote() -> None:
    spans = [span for span, _ in COMMANDS]
    assert any("topics create" in s and "sink_options.py" in s for s in spans), spans
    assert not any("tidelog serve with" in " ".join(w) for _, w in COMMANDS)  # prose is not parsed


def test_a_wrong_command_is_caught() -> None:
    """The check itself fails on the command the sink's error quoted before (``topics --create``)."""
    with pytest.raises(click.UsageError, match="No such option.*--create"):
        _parse(["--data-dir", "d", "topics", "--create", "t", "--partitions", "1"])
    with pytest.raises(click.UsageError, match="No such command"):
        _parse(["topic", "create", "t"])


@pytest.mark.parametrize(("where", "words"), COMMANDS, ids=[span for span, _ in COMMANDS])
def test_every_quoted_command_parses(where: str, words: list[str]) -> None:
    _parse(words)
