"""Commands that run cases: run (bisect is in bisecting.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import click

from diag import text
from diag.cli import params, sharding
from diag.cli.checks import refuse_timing_options_without_timing
from diag.cli.common import (
    cli,
    config_options,
    count,
    db_option,
    env_options,
    json_option,
    progress,
    public_run,
    timeout_option,
    verbose_option,
)
from diag.config import artifacts_root
from diag.run import catalog, matrix, shard
from diag.run import execute as executing
from diag.run.matrix import Part
from diag.store.typed import StoredRun

# A matrix run this many times over is months of runs: a larger --repeat is a mistyped number, and
# planning its cells alone would take as long.
MAX_REPEAT = 10_000


@cli.command("run")
@click.option(
    "--case",
    "case_values",
    multiple=True,
    help="Case name, 'all', hf:<model_type>, hf:all, or a path to a case file. Repeatable. "
    "Required unless --matrix or --plan gives the matrix.",
)
@click.option(
    "--torch",
    "torch_specs",
    type=params.TORCH_SPEC,
    multiple=True,
    default=("current",),
    show_default=True,
    help="Torch environment: current, a release (2.13.0), a nightly (2.1.0.dev20230621, 2.1.0.dev, "
    "nightly) or a path to a python. Repeatable: runs the matrix.",
)
@env_options
@config_options
@db_option
@timeout_option("Seconds each pass (timing, diagnosis) may run.")
@click.option("--jobs", type=count(), default=1, show_default=True, help="Probes run in parallel.")
@click.option(
    "--timing/--no-timing",
    default=True,
    show_default=True,
    help="Run the timing pass (logging off, a cold compile) before the diagnosis.",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, MAX_REPEAT),
    default=1,
    show_default=True,
    help="Run the whole matrix this many times over. diag check pools a row's runs of one "
    "invocation, so that latency is judged over runs spread in time, not one run.",
)
@click.option(
    "--sweep",
    type=click.Choice(["batch", "length"]),
    default=None,
    help="Run every config over a range of batch sizes or prompt lengths (see --sweep-values).",
)
@click.option(
    "--sweep-values",
    default=None,
    metavar="N,N,...",
    help="Values for --sweep (default: batch 1,2,4,8; length 16,64,256).",
)
@click.option(
    "--shard",
    "wanted",
    type=params.SHARD,
    default=None,
    metavar="K/N|auto",
    help="Run share K (counted from 0) of N of the whole matrix, balanced by cost; every worker "
    "plans the same shares. auto reads K and N from Slurm, Kubernetes or Buildkite (docs/scale-out.md).",
)
@click.option(
    "--matrix",
    "matrix_path",
    type=params.INPUT_FILE,
    default=None,
    help="Matrix file (TOML, [[part]] tables of diag run arguments) to shard instead of this command's own.",
)
@click.option(
    "--plan",
    "plan_path",
    type=params.INPUT_FILE,
    default=None,
    help="A plan written by diag plan --out: run its share --shard K/N.",
)
@click.option(
    "--history",
    "history_path",
    type=params.DB_FILE,
    default=None,
    help="With --shard: a diag DB whose recorded durations cost the rows (the same file on every worker).",
)
@verbose_option
@json_option
@click.pass_context
def run_command(
    ctx: click.Context,
    wanted: Optional[shard.Shard],
    matrix_path: Optional[str],
    plan_path: Optional[str],
    history_path: Optional[str],
    db_path: str,
    verbose: bool,
    as_json: bool,
    **params: Any,
) -> None:
    """Diagnose cases under torch.compile and record the runs.

    Each case x torch x config is one probe process, which imports torch once and
    forks two passes: first the timing pass (logging off, a cold compile), then the
    diagnosis pass (dynamo/aot/inductor DEBUG logs captured). Where a torch
    environment has several runs, each is forked from one long-lived parent that
    imported torch for all of them (DIAG_PROBE_PARENT=0: a fresh process each).
    Prints one line per run in 120 columns under a header (--verbose: every figure and the whole
    reason a timing is not compared). Exits 0 when every run was recorded, whatever the statuses; compile
    failures are findings, not tool errors (see diag statuses).

    Each run's directory (spec, records, logs, trace, tlparse and depyf output) goes
    next to the DB: for diag.db, in diag.runs/<run uid>/.
    """
    refuse_timing_options_without_timing(ctx)
    if wanted is None:
        for name in ("matrix", "plan", "history"):
            if ctx.params[f"{name}_path"] is not None:
                raise click.UsageError(f"--{name} shards a matrix: give --shard K/N too (0/1 runs all of it)")
        part = sharding.part_of(0, [], params)
        if catalog.HF_ALL not in part.case_values:  # hf:all: expanded in the environments, once provisioned
            matrix.resolve_cases([part], progress)
        parts, keys = [part], None
    else:
        parts, keys = sharded_parts(wanted, matrix_path, plan_path, history_path, params)
    execute(parts, keys, db_path, as_json, verbose)


def execute(parts: list[Part], keys: Optional[set[str]], db_path: str, as_json: bool, verbose: bool = False) -> None:
    """Run the parts (run/execute.py), one line per run (under a header, the first time); exit 1
    where a torch spec could not be provisioned (the others still ran)."""
    lines = 0

    def stored(row: StoredRun) -> None:
        nonlocal lines
        if not as_json:
            if not lines and not verbose:
                click.echo(text.RUN_HEADER)
            click.echo(text.summary_line(row, verbose))
            lines += 1

    try:
        done = executing.execute(parts, keys, db_path, stored, said)
    except executing.Interrupted as exc:
        sys.exit(exc.exit_code)
    recorded = done.recorded
    if as_json:
        click.echo(json.dumps([public_run(row) for row in recorded], indent=2, default=str))
    if recorded:
        progress(
            f"recorded {len(recorded)} run{'' if len(recorded) == 1 else 's'} in {db_path}, run directories in "
            f"{artifacts_root(Path(db_path).resolve())}/; next: diag show {recorded[-1]['id']} --db {db_path}, "
            f"diag report --db {db_path}"
        )
    if done.failed:
        sys.exit(1)


def said(message: str) -> None:
    """What the executor says, as the terminal shows stored text (``text.safe``)."""
    progress(text.safe(message))


def sharded_parts(
    wanted: shard.Shard, matrix_path: Optional[str], plan_path: Optional[str], history_path: Optional[str], params: dict
) -> tuple[list[Part], set[str]]:
    """This worker's parts and the keys of its units: from a saved plan, or planned here as every
    worker plans it. Bad input fails before anything is written."""
    if sum(value is not None for value in (matrix_path, plan_path)) + bool(params["case_values"]) > 1:
        raise click.UsageError("give the matrix one way: --case (this command's own), --matrix FILE or --plan FILE")
    if plan_path is not None:
        parts, keys = sharding.read_plan(plan_path, wanted)
        announce(parts, keys, wanted)
    else:
        parts = sharding.read_matrix(matrix_path) if matrix_path else [sharding.part_of(0, [], params)]
        keys = share_of(parts, wanted, history_path)
    return parts, keys


def share_of(parts: list[Part], wanted: shard.Shard, history_path: Optional[str]) -> set[str]:
    """The keys of this worker's units, planned here as every worker plans them."""
    keys = matrix.plan(parts, wanted.count, history_path, progress).share_keys(wanted.index)
    announce(parts, keys, wanted)
    return keys


def announce(parts: list[Part], keys: set[str], wanted: shard.Shard) -> None:
    runs = sum(1 for part in parts for _ in part.runs_of(keys))
    progress(f"shard {wanted}: {runs} runs of the matrix")
