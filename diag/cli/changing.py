"""``diag changes``: the change points of the stored history, newest first (diag/verdicts/changes.py)."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from typing import Any, Callable, NamedTuple, Optional, Sequence

import click

from diag import row as rows
from diag import store, text
from diag.build import order as build_order
from diag.cli.common import cli, db_option, fail, json_option, read_store
from diag.store.typed import TorchBuildRow
from diag.verdicts import changes as changes_of
from diag.verdicts import gate

NOT_BISECTED = "diag bisect judges a build by its status, not by this figure: the commit range is where to look"


class Searched(NamedTuple):
    changes: list[changes_of.Change]
    series: list[changes_of.Series]
    said: str  # what the runner was told apart by
    twins: Optional[changes_of.Twins]
    twin: Optional[TorchBuildRow]


def found(db: Any, stable: Optional[str], metrics: Sequence[str], case: Optional[str] = None) -> Searched:
    """The change points of the DB's history (of ``metrics``, of ``case`` where given)."""
    builds = {b["id"]: b for b in store.builds(db)}
    if not builds:
        raise store.StoreError("the database has no runs to search for change points")
    twin = store.find_build(db, stable) if stable else None
    runs = [r for r in store.report_runs(db) if case is None or r.get("case") == case]
    series = changes_of.series_of(runs, builds, metrics, skip=twin["id"] if twin else None)
    twins = changes_of.twin_nights(runs, twin["id"], metrics) if twin else None
    version = (twin.get("version") or "?") if twin else None
    said = (
        f"runner changes told apart by stable {version}'s own points, one a night"
        if twin
        else "runner changes not told apart: pass --stable BUILD, a pinned release the same runner ran each night"
    )
    return Searched(changes_of.changes(series, twins, version), series, said, twins, twin)


def tonight(db: Any, stable: Optional[str], limit: Callable[[str], float]) -> list[changes_of.Change]:
    """``check --changes``: the change points past ``limit(metric)`` that the history without each
    variant's newest build did not have (``changes.tonight``)."""
    try:
        now = found(db, stable, list(changes_of.METRICS))
    except store.StoreError as exc:
        raise fail(str(exc)) from exc
    newest: dict[Optional[str], TorchBuildRow] = {}
    for build in (b for series in now.series for b in series.builds):  # the twin's are not in a series
        known = newest.get(build.get("variant"))
        newest[build.get("variant")] = build if known is None or build_order(build) > build_order(known) else known
    version = (now.twin.get("version") or "?") if now.twin else None
    before = changes_of.changes(changes_of.without(now.series, {b["id"] for b in newest.values()}), now.twins, version)
    return changes_of.tonight(now.changes, before, limit)


def tonight_lines(shown: list[changes_of.Change]) -> list[str]:
    """What ``check --changes`` says: each new change point, or that there was none."""
    if not shown:
        return ["changes: no new change point past its threshold tonight"]
    head = [f"CHANGES: {len(shown)} new change point{'s' if len(shown) != 1 else ''} past its threshold tonight"]
    return head + [line for change in shown for line in lines(change)]


def lines(change: changes_of.Change) -> list[str]:
    """One change point in text: the headline, its range and what to run."""
    s, row = change.shift, change.series.row
    what = changes_of.METRICS[change.metric][1]
    how = "step" if s.kind == "step" else f"creep to {change.settled.get('version')} ({s.end - s.start + 1} builds)"
    trust = f"the runner's: {change.runner.split(': ', 1)[-1]}" if change.runner else (change.twin or "")
    head = (
        f"{'WORSE' if change.worse else 'BETTER'} {what} {change.size_text()} {how} from {change.first.get('version')}"
        f"{f' [{change.series.variant}]' if change.series.variant else ''}: {text.safe(rows.label(row))}"
    )
    commits = [change.before.get("git_version"), change.first.get("git_version")]
    out = [
        head,
        f"  after {change.before.get('version')}; commits {'..'.join((c or '?')[:12] for c in commits)}; "
        f"{s.before} builds before, {s.after} after; rank test p {s.p_value:.1g}" + (f"; {trust}" if trust else ""),
    ]
    out.append(f"  bisect: {NOT_BISECTED}")
    out.append(
        f"  rerun: diag run --torch {shlex.quote(str(change.first.get('version')))} {shlex.join(gate.row_flags(row))}"
    )
    return out


@cli.command("changes")
@click.option(
    "--since", default=None, metavar="DATE", help="Only change points whose first build is from DATE (YYYY-MM-DD) on."
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    type=click.Choice(list(changes_of.METRICS)),
    help="Only this metric (repeatable; default: all).",
)
@click.option("--case", "case_name", default=None, help="Only rows of this case.")
@click.option(
    "--stable",
    default=None,
    metavar="BUILD",
    help="A pinned release the same runner ran each night: a change it made the same night is the runner's.",
)
@click.option("--worse", "worse_only", is_flag=True, help="Only changes that made a metric worse.")
@db_option
@json_option
def changes_command(
    since: Optional[str],
    metrics: tuple[str, ...],
    case_name: Optional[str],
    stable: Optional[str],
    worse_only: bool,
    db_path: str,
    as_json: bool,
) -> None:
    """Change points over the history, newest first: where each row's compile time (cold, warm),
    compile instructions, guard time, latency (eager, compiled), peak memory, graphs, graph breaks
    and recompiles stepped or crept, dated to the first build that moved, with the size, its 95%
    interval and the commit range. A noisy latency or a compile that waited is no point.
    """
    if since is not None and not _is_date(since):
        raise click.BadParameter(f"{since!r} is not a date (YYYY-MM-DD)", param_hint="--since")
    db = read_store(db_path)
    try:
        listed, series, said, *_ = found(db, stable, metrics or list(changes_of.METRICS), case_name)
    except store.StoreError as exc:
        raise fail(str(exc)) from exc
    listed = [c for c in listed if (since is None or when(c) >= since) and (c.worse or not worse_only)]
    builds = {b.get("id") for s in series for b in s.builds}
    if as_json:
        click.echo(
            json.dumps(
                {
                    "series": len(series),
                    "builds": len(builds),
                    "runner": said,
                    "changes": [c.as_dict() for c in listed],
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"{len(listed)} change point{'s' if len(listed) != 1 else ''} over {len(builds)} builds, "
        f"{len(series)} series; {said}"
    )
    for change in listed:
        click.echo("\n".join(lines(change)))


def when(change: changes_of.Change) -> str:
    """The date of a change: its first build's nightly date, else the first night it ran."""
    stamp = change.first.get("nightly_date") or change.series.nights[change.shift.start]
    return str(stamp or "")[:10]


def _is_date(value: str) -> bool:
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True
