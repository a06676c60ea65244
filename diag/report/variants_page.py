"""The variants page: on the newest build, the races stored there (``diag race``: variants timed in
one probe, a row per variant against the race's first case), each timed case set against the first
one by name (``diag compare --case A --case B``'s verdicts, per point of a sweep), and throughput and
peak memory against the swept parameter, a line per variant with the 95% interval of each point as a
bar."""

from __future__ import annotations

from typing import Any, Optional

from diag import build, store
from diag import row as rows
from diag.report import charts, svg
from diag.run import profile
from diag.store.typed import StoredRace, StoredRun, TorchBuildRow
from diag.verdicts import variants, why


def context(db, builds: list[TorchBuildRow], runs: list[StoredRun]) -> Optional[dict[str, Any]]:
    """What variants.html shows, or None where no build has a race and the newest fewer than two timed
    cases. ``builds``: the builds with runs, oldest first; races are shown of the newest build that has
    any, which may have no runs."""
    every_race = store.races(db) if "races" in db.table_names() else []  # an old history has no such table
    raced_ids = {race["torch_build_id"] for race in every_race}
    raced_builds = sorted((b for b in store.builds(db) if b["id"] in raced_ids), key=build.order)
    raced_on = raced_builds[-1] if raced_builds else None
    # the newest race first, each race's rows in the order its cases were given
    found = [race for race in every_race if raced_on and race["torch_build_id"] == raced_on["id"]]
    raced = [_race_row(race) for race in sorted(found, key=lambda r: (r["started_at"], -r["id"]), reverse=True)]
    newest = builds[-1] if builds else None
    timed = [r for r in runs if newest and r["torch_build_id"] == newest["id"] and r.get("eager_ms_per_token")]
    cases = sorted({r["case"] or "" for r in timed})
    if len(cases) < 2:
        if not raced:
            return None
        cases, timed = [], []
    full = list(store.full_runs(db, [r["id"] for r in timed]))
    by_case: dict[str, list[StoredRun]] = {}
    for run in full:
        by_case.setdefault(run["case"] or "", []).append(run)
    reference = cases[0] if cases else None
    against = [(case, variants.compare(by_case[cases[0]], by_case[case])) for case in cases[1:]]
    return {
        "build": newest if cases else raced_on,
        "raced_on": raced_on,
        "races": raced,
        "reference": reference,
        "against": [(case, points) for case, points in against if points],
        "charts": [made for made in [charts.race_trend(every_race, raced_builds)] if made]
        + charts.variant_charts(full),
        "min_effect": variants.MIN_EFFECT,
    }


def _race_row(race: StoredRace) -> dict[str, Any]:
    """A stored race row as the page's table shows it: its config label, and the error of a variant
    that was not raced in one line."""
    shown: dict[str, Any] = dict(race)
    shown["config"] = rows.config_label(race)
    message = (race.get("error_message") or "").strip().splitlines()
    shown["error_line"] = message[0][:300] if message else None
    stored = why.stored_breakdown(race.get("profile"))
    shown["breakdown"] = stored.as_dict() if stored is not None else None
    if shown["breakdown"] and shown["breakdown"].get("groups"):
        # every chart's bars in one order of groups, each group in its one colour (group_colour)
        groups = sorted(shown["breakdown"]["groups"], key=lambda g: GROUP_ORDER.get(g["name"], len(GROUP_ORDER)))
        bars = [
            _bar(race["baseline"] or "", {g["name"]: g["ms_baseline"] for g in groups}, race.get("ms_baseline")),
            _bar(race["case"] or "", {g["name"]: g["ms_case"] for g in groups}, race.get("ms_case")),
        ]
        title = (
            f"{race['case']} against {race['baseline']}: each decode step by op group, profiled, "
            "and the rest of the time the race measured (ms per token)"
        )
        shown["stacked"] = svg.stacked_bars(title, bars, "ms", group_colour)
    return shown


# One order and one colour per op group on every chart of the site, whichever groups a chart holds
GROUP_ORDER = {name: index for index, name in enumerate([*(name for name, _ in profile.GROUPS), profile.OTHER])}
REST = "measured, in no profiled op"  # the race's median less what the profiled ops add up to
REST_COLOUR = "#c7c7c7"


def group_colour(name: str) -> str:
    if name == REST:
        return REST_COLOUR
    index = GROUP_ORDER.get(name)
    if index is None:  # a group a newer diag stored: a colour of its name's, the same on every page
        index = len(GROUP_ORDER) + sum(name.encode("utf-8")) % len(svg.PALETTE)
    return svg.PALETTE[index % len(svg.PALETTE)]


def _bar(label: str, groups: dict[str, float], measured: Optional[float]) -> tuple[str, dict[str, float]]:
    """A variant's bar: its profiled groups, then the rest of the time the race measured (not drawn
    where the profiled groups add up to more: the profiler's own cost)."""
    rest = (measured or 0.0) - sum(v for v in groups.values() if v > 0)
    return label, {**groups, REST: rest} if measured is not None and rest > 0 else groups
