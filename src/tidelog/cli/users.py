"""``tidelog users``: the SASL users of the broker (what ``kafka-configs --entity-type users
--alter --add-config 'SCRAM-SHA-256=[...]'`` manages in Kafka).

Users live in ``tidelog-credentials.json`` in the first log dir (see
:mod:`tidelog.server.security.credentials`); a running ``tidelog serve`` picks changes up at the
next authentication. Passwords are never stored: SCRAM keeps Kafka's salted keys, PLAIN a salted
PBKDF2 hash. These commands do not open the log dir's partitions, so they work while the broker
runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tidelog.cli.context import log_dirs
from tidelog.cli.tables import echo_json, echo_table

MECHANISM_NAMES = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_MIN_ITERATIONS, _MAX_ITERATIONS = 4096, 16384  # Kafka's SCRAM bounds (checked again where credentials are made)


@click.group()
def users() -> None:
    """Add, list and delete the users SASL listeners accept."""


def _credentials_file(ctx: click.Context) -> Path:
    # imported here: tidelog.server loads the protocol codec, which other commands should not pay for
    from tidelog.server.security.credentials import credentials_path

    return credentials_path(log_dirs(ctx)[0])


def _read_password(password_stdin: bool) -> str:
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    return password


def _check_name(name: str) -> None:
    if not name or any(ord(c) < 0x20 or c == "\x7f" for c in name):
        raise click.UsageError(f"invalid user name {name!r}: empty, or holding control characters")


@users.command()
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(MECHANISM_NAMES),
              help="Mechanism the user may authenticate with; repeatable (default: all three).")
@click.option("--iterations", type=click.IntRange(_MIN_ITERATIONS, _MAX_ITERATIONS), default=_MIN_ITERATIONS,
              show_default=True, help="PBKDF2 iterations of the stored credentials.")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@click.pass_context
def add(ctx: click.Context, name: str, mechanisms: tuple[str, ...], iterations: int, password_stdin: bool) -> None:
    """Add user NAME, or replace its credentials for the mechanisms given."""
    from tidelog.server.security.credentials import load_credentials, locked, new_user_credential, save_credentials

    _check_name(name)
    password = _read_password(password_stdin)
    path = _credentials_file(ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    chosen = mechanisms or MECHANISM_NAMES
    fresh = {m: new_user_credential(m, password, iterations) for m in chosen}
    with locked(path.parent):
        found = load_credentials(path)
        found.setdefault(name, {}).update(fresh)
        save_credentials(path, found)
    click.echo(f"User {name} may authenticate with {', '.join(sorted(found[name]))}.")


@users.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON object: user -> mechanism -> iterations.")
@click.pass_context
def list_users(ctx: click.Context, as_json: bool) -> None:
    """List users and their mechanisms (never their credentials)."""
    from tidelog.server.security.credentials import load_credentials

    found = load_credentials(_credentials_file(ctx))
    if as_json:
        echo_json({name: {m: c.iterations for m, c in sorted(creds.items())} for name, creds in sorted(found.items())})
        return
    rows = [{"User": name, "Mechanisms": ", ".join(f"{m} ({c.iterations})" for m, c in sorted(creds.items()))}
            for name, creds in sorted(found.items())]
    echo_table(rows, ("User", "Mechanisms"))


@users.command()
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(MECHANISM_NAMES),
              help="Remove only this mechanism's credentials; repeatable (default: the whole user).")
@click.pass_context
def delete(ctx: click.Context, name: str, mechanisms: tuple[str, ...]) -> None:
    """Delete user NAME (or some of its mechanisms). Its open connections stay open."""
    from tidelog.server.security.credentials import load_credentials, locked, save_credentials

    path = _credentials_file(ctx)
    if not path.parent.is_dir():
        raise click.ClickException(f"no user {name}")
    with locked(path.parent):
        found = load_credentials(path)
        if name not in found:
            raise click.ClickException(f"no user {name}")
        for mechanism in mechanisms or tuple(found[name]):
            found[name].pop(mechanism, None)
        if not found[name]:
            del found[name]
        save_credentials(path, found)
    click.echo(f"Deleted {'user ' + name if name not in found else ', '.join(mechanisms) + ' of user ' + name}.")
