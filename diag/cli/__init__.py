"""The diag command line. Commands stay thin: the work lives in the modules they call.

``common`` holds the group and the option bundles; each other module registers its commands on it,
and is imported when one of its commands is first looked up (``common.COMMAND_MODULES``).
"""

from __future__ import annotations

import sys

import click

from diag import stopping, text
from diag.cli.common import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Entry point: click's usage errors reduced to one line on stderr, exit status 2."""
    try:
        with stopping.on_stop_signals():
            code = cli.main(prog_name="diag", standalone_mode=False)
    except click.exceptions.Abort as exc:
        # click turns Ctrl-C (and stopping.Stopped, which is one) into Abort; the signal is its context
        stop = stopping.of(exc.__context__ if isinstance(exc.__context__, KeyboardInterrupt) else KeyboardInterrupt())
        click.echo(f"Aborted{stop.by}.", err=True)
        sys.exit(stop.exit_code)
    except click.ClickException as exc:
        # the command's full path (``diag run``, ``diag env add``); for the group itself that is ``diag``
        hint = f" (see '{exc.ctx.command_path} --help')" if isinstance(exc, click.UsageError) and exc.ctx else ""
        click.echo(f"Error: {text.safe(exc.format_message())}{hint}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
