"""Parameter types: values parsed where they enter, so that a command body receives the value and a
malformed one is refused in one line before anything is created, provisioned or started."""

from __future__ import annotations

import shlex
from typing import Any, Optional

import click


def split_words(text: str) -> list[str]:
    """The words of a quoted argument list, as a shell splits them; ValueError names what is wrong."""
    try:
        return shlex.split(text)
    except ValueError as exc:  # shlex says "No closing quotation" / "No escaped character"
        raise ValueError(f"{str(exc)[0].lower()}{str(exc)[1:]} in {text!r}") from exc


class RunArgs(click.ParamType):
    """The arguments of one ``diag run``, quoted as one value (``--part``): its words."""

    name = "run args"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if isinstance(value, list):
            return value
        try:
            return split_words(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


RUN_ARGS = RunArgs()
