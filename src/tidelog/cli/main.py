"""The ``tidelog`` command: one entry point, subcommands named after Kafka's tools.

Global options (``--data-dir``, ``--config``, ``--override``) may stand before or after the
subcommand, as users of Kafka's tools expect; they are moved to the front before parsing.
Errors print as one line on stderr with a non-zero exit code.

Every command adds group and world write to the process umask first: what tidelog creates is
never writable by other users, whatever umask it was started with (data files and checkpoints
0644, dirs 0755, as Kafka's under the usual umask 022; the credentials file 0600). See
docs/security.md.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from tidelog.cli.admin import delete_records, log_dirs
from tidelog.cli.clean import clean
from tidelog.cli.configs import configs
from tidelog.cli.consume import consume
from tidelog.cli.demo import demo
from tidelog.cli.dump import dump
from tidelog.cli.metrics import metrics
from tidelog.cli.offsets import offsets
from tidelog.cli.produce import produce
from tidelog.cli.retention import explain, retention
from tidelog.cli.serve import serve
from tidelog.cli.spark import spark
from tidelog.cli.tiered import tiered
from tidelog.cli.tables import parse_key_values
from tidelog.cli.topics import topics
from tidelog.cli.users import users
from tidelog.cli.verify import verify
from tidelog.errors import TidelogError
from tidelog.storage.config import BrokerConfig

GLOBAL_OPTIONS_WITH_VALUE = ("--data-dir", "--config", "--override")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-dir", type=click.Path(path_type=Path), envvar="TIDELOG_DATA_DIR", default=Path("./data"),
              show_default=True, help="The log dir tidelog owns (env TIDELOG_DATA_DIR).")
@click.option("--config", "config_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A Kafka server.properties file.")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a broker config; repeatable.")
@click.option("-v", "--verbose", is_flag=True, help="Log what tidelog does to stderr.")
@click.pass_context
def cli(ctx: click.Context, data_dir: Path, config_file: Path | None, overrides: tuple[str, ...], verbose: bool) -> None:
    """tidelog: Kafka's log storage, in Python."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parsed = parse_key_values(overrides, "--override")
    broker = BrokerConfig.load(config_file, parsed) if config_file else BrokerConfig.from_properties(parsed)
    ctx.obj = {"data_dir": data_dir, "broker": broker}


for command in (topics, configs, produce, consume, offsets, delete_records, log_dirs, retention, explain, clean,
                serve, dump, verify, demo, spark, users, tiered, metrics):
    cli.add_command(command)


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move global options found after the subcommand to the front (``tidelog verify X --data-dir D``).

    A subcommand's own option of the same name wins: ``--config`` after ``topics create`` is a
    topic config (``KEY=VALUE``, as in kafka-topics), not the server.properties file.
    """
    front: list[str] = []
    rest: list[str] = []
    own = _subcommand_option_names(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, has_value, _ = arg.partition("=")
        if arg == "--":
            rest.extend(argv[i:])
            break
        if name in GLOBAL_OPTIONS_WITH_VALUE:
            taken = [arg] if has_value else argv[i:i + 2]
            (rest if name in own and rest else front).extend(taken)
            i += len(taken)
            continue
        rest.append(arg)
        i += 1
    return front + rest


def _subcommand_option_names(argv: list[str]) -> set[str]:
    """Option names of the deepest subcommand named in ``argv`` (empty when there is none)."""
    command: click.Command = cli
    for arg in argv:
        if not isinstance(command, click.Group) or arg.startswith("-"):
            continue
        sub = command.commands.get(arg)
        if sub is not None:
            command = sub
    if command is cli:
        return set()
    return {opt for param in command.params if isinstance(param, click.Option) for opt in param.opts}


NEVER_WRITABLE_BY_OTHERS = 0o022  # umask bits every command sets (module doc)


def main(argv: list[str] | None = None) -> None:
    os.umask(os.umask(NEVER_WRITABLE_BY_OTHERS) | NEVER_WRITABLE_BY_OTHERS)
    args = hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    try:
        cli.main(args=args, prog_name="tidelog", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        click.echo(f"error: {e.format_message()}{hint}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except (TidelogError, OSError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
