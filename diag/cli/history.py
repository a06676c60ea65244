"""Commands over a history of builds: environments, merge, compare, prune (check is in gating.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

import click

from diag import envs, store, text, verdict_text
from diag.build import Spec
from diag.cli import params
from diag.cli.common import (
    cli,
    count,
    db_option,
    env_options,
    fail,
    json_option,
    open_store,
    progress,
    read_store,
    run_preflight,
)
from diag.run import preflight
from diag.verdicts import coverage, gate, regress, variants, why


@cli.group("env")
def env_group() -> None:
    """Provisioned torch environments (virtualenvs under $DIAG_HOME/envs)."""


@env_group.command("list")
@json_option
def env_list(as_json: bool) -> None:
    """List provisioned environments: name, torch version, git commit, nightly date, size, path; and
    for a package bisect's, the package its base leaves out or the release an overlay adds."""
    listed = envs.listing()
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    for row in listed:
        click.echo(
            f"{row['name']:<36} torch {row['torch_version']:<26} git {(row['git_version'] or '-')[:12]:<12} "
            f"nightly {row['nightly_date'] or '-':<10} {row['size_mb']:>9.1f} MB  {row['path']}{_overlay(row)}"
        )


def _overlay(row: dict) -> str:
    """What a package bisect's environment is: a base less a package, or a release over a base."""
    if row["over"]:
        moved = ", ".join(f"{name}=={version}" for name, version in (row["moved"] or {}).items())
        return f"  ({moved} over {row['over']})"
    return f"  (a base without {row['without']})" if row["without"] else ""


@env_group.command("add")
@click.argument("spec", required=False, type=params.TORCH_SPEC)
@env_options
@click.option(
    "--like",
    "like",
    default=None,
    metavar="BUILD",
    help="Install a build diag ran again, from its recorded wheel, checked by its sha256: a build id "
    "or torch version from --db. Its Python and transformers are used unless given.",
)
@db_option
@json_option
def env_add(spec: Optional[Spec], env_options: envs.Options, like: Optional[str], db_path: str, as_json: bool) -> None:
    """Provision (or reuse) the environment for a torch SPEC: a release, a dated nightly, 2.1.0.dev, nightly,
    a wheel URL or file; or, with --like BUILD, the build a stored run used."""
    if (spec is None) == (like is None):
        raise fail("give a torch SPEC or --like BUILD (one of them)")
    sha256 = None
    if like is not None:
        spec, env_options, sha256 = _like(like, db_path, env_options)
    assert spec is not None  # given, or the build --like names
    if spec.kind in ("current", "python"):
        raise fail(f"torch spec {spec.text!r} names an existing interpreter; nothing to provision")
    env = envs.resolve(spec, env_options, log=progress, sha256=sha256)
    info = {"spec": spec.text, "python": env.python, "path": env.path, **env.build()}
    click.echo(json.dumps(info, indent=2) if as_json else f"{spec.text}: torch {info['torch_version']} at {env.path}")


def _like(build_ref: str, db_path: str, options: envs.Options) -> tuple[Spec, envs.Options, Optional[str]]:
    """The wheel, Python and transformers of a stored build (by id or torch version)."""
    db = read_store(db_path)
    found = [
        b
        for b in store.builds(db)
        if str(b["id"]) == build_ref or b["version"] == build_ref or (b["version"] or "").split("+", 1)[0] == build_ref
    ]
    if not found:
        raise fail(f"no build {build_ref!r} in {db_path} (see diag runs)")
    build = found[-1]
    wheel_url = build.get("wheel_url")
    if not wheel_url:
        raise fail(
            f"build {build['version']} has no recorded wheel (its runs used an interpreter as it was, "
            "or were stored before wheels were recorded); give its torch spec instead"
        )
    runs = store.runs_of_build(db, build["id"])
    python = next((r["python"] for r in reversed(runs) if r.get("python")), None)
    transformers = next((r["transformers_version"] for r in reversed(runs) if r.get("transformers_version")), None)
    extras = options.extras
    if transformers and not envs.names_transformers(extras):
        extras = (*extras, f"transformers=={transformers}")
    chosen = options.python or (".".join(python.split(".")[:2]) if python else None)
    wheel = envs.parse_spec(wheel_url)  # the stored build's wheel, parsed as it leaves the DB
    return wheel, dataclasses.replace(options, extras=extras, python=chosen), build["wheel_sha256"]


@env_group.command("rm")
@click.argument("name")
def env_rm(name: str) -> None:
    """Remove a provisioned environment by NAME (from diag env list)."""
    click.echo(f"removed {envs.remove(name)}")


@cli.command("env-diff")
@click.argument("first")
@click.argument("second")
@db_option
@json_option
def env_diff(first: str, second: str, db_path: str, as_json: bool) -> None:
    """What differs between the environments two runs ran in: Python, CUDA, the GPU driver and every
    installed distribution. FIRST and SECOND are run ids, or builds (the newest run on it)."""
    from diag.verdicts import causes

    db = read_store(db_path)
    sides = [_environment_of(db, side) for side in (first, second)]
    (run_a, env_a), (run_b, env_b) = sides
    fields = {
        name: [env_a.get(name), env_b.get(name)]
        for name in ("python", "cuda_version", "driver_version")
        if env_a.get(name) != env_b.get(name)
    }
    packages = causes.package_differences(env_a["packages"], env_b["packages"])
    if as_json:
        runs = [{"run": run["id"], "torch": run.get("torch_version")} for run in (run_a, run_b)]
        click.echo(json.dumps({"runs": runs, **fields, "packages": packages}, indent=2))
        return
    ends = [f"run #{run['id']} (torch {run.get('torch_version')})" for run in (run_a, run_b)]
    click.echo(" -> ".join(ends))
    for name, (old, new) in fields.items():
        click.echo(f"{name}: {old or 'none'} -> {new or 'none'}")
    click.echo(f"packages: {len(packages)} of {len(set(env_a['packages']) | set(env_b['packages']))} differ")
    for name, (old, new) in packages.items():
        click.echo(f"  {text.safe(name)} {old or '(absent)'} -> {new or '(absent)'}")


def _environment_of(db: Any, side: str) -> tuple[Any, dict[str, Any]]:
    """A run (an id, or the newest run on a build) and the environment it ran in; a one-line error
    where there is no such run or it has no environment stored."""
    if side.isdigit():
        run = store.get_run(db, int(side))
        if run is None:
            raise fail(f"no run #{side} in the database")
    else:
        try:
            build = store.find_build(db, side)
        except store.StoreError as exc:
            raise fail(str(exc)) from exc
        found = [r for r in store.runs_of_build(db, build["id"]) if r.get("environment")]
        if not found:
            raise fail(f"no run on {build['version']} has its environment stored (runs stored before diag listed them)")
        run = found[-1]
    held = store.environments(db, [run.get("environment")]).get(run.get("environment") or "")
    if held is None:
        raise fail(f"run #{run['id']} has no environment stored (stored before diag listed them, or imported)")
    return run, held


@cli.command("merge")
@click.argument("out_db", type=params.DB_FILE)
@click.argument("shards", nargs=-1, required=True, type=params.DB_FILE)
@json_option
def merge_command(out_db: str, shards: tuple[str, ...], as_json: bool) -> None:
    """Merge shard databases (e.g. one per CI leg) into OUT_DB without duplicating runs.

    Runs are matched by their unique id, so merging the same shard twice adds
    nothing. Builds are matched by git commit and variant.
    """
    run_preflight(preflight.check_database, out_db)
    shard_dbs = [(shard, read_store(shard)) for shard in shards]
    target = open_store(out_db, create=True)
    summary = []
    for shard, db in shard_dbs:
        try:
            added, present = store.merge(target, db)
        except store.StoreError as exc:
            raise fail(f"merging {shard}: {exc}") from exc
        summary.append({"shard": shard, "added": added, "already_present": present})
        if not as_json:
            click.echo(f"{shard}: {added} runs added, {present} already present")
    if as_json:
        click.echo(json.dumps(summary, indent=2))


@cli.command("compare")
@click.argument("a", required=False)
@click.argument("b", required=False)
@click.option(
    "--case",
    "cases",
    multiple=True,
    metavar="CASE",
    help="Twice, instead of A and B: variant against variant (--case A --case B) on one build, "
    "row by row (each point of a sweep on its own).",
)
@click.option(
    "--build",
    "build_ref",
    default=None,
    metavar="BUILD",
    help="With --case: the build (version, git prefix, build:ID). Default: the newest build with runs of both.",
)
@click.option(
    "--profile",
    "by_op",
    is_flag=True,
    help="Under each row whose two runs were recorded with diag run --profile: where the compiled step's "
    "time went, op group by op group, B against A.",
)
@db_option
@json_option
def compare_command(
    a: Optional[str],
    b: Optional[str],
    cases: tuple[str, ...],
    build_ref: Optional[str],
    by_op: bool,
    db_path: str,
    as_json: bool,
) -> None:
    """What changed from A to B: two run ids, or two torch builds (version, git prefix, build:ID);
    or, with --case A --case B, how one variant's per-token latency compares with another's.

    Per case x config: the status change, graph-break / recompile / hidden-error keys
    added and removed, and compile-time and per-token latency ratios with a one-sided
    Mann-Whitney U p-value. Between builds, timings pool every run of a row on each
    side; reruns on one build compare the newest `diag run` invocation with the one
    before. CPU latency is host-adjusted where both sides timed the host.

    Variant against variant: per point and mode, the ratio of B's median latency to A's
    with a 95% interval over the runs, and a verdict: faster, slower, no difference, or
    noisy (no steady run on a side). Noisy runs are left out.

    --profile, for runs recorded with diag run --profile: per row, each op group's compiled time
    per token on B less A's (medians over each run's profiled generations, a bootstrap 95%
    interval), ranked, with the share of the measured latency difference the rows explain and
    the attention kernels each side ran. A change of attention kernel is printed, and is a
    regression for check, whatever --profile says.
    """
    if cases or build_ref:
        if len(cases) != 2 or a or b:
            raise fail("variant against variant takes --case A --case B (two cases, no A B arguments)")
        _compare_variants(read_store(db_path), cases[0], cases[1], build_ref, as_json)
        return
    if not (a and b):
        raise fail("compare needs A and B (two run ids or two builds), or --case A --case B")
    db = read_store(db_path)
    outcome = gate.compare(db, a, b)
    breakdowns = [why.of_comparison(c) if by_op else None for c in outcome.comparisons]
    if as_json:
        found = [
            {**c.as_dict(), **({"profile": d.as_dict() if d else None} if by_op else {})}
            for c, d in zip(outcome.comparisons, breakdowns)
        ]
        judged = [each.as_dict() for each in coverage.coverage(outcome.comparisons, regress.Thresholds().alpha)]
        body = {"compared": outcome.description, "rows": found, "judged": judged}
        click.echo(json.dumps(body, indent=2, default=str))
        return
    click.echo(f"compared: {outcome.description}")
    for comparison, breakdown in zip(outcome.comparisons, breakdowns):
        said = verdict_text.comparison_lines(comparison)
        if by_op and comparison.before and comparison.after:
            said += why.lines(breakdown) if breakdown else ["    not profiled on both sides (diag run --profile)"]
        click.echo("\n".join(text.safe(line) for line in said))
    click.echo("\n".join(verdict_text.judged_lines(outcome.comparisons)))


def _compare_variants(db, case_a: str, case_b: str, build_ref: Optional[str], as_json: bool) -> None:
    build, runs_a, runs_b = gate.variant_runs(db, case_a, case_b, build_ref)
    points = variants.compare(runs_a, runs_b)
    if as_json:
        body = {"build": build["version"], "a": case_a, "b": case_b, "points": [p.as_dict() for p in points]}
        click.echo(json.dumps(body, indent=2))
        return
    click.echo("\n".join(verdict_text.variant_lines(build["version"] or "?", case_a, case_b, points)))


@cli.command("prune")
@click.option(
    "--keep-builds",
    type=count(),
    default=14,
    show_default=True,
    help="Builds of each variant (the newest) whose runs keep full detail.",
)
@click.option(
    "--keep-runs",
    type=count(),
    default=10,
    show_default=True,
    help="Runs of each row of one build that stay (the newest; whole on the newest builds); "
    "older ones are folded into counts.",
)
@click.option(
    "--thin-after",
    type=count(),
    default=30,
    show_default=True,
    help="Builds of each variant (the newest) past which a nightly's rows that change nothing are folded.",
)
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
    before = Path(db_path).stat().st_size
    changed = store.prune(db, keep_builds, keep_runs, thin_after)
    after = Path(db_path).stat().st_size
    result = {**changed, "bytes_before": before, "bytes_after": after}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(
            f"compacted {changed['runs']} runs ({changed['series']} timing series), folded "
            f"{changed['folded']} into counts ({changed['thinned']} rows of old nightlies thinned); "
            f"{before / 2**20:.1f} MB -> {after / 2**20:.1f} MB"
        )
