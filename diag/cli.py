"""The diag command line. Commands stay thin: the work lives in the modules they call."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import re
import shutil
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

import click

from diag import __version__, artifacts, catalog, envs, gate, preflight, regress, runner, store, text, wheels
from diag import row as rows
from diag.config import DEFAULT_DB, DEFAULT_TIMEOUT_S, artifacts_root
from diag.probe.session import DTYPES, MODES, Config
from diag.probe.statuses import FINDING_KINDS, STATUSES

BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")
MAX_BATCH = 4096
MAX_POSITIONS = 1 << 20  # any model's; each config is checked against its own model before running


def _fail(message: str) -> click.ClickException:
    return click.ClickException(message.splitlines()[0] if message else "failed")


def db_option(fn: Callable) -> Callable:
    return click.option("--db", "db_path", default=DEFAULT_DB, show_default=True,
                        type=click.Path(dir_okay=False), help="SQLite database file.")(fn)


def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(fn)


def config_options(fn: Callable) -> Callable:
    """The compile and workload options every command that runs a case shares."""
    options = [
        click.option("--fullgraph/--no-fullgraph", default=None,
                     help="Compile with fullgraph=True or False. Default: both, as two runs."),
        click.option("--backend", type=click.Choice(BACKENDS), default="inductor", show_default=True,
                     help="torch.compile backend."),
        click.option("--mode", type=click.Choice(MODES), default=None, help="torch.compile mode."),
        click.option("--dynamic", type=click.Choice(["auto", "true", "false"]), default="auto", show_default=True,
                     help="torch.compile dynamic= (auto passes None)."),
        click.option("--batch-size", type=click.IntRange(1, MAX_BATCH), default=1, show_default=True),
        click.option("--prompt-length", type=click.IntRange(1, MAX_POSITIONS), default=16, show_default=True,
                     help="Prompt tokens; with --new-tokens, within the model's positions."),
        click.option("--new-tokens", type=click.IntRange(2, MAX_POSITIONS), default=16, show_default=True,
                     help="Tokens to generate (the prefill emits the first)."),
        click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="float32", show_default=True),
        click.option("--device", default="cpu", show_default=True,
                     help="cpu, cuda or cuda:N (checked in each torch environment before any run)."),
        click.option("--model", "model_path", type=click.Path(exists=True, file_okay=False), default=None,
                     help="Local transformers Llama checkpoint; default: a small random Llama."),
        click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
                     help="Seed for weights and prompt."),
        click.option("--repeats", type=click.IntRange(1, 100_000), default=5, show_default=True,
                     help="Timed generations per mode in the timing pass."),
        click.option("--timing-seconds", type=click.FloatRange(0, 86_400), default=1.0, show_default=True,
                     help="Timed generations per mode go on at least this long (after --repeats), so that "
                          "the samples span the host's own changes of speed."),
        click.option("--threads", type=click.IntRange(1, 4096), default=None,
                     help="torch intra-op threads in the probes (default: torch's own choice). On a shared "
                          "machine, 1 keeps other load from skewing timings."),
        click.option("--profile/--no-profile", default=False, show_default=True,
                     help="After the timing pass, one eager and one compiled generation under torch.profiler: "
                          "a gzipped Chrome trace in the run directory (open it in Perfetto) and the top ops "
                          "by self time on the run page. Needs the timing pass."),
        click.option("--reuse-compiled/--no-reuse-compiled", default=True, show_default=True,
                     help="Let the diagnosis pass take the timing pass's compiled graphs from inductor's cache "
                          "where the timing pass lowered every graph and torch logged no warning or exception "
                          "meanwhile (dynamo still traces again with every log on). --no-reuse-compiled lowers "
                          "every graph again, so that DEBUG records of a lowering that succeeded are in the log."),
        click.option("--depyf/--no-depyf", default=False, show_default=True,
                     help="Where depyf is installed, dump dynamo's transformed bytecode, decompiled, into the run "
                          "directory. Its hooks keep AOTAutograd from reusing the timing pass's graphs."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def build_configs(fullgraph: Optional[bool], backend: str, mode: Optional[str], dynamic: str, batch_size: int,
                  prompt_length: int, new_tokens: int, dtype: str, device: str, model_path: Optional[str],
                  seed: int, repeats: int, timing_seconds: float, threads: Optional[int],
                  profile: bool = False, reuse_compiled: bool = True, depyf: bool = False) -> list[Config]:
    if not re.fullmatch(r"cpu|cuda(:\d{1,4})?", device):
        raise click.BadParameter(f"{device!r} is not cpu, cuda or cuda:N", param_hint="--device")
    fullgraphs = [True, False] if fullgraph is None else [fullgraph]
    return [Config(backend=backend, fullgraph=fg, dynamic={"auto": None, "true": True, "false": False}[dynamic],
                   mode=mode, device=device, dtype=DTYPES[dtype], batch_size=batch_size,
                   prompt_length=prompt_length, new_tokens=new_tokens,
                   model=str(Path(model_path).resolve()) if model_path else None, seed=seed, repeats=repeats,
                   timing_seconds=timing_seconds, threads=threads, profile=profile,
                   reuse_compiled=reuse_compiled, depyf=depyf)
            for fg in fullgraphs]


SWEEP_DEFAULTS = {"batch": "1,2,4,8", "length": "16,64,256"}


def sweep_configs(configs: list[Config], sweep: Optional[str], values: Optional[str]) -> list[Config]:
    """Each config repeated over the swept batch sizes or prompt lengths."""
    if sweep is None:
        if values is not None:
            raise click.BadParameter("needs --sweep batch|length", param_hint="--sweep-values")
        return configs
    try:
        numbers = [int(v) for v in (values or SWEEP_DEFAULTS[sweep]).split(",")]
    except ValueError:
        raise click.BadParameter(f"{values!r} is not a comma-separated list of integers",
                                 param_hint="--sweep-values") from None
    limit = MAX_BATCH if sweep == "batch" else MAX_POSITIONS
    if not numbers or min(numbers) < 1 or max(numbers) > limit:
        raise click.BadParameter(f"values must be integers from 1 to {limit}", param_hint="--sweep-values")
    field = "batch_size" if sweep == "batch" else "prompt_length"
    return [replace(config, **{field: number}) for config in configs for number in numbers]


def open_store(db_path: str, create: bool = False, readonly: bool = False) -> Any:
    try:
        return store.open_db(db_path, create=create, readonly=readonly)
    except store.StoreError as exc:
        raise _fail(str(exc)) from exc


def hf_architectures(environments: list[envs.TorchEnv]) -> list[str]:
    """The model types ``hf:all`` stands for: every decoder-only causal-LM architecture of the
    transformers in any of the environments (asked in each, where its transformers is installed)."""
    found: set[str] = set()
    for env in environments:
        try:
            done = subprocess.run(env.probe_command("architectures"), capture_output=True, text=True,
                                  env=env.probe_environ(), timeout=600)
            listed = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            listed = None
        if listed is None:
            raise _fail(f"hf:all: cannot list transformers' architectures in {env.python} (is transformers installed?)")
        found.update(listed)
    _progress(f"hf:all: {len(found)} decoder-only causal-LM architectures")
    return sorted(found)


def read_store(db_path: str) -> Any:
    """An existing DB, opened for reading only: a read-only file or a shard is never written."""
    return open_store(db_path, readonly=True)


def _preflight(check: Callable[..., None], *args: Any) -> None:
    try:
        check(*args)
    except (preflight.PreflightError, store.StoreError) as exc:
        raise _fail(str(exc)) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="diag")
def cli() -> None:
    """Compile diagnostics for torch.compile'd LLM decode steps.

    Runs generation-step variants under torch.compile, records graph breaks,
    recompiles, swallowed errors and timings per torch build in SQLite.
    """


@cli.command("statuses")
@json_option
def statuses_command(as_json: bool) -> None:
    """List the statuses a run can have (exactly one each), whether the row works, and what each means."""
    if as_json:
        click.echo(json.dumps([{"name": s.name, "works": s.works, "severity": s.severity, "meaning": s.meaning}
                               for s in STATUSES], indent=2))
        return
    click.echo(text.statuses_table())


@cli.command("cases")
@json_option
def cases_command(as_json: bool) -> None:
    """List the built-in cases with a one-line description each.

    Beside them: hf:<model_type> (e.g. hf:llama) runs a tiny random model of any transformers
    architecture through generate with a static cache and a compiled forward; hf:all runs every
    decoder-only causal-LM architecture of the target's transformers.
    """
    refs = catalog.builtin_cases()
    if as_json:
        click.echo(json.dumps([{"name": r.name, "description": r.description, "path": r.path} for r in refs],
                              indent=2))
        return
    width = max((len(r.name) for r in refs), default=0)
    for ref in refs:
        click.echo(f"{ref.name:<{width}}  {ref.description}")
    click.echo(f"{'hf:TYPE':<{width}}  a tiny random transformers model of model_type TYPE (hf:llama, hf:gpt2, ...): "
               "generate, static cache, compiled forward; hf:all = every decoder-only causal-LM architecture")


def env_options(fn: Callable) -> Callable:
    """How provisioned torch environments are built (shared by run and env add)."""
    options = [
        click.option("--with", "extras", multiple=True, metavar="REQUIREMENT",
                     help="Extra requirement for provisioned environments, e.g. transformers==4.38.2. Repeatable."),
        click.option("--index-url", default=None,
                     help="Index for torch itself (default for nightly specs: the PyTorch nightly index)."),
        click.option("--variant", default="cpu", show_default=True,
                     help="Nightly index variant: cpu, cu121, cu124, ..."),
        click.option("--installer", type=click.Choice(["pip", "uv"]), default="pip", show_default=True),
        click.option("--python", "python", default=None, metavar="VERSION|PATH",
                     help="Interpreter for provisioned environments: a version (3.10), found on PATH, through "
                          "pyenv or uv, or a path. Default: diag's own. torch 2.0 needs 3.10 or older."),
        click.option("--find-links", "find_links", multiple=True, metavar="DIR",
                     type=click.Path(exists=True, file_okay=False),
                     help="A folder of torch wheels to look in before the index (also $DIAG_HOME/wheels). "
                          "Repeatable."),
    ]
    for option in reversed(options):
        fn = option(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["env_options"] = envs.Options(
            extras=tuple(kwargs.pop("extras")), index_url=kwargs.pop("index_url"), variant=kwargs.pop("variant"),
            installer=kwargs.pop("installer"), python=kwargs.pop("python"),
            find_links=tuple(kwargs.pop("find_links")))
        return fn(*args, **kwargs)

    return wrapper


def _progress(message: str) -> None:
    click.echo(message, err=True)


def resolve_envs(specs: tuple[str, ...], options: envs.Options) -> tuple[list[envs.TorchEnv], list[str]]:
    """Environments for ``specs``; a spec that fails is reported and skipped, the others still run."""
    try:
        for spec in specs:
            envs.parse_spec(spec).kind
        if options.python is not None:
            # Every spec is checked against the interpreter before anything is installed.
            version = envs.python_version(envs.find_python(options.python))
            for spec in specs:
                envs.check_compile_support(spec, version)
    except envs.EnvError as exc:
        raise _fail(str(exc)) from exc
    resolved, failures = [], []
    for spec in specs:
        try:
            resolved.append(envs.resolve(spec, options, log=_progress))
        except envs.EnvError as exc:
            failures.append(str(exc))
            if len(specs) == 1:
                raise _fail(str(exc)) from exc
            click.echo(f"Error: {text.safe(str(exc))}", err=True)
    return resolved, failures


@cli.command("run")
@click.option("--case", "case_values", multiple=True, required=True,
              help="Case name, 'all', or a path to a case file. Repeatable.")
@click.option("--torch", "torch_specs", multiple=True, default=("current",), show_default=True,
              help="Torch environment: current, a release (2.13.0), a nightly (2.1.0.dev20230621, 2.1.0.dev, "
                   "nightly) or a path to a python. Repeatable: runs the matrix.")
@env_options
@config_options
@db_option
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds each pass (timing, diagnosis) may run.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Probes run in parallel.")
@click.option("--timing/--no-timing", default=True, show_default=True,
              help="Run the timing pass (logging off, a cold compile) before the diagnosis.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run the whole matrix this many times over. diag check pools a row's runs of one "
                   "invocation, so that latency is judged over runs spread in time, not one run.")
@click.option("--sweep", type=click.Choice(["batch", "length"]), default=None,
              help="Run every config over a range of batch sizes or prompt lengths (see --sweep-values).")
@click.option("--sweep-values", default=None, metavar="N,N,...",
              help="Values for --sweep (default: batch 1,2,4,8; length 16,64,256).")
@json_option
def run_command(case_values: tuple[str, ...], torch_specs: tuple[str, ...], env_options: envs.Options,
                db_path: str, timeout_s: float, jobs: int, timing: bool, repeat: int, sweep: Optional[str], sweep_values: Optional[str],
                as_json: bool, **config: Any) -> None:
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
        raise _fail("--profile profiles after the timing pass: it cannot be combined with --no-timing")
    every_architecture = catalog.HF_ALL in case_values
    try:
        refs = catalog.resolve([value for value in case_values if value != catalog.HF_ALL])
    except catalog.CatalogError as exc:
        raise _fail(str(exc)) from exc
    _preflight(preflight.check_configs, configs)
    _preflight(preflight.check_database, db_path)
    environments, env_failures = resolve_envs(torch_specs, env_options)
    if every_architecture:
        refs += [catalog.hf_case(model_type) for model_type in hf_architectures(environments)
                 if catalog.hf_case(model_type).name not in {ref.name for ref in refs}]
    for env in environments:
        _preflight(preflight.check_environment, env, refs, configs)
    db = open_store(db_path, create=True)
    jobs_list = runner.plan(environments, refs, configs, repeat)
    recorded: list[dict[str, Any]] = []
    heartbeat = runner.Heartbeat(_progress)

    def on_start(index: int, job: runner.Job) -> None:
        heartbeat.started(index, f"[{index}/{len(jobs_list)}] {text.safe(job.label())}")
        _progress(f"[{index}/{len(jobs_list)}] running {text.safe(job.label())}")

    def on_done(index: int, job: runner.Job, record: store.RunRecord) -> None:
        heartbeat.finished(index)
        try:
            run_id = store.save_run(db, record)
        except store.StoreError as exc:
            shutil.rmtree(record.run["artifacts_dir"], ignore_errors=True)
            raise _fail(f"cannot store run {index}: {exc}; {len(recorded)} runs stored before it") from exc
        row = store.get_run(db, run_id)
        recorded.append(row)
        if not as_json:
            click.echo(text.summary_line(row))

    try:
        with heartbeat:
            runner.run_matrix(jobs_list, Path(db_path), timeout_s, timing, jobs, on_start, on_done)
    except KeyboardInterrupt:
        _progress(f"interrupted: {len(recorded)} of {len(jobs_list)} runs recorded in {db_path}")
        sys.exit(130)
    except runner.EnvironmentFault as exc:
        raise _fail(f"{exc}; {len(recorded)} runs stored before it, nothing stored for it") from exc
    if as_json:
        click.echo(json.dumps([_public(row) for row in recorded], indent=2, default=str))
    if recorded:
        _progress(f"recorded {len(recorded)} run{'' if len(recorded) == 1 else 's'} in {db_path}, run directories in "
                  f"{artifacts_root(Path(db_path).resolve())}/; next: diag show {recorded[-1]['id']} --db {db_path}, "
                  f"diag report --db {db_path}")
    if env_failures:
        sys.exit(1)


def _public(run: dict[str, Any]) -> dict[str, Any]:
    """A run as JSON output: raw timing samples stay in ``diag show --json``."""
    return {k: v for k, v in run.items() if k not in ("timings", "traceback", "stderr_tail")}


@cli.command("runs")
@db_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--case", "case_name", default=None, help="Only runs of this case.")
@json_option
def runs_command(db_path: str, limit: int, case_name: Optional[str], as_json: bool) -> None:
    """List recent runs, newest first."""
    db = read_store(db_path)
    listed = store.recent_runs(db, limit=limit, case=case_name)
    if as_json:
        click.echo(json.dumps(listed, indent=2, default=str))
        return
    if not listed:
        click.echo(f"no runs{f' of case {text.safe(case_name)}' if case_name else ''} in {db_path}", err=True)
    for row in listed:
        click.echo(f"{text.summary_line(row)}  torch {text.safe(row['torch_version'])}")


@cli.command("show")
@click.argument("run_id", type=int)
@db_option
@json_option
def show_command(run_id: int, db_path: str, as_json: bool) -> None:
    """Print everything recorded for one run, including its artifacts."""
    db = read_store(db_path)
    run = store.get_run(db, run_id)
    if run is None:
        raise _fail(f"no run #{run_id} in {db_path}")
    run["artifacts"] = {label: str(path) for label, path in artifacts.listing(run.get("artifacts_dir"))}
    if as_json:
        click.echo(json.dumps(run, indent=2, default=str))
        return
    click.echo(text.show(run))
    for name, path in run["artifacts"].items():
        click.echo(f"  {text.safe(name)}: {text.safe(path)}")


@cli.group("env")
def env_group() -> None:
    """Provisioned torch environments (virtualenvs under $DIAG_HOME/envs)."""


@env_group.command("list")
@json_option
def env_list(as_json: bool) -> None:
    """List provisioned environments: name, torch version, git commit, nightly date, size, path."""
    listed = envs.listing()
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    for row in listed:
        click.echo(f"{row['name']:<36} torch {row['torch_version']:<26} git {(row['git_version'] or '-')[:12]:<12} "
                   f"nightly {row['nightly_date'] or '-':<10} {row['size_mb']:>9.1f} MB  {row['path']}")


@env_group.command("add")
@click.argument("spec", required=False)
@env_options
@click.option("--like", "like", default=None, metavar="BUILD",
              help="Install a build diag ran again, from its recorded wheel, checked by its sha256: a build id "
                   "or torch version from --db. Its Python and transformers are used unless given.")
@db_option
@json_option
def env_add(spec: Optional[str], env_options: envs.Options, like: Optional[str], db_path: str,
            as_json: bool) -> None:
    """Provision (or reuse) the environment for a torch SPEC: a release, a dated nightly, 2.1.0.dev, nightly,
    a wheel URL or file; or, with --like BUILD, the build a stored run used."""
    if (spec is None) == (like is None):
        raise _fail("give a torch SPEC or --like BUILD (one of them)")
    sha256 = None
    if like is not None:
        spec, env_options, sha256 = _like(like, db_path, env_options)
    try:
        if envs.parse_spec(spec).kind in ("current", "python"):
            raise _fail(f"torch spec {spec!r} names an existing interpreter; nothing to provision")
        env = envs.resolve(spec, env_options, log=_progress, sha256=sha256)
    except envs.EnvError as exc:
        raise _fail(str(exc)) from exc
    info = {"spec": spec, "python": env.python, "path": env.path, **env.build()}
    click.echo(json.dumps(info, indent=2) if as_json else f"{spec}: torch {info['torch_version']} at {env.path}")


def _like(build_ref: str, db_path: str, options: envs.Options) -> tuple[str, envs.Options, Optional[str]]:
    """The wheel, Python and transformers of a stored build (by id or torch version)."""
    db = read_store(db_path)
    found = [b for b in store.builds(db) if str(b["id"]) == build_ref or b["version"] == build_ref
             or b["version"].split("+", 1)[0] == build_ref]
    if not found:
        raise _fail(f"no build {build_ref!r} in {db_path} (see diag runs)")
    build = found[-1]
    if not build.get("wheel_url"):
        raise _fail(f"build {build['version']} has no recorded wheel (its runs used an interpreter as it was, "
                    "or were stored before wheels were recorded); give its torch spec instead")
    runs = store.runs_of_build(db, build["id"])
    python = next((r["python"] for r in reversed(runs) if r.get("python")), None)
    transformers = next((r["transformers_version"] for r in reversed(runs) if r.get("transformers_version")), None)
    extras = options.extras
    if transformers and not envs.names_transformers(extras):
        extras = (*extras, f"transformers=={transformers}")
    chosen = options.python or (".".join(python.split(".")[:2]) if python else None)
    return build["wheel_url"], dataclasses.replace(options, extras=extras, python=chosen), build["wheel_sha256"]


@env_group.command("rm")
@click.argument("name")
def env_rm(name: str) -> None:
    """Remove a provisioned environment by NAME (from diag env list)."""
    try:
        click.echo(f"removed {envs.remove(name)}")
    except envs.EnvError as exc:
        raise _fail(str(exc)) from exc


@cli.command("merge")
@click.argument("out_db", type=click.Path(dir_okay=False))
@click.argument("shards", nargs=-1, required=True, type=click.Path(dir_okay=False))
@json_option
def merge_command(out_db: str, shards: tuple[str, ...], as_json: bool) -> None:
    """Merge shard databases (e.g. one per CI leg) into OUT_DB without duplicating runs.

    Runs are matched by their unique id, so merging the same shard twice adds
    nothing. Builds are matched by git commit and variant.
    """
    _preflight(preflight.check_database, out_db)
    shard_dbs = [(shard, read_store(shard)) for shard in shards]
    target = open_store(out_db, create=True)
    summary = []
    for shard, db in shard_dbs:
        try:
            added, present = store.merge(target, db)
        except store.StoreError as exc:
            raise _fail(f"merging {shard}: {exc}") from exc
        summary.append({"shard": shard, "added": added, "already_present": present})
        if not as_json:
            click.echo(f"{shard}: {added} runs added, {present} already present")
    if as_json:
        click.echo(json.dumps(summary, indent=2))


def _timing_text(change: regress.TimingChange) -> str:
    if change.ratio is None:
        return f"{change.metric} -"
    p = "n/a" if change.p_value is None else f"{change.p_value:.2g}"
    basis = "host-adjusted, " if change.basis == "host-adjusted" else ""
    pooled = (change.runs_before, change.runs_after) != (1, 1)
    runs = f"runs {change.runs_before} -> {change.runs_after}, " if pooled else ""
    return f"{change.metric} x{change.ratio:.3f} ({basis}{runs}p={p})"


def _comparison_lines(comparison: regress.RowComparison) -> list[str]:
    before, after = comparison.before, comparison.after
    status = (f"{before['status'] if before else 'absent'} -> {after['status'] if after else 'absent'}")
    lines = [f"{text.safe(rows.label(comparison.row))}: {status}"]
    for kind in FINDING_KINDS:
        for key in comparison.added.get(kind.table, []):
            lines.append(f"    + {kind.label} {text.safe(key)}")
        for key in comparison.removed.get(kind.table, []):
            lines.append(f"    - {kind.label} {text.safe(key)}")
    if comparison.timings:
        lines.append("    " + "; ".join(_timing_text(t) for t in comparison.timings))
    return lines


@cli.command("compare")
@click.argument("a")
@click.argument("b")
@db_option
@json_option
def compare_command(a: str, b: str, db_path: str, as_json: bool) -> None:
    """What changed from A to B: two run ids, or two torch builds (version, git prefix, build:ID).

    Per case x config: the status change, graph-break / recompile / hidden-error keys
    added and removed, and compile-time and per-token latency ratios with a one-sided
    Mann-Whitney U p-value. Between builds, timings pool every run of a row on each
    side; reruns on one build compare the newest `diag run` invocation with the one
    before. CPU latency is host-adjusted where both sides timed the host.
    """
    db = read_store(db_path)
    try:
        outcome = gate.compare(db, a, b)
    except store.StoreError as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({"compared": outcome.description,
                               "rows": [c.as_dict() for c in outcome.comparisons]}, indent=2, default=str))
        return
    click.echo(f"compared: {outcome.description}")
    for comparison in outcome.comparisons:
        click.echo("\n".join(_comparison_lines(comparison)))


@cli.command("prune")
@click.option("--keep-builds", type=click.IntRange(min=1), default=14, show_default=True,
              help="Builds of each variant (the newest) whose runs keep full detail.")
@click.option("--keep-runs", type=click.IntRange(min=1), default=10, show_default=True,
              help="Runs of each row of one build that stay (the newest; whole on the newest builds); "
                   "older ones are folded into counts.")
@click.option("--thin-after", type=click.IntRange(min=1), default=30, show_default=True,
              help="Builds of each variant (the newest) past which a nightly's rows that change nothing are folded.")
@db_option
@json_option
def prune_command(keep_builds: int, keep_runs: int, thin_after: int, db_path: str, as_json: bool) -> None:
    """Keep a long-lived history bounded: full detail for the newest builds of each variant only.

    Older builds keep every status, error, count, finding key and per-run median, and a summary
    of each timing series (n, median, p10, p90); their raw samples, compiled frames,
    capabilities and the bulk of their tracebacks go. Of one build, a row keeps its newest
    --keep-runs runs, and on an older build those of its newest two invocations (a release
    re-run every night); the rest are folded into counts by status (table folded_runs). Past
    --thin-after builds, a row's runs on a nightly are folded the same way unless the row
    changes there (a transition or key change keeps both its builds), or the row is timed and
    the nightly is its week's first. The nightly workflow runs this after each merge.
    """
    db = open_store(db_path)
    try:
        before = Path(db_path).stat().st_size
        changed = store.prune(db, keep_builds, keep_runs, thin_after)
        after = Path(db_path).stat().st_size
    except (OSError, sqlite3.Error, store.StoreError) as exc:
        raise _fail(f"{db_path}: {exc}") from exc
    result = {**changed, "bytes_before": before, "bytes_after": after}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"compacted {changed['runs']} runs ({changed['series']} timing series), folded "
                   f"{changed['folded']} into counts ({changed['thinned']} rows of old nightlies thinned); "
                   f"{before / 2**20:.1f} MB -> {after / 2**20:.1f} MB")


@cli.command("check")
@click.option("--baseline", default=None, help="Build to compare the newest build against (default: the previous "
                                                "build; with one build in the DB, each row's newest diag run "
                                                "invocation against the one before it).")
@click.option("--compile-threshold", type=click.FloatRange(min=1.0), default=1.15, show_default=True,
              help="Compile-time ratio that counts as a slowdown (when significant).")
@click.option("--latency-threshold", type=click.FloatRange(min=1.0), default=1.05, show_default=True,
              help="Per-token latency ratio that counts as a slowdown (when significant).")
@click.option("--alpha", type=click.FloatRange(min=0.0, max=1.0), default=regress.Thresholds.alpha,
              show_default=True,
              help="Significance level of the one-sided Mann-Whitney U test.")
@click.option("--allow", "allow_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="File of keys known to be flaky (one per line), ignored when new.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False), default=None,
              help="Write JUnit XML: a test case per row, a failure per regression.")
@click.option("--inconclusive-exit", type=click.IntRange(min=0, max=255), default=3, show_default=True,
              help="Exit status when nothing regressed but a slowdown had too few runs to judge.")
@click.option("--alerts", "alerts_file", type=click.Path(dir_okay=False), default=None,
              help="Write one alert per regressed row (JSON: title, marker, Markdown body) for an issue tracker.")
@click.option("--site-url", default=None, help="Where the report is published, for the alerts' run links.")
@db_option
@json_option
def check_command(baseline: Optional[str], compile_threshold: float, latency_threshold: float, alpha: float,
                  allow_file: Optional[str], junit_file: Optional[str], inconclusive_exit: int,
                  alerts_file: Optional[str], site_url: Optional[str], db_path: str, as_json: bool) -> None:
    """CI gate: exit 1 if the newest build regressed against the baseline.

    A regression is: a pass or graph_break row that now fails; a new graph-break,
    recompile or hidden-error key (not in --allow); compiled tokens that no longer
    match eager; or a slowdown beyond the thresholds that a rank test over the runs
    confirms. A slowdown beyond a threshold with too few runs a side to test (4 for
    --alpha 0.02, 5 for 0.01) is INCONCLUSIVE: exit 3 when nothing else regressed, skipped in JUnit.
    """
    for option, path in (("--junit", junit_file), ("--alerts", alerts_file)):
        if path and not Path(path).resolve().parent.is_dir():
            raise _fail(f"{option} {path}: directory {Path(path).resolve().parent} does not exist")
    db = read_store(db_path)
    thresholds = regress.Thresholds(compile_threshold, latency_threshold, alpha)
    try:
        outcome = gate.check(db, baseline, thresholds, gate.read_allow_list(allow_file))
    except store.StoreError as exc:
        raise _fail(str(exc)) from exc
    if junit_file:
        try:
            Path(junit_file).write_text(regress.junit_xml(outcome.comparisons, outcome.regressions, "diag check",
                                                          outcome.inconclusive), encoding="utf-8")
        except OSError as exc:
            raise _fail(f"--junit {junit_file}: {exc.strerror or exc}") from exc
    if alerts_file:
        try:
            Path(alerts_file).write_text(json.dumps(gate.alerts(outcome, site_url), indent=2), encoding="utf-8")
        except OSError as exc:
            raise _fail(f"--alerts {alerts_file}: {exc.strerror or exc}") from exc
    compared = [c for c in outcome.comparisons if c.before is not None and c.after is not None]
    if as_json:
        click.echo(json.dumps({"checked": outcome.description, "rows": len(outcome.comparisons),
                               "compared": len(compared),
                               "regressions": [{"row": rows.label(r.row), "kind": r.kind,
                                                "message": r.message} for r in outcome.regressions],
                               "inconclusive": [{"row": rows.label(r.row), "message": r.message}
                                                for r in outcome.inconclusive],
                               "not_compared": [{"row": rows.label(c.row), "note": c.note}
                                                for c in outcome.comparisons if c.note]}, indent=2))
    else:
        click.echo(f"checked: {outcome.description}; {len(outcome.comparisons)} rows, {len(compared)} with runs "
                   "on both sides")
        for regression in outcome.regressions:
            click.echo(f"REGRESSION {text.safe(rows.label(regression.row))}: {text.safe(regression.message)}")
        for item in outcome.inconclusive:
            click.echo(f"INCONCLUSIVE {text.safe(rows.label(item.row))}: {text.safe(item.message)}")
        for comparison in outcome.comparisons:
            if comparison.note:
                click.echo(f"NOT COMPARED {text.safe(rows.label(comparison.row))}: {text.safe(comparison.note)}")
        if not compared:
            click.echo("nothing to compare: no row has runs on both sides (run the matrix again, or on another "
                       "build, then check)")
        elif not outcome.regressions:
            click.echo("no regressions" + (" (some slowdowns could not be judged)" if outcome.inconclusive else ""))
    if outcome.regressions:
        sys.exit(1)
    if outcome.inconclusive:
        sys.exit(inconclusive_exit)


@cli.command("bisect")
@click.option("--case", "case_value", required=True, help="Case name or path to a case file.")
@click.option("--good", required=True, help="A torch spec that behaves (e.g. 2.1.0.dev20230601).")
@click.option("--bad", required=True, help="A later torch spec that does not.")
@click.option("--candidates", "candidates_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="File of torch specs to search, one per line (default: the versions on --index).")
@click.option("--index", "listing_index", default=None,
              help="Simple index whose torch builds are the candidates (default: the PyTorch nightly index "
                   "for --variant). Installs still use --index-url, else the installer's defaults.")
@env_options
@config_options
@db_option
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True)
@json_option
def bisect_command(case_value: str, good: str, bad: str, candidates_file: Optional[str],
                   listing_index: Optional[str], env_options: envs.Options, db_path: str, timeout_s: float,
                   as_json: bool, **config: Any) -> None:
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
        raise _fail(str(exc)) from exc
    _preflight(preflight.check_configs, [run_config])
    _preflight(preflight.check_database, db_path)
    db = open_store(db_path, create=True)
    recorded = {b["version"].split("+", 1)[0]: b for b in store.builds(db) if b.get("wheel_url")}
    try:
        found = bisect.candidates(good, bad, candidates_file, listing_index, env_options.variant,
                                  stored=[b["version"] for b in store.builds(db)],
                                  request=env_options.request(good))
    except (catalog.CatalogError, envs.EnvError, wheels.WheelError) as exc:
        raise _fail(str(exc)) from exc
    for note in found.notes:
        _progress(text.safe(note))
    if found.missing_dates:
        _progress(f"no nightly at its direct URL for {len(found.missing_dates)} dates in range: "
                  f"{', '.join(found.missing_dates[:10])}{' ...' if len(found.missing_dates) > 10 else ''}")

    def provision(spec: str) -> envs.TorchEnv:
        build = recorded.get(spec)
        if build is not None:
            # a build diag ran before: the same wheel again, checked by its sha256
            return envs.resolve(build["wheel_url"], env_options, log=_progress, sha256=build["wheel_sha256"])
        return envs.resolve(spec, env_options, log=_progress)

    try:
        summary = bisect.bisect(db, Path(db_path), refs[0], run_config, found.specs, provision, timeout_s,
                                log=lambda message: _progress(text.safe(message)))
    except (bisect.BisectError, runner.EnvironmentFault, store.StoreError) as exc:
        raise _fail(str(exc)) from exc
    summary["missing_dates"] = found.missing_dates
    summary["sources"] = {spec: found.sources.get(spec, []) for spec in found.specs}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"last good: {_build_line(summary['last_good'])}")
    click.echo(f"first bad: {_build_line(summary['first_bad'])}")
    if summary["commit_range"]:
        click.echo(f"commits:   git log {summary['commit_range']}   ({summary['compare_url']})")
    for spec, reason in summary["skipped"].items():
        click.echo(f"skipped:   {spec}: {text.safe(reason)}")
    if summary["missing_dates"]:
        click.echo(f"no build:  {len(summary['missing_dates'])} dates in range had no nightly "
                   f"({', '.join(summary['missing_dates'][:10])}{' ...' if len(summary['missing_dates']) > 10 else ''})")


def _build_line(build: dict[str, Any]) -> str:
    date = f", nightly {build['nightly_date']}" if build["nightly_date"] else ""
    return f"{build['version']}{date}, git {build['git_version']} (run #{build['run']}: {build['status']})"


@cli.command("repro")
@click.argument("run_id", type=int)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the script here (default: print it).")
@db_option
def repro_command(run_id: int, output: Optional[str], db_path: str) -> None:
    """Write a standalone script (torch and transformers only, no diag import) that reproduces a run.

    It rebuilds the case's model and inputs, compiles with the recorded options,
    and prints the graph breaks, or raises the compile error as torch raises it.
    Attach it to a PyTorch issue.
    """
    from diag import repro

    db = read_store(db_path)
    run = store.get_run(db, run_id)
    if run is None:
        raise _fail(f"no run #{run_id} in {db_path}")
    try:
        source = repro.script(run, repro.case_path_of(run), Path(output).name if output else "repro.py")
    except repro.ReproError as exc:
        raise _fail(str(exc)) from exc
    if output:
        Path(output).write_text(source, encoding="utf-8")
        click.echo(f"wrote {output}: python {output}", err=True)
    else:
        click.echo(source)


@cli.command("report")
@db_option
@click.option("--out", "out_dir", default="reports", show_default=True, type=click.Path(file_okay=False),
              help="Output directory; updated in place, never overwriting files of yours.")
@json_option
def report_command(db_path: str, out_dir: str, as_json: bool) -> None:
    """Render the static HTML report: the status matrix across torch builds, transitions, trends, run pages.

    Opens from disk or any static host (no server, no CDN). Re-running updates
    the site in place: files whose content did not change are left alone, and only
    stale files that diag itself wrote are deleted. A non-empty --out folder that
    holds no diag report is refused, as is overwriting a file diag did not write.
    The site also holds datasette.json: `datasette DB -m OUT/datasette.json`.
    """
    from diag import report

    db = read_store(db_path)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out_dir} is not a directory")
    try:
        counts = report.publish(report.render(db, out, db_name=Path(db_path).stem), out, Path(db_path))
    except report.ReportError as exc:
        raise _fail(str(exc)) from exc
    except OSError as exc:
        raise _fail(f"cannot write report to {out_dir}: {exc}") from exc
    index = out / "index.html"
    if as_json:
        click.echo(json.dumps({**counts, "index": str(index)}))
    else:
        click.echo(f"{counts['files']} files: {counts['written']} written, {counts['unchanged']} unchanged, "
                   f"{counts['removed']} stale removed: {index}")


def main() -> None:
    """Entry point: click's usage errors reduced to one line on stderr, exit status 2."""
    try:
        code = cli.main(prog_name="diag", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        hint = f" (see 'diag {exc.ctx.info_name} --help')" if isinstance(exc, click.UsageError) and exc.ctx else ""
        click.echo(f"Error: {text.safe(exc.format_message())}{hint}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
