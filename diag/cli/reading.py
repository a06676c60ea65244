"""Commands that read a DB or the vocabulary: statuses, cases, runs, show, repro, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import click

from diag import figure, store, text
from diag.cli import checks, params
from diag.cli.checks import write_output
from diag.cli.common import RUN_ID, cli, count, db_option, fail, json_option, progress, read_store, verbose_option
from diag.contract import STATUSES
from diag.run import artifacts, catalog, trace


@cli.command("statuses")
@json_option
def statuses_command(as_json: bool) -> None:
    """List the statuses a run can have (exactly one each), whether the row works, and what each means."""
    if as_json:
        click.echo(
            json.dumps(
                [{"name": s.name, "works": s.works, "severity": s.severity, "meaning": s.meaning} for s in STATUSES],
                indent=2,
            )
        )
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
        click.echo(json.dumps([{"name": r.name, "description": r.description, "path": r.path} for r in refs], indent=2))
        return
    width = max((len(r.name) for r in refs), default=0)
    for ref in refs:
        click.echo(f"{ref.name:<{width}}  {ref.description}")
    click.echo(
        f"{'hf:TYPE':<{width}}  a tiny random transformers model of model_type TYPE (hf:llama, hf:gpt2, ...): "
        "generate, static cache, compiled forward; hf:all = every decoder-only causal-LM architecture"
    )


@cli.command("runs")
@db_option
@click.option("--limit", type=count(), default=20, show_default=True)
@click.option("--case", "case_name", default=None, help="Only runs of this case.")
@verbose_option
@json_option
def runs_command(db_path: str, limit: int, case_name: Optional[str], verbose: bool, as_json: bool) -> None:
    """List recent runs, newest first, in 120 columns under a header, each torch build's runs under
    its name (--verbose: every figure, the whole reason a timing is not compared, the torch on each line)."""
    db = read_store(db_path)
    listed = store.recent_runs(db, limit=limit, case=case_name)
    if as_json:
        # each run's columns and its judged figures (value, interval, samples, trust and why: diag/figure.py)
        click.echo(json.dumps([{**row, "figures": figure.as_json(row)} for row in listed], indent=2, default=str))
        return
    if not listed:
        click.echo(f"no runs{f' of case {text.safe(case_name)}' if case_name else ''} in {db_path}", err=True)
    if listed and not verbose:
        click.echo(text.RUN_HEADER)
    torch: object = object()  # no build yet
    for row in listed:
        if verbose:
            click.echo(f"{text.summary_line(row, verbose=True)}  torch {text.safe(row['torch_version'])}")
            continue
        if row["torch_version"] != torch:
            torch = row["torch_version"]
            click.echo(f"torch {text.safe(torch)}:")
        click.echo(text.summary_line(row))


@cli.command("show")
@click.argument("run_id", type=RUN_ID)
@db_option
@json_option
def show_command(run_id: int, db_path: str, as_json: bool) -> None:
    """Print everything recorded for one run, including its artifacts."""
    db = read_store(db_path)
    run = store.get_run(db, run_id)
    if run is None:
        raise fail(f"no run #{run_id} in {db_path}")
    listed = {label: str(path) for label, path in artifacts.listing(run.get("artifacts_dir"))}
    if as_json:  # the run's columns, its judged figures, its artifacts, and its frames' count (null: unknown)
        shown = {**run, "figures": figure.as_json(run), "artifacts": listed, "frame_count": trace.frame_count(run)[0]}
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    click.echo(text.show(run))
    for name, path in listed.items():
        click.echo(f"  {text.safe(name)}: {text.safe(path)}")


@cli.command("repro")
@click.argument("run_id", type=RUN_ID)
@click.option(
    "-o", "--output", type=params.OUTPUT_FILE, default=None, help="Write the script here (default: print it)."
)
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
        raise fail(f"no run #{run_id} in {db_path}")
    case_path = repro.case_path_of(run)
    why = output and checks.refuse_input(output, case_path, f"run #{run_id}'s case file")
    if why:
        raise click.BadParameter(why, param_hint="'-o' / '--output'")
    source = repro.script(run, case_path, Path(output).name if output else "repro.py")
    if output:
        write_output(output, source, f"-o {output}")
        click.echo(f"wrote {output}: python {output}", err=True)
    else:
        click.echo(source)


@cli.command("report")
@db_option
@click.option(
    "--out",
    "out_dir",
    default="reports",
    show_default=True,
    type=params.OUTPUT_FOLDER,
    help="Output directory; updated in place, never overwriting files of yours.",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 2),
    default=None,
    help="1: render in one process; 2: the run pages in a second one meanwhile. Default: 2 on two or more cores.",
)
@click.option(
    "--carry-artifacts",
    is_flag=True,
    help="Copy each detailed run's directory (debug log, trace, tlparse report) into the site and link it; "
    "the copies are as recorded, the machine's paths in them. Without it, a run page names its artifacts "
    "and says they stayed where the run was recorded.",
)
@json_option
def report_command(db_path: str, out_dir: str, processes: Optional[int], carry_artifacts: bool, as_json: bool) -> None:
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
        raise fail(f"--out {out_dir} is not a directory")
    site = report.Site(out, Path(db_path))
    try:
        with site.exclusive(waiting=progress):
            files = report.render(
                db, out, db_name=Path(db_path).stem, processes=processes, site=site, carry_artifacts=carry_artifacts
            )
            counts = site.publish(files)
    except OSError as exc:
        raise fail(f"cannot write report to {out_dir}: {exc}") from exc
    index = out / "index.html"
    if as_json:
        click.echo(json.dumps({**counts, "index": str(index)}))
    else:
        click.echo(
            f"{counts['files']} files: {counts['written']} written, {counts['unchanged']} unchanged, "
            f"{counts['removed']} stale removed: {index}"
        )


@cli.command("export")
@db_option
@click.option(
    "--format",
    "out_format",
    type=click.Choice(["parquet"]),
    default="parquet",
    show_default=True,
    help="File format (Parquet, through pyarrow: pip install 'diag[export]').",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=params.OUTPUT_FOLDER,
    help="Folder for the datasets, one per table (an earlier export there is replaced).",
)
@json_option
def export_command(db_path: str, out_format: str, out_dir: str, as_json: bool) -> None:
    """Export the history as Parquet datasets, one per table, partitioned by build date.

    For pandas, DuckDB, Polars or a notebook: runs, graph_breaks, recompiles, hidden_errors,
    timings, frames, folded_runs and torch_builds, each in OUT/<table>/build_date=<date>/.
    docs/data.md has the schema and three questions answered with DuckDB.
    """
    from diag import export

    read_store(db_path)  # a missing or foreign file is a one-line error, as for every reading command
    out = Path(out_dir)
    why = export.check_out(out)  # before pyarrow is imported: a refused folder is refused at once
    if why:
        raise fail(why)
    try:
        import pyarrow  # noqa: F401 (only checks it is installed)
    except ImportError as exc:
        raise fail("diag export needs pyarrow: pip install 'diag[export]' (or pip install pyarrow)") from exc
    written = export.export(Path(db_path), out, progress=lambda message: click.echo(message, err=True))
    if as_json:
        click.echo(json.dumps({"out": str(out), "format": out_format, "rows": written}, indent=2))
    else:
        click.echo(f"exported {sum(written.values())} rows of {len(written)} tables to {out}/")


@cli.command("file-upstream")
@click.argument("run_id", type=RUN_ID, required=False)
@db_option
@click.option("--break", "key", default=None, help="The finding key to report (default: the run's first with a GB id).")
@click.option(
    "--causes",
    "by_cause",
    is_flag=True,
    help="Instead of one run's break: an issue per cause diag check finds on the newest builds, at its owner's"
    " tracker.",
)
@click.option(
    "--repo",
    default=None,
    help="The tracker's repository (default: pytorch/pytorch; with --causes, each cause's owner's).",
)
@click.option(
    "--api-url", default="https://api.github.com", show_default=True, help="GitHub's REST API (or GitHub Enterprise's)."
)
@click.option(
    "--token-env",
    default="GITHUB_TOKEN",
    show_default=True,
    help="Environment variable holding a token. With one, the tracker is searched for the GB id first.",
)
@click.option("--file", "file_it", is_flag=True, help="File the issue when the search finds none (needs the token).")
@json_option
def file_upstream_command(
    run_id: Optional[int],
    db_path: str,
    key: Optional[str],
    by_cause: bool,
    repo: Optional[str],
    api_url: str,
    token_env: str,
    file_it: bool,
    as_json: bool,
) -> None:
    """Draft an upstream issue for a run's graph break: GB id, versions, the message, the DEBUG log
    around it and the repro script.

    Without a token, prints the draft and sends nothing. With one ($GITHUB_TOKEN, or --token-env),
    searches the tracker for the GB id first and names the issues that already report it; --file
    files the draft only when none does.

    --causes: per cause of the newest builds (diag check's: its rows, owner, first bad build, the
    repro of its smallest row and the bisect), searches the owner's tracker for the cause's marker;
    --file comments on the issue that carries it, or files one where none does: never twice. A cause
    in the case's own code is the user's bug and goes nowhere.
    """
    import os

    from diag import repro, upstream

    db = read_store(db_path)
    token = os.environ.get(token_env) or None
    if file_it and token is None:
        raise fail(f"--file needs a token in ${token_env}")
    if by_cause:
        if run_id is not None or key is not None:
            raise fail("--causes files the newest builds' causes: give no run id and no --break")
        _file_causes(db, api_url, token, file_it, repo, as_json)
        return
    if run_id is None:
        raise fail("give a run id, or --causes")
    repo = repo or upstream.REPO
    run = store.get_run(db, run_id)
    if run is None:
        raise fail(f"no run #{run_id} in {db_path}")
    finding = upstream.choose(run, key)
    try:
        source = repro.script(run, repro.case_path_of(run))
    except repro.ReproError:
        source = None
    title, body = upstream.draft(run, finding, source, upstream.excerpt(run, finding))
    existing = upstream.search(api_url, repo, token, finding) if token else None
    filed = upstream.create(api_url, repo, token, title, body) if token and file_it and not existing else None
    if as_json:
        said = {"key": finding.key, "gb_id": finding.gb_id, "title": title, "body": body}
        click.echo(json.dumps({**said, "existing": existing, "filed": filed}, indent=2))
        return
    _said_of_run(repo, title, body, finding, existing, filed, token_env)


def _said_of_run(
    repo: str, title: str, body: str, finding: Any, existing: Optional[list], filed: Optional[dict], token_env: str
) -> None:
    """``file-upstream RUN_ID``'s text: the issues that already report it, the one filed, or the draft."""
    if existing:
        click.echo(f"already reported in {repo}; not filed again:")
        for issue in existing:
            click.echo(f"  #{issue['number']} ({issue['state']}) {issue['title']}: {issue['html_url']}")
        return
    if filed:
        click.echo(f"filed {filed['html_url']}")
        return
    click.echo(f"# {title}\n\n{body}")
    if existing is not None:
        progress_note = f"no issue in {repo} names {finding.gb_id or finding.key}; --file files this draft"
    else:
        progress_note = f"a draft only: with a token in ${token_env}, the tracker is searched first"
    click.echo(progress_note, err=True)


def _file_causes(
    db: Any, api_url: str, token: Optional[str], file_it: bool, repo: Optional[str], as_json: bool
) -> None:
    """``file-upstream --causes``: each cause's issue drafted, searched for, commented on or filed."""
    from diag import upstream
    from diag.verdicts import gate, regress

    try:
        outcome = gate.check(db, None, regress.Thresholds(), set())
    except store.StoreError as exc:
        raise fail(str(exc)) from exc
    alerts = gate.alerts(outcome)
    done = upstream.per_cause(alerts, api_url, token, file_it, repo)
    if as_json:
        click.echo(json.dumps([{**d, "body": a["body"]} for d, a in zip(done, alerts)], indent=2))
        return
    if not done:
        click.echo("no causes: nothing regressed on the newest builds")
    for said, alert in zip(done, alerts):
        head = f"{text.safe(said['title'])} -> {said['repo'] or 'nowhere'}"
        if said.get("skipped"):
            click.echo(f"{head}: {said['skipped']}")
            if said["repo"]:
                click.echo(alert["body"])
        elif said["commented"]:
            click.echo(f"{head}: commented on {said['existing'][0]['html_url']}")
        elif said["filed"]:
            click.echo(f"{head}: filed {said['filed']['html_url']}")
        elif said["existing"]:
            click.echo(f"{head}: already filed as {said['existing'][0]['html_url']} (--file comments on it)")
        else:
            click.echo(f"{head}: not filed yet (--file files it)")
