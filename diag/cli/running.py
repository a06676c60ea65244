"""Commands that run cases: run and bisect."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import click

from diag import catalog, envs, preflight, runner, stopping, store, text, wheels
from diag.cli.common import (
    build_configs,
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
    sweep_configs,
)
from diag.config import DEFAULT_TIMEOUT_S, artifacts_root


def hf_architectures(environments: list[envs.TorchEnv]) -> list[str]:
    """The model types ``hf:all`` stands for: every decoder-only causal-LM architecture of the
    transformers in any of the environments (asked in each, where its transformers is installed)."""
    found: set[str] = set()
    for env in environments:
        try:
            done = subprocess.run(
                env.probe_command("architectures"), capture_output=True, text=True, env=env.probe_environ(), timeout=600
            )
            listed = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            listed = None
        if listed is None:
            raise fail(f"hf:all: cannot list transformers' architectures in {env.python} (is transformers installed?)")
        found.update(listed)
    progress(f"hf:all: {len(found)} decoder-only causal-LM architectures")
    return sorted(found)


def resolve_envs(specs: tuple[str, ...], options: envs.Options) -> tuple[list[envs.TorchEnv], list[str]]:
    """Environments for ``specs``; a spec that fails is reported and skipped, the others still run."""
    try:
        for spec in specs:
            envs.parse_spec(spec)  # refuses a malformed spec before anything runs
        if options.python is not None:
            # Every spec is checked against the interpreter before anything is installed.
            version = envs.python_version(envs.find_python(options.python))
            for spec in specs:
                envs.check_compile_support(spec, version)
    except envs.EnvError as exc:
        raise fail(str(exc)) from exc
    resolved, failures = [], []
    for spec in specs:
        try:
            resolved.append(envs.resolve(spec, options, log=progress))
        except envs.EnvError as exc:
            failures.append(str(exc))
            if len(specs) == 1:
                raise fail(str(exc)) from exc
            click.echo(f"Error: {text.safe(str(exc))}", err=True)
    return resolved, failures


@cli.command("run")
@click.option(
    "--case",
    "case_values",
    multiple=True,
    required=True,
    help="Case name, 'all', or a path to a case file. Repeatable.",
)
@click.option(
    "--torch",
    "torch_specs",
    multiple=True,
    default=("current",),
    show_default=True,
    help="Torch environment: current, a release (2.13.0), a nightly (2.1.0.dev20230621, 2.1.0.dev, "
    "nightly) or a path to a python. Repeatable: runs the matrix.",
)
@env_options
@config_options
@db_option
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds each pass (timing, diagnosis) may run.",
)
@click.option("--jobs", type=count(), default=1, show_default=True, help="Probes run in parallel.")
@click.option(
    "--timing/--no-timing",
    default=True,
    show_default=True,
    help="Run the timing pass (logging off, a cold compile) before the diagnosis.",
)
@click.option(
    "--repeat",
    type=count(),
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
@json_option
def run_command(
    case_values: tuple[str, ...],
    torch_specs: tuple[str, ...],
    env_options: envs.Options,
    db_path: str,
    timeout_s: float,
    jobs: int,
    timing: bool,
    repeat: int,
    sweep: Optional[str],
    sweep_values: Optional[str],
    as_json: bool,
    **config: Any,
) -> None:
    """Diagnose cases under torch.compile and record the runs.

    Each case x torch x config is one probe process, which imports torch once and
    forks two passes: first the timing pass (logging off, a cold compile), then the
    diagnosis pass (dynamo/aot/inductor DEBUG logs captured). Prints one line per
    run. Exits 0 when every run was recorded, whatever the statuses; compile
    failures are findings, not tool errors (see diag statuses).

    Each run's directory (spec, records, logs, trace, tlparse and depyf output) goes
    next to the DB: for diag.db, in diag.runs/<run uid>/.
    """
    configs = sweep_configs(build_configs(**config), sweep, sweep_values)
    if not timing and any(c.profile for c in configs):
        raise fail("--profile profiles after the timing pass: it cannot be combined with --no-timing")
    every_architecture = catalog.HF_ALL in case_values
    try:
        refs = catalog.resolve([value for value in case_values if value != catalog.HF_ALL])
    except catalog.CatalogError as exc:
        raise fail(str(exc)) from exc
    run_preflight(preflight.check_configs, configs)
    run_preflight(preflight.check_database, db_path)
    environments, env_failures = resolve_envs(torch_specs, env_options)
    if every_architecture:
        refs += [
            catalog.hf_case(model_type)
            for model_type in hf_architectures(environments)
            if catalog.hf_case(model_type).name not in {ref.name for ref in refs}
        ]
    for env in environments:
        run_preflight(preflight.check_environment, env, refs, configs)
    db = open_store(db_path, create=True)
    jobs_list = runner.plan(environments, refs, configs, repeat)
    recorded: list[dict[str, Any]] = []
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
        recorded.append(row)
        if not as_json:
            click.echo(text.summary_line(row))

    try:
        with heartbeat:
            runner.run_matrix(jobs_list, Path(db_path), timeout_s, timing, jobs, on_start, on_done)
    except KeyboardInterrupt as exc:
        stop = stopping.of(exc)
        progress(f"interrupted{stop.by}: {len(recorded)} of {len(jobs_list)} runs recorded in {db_path}")
        sys.exit(stop.exit_code)
    except runner.EnvironmentFault as exc:
        raise fail(f"{exc}; {len(recorded)} runs stored before it, nothing stored for it") from exc
    if as_json:
        click.echo(json.dumps([public_run(row) for row in recorded], indent=2, default=str))
    if recorded:
        progress(
            f"recorded {len(recorded)} run{'' if len(recorded) == 1 else 's'} in {db_path}, run directories in "
            f"{artifacts_root(Path(db_path).resolve())}/; next: diag show {recorded[-1]['id']} --db {db_path}, "
            f"diag report --db {db_path}"
        )
    if env_failures:
        sys.exit(1)


@cli.command("bisect")
@click.option("--case", "case_value", required=True, help="Case name or path to a case file.")
@click.option("--good", required=True, help="A torch spec that behaves (e.g. 2.1.0.dev20230601).")
@click.option("--bad", required=True, help="A later torch spec that does not.")
@click.option(
    "--candidates",
    "candidates_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="File of torch specs to search, one per line (default: the versions on --index).",
)
@click.option(
    "--index",
    "listing_index",
    default=None,
    help="Simple index whose torch builds are the candidates (default: the PyTorch nightly index "
    "for --variant). Installs still use --index-url, else the installer's defaults.",
)
@env_options
@config_options
@db_option
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True)
@json_option
def bisect_command(
    case_value: str,
    good: str,
    bad: str,
    candidates_file: Optional[str],
    listing_index: Optional[str],
    env_options: envs.Options,
    db_path: str,
    timeout_s: float,
    as_json: bool,
    **config: Any,
) -> None:
    """Binary-search the builds between --good and --bad for the first one whose status differs from --good's.

    Builds are provisioned as needed and runs already in the DB are reused. A build
    that fails to install is skipped and reported. Prints the first bad build, its
    nightly date and git commit, and the commit range since the last good build.
    """
    from diag import bisect

    config["fullgraph"] = True if config["fullgraph"] is None else config["fullgraph"]
    run_config = build_configs(**config)[0]
    try:
        refs = catalog.resolve([case_value])
        bisect.check_ends(good, bad)
    except (catalog.CatalogError, envs.EnvError) as exc:
        raise fail(str(exc)) from exc
    run_preflight(preflight.check_configs, [run_config])
    run_preflight(preflight.check_database, db_path)
    db = open_store(db_path, create=True)
    recorded = {b["version"].split("+", 1)[0]: b for b in store.builds(db) if b.get("wheel_url")}
    try:
        found = bisect.candidates(
            good,
            bad,
            candidates_file,
            listing_index,
            env_options.variant,
            stored=[b["version"] for b in store.builds(db)],
            request=env_options.request(good),
        )
    except (catalog.CatalogError, envs.EnvError, wheels.WheelError) as exc:
        raise fail(str(exc)) from exc
    for note in found.notes:
        progress(text.safe(note))
    if found.missing_dates:
        progress(
            f"no nightly at its direct URL for {len(found.missing_dates)} dates in range: "
            f"{', '.join(found.missing_dates[:10])}{' ...' if len(found.missing_dates) > 10 else ''}"
        )

    def provision(spec: str) -> envs.TorchEnv:
        build = recorded.get(spec)
        if build is not None:
            # a build diag ran before: the same wheel again, checked by its sha256
            return envs.resolve(build["wheel_url"], env_options, log=progress, sha256=build["wheel_sha256"])
        return envs.resolve(spec, env_options, log=progress)

    try:
        summary = bisect.bisect(
            db,
            Path(db_path),
            refs[0],
            run_config,
            found.specs,
            provision,
            timeout_s,
            log=lambda message: progress(text.safe(message)),
        )
    except (bisect.BisectError, runner.EnvironmentFault, store.StoreError) as exc:
        raise fail(str(exc)) from exc
    summary["missing_dates"] = found.missing_dates
    summary["sources"] = {spec: found.sources.get(spec, []) for spec in found.specs}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo("\n".join(text.bisect_lines(summary)))
