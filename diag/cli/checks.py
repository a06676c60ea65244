"""What a command's parameters must satisfy together, checked before its body runs: the one rule for
every path a command writes, and no option accepted that the command cannot honour.

An output (an option whose type is an output file or folder, ``params.FilePath(output=True)`` and
``params.FolderPath(output=True)``) is never:

- one of the command's inputs: any other option or argument that names an existing file or folder
  (the DB, a shard, the history, a matrix, a case file), defaults included, compared as files are
  (the same inode, whatever the spelling);
- a symbolic link: diag writes only where it makes the file or folder, never through a link into
  somewhere the user did not name;
- an SQLite database: no report, plan, script or XML ever takes the place of a history.

The body of a command that learns of another input only later (``repro`` reads the run's case file
from the DB) calls ``refuse_input`` with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Optional

import click
from click.core import ParameterSource

from diag.cli import params

SQLITE_HEADER = b"SQLite format 3\x00"


class CheckedCommand(click.Command):
    """A command whose outputs are checked against its inputs before its body runs."""

    def invoke(self, ctx: click.Context) -> Any:
        check(ctx)
        return super().invoke(ctx)


class CheckedGroup(click.Group):
    """A nested group (``diag env``) whose commands are checked the same way."""

    command_class = CheckedCommand


def _is_output(param: click.Parameter) -> bool:
    return isinstance(param.type, (params.FilePath, params.FolderPath)) and bool(param.type.output)


def _values(value: Any) -> Iterator[str]:
    if isinstance(value, (str, os.PathLike)):
        yield os.fspath(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _values(item)


def _label(param: click.Parameter) -> str:
    return param.opts[-1] if isinstance(param, click.Option) else param.human_readable_name


def check(ctx: click.Context) -> None:
    """Refuse, in one line and before anything is written, an output that breaks the rule."""
    outputs = [
        (param, value)
        for param in ctx.command.params
        if _is_output(param)
        for value in _values(ctx.params.get(param.name or ""))
    ]
    if not outputs:
        return
    inputs = [
        (param, value)
        for param in ctx.command.params
        if not _is_output(param)
        for value in _values(ctx.params.get(param.name or ""))
        if value and os.path.lexists(value)
    ]
    for param, value in outputs:
        why = next((w for other, named in inputs if (w := refuse_input(value, named, f"{_label(other)}'s file"))), None)
        why = why or refusal(value, folder=isinstance(param.type, params.FolderPath))
        if why:
            raise click.BadParameter(why, ctx=ctx, param=param)


def refusal(path: str, folder: bool = False) -> Optional[str]:
    """Why ``path`` may not be written whatever the inputs, or None."""
    if os.path.islink(path):
        return f"{path} is a symbolic link: diag writes only where it makes the file (name its target)"
    if not folder and _is_sqlite(path):
        return f"{path} is an SQLite database: diag never writes over one (name another file)"
    return None


def refuse_input(output: str, named: str, what: str) -> Optional[str]:
    """Why ``output`` may not be written, being the input ``named`` (described as ``what``), or None."""
    if _same(output, named):
        return f"{output} is {what}: diag never writes over one of its inputs"
    return None


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is not there yet: the same path, spelt differently
        return os.path.realpath(a) == os.path.realpath(b)


def _is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as handle:  # the type checked it is a regular file: no FIFO to block on
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def refuse_unhonoured(ctx: click.Context, names: tuple[str, ...], why: str) -> None:
    """An option the command was given (on the command line or by its variable) away from its default,
    which it cannot honour, is refused in one line; never accepted to do nothing."""
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    for param in ctx.command.params:
        if param.name in names and ctx.get_parameter_source(param.name) in given:
            value = ctx.params.get(param.name)
            if value == param.default:
                continue
            shown = param.secondary_opts[0] if param.secondary_opts and value is False else param.opts[-1]
            raise click.ClickException(f"{shown} does nothing on diag {ctx.command.name}: {why}")


# What the timing pass alone uses: a command or a run without one cannot honour them.
TIMING_OPTIONS = ("repeats", "timing_seconds", "reuse_compiled", "profile")


def refuse_timing_options_without_timing(ctx: click.Context) -> None:
    """``diag run --no-timing`` (on the command line or in a matrix part) refuses TIMING_OPTIONS."""
    if not ctx.params["timing"]:
        refuse_unhonoured(ctx, TIMING_OPTIONS, "--no-timing runs no timing pass")


def write_output(path: str, content: str, named: str) -> None:
    """``content`` written to the output file ``path``; where it cannot be, one line naming it as
    ``named`` (``--junit out.xml``) and why."""
    try:
        Path(path).write_text(content, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"{named}: {exc.strerror or exc}") from exc
