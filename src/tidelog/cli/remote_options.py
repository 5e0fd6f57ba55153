"""The ``--bootstrap-server`` option and its usage rules, without importing kafka-python (see
:mod:`tidelog.cli.remote`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

ENV_VAR = "TIDELOG_BOOTSTRAP_SERVER"
LOCAL_ONLY_GLOBALS = (("config_file", "--config"), ("overrides", "--override"))

F = TypeVar("F", bound=Callable[..., Any])


def bootstrap_option(command: F) -> F:
    """The ``--bootstrap-server`` option, as Kafka's tools spell it (env TIDELOG_BOOTSTRAP_SERVER)."""
    return click.option("--bootstrap-server", "bootstrap_server", envvar=ENV_VAR, metavar="HOST:PORT",
                        help="Go through the broker at HOST:PORT (tidelog serve or Kafka) instead of opening "
                             f"the log dir (env {ENV_VAR}).")(command)


def check_remote_usage(ctx: click.Context, **local_only: object) -> None:
    """Usage error when a local-only option is given with ``--bootstrap-server``: the global
    ``--config``/``--override`` (they configure a local log dir), or any of ``local_only``
    (option name -> value, None/False when not given)."""
    root = ctx.find_root()
    for param, flag in LOCAL_ONLY_GLOBALS:
        if root.get_parameter_source(param) not in (None, ParameterSource.DEFAULT) and root.params.get(param):
            raise click.UsageError(f"{flag} configures a local log dir; it has no effect with --bootstrap-server")
    for flag, value in local_only.items():
        if value not in (None, False, ()):
            raise click.UsageError(f"{flag} works on a local log dir only; it cannot be used with --bootstrap-server")
