"""The CI gate: ``diag check`` (regressions against a baseline, and counts against a contract) and
``diag expect`` (writes the contract ``check --expect`` holds a build to)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import click

from diag import row as rows
from diag import store, text, verdict_text
from diag.cli import changing, params
from diag.cli.checks import write_output
from diag.cli.common import cli, db_option, fail, json_option, read_store
from diag.verdicts import coverage, expect, gate, junit, regress


def _ratio(name: str, default: float, said: str) -> Any:
    """A threshold of ``check``: a ratio of at least 1, its default shown."""
    return click.option(name, type=click.FloatRange(min=1.0), default=default, show_default=True, help=said)


@cli.command("check")
@click.option(
    "--baseline",
    default=None,
    help="Build to compare the newest build against (default: the previous "
    "build; with one build in the DB, each row's newest diag run "
    "invocation against the one before it).",
)
@click.option(
    "--stable",
    default=None,
    metavar="BUILD",
    help="A pinned release the same runner ran each night beside the nightly: a latency or compile-time "
    "slowdown it shared (its newest invocation against the one before) is reported as HOST CHANGED, "
    "not as torch's; only the part beyond its own ratio counts.",
)
@_ratio(
    "--compile-threshold",
    regress.Thresholds.compile_ratio,
    "Compile-time ratio that counts as a slowdown (when significant).",
)
@_ratio(
    "--instructions-threshold",
    regress.Thresholds.instructions_ratio,
    "Ratio of the cold compile's instruction count (runs made with --count-instructions) that "
    "counts as a slowdown; a count is judged on its ratio alone, one run a side.",
)
@_ratio(
    "--latency-threshold",
    regress.Thresholds.latency_ratio,
    "Per-token latency ratio that counts as a slowdown (when significant).",
)
@click.option(
    "--decode-recompile-steps",
    type=click.IntRange(min=0),
    default=regress.Thresholds.decode_recompile_steps,
    show_default=True,
    help="Decode steps a row may recompile on; beyond it, where the baseline stayed within it, is a "
    "regression (a fixed-size cache should compile once).",
)
@click.option(
    "--alpha",
    type=click.FloatRange(min=0.0, max=1.0),
    default=regress.Thresholds.alpha,
    show_default=True,
    help="Significance level of the one-sided Mann-Whitney U test.",
)
@click.option(
    "--allow",
    "allow_file",
    type=params.TEXT_FILE,
    default=None,
    help="File of keys known to be flaky (one per line), ignored when new.",
)
@click.option(
    "--junit",
    "junit_file",
    type=params.OUTPUT_FILE,
    default=None,
    help="Write JUnit XML: a test case per row, a failure per regression.",
)
@click.option(
    "--inconclusive-exit",
    type=click.IntRange(min=0, max=255),
    default=3,
    show_default=True,
    help="Exit status when nothing regressed but a slowdown had too few runs to judge.",
)
@click.option(
    "--alerts",
    "alerts_file",
    type=params.OUTPUT_FILE,
    default=None,
    help="Write one alert per cause (JSON: title, marker, owner, tracker, rows, Markdown body) for an issue tracker.",
)
@click.option("--site-url", default=None, help="Where the report is published, for the alerts' run links.")
@click.option(
    "--expect",
    "expect_file",
    type=params.TEXT_FILE,
    default=None,
    help="A contract of exact counts (diag expect): exit 1 on any count of the newest build that differs "
    "from it, an improvement included; the update command is printed.",
)
@click.option(
    "--changes",
    "with_changes",
    is_flag=True,
    help="Also exit 1 on a change point that made a figure worse past its threshold above (a count: by "
    "any unit) and that the history without the newest build did not have: a creep fails on the night it "
    "passes, dated to where it started (diag changes).",
)
@db_option
@json_option
def check_command(
    baseline: Optional[str],
    stable: Optional[str],
    compile_threshold: float,
    instructions_threshold: float,
    latency_threshold: float,
    decode_recompile_steps: int,
    alpha: float,
    allow_file: Optional[str],
    junit_file: Optional[str],
    inconclusive_exit: int,
    alerts_file: Optional[str],
    site_url: Optional[str],
    expect_file: Optional[str],
    with_changes: bool,
    db_path: str,
    as_json: bool,
) -> None:
    """CI gate: exit 1 if the newest build regressed against the baseline.

    A regression is: a pass or graph_break row that now fails; a new graph-break,
    recompile or hidden-error key (not in --allow); compiled tokens that no longer
    match eager; or a slowdown beyond the thresholds that a rank test over the runs
    confirms. A slowdown beyond a threshold with too few runs a side to test (4 for
    --alpha 0.02, 5 for 0.01) is INCONCLUSIVE: exit 3 when nothing else regressed, skipped in JUnit.

    --expect FILE: also every count of the newest build's rows against the contract (graphs, graph
    breaks per GB id, recompiles per guard, hidden errors, second-call recompiles, torch's
    counters); any difference is a failure, named by its count, in the text, --json and JUnit.
    """
    db = read_store(db_path)
    thresholds = regress.Thresholds(
        compile_ratio=compile_threshold,
        instructions_ratio=instructions_threshold,
        latency_ratio=latency_threshold,
        alpha=alpha,
        decode_recompile_steps=decode_recompile_steps,
    )
    outcome = gate.check(db, baseline, thresholds, gate.read_allow_list(allow_file), stable)
    held = _held(db, expect_file, db_path) if expect_file else None
    shown = changing.tonight(db, stable, thresholds.limit) if with_changes else None
    _write_gate_files(outcome, junit_file, alerts_file, site_url, held, store.bisects(db))
    if as_json:
        extra: dict[str, Any] = {"contract": held.as_dict()} if held else {}
        extra |= {"changes": [c.as_dict() for c in shown]} if shown is not None else {}
        click.echo(json.dumps({**_check_json(outcome, alpha), **extra}, indent=2))
    else:
        said = verdict_text.check_lines(outcome, alpha) + (held.lines() if held else [])
        said += changing.tonight_lines(shown) if shown is not None else []
        click.echo("\n".join(said))
    if outcome.regressions or (held and held.moved) or shown:
        sys.exit(1)
    if outcome.inconclusive:
        sys.exit(inconclusive_exit)


def _write_gate_files(
    outcome: gate.Outcome,
    junit_file: Optional[str],
    alerts_file: Optional[str],
    site_url: Optional[str],
    held: Optional[expect.Held] = None,
    bisected: Optional[dict[str, dict[str, Any]]] = None,
) -> None:
    """JUnit XML (a test case per row, and per contract row with --expect) and the alerts (one per
    cause, each with the bisect stored for its row where ``bisected`` has one), where asked for."""
    if junit_file:
        xml = junit.junit_xml(outcome.comparisons, outcome.regressions, "diag check", outcome.inconclusive)
        suites = [junit.cause_suite(outcome.causes)] if outcome.causes else []
        suites += [junit.contract_suite(held)] if held is not None else []
        write_output(junit_file, junit.with_suites(xml, suites), f"--junit {junit_file}")
    if alerts_file:
        found = gate.alerts(outcome, site_url, bisected)
        write_output(alerts_file, json.dumps(found, indent=2), f"--alerts {alerts_file}")


def _check_json(outcome: gate.Outcome, alpha: float) -> dict[str, Any]:
    compared = [c for c in outcome.comparisons if c.before is not None and c.after is not None]
    return {
        "checked": outcome.description,
        "rows": len(outcome.comparisons),
        "compared": len(compared),
        "regressions": [{"row": rows.label(r.row), "kind": r.kind, "message": r.message} for r in outcome.regressions],
        "causes": [cause.as_dict() for cause in outcome.causes],
        "inconclusive": [{"row": rows.label(r.row), "message": r.message} for r in outcome.inconclusive],
        "host_changed": [{"row": rows.label(r.row), "message": r.message} for r in outcome.host_changed],
        "not_compared": [
            {"row": rows.label(c.row), "note": note}
            for c in outcome.comparisons
            for note in ([c.note] if c.note else []) + c.noisy
        ],
        "judged": [found.as_dict() for found in coverage.coverage(outcome.comparisons, alpha)],
    }


def _held(db: Any, expect_file: str, db_path: str) -> expect.Held:
    """The newest build of each variant held to the contract in ``expect_file``, each build's runs
    against its own torch version's counts."""
    contract = _read_contract(expect_file)
    moved: list[expect.Moved] = []
    checked: list[str] = []
    every: list[Any] = []
    newest = gate.newest_builds(db)
    for build in newest:
        runs = store.runs_of_build(db, build["id"])
        moved += expect.compared(contract, runs, build["version"])
        checked += [label for label in expect.newest_per_row(runs) if label not in checked]
        every += runs
    versions = ", ".join(b["version"] or "?" for b in newest) or None
    update = f"diag expect {expect_file} --db {db_path}"
    return expect.Held(expect_file, versions, moved, checked, expect.unchecked(contract, every), update)


def _read_contract(path: str) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise fail(f"{path}: not a readable contract ({exc})") from exc
    try:
        return expect.read(document, path)
    except expect.ContractError as exc:
        raise fail(str(exc)) from exc


@cli.command("expect")
@click.argument("contract_file", type=params.OUTPUT_FILE)
@click.option("--build", "build_ref", default=None, help="The build whose counts are written (default: the newest).")
@click.option(
    "--section",
    is_flag=True,
    help="Keep the contract's counts and write what differs on this build into its torch version's "
    "section (2.14), for a count that legitimately differs there.",
)
@db_option
@json_option
def expect_command(contract_file: str, build_ref: Optional[str], section: bool, db_path: str, as_json: bool) -> None:
    """Write the count contract that `diag check --expect CONTRACT_FILE` holds builds to: per row (case
    and config) of a build, its exact counts (graphs, graph breaks per GB id, recompiles per guard,
    hidden errors per key, second-call recompiles, torch's counters), sorted, one JSON file to review
    and commit. Rewriting it with a build's counts is the ratchet: an improvement is taken on purpose.
    Rows the build did not run, and other versions' sections, are kept."""
    db = read_store(db_path)
    try:
        chosen = store.find_build(db, build_ref) if build_ref else gate.newest_builds(db)[-1]
    except (store.StoreError, IndexError) as exc:
        raise fail(str(exc) if isinstance(exc, store.StoreError) else f"no runs in {db_path}") from exc
    existing = _read_contract(contract_file) if Path(contract_file).exists() else None
    if section and existing is None:
        raise fail(f"--section adds to a contract: {contract_file} does not exist yet (write it without --section)")
    runs = store.runs_of_build(db, chosen["id"])
    contract = expect.written(runs, chosen["version"] or "?", existing, section)
    write_output(contract_file, json.dumps(contract, indent=2) + "\n", contract_file)
    ran = len(expect.newest_per_row(runs))
    said = {"contract": contract_file, "build": chosen["version"], "rows": ran, "section": section}
    if as_json:
        click.echo(json.dumps(said, indent=2))
        return
    where = f" (its torch {expect.version_key(chosen['version'])} section)" if section else ""
    click.echo(
        f"wrote the counts of {ran} row{'s' if ran != 1 else ''} of {text.safe(chosen['version'])} to "
        f"{text.safe(contract_file)}{where}; check with diag check --expect {text.safe(contract_file)}"
    )
