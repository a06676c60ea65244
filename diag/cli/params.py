"""Parameter types: values parsed where they enter, so that a command body receives the value and a
malformed one is refused in one line before anything is created, provisioned or started."""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from typing import Any, Optional

import click

from diag import store


class RunArgs(click.ParamType):
    """The arguments of one ``diag run``, quoted as one value (``--part``): its words."""

    name = "run args"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if isinstance(value, list):
            return value
        from diag.run.matrix import split_words

        try:
            return split_words(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


RUN_ARGS = RunArgs()


class FilePath(click.Path):
    """A file diag reads or writes, checked where it enters: what is there must be a regular file (a
    FIFO would block diag, a device take its writes, a loop of links fail it later); ``must_exist`` for
    an input; for an output, its folder must exist. The value is the path as given."""

    def __init__(self, must_exist: bool = False, output: bool = False) -> None:
        super().__init__(dir_okay=False)
        self.must_exist, self.output = must_exist, output

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        text = os.fspath(value)
        if not text:
            self.fail("an empty path names no file", param, ctx)
        path = Path(text)
        kind = store.path_kind(path)
        if kind is None and self.must_exist:
            self.fail(f"{text!r}: no such file", param, ctx)
        if kind not in (None, "file"):
            self.fail(f"{text!r} is {kind}, not a regular file", param, ctx)
        if self.output and kind is None and not path.absolute().parent.is_dir():
            self.fail(f"{text!r}: its folder {path.absolute().parent} does not exist", param, ctx)
        return text


class TextFile(FilePath):
    """An existing file of text lines (a list of keys, of torch specs): it must read as UTF-8, so that
    a DB or a binary given in its place is refused where it enters, not met by a decoding error later."""

    def __init__(self) -> None:
        super().__init__(must_exist=True)

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        text = super().convert(value, param, ctx)
        try:
            with open(text, encoding="utf-8") as handle:
                handle.read()
        except UnicodeDecodeError as exc:
            self.fail(f"{text!r} is not a text file (byte {exc.start} is no UTF-8): one entry a line", param, ctx)
        except OSError as exc:
            self.fail(f"{text!r}: {exc.strerror or exc}", param, ctx)
        return text


DB_FILE = FilePath()  # a DB, new or existing: commands that read one say "no database at" themselves
INPUT_FILE = FilePath(must_exist=True)
TEXT_FILE = TextFile()
OUTPUT_FILE = FilePath(output=True)


class FolderPath(click.Path):
    """A folder diag reads (``must_exist``) or writes into (``output``): what is there must be a directory."""

    def __init__(self, must_exist: bool = False, output: bool = False) -> None:
        super().__init__(file_okay=False)
        self.must_exist, self.output = must_exist, output

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        text = os.fspath(value)
        if not text:
            self.fail("an empty path names no folder", param, ctx)
        kind = store.path_kind(Path(text))
        if kind is None and self.must_exist:
            self.fail(f"{text!r}: no such folder", param, ctx)
        if kind not in (None, "a directory"):
            self.fail(f"{text!r} is {'a file' if kind == 'file' else kind}, not a folder", param, ctx)
        return text


INPUT_FOLDER = FolderPath(must_exist=True)
OUTPUT_FOLDER = FolderPath(output=True)


class ShardParam(click.ParamType):
    """``--shard K/N``, or ``auto`` (K and N read from the scheduler's variables, as the worker starts):
    a ``shard.Shard``."""

    name = "shard"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        from diag.run import shard

        if isinstance(value, shard.Shard):
            return value
        try:
            return shard.from_environ(os.environ) if value.strip() == "auto" else shard.parse(value)
        except shard.ShardError as exc:
            self.fail(str(exc).split(": ", 1)[-1] if value.strip() != "auto" else str(exc), param, ctx)


class Parsed(click.ParamType):
    """A value parsed by one parser where it enters: ``parse`` of ``module`` (imported on first use, so
    that no command pays for another's parser) gives a ``kind``; its ``error`` is click's one-line
    usage error; a value already parsed passes as it is."""

    def __init__(self, name: str, module: str, parse: str, kind: str, error: str) -> None:
        self.name, self.module, self.parse, self.kind, self.error = name, module, parse, kind, error

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        found = importlib.import_module(self.module)

        def named(path: str) -> Any:
            return functools.reduce(getattr, path.split("."), found)

        if isinstance(value, named(self.kind)):
            return value
        try:
            return named(self.parse)(value)
        except named(self.error) as exc:
            self.fail(str(exc), param, ctx)


class EveryParam(click.ParamType):
    """Days between a backfill's builds (1d, 7d, 2w): a number of days."""

    name = "every"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        from diag import backfill

        if isinstance(value, int):
            return value
        try:
            return backfill.parse_every(value)
        except backfill.BackfillError as exc:
            self.fail(str(exc), param, ctx)


SHARD = ShardParam()
# a --torch value: a ``build.Spec`` (whose ``text`` names the environment from here on)
TORCH_SPEC = Parsed("spec", "diag.build", "Spec.parse", "Spec", "BuildError")
SIGNAL = Parsed("signal", "diag.signal", "parse", "Signal", "SignalError")  # a bisect's --on
# a backfill's end: a date (2023-06-01) or a dated nightly (2.1.0.dev20230601)
DAY = Parsed("day", "diag.backfill", "parse_end", "End", "BackfillError")
EVERY = EveryParam()
