"""The ``tidelog`` command: one entry point, subcommands named after Kafka's tools.

Global options (``--data-dir``, ``--config``, ``--override``) may stand before or after the
subcommand, as users of Kafka's tools expect; they are moved to the front before parsing.
Errors print as one line on stderr with a non-zero exit code.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from tidelog.cli.demo import demo
from tidelog.cli.dump import dump
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
    parsed = _parse_overrides(overrides)
    broker = BrokerConfig.load(config_file, parsed) if config_file else BrokerConfig.from_properties(parsed)
    ctx.obj = {"data_dir": data_dir, "broker": broker}


def _parse_overrides(overrides: tuple[str, ...]) -> dict[str, str]:
    parsed = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--override")
        parsed[key.strip()] = value.strip()
    return parsed


cli.add_command(dump)
cli.add_command(verify)
cli.add_command(demo)


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move global options found after the subcommand to the front (``tidelog verify X --data-dir D``)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS_WITH_VALUE:
            if "=" in arg:
                front.append(arg)
            else:
                front.extend(argv[i:i + 2])
                i += 1
        elif arg == "--":
            rest.extend(argv[i:])
            break
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: list[str] | None = None) -> None:
    args = hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    try:
        cli.main(args=args, prog_name="tidelog", standalone_mode=False)
    except click.exceptions.Exit as e:
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
