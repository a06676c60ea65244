"""``diag plan``, and a part of the matrix read as the command line reads ``diag run``'s arguments.

The matrix itself (parts, units, plans) is the orchestrator's: diag/run/matrix.py. What is here parses
a part's words with ``diag run``'s own parser, so that a matrix file, a saved plan and ``--part``
refuse what the command line refuses, with the same words.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any, Iterable, Optional

import click

from diag.cli import params
from diag.cli.checks import refuse_timing_options_without_timing
from diag.cli.common import cli, configs_of, fail, json_option, pop_env_options, progress
from diag.run import matrix, shard
from diag.run.matrix import Part

# Options of diag run that belong to the invocation, not to a part of the matrix.
NOT_IN_A_PART = ("--db", "--json", "--shard", "--matrix", "--plan", "--history")


def part_of(index: int, args: Iterable[str], params: dict[str, Any]) -> Part:
    """A part from ``diag run``'s parsed parameters."""
    configs = configs_of(params)
    if not params["case_values"]:
        raise click.UsageError("Missing option '--case'.")
    return Part(
        index,
        without_torch(args),
        tuple(params["case_values"]),
        tuple(params["torch_specs"]),
        params["env_options"] if "env_options" in params else pop_env_options(dict(params)),
        configs,
        params["timing"],
        params["repeat"],
        params["timeout_s"],
        params["jobs"],
    )


def without_torch(args: Iterable[str]) -> tuple[str, ...]:
    """A part's words but its torch specs (``--torch X``, ``--torch=X``), which it holds as values."""
    found: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--torch":
            next(words, None)
        elif not word.startswith("--torch="):
            found.append(word)
    return tuple(found)


def parse_part(index: int, args: list[str], source: str) -> Part:
    """A part from its ``diag run`` arguments, checked as the command line checks them."""
    for arg in args:
        option = arg.split("=", 1)[0]
        if option in NOT_IN_A_PART:
            raise fail(f"{source}: part {index} gives {option}, an option of the whole invocation, not of a part")
    command = cli.get_command(None, "run")
    assert command is not None  # registered by diag/cli/running.py, which imports this module
    try:
        with command.make_context("diag run", list(args), resilient_parsing=False) as ctx:
            refuse_timing_options_without_timing(ctx)
            return part_of(index, args, ctx.params)
    except click.ClickException as exc:
        raise fail(f"{source}: part {index} ({shlex.join(args)}): {exc.format_message()}") from exc


def read_matrix(path: str) -> list[Part]:
    """The parts of a matrix file (``matrix.read_matrix``), each parsed as ``diag run`` parses it."""
    return matrix.read_matrix(path, parse_part)


def read_plan(path: str, wanted: shard.Shard) -> tuple[list[Part], set[str]]:
    """The parts of a saved plan and worker ``wanted``'s units (``matrix.read_plan``)."""
    return matrix.read_plan(path, wanted, parse_part, progress)


@cli.command("plan")
@click.option(
    "--matrix",
    "matrix_path",
    type=params.INPUT_FILE,
    default=None,
    help='Matrix file (TOML): [[part]] tables, each with run = "<diag run arguments>".',
)
@click.option(
    "--part",
    "part_args",
    multiple=True,
    type=params.RUN_ARGS,
    metavar="'RUN ARGS'",
    help="A part on the command line: the arguments of one diag run, quoted. Repeatable; adds to --matrix.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, shard.MAX_SHARDS),
    required=True,
    help=f"Number of workers, 1 to {shard.MAX_SHARDS} (the most jobs a GitHub Actions matrix holds).",
)
@click.option(
    "--history",
    "history_path",
    type=params.DB_FILE,
    default=None,
    help="A diag DB whose recorded run durations cost the rows (default: estimates, docs/scale-out.md).",
)
@click.option(
    "--out",
    "out_path",
    type=params.OUTPUT_FILE,
    default=None,
    help="Write the plan here, for diag run --plan FILE --shard K/N.",
)
@click.option(
    "--github-output",
    "output_name",
    default=None,
    metavar="NAME",
    help="Also write NAME=<the --json matrix> to the file $GITHUB_OUTPUT names (a GitHub Actions step output).",
)
@json_option
def plan_command(
    matrix_path: Optional[str],
    part_args: tuple[list[str], ...],
    shards: int,
    history_path: Optional[str],
    out_path: Optional[str],
    output_name: Optional[str],
    as_json: bool,
) -> None:
    """Split a matrix into shards balanced by estimated cost.

    Prints one line per shard (its runs and estimated seconds); --json prints the GitHub Actions
    matrix ({"include": [{"shard": "K/N", ...}]}) for fromJSON. With --out, workers run
    `diag run --plan FILE --shard K/N`, and nightly specs are pinned to today's dated build
    first, so that every worker runs the same one. Workers may instead plan the same matrix
    themselves (`diag run ... --shard K/N`): the same inputs give the same shares everywhere.
    """
    parts = read_matrix(matrix_path) if matrix_path else []
    parts += [parse_part(len(parts) + i, args, "--part") for i, args in enumerate(part_args)]
    if not parts:
        raise click.UsageError("give --matrix FILE or --part 'RUN ARGS'")
    if out_path:
        parts = matrix.pin_nightlies(parts, progress)
    planned = matrix.plan(parts, shards, history_path, progress)
    if out_path:
        Path(out_path).write_text(json.dumps(matrix.plan_document(parts, planned), indent=1) + "\n", encoding="utf-8")
    jobs = json.dumps(matrix.actions_matrix(planned))
    if output_name:
        target = os.environ.get("GITHUB_OUTPUT")
        if not target:
            raise fail("--github-output: $GITHUB_OUTPUT is not set (it is, inside a GitHub Actions step)")
        with open(target, "a", encoding="utf-8") as out:
            out.write(f"{output_name}={jobs}\n")
    if as_json:
        click.echo(jobs)
        return
    total = sum(unit.runs for share in planned.shares for unit in share)
    for index, (share, load) in enumerate(zip(planned.shares, planned.loads())):
        click.echo(f"shard {index}/{shards}: {sum(u.runs for u in share)} runs, about {load:.0f} s")
    spread = shard.spread(planned)
    progress(f"{total} runs in {shards} shards; largest shard {spread:.2f}x the mean" if spread else f"{total} runs")
