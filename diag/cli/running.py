"""Commands that run cases: run (bisect is in bisecting.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

import click

from diag import envs, stopping, store, text
from diag.build import Spec
from diag.cli import params, sharding
from diag.cli.checks import refuse_timing_options_without_timing
from diag.cli.common import (
    cli,
    config_options,
    count,
    db_option,
    env_options,
    fail,
    json_option,
    open_store,
    progress,
    public_run,
    run_preflight,
    timeout_option,
)
from diag.config import artifacts_root
from diag.run import catalog, matrix, preflight, runner, shard
from diag.run.matrix import Part
from diag.store.typed import StoredRun


def resolve_envs(specs: tuple[Spec, ...], options: envs.Options) -> tuple[dict[Spec, envs.TorchEnv], list[str]]:
    """Environments for ``specs``, by spec; a spec that fails is reported and skipped, the others still run."""
    if options.python is not None:
        # Every spec is checked against the interpreter before anything is installed.
        version = envs.python_version(envs.find_python(options.python))
        for spec in specs:
            envs.check_compile_support(spec, version)
    resolved, failures = {}, []
    for spec in specs:
        try:
            resolved[spec] = envs.resolve(spec, options, log=progress)
        except envs.EnvError as exc:
            failures.append(str(exc))
            if len(specs) == 1:
                raise fail(str(exc)) from exc
            click.echo(f"Error: {text.safe(str(exc))}", err=True)
    return resolved, failures


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
@json_option
@click.pass_context
def run_command(
    ctx: click.Context,
    wanted: Optional[shard.Shard],
    matrix_path: Optional[str],
    plan_path: Optional[str],
    history_path: Optional[str],
    db_path: str,
    as_json: bool,
    **params: Any,
) -> None:
    """Diagnose cases under torch.compile and record the runs.

    Each case x torch x config is one probe process, which imports torch once and
    forks two passes: first the timing pass (logging off, a cold compile), then the
    diagnosis pass (dynamo/aot/inductor DEBUG logs captured). Where a torch
    environment has several runs, each is forked from one long-lived parent that
    imported torch for all of them (DIAG_PROBE_PARENT=0: a fresh process each).
    Prints one line per run. Exits 0 when every run was recorded, whatever the statuses; compile
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
    execute(parts, keys, db_path, as_json)


def execute(parts: list[Part], keys: Optional[set[str]], db_path: str, as_json: bool) -> None:
    """Run the parts (the units of ``keys`` only, where sharded) into the DB, one line per run;
    exit 1 where a torch spec could not be provisioned (the others still ran)."""
    run_preflight(preflight.check_database, db_path)
    recorded: list[StoredRun] = []
    failed = False
    for part in parts:
        failed |= run_part(part, keys, db_path, as_json, recorded)
    if as_json:
        click.echo(json.dumps([public_run(row) for row in recorded], indent=2, default=str))
    if recorded:
        progress(
            f"recorded {len(recorded)} run{'' if len(recorded) == 1 else 's'} in {db_path}, run directories in "
            f"{artifacts_root(Path(db_path).resolve())}/; next: diag show {recorded[-1]['id']} --db {db_path}, "
            f"diag report --db {db_path}"
        )
    if failed:
        sys.exit(1)


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


def run_part(part: Part, keys: Optional[set[str]], db_path: str, as_json: bool, recorded: list[StoredRun]) -> bool:
    """Run the part's jobs (those of ``keys``, where sharded) into the DB; True where a torch spec failed."""
    run_preflight(preflight.check_configs, part.configs)
    specs = part.torch_specs if part.refs is None else tuple(dict.fromkeys(s for _, s, _, _ in part.runs_of(keys)))
    if not specs:
        return False
    environments, env_failures = resolve_envs(specs, part.env_options)
    if part.refs is None:  # hf:all, unsharded: every architecture of the environments' transformers
        part.case_values = tuple(value for value in part.case_values if value != catalog.HF_ALL)
        matrix.resolve_cases([part], progress)
        assert part.refs is not None  # resolved just now
        names = {ref.name for ref in part.refs}
        part.refs += [
            catalog.hf_case(model_type)
            for model_type in matrix.hf_architectures(list(environments.values()), progress)
            if catalog.hf_case(model_type).name not in names
        ]
    run_preflight(preflight.check_architectures, list(environments.values()), part.refs)
    for env in environments.values():
        run_preflight(preflight.check_environment, env, part.refs, part.configs)
    db = open_store(db_path, create=True)
    jobs_list = [
        runner.Job(environments[spec], case, config)
        for _, spec, case, config in part.runs_of(keys)
        if spec in environments
    ]
    heartbeat = runner.Heartbeat(progress)

    def on_start(index: int, job: runner.Job) -> None:
        heartbeat.started(index, f"[{index}/{len(jobs_list)}] {text.safe(job.label())}")
        progress(f"[{index}/{len(jobs_list)}] running {text.safe(job.label())}")

    def on_done(index: int, job: runner.Job, record: store.RunRecord) -> None:
        heartbeat.finished(index)
        try:
            run_id = store.save_run(db, record)
        except store.StoreError as exc:
            shutil.rmtree(record.run["artifacts_dir"], ignore_errors=True)
            raise fail(f"cannot store run {index}: {exc}; {len(recorded)} runs stored before it") from exc
        row = store.get_run(db, run_id)
        assert row is not None  # stored just now, in this process
        recorded.append(row)
        if not as_json:
            click.echo(text.summary_line(row))

    try:
        with heartbeat:
            runner.run_matrix(jobs_list, Path(db_path), part.timeout_s, part.timing, part.jobs, on_start, on_done)
    except KeyboardInterrupt as exc:
        stop = stopping.of(exc)
        progress(f"interrupted{stop.by}: {len(recorded)} of {len(jobs_list)} runs recorded in {db_path}")
        sys.exit(stop.exit_code)
    except runner.EnvironmentFault as exc:
        raise fail(f"{exc}; {len(recorded)} runs stored before it, nothing stored for it") from exc
    return bool(env_failures)
