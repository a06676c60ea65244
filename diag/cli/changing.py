"""``diag changes``: the change points of the stored history, newest first (diag/verdicts/changes.py)."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from typing import Any, Callable, Optional

import click

from diag import row as rows
from diag import store, text
from diag.cli.common import cli, db_option, fail, json_option, read_store
from diag.verdicts import changes as changes_of
from diag.verdicts import dated

NOT_BISECTED = (
    "diag bisect judges a build by its status, a key or a count, not yet by a time or memory figure: "
    "the commit range is where to look"
)


def bisect_command(change: changes_of.Change) -> Optional[str]:
    """The bisect that searches a change of a count between the builds either side of it; None for a
    figure bisect cannot judge on."""
    on = changes_of.COUNTED.get(change.metric)
    if on is None:
        return None
    ends = ["--good", str(change.before.get("version")), "--bad", str(change.first.get("version"))]
    return shlex.join(["diag", "bisect", *rows.flags(change.series.row), *ends, "--on", f"count:{on}"])


def tonight(db: Any, stable: Optional[str], limit: Callable[[str], float]) -> list[changes_of.Change]:
    """``check --changes``'s change points (``dated.tonight``), a DB with no runs refused in one line."""
    try:
        return dated.tonight(db, stable, limit)
    except store.StoreError as exc:
        raise fail(str(exc)) from exc


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
    how = (
        "step"
        if s.kind == "step"
        else f"creep, still rising at {change.settled.get('version')}"
        if s.ongoing
        else f"creep to {change.settled.get('version')} ({s.end - s.start + 1} builds)"
    )
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
    out.append(f"  bisect: {bisect_command(change) or NOT_BISECTED}")
    out.append(
        f"  rerun: diag run --torch {shlex.quote(str(change.first.get('version')))} {shlex.join(rows.flags(row))}"
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
        listed, series, said, *_ = dated.found(db, stable, metrics or list(changes_of.METRICS), case_name)
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
