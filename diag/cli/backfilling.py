"""``diag backfill``: a matrix over the nightlies of a date range, sharded as ``diag run`` is."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

import click

from diag import backfill, envs, store, text
from diag.build import NIGHTLY
from diag.cli import params, running, sharding
from diag.cli.common import cli, db_option, fail, json_option, progress
from diag.run import matrix, shard


@cli.command("backfill")
@click.option(
    "--from",
    "first",
    required=True,
    type=params.DAY,
    metavar="TEXT",
    help="First day: a date (2023-06-01) or a dated nightly (2.1.0.dev20230601).",
)
@click.option(
    "--to",
    "last",
    required=True,
    type=params.DAY,
    metavar="TEXT",
    help="Last day, as --from. Dated nightlies at both ends also find "
    "builds the index no longer lists, at their direct URLs.",
)
@click.option(
    "--every",
    type=params.EVERY,
    metavar="TEXT",
    default="1d",
    show_default=True,
    help="One build per this many days (1d, 7d, 2w): each window's earliest.",
)
@click.option(
    "--part",
    "part_args",
    multiple=True,
    required=True,
    type=params.RUN_ARGS,
    metavar="'RUN ARGS'",
    help="What to run on each build: the arguments of one diag run without --torch, quoted. Repeatable. "
    "Its --index-url, --variant and --find-links say where the nightlies are found.",
)
@click.option(
    "--history",
    "history_path",
    type=params.DB_FILE,
    default=None,
    help="A diag DB: its builds are skipped (and named as candidates), its durations cost the rows.",
)
@click.option(
    "--shard",
    "wanted",
    type=params.SHARD,
    default=None,
    metavar="K/N|auto",
    help="Run share K of N of the backfill (see diag run --shard).",
)
@click.option("--dry-run", is_flag=True, help="Print the builds it would run, and run nothing.")
@db_option
@json_option
def backfill_command(
    first: backfill.End,
    last: backfill.End,
    every: int,
    part_args: tuple[list[str], ...],
    history_path: Optional[str],
    wanted: Optional[shard.Shard],
    dry_run: bool,
    db_path: str,
    as_json: bool,
) -> None:
    """Run a matrix over the nightlies between two days, one every --every days.

    Builds the history (--history, else --db) already has are skipped. Sharded with --shard,
    every worker finds the same builds and plans the same shares, as diag run --shard does.
    """
    parts = [sharding.parse_part(i, args, "--part") for i, args in enumerate(part_args)]
    for part in parts:
        if [spec.kind for spec in part.torch_specs] != ["current"]:
            raise fail(f"--part {part.index}: gives --torch; backfill chooses the builds")
    # Sharded workers each write their own DB: only --history, the same file everywhere, may decide
    # what is skipped, or two workers would plan two different backfills.
    history = history_path or (db_path if wanted is None and Path(db_path).is_file() else None)
    if history_path is not None and not Path(history_path).is_file():
        raise fail(f"--history {history_path}: no such file (the builds it holds are the ones skipped)")
    stored = (
        [b["version"] for b in store.builds(store.open_db(history, readonly=True)) if b["version"]] if history else []
    )
    request = parts[0].env_options.request(NIGHTLY)
    found = backfill.select(first, last, every, request, [Path(f) for f in request.find_links], stored)
    for note in found.notes:
        progress(text.safe(note))
    progress(
        f"{len(found.builds)} builds to run, {len(found.skipped)} in the history already"
        + (f", {len(found.empty_windows)} windows with no build" if found.empty_windows else "")
    )
    if dry_run:
        summary = {
            "builds": found.builds,
            "skipped": found.skipped,
            "empty_windows": found.empty_windows,
            "sources": found.sources,
        }
        click.echo(
            json.dumps(summary, indent=2)
            if as_json
            else "\n".join(f"{build}  ({', '.join(found.sources[build])})" for build in found.builds)
        )
        return
    if not found.builds:
        return
    specs = tuple(envs.parse_spec(build) for build in found.builds)  # the builds found, parsed as they enter
    parts = [replace(part, torch_specs=specs) for part in parts]
    matrix.resolve_cases(parts, progress)
    keys = running.share_of(parts, wanted, history_path) if wanted else None
    running.execute(parts, keys, db_path, as_json)
