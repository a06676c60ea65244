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
    """Entry point: click's usage errors in one line on stderr with exit status 2, and every error a
    user can cause (``LazyGroup.invoke`` makes them ClickExceptions) in one line with exit status 1."""
    try:
        undecodable = next((arg for arg in sys.argv[1:] if _undecodable(arg)), None)
        if undecodable is not None:
            raise click.UsageError(f"{text.safe(undecodable)!r} is not valid UTF-8: diag takes text it can store")
        with stopping.on_stop_signals():
            try:
                code = cli.main(prog_name="diag", standalone_mode=False)
            finally:
                stopping.hold()
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
    except Exception as exc:  # a stop that landed inside Python's own machinery, which wrapped it
        wrapped = stopping.within(exc)
        if wrapped is None:
            raise
        click.echo(f"Aborted{wrapped.by}.", err=True)
        sys.exit(wrapped.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def _undecodable(arg: str) -> bool:
    """An argument the OS passed as bytes that are not UTF-8 (Python keeps them as lone surrogates)."""
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
