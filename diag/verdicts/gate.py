"""``diag compare`` and ``diag check``: pick the runs to compare from the DB, then apply regress."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from diag import pages, store
from diag import row as rows
from diag.build import order as build_order
from diag.store.typed import StoredRun, TorchBuildRow
from diag.verdicts import causes as causes_of
from diag.verdicts import regress


@dataclass
class Outcome:
    description: str
    comparisons: list[regress.RowComparison]
    regressions: list[regress.Regression]
    inconclusive: list[regress.Regression] = field(default_factory=list)
    host_changed: list[regress.Regression] = field(default_factory=list)
    causes: list[causes_of.Cause] = field(default_factory=list)  # the regressions grouped by what broke them


def _by_row(runs: list[StoredRun]) -> dict[rows.Row, list[StoredRun]]:
    grouped: dict[rows.Row, list[StoredRun]] = {}
    for run in sorted(runs, key=lambda r: r["id"]):
        grouped.setdefault(rows.of(run), []).append(run)
    return grouped


def _in_order(keys) -> list[rows.Row]:
    return sorted(keys, key=rows.sort_key)


def environment(run: StoredRun) -> tuple[str, str]:
    """What beside torch decides a run: the Python minor version and the transformers version."""
    python = ".".join((run.get("python") or "?").split(".")[:2])
    return python, run.get("transformers_version") or "?"


def both_moved(row: rows.Row, before: StoredRun, after: StoredRun) -> str:
    """Where a row's status changed between two builds on which torch and transformers both moved:
    that neither alone is to blame yet, and the two bisects that tell which (each moves one side,
    the other held where the baseline had it)."""
    old_torch, new_torch = (str(run.get("build_version") or "").split("+", 1)[0] for run in (before, after))
    old_tf, new_tf = before.get("transformers_version"), after.get("transformers_version")
    if before["status"] == after["status"] or not (old_tf and new_tf and old_torch and new_torch):
        return ""
    if old_tf == new_tf or old_torch == new_torch:
        return ""
    flags = shlex.join(rows.flags(row))
    return (
        f". The status changed ({before['status']} -> {after['status']}) while both torch ({old_torch} -> "
        f"{new_torch}) and transformers ({old_tf} -> {new_tf}) moved; to tell which, bisect each:"
        f"\n      diag bisect {flags} --good {old_torch} --bad {new_torch} --with transformers=={old_tf}"
        f"\n      diag bisect {flags} --transformers {old_tf}..{new_tf} --torch {old_torch}"
    )


def compare_build_runs(
    before_runs: list[StoredRun], after_runs: list[StoredRun], like_with_like: bool = True
) -> list[regress.RowComparison]:
    """Findings of the newest run per row on each side; timings over every run of the row on each side.

    Like with like (the gate): a row's baseline runs are those with the newest run's Python and
    transformers; where there are none (transformers moved), the row is not compared, and says why.
    Otherwise (``diag compare`` of two builds) every row is compared, and one whose sides ran
    another Python or transformers says so.
    """
    pools_before, pools_after = _by_row(before_runs), _by_row(after_runs)
    comparisons = []
    for row in _in_order(set(pools_before) | set(pools_after)):
        before, after = pools_before.get(row, []), pools_after.get(row, [])
        if before and after and not like_with_like:
            deciding_before, deciding_after = rows.deciding_run(before), rows.deciding_run(after)
            comparison = regress.compare_runs(deciding_before, deciding_after, before, after)
            was, now = environment(deciding_before), environment(deciding_after)
            if was != now:
                also = "also different: " + ", ".join(
                    f"{name} {old} -> {new}"
                    for name, old, new in zip(("Python", "transformers"), was, now)
                    if old != new
                )
                comparison.note = f"{comparison.note}; {also}" if comparison.note else also
            comparisons.append(comparison)
            continue
        if before and after:
            wanted = environment(rows.deciding_run(after))
            alike = [r for r in before if environment(r) == wanted]
            if not alike:
                comparison = regress.compare_runs(None, rows.deciding_run(after))
                was = environment(rows.deciding_run(before))
                comparison.note = (
                    f"not compared: the baseline ran Python {was[0]}, transformers {was[1]}; "
                    f"now Python {wanted[0]}, transformers {wanted[1]}"
                ) + both_moved(row, rows.deciding_run(before), rows.deciding_run(after))
                comparisons.append(comparison)
                continue
            before = alike
        comparisons.append(
            regress.compare_runs(
                rows.deciding_run(before) if before else None,
                rows.deciding_run(after) if after else None,
                before,
                after,
            )
        )
    return comparisons


def _invocations(history: list[StoredRun]) -> list[list[StoredRun]]:
    """A row's runs grouped by the ``diag run`` that made them, oldest group first (a run with no
    invocation recorded is a group of its own)."""
    groups: dict[Any, list[StoredRun]] = {}
    for run in history:
        groups.setdefault(run.get("invocation") or ("run", run["id"]), []).append(run)
    return sorted(
        groups.values(), key=lambda group: max((r.get("started_at") or "", r.get("uid") or "") for r in group)
    )


def compare_within_build(runs: list[StoredRun]) -> list[regress.RowComparison]:
    """Each row's newest invocation against the invocation of that row before it, on one build (A/A, reruns)."""
    comparisons = []
    grouped = _by_row(runs)
    for row in _in_order(grouped):
        groups = _invocations(grouped[row])
        before = groups[-2] if len(groups) > 1 else []
        comparisons.append(
            regress.compare_runs(
                rows.deciding_run(before) if before else None, rows.deciding_run(groups[-1]), before, groups[-1]
            )
        )
    return comparisons


def compare(db, a: str, b: str) -> Outcome:
    """Two run ids (digits) or two builds (version, git prefix, build:ID)."""
    if a.isdigit() and b.isdigit():
        before, after = store.get_run(db, int(a)), store.get_run(db, int(b))
        if before is None or after is None:
            raise store.StoreError(f"no run #{a if before is None else b}")
        differ = rows.differences(rows.of(before), rows.of(after))
        note = f" (different rows: {', '.join(differ)})" if differ else ""
        builds = {build["id"]: build for build in store.builds(db)}
        others = identity_differences(
            builds[before["torch_build_id"]], builds[after["torch_build_id"]], [before], [after]
        )
        note += f" (also different: {'; '.join(others)})" if others else ""
        return Outcome(f"run #{a} -> run #{b}{note}", [regress.compare_runs(before, after)], [])
    if a.isdigit() or b.isdigit():
        raise store.StoreError("compare two run ids or two builds, not one of each")
    build_a, build_b = store.find_build(db, a), store.find_build(db, b)
    if build_a["id"] == build_b["id"]:
        return Outcome(
            f"reruns on {build_a['version']}", compare_within_build(store.runs_of_build(db, build_a["id"])), []
        )
    runs_a, runs_b = store.runs_of_build(db, build_a["id"]), store.runs_of_build(db, build_b["id"])
    differences = identity_differences(build_a, build_b, runs_a, runs_b)
    also = f" (also different: {'; '.join(differences)})" if differences else ""
    return Outcome(
        f"{build_a['version']} -> {build_b['version']}{also}",
        compare_build_runs(runs_a, runs_b, like_with_like=False),
        [],
    )


def variant_runs(
    db, case_a: str, case_b: str, build_ref: Optional[str]
) -> tuple[TorchBuildRow, list[StoredRun], list[StoredRun]]:
    """The build and each case's runs on it: ``build_ref``'s, else the newest build with runs of both."""
    if build_ref is not None:
        candidates = [store.find_build(db, build_ref)]
    else:
        candidates = sorted(store.builds(db), key=build_order, reverse=True)
    for build in candidates:
        runs = store.runs_of_build(db, build["id"])
        runs_a, runs_b = _of_case(runs, case_a), _of_case(runs, case_b)
        if runs_a and runs_b:
            for case, chosen in ((case_a, runs_a), (case_b, runs_b)):
                sources = sorted({rows.of(run).case_source for run in chosen})
                if len(sources) > 1:
                    # one name, two case files: pooling them would time neither (a row is case and source)
                    raise store.StoreError(
                        f"--case {case} names runs of {len(sources)} case files on {build['version']} "
                        f"({', '.join(sources)}): give the file's path as --case to choose one"
                    )
            return build, runs_a, runs_b
    where = f"on {candidates[0]['version']}" if build_ref is not None else "on any one build"
    raise store.StoreError(
        f"no runs of both {case_a!r} and {case_b!r} {where} (diag run --case {case_a} --case {case_b})"
    )


def _of_case(runs: list[StoredRun], case: str) -> list[StoredRun]:
    """The runs a --case value names: a case name, or a case file by its path (its runs' source)."""
    if case.endswith(".py"):
        source = str(Path(case).resolve())
        return [run for run in runs if rows.of(run).case_source == source]
    return [run for run in runs if run["case"] == case]


def identity_differences(
    build_a: TorchBuildRow, build_b: TorchBuildRow, runs_a: list[StoredRun], runs_b: list[StoredRun]
) -> list[str]:
    """What else differs between two builds' runs than torch itself: variant, CUDA, Python, transformers."""

    def seen(runs: list[StoredRun], index: int) -> str:
        return ", ".join(sorted({environment(run)[index] for run in runs})) or "-"

    pairs = [
        ("variant", build_a.get("variant") or "-", build_b.get("variant") or "-"),
        ("CUDA", build_a.get("cuda_version") or "none", build_b.get("cuda_version") or "none"),
        ("Python", seen(runs_a, 0), seen(runs_b, 0)),
        ("transformers", seen(runs_a, 1), seen(runs_b, 1)),
    ]
    return [f"{name} {was} -> {now}" for name, was, now in pairs if was != now]


def newest_builds(db) -> list[TorchBuildRow]:
    """The newest build of each variant (cpu, cu126, ...), oldest of them first: what ``check`` judges."""
    ordered = sorted(store.builds(db), key=build_order)
    newest = {b["variant"]: b for b in ordered}
    return sorted(newest.values(), key=build_order)


def check(
    db, baseline: Optional[str], thresholds: regress.Thresholds, allowed: set[str], stable: Optional[str] = None
) -> Outcome:
    """The newest build of each variant (cpu, cu126, ...) against the build before it of the same variant,
    or against ``baseline`` (then only the newest build of that baseline's variant); on a variant with
    one build, each row's newest invocation against the one before it. With ``stable``, a pinned
    release the same runner ran each night: slowdowns it shared are the host's (regress.against_stable)."""
    ordered = sorted(store.builds(db), key=build_order)
    if not ordered:
        raise store.StoreError("the database has no runs to check")
    pairs = []
    if baseline is not None:
        base = store.find_build(db, baseline)
        same = [b for b in ordered if b["variant"] == base["variant"]]
        pairs.append((base, same[-1]))
    else:
        for variant in sorted({b["variant"] for b in ordered}, key=lambda name: name or ""):
            same = [b for b in ordered if b["variant"] == variant]
            pairs.append((same[-2] if len(same) > 1 else same[-1], same[-1]))
    comparisons, descriptions = [], []
    for base, newest in pairs:
        after_runs = store.runs_of_build(db, newest["id"])
        if base["id"] == newest["id"]:
            comparisons += compare_within_build(after_runs)
            descriptions.append(f"newest invocation on {newest['version']} against the one before it")
        else:
            comparisons += compare_build_runs(store.runs_of_build(db, base["id"]), after_runs)
            descriptions.append(f"{newest['version']} against baseline {base['version']}")
    found = [r for c in comparisons for r in regress.regressions(c, thresholds, allowed)]
    unjudged = [r for c in comparisons for r in regress.inconclusive(c, thresholds)]
    host: list[regress.Regression] = []
    if stable is not None:
        twin = store.find_build(db, stable)
        changes = {
            (c.row, t.metric): t for c in compare_within_build(store.runs_of_build(db, twin["id"])) for t in c.timings
        }
        found, host = regress.against_stable(found, changes, twin["version"] or "?", thresholds)
        descriptions.append(f"slowdowns set against stable {twin['version']}'s newest invocation and the one before")
    sides = [run for c in comparisons for run in (c.before, c.after) if run is not None]
    held = store.environments(db, (run.get("environment") for run in sides))
    return Outcome("; ".join(descriptions), comparisons, found, unjudged, host, causes_of.of(found, held))


def read_allow_list(path: Optional[str]) -> set[str]:
    """Keys known to be flaky: one per line; '#' starts a comment."""
    if not path:
        return set()
    with open(path, encoding="utf-8") as handle:
        return {line.split("#", 1)[0].strip() for line in handle} - {""}


def _smallest(cause: causes_of.Cause) -> tuple[StoredRun, StoredRun]:
    """The last good and first bad run of the cause's smallest row (fewest tokens, batch and prompt):
    its repro and its bisect."""
    sizes = ("new_tokens", "batch_size", "prompt_length")
    return min(cause.sides.values(), key=lambda pair: tuple(pair[1].get(n) or 0 for n in sizes) + (pair[1]["id"],))


def _bisect_line(stored: Optional[dict[str, Any]], cause: causes_of.Cause, before: StoredRun, after: StoredRun) -> str:
    """The alert's bisect: the one stored for the row, else the command that runs it, moving what moved
    between the two runs: torch's builds where torch moved; else, torch held, the releases of the
    package that moved (the cause's owner first), transformers' included."""
    if stored is not None:
        return (
            f"Bisected (#{stored['id']}, on {stored['signal']}): first bad {stored['first_bad']} after "
            f"{stored['last_good']}, {stored['commit_range'] or 'no commit range'}; reproduce: `{stored['reproduce']}`"
        )
    flags = shlex.join(rows.flags(rows.of(after)))
    good, bad = (str(run.get("build_version") or "?").split("+", 1)[0] for run in (before, after))
    if causes_of.moved(before, after)[:1] == ["torch"]:
        return f"Bisect: `diag bisect {flags} --good {good} --bad {bad}`"
    releases = {
        **cause.moved_versions,
        "transformers": (before.get("transformers_version"), after.get("transformers_version")),
    }
    movable = [name for name, (old, new) in releases.items() if old and new and old != new]
    movable.sort(key=lambda name: name != cause.owner)
    if not movable:
        moved = ", ".join(cause.moved.values()) or "nothing diag records"
        return f"Bisect: none to run: torch did not move, and no package moved from one release to another ({moved})"
    return "\n".join(
        f"Bisect: `diag bisect {flags} --package {name}={releases[name][0]}..{releases[name][1]} --torch {good}`"
        for name in movable
    )


def alerts(
    outcome: Outcome, site_url: Optional[str] = None, bisected: Optional[dict[str, dict[str, Any]]] = None
) -> list[dict[str, Any]]:
    """One alert per cause, for an issue tracker: a title, a marker that stays the same for the cause
    (so that a night's alert comments on the cause's open issue instead of opening another), its
    owner and that owner's tracker, and a Markdown body with every row it hit, the last good and
    first bad build, the commit range, the error, the repro of its smallest row and the bisect: the one
    stored for that row where ``bisected`` (``store.bisects``) has one, else the command to run."""
    found = []
    for cause in outcome.causes:
        before, after = _smallest(cause)
        label = rows.label(rows.of(after))
        good_git, bad_git = before.get("build_git_version"), after.get("build_git_version")
        owner = f"owner: {cause.owner}" + (f" (file at {cause.tracker})" if cause.tracker else "")
        if cause.owner == causes_of.CASE_CODE:
            owner += ": the case's own bug, nothing to file upstream"
        lines = [f"`{cause.headline}` broke {cause.hit()}.", ""]
        lines += [f"> {pages.public_paths(cause.text)}", ""] if cause.text else []
        lines.append(f"- {owner}")
        lines += [f"- moved beside it: {', '.join(cause.moved.values())}"] if cause.moved else []
        lines += [f"- at `{pages.public_paths(cause.where)}`"] if cause.where else []
        lines += [
            f"- last good build: {before.get('build_version')} (git {good_git or 'unknown'}), run #{before['id']}",
            f"- first bad build: {after.get('build_version')} (git {bad_git or 'unknown'}), run #{after['id']}",
        ]
        if good_git and bad_git and good_git != bad_git:
            lines.append(f"- commits: https://github.com/pytorch/pytorch/compare/{good_git}...{bad_git}")
        lines += ["", "Rows it hit:", ""] + [f"- {r.message} (`{rows.label(r.row)}`)" for r in cause.regressions]
        if after.get("error_type"):
            message = pages.public_paths((after.get("error_message") or "").strip())
            lines += ["", f"Error: `{after['error_type']}`", "", "```", message[:2000], "```"]
        lines += ["", f"Reproduce the smallest row ({label}): `diag repro {after['id']} -o repro.py`"]
        lines.append(_bisect_line((bisected or {}).get(label), cause, before, after))
        if site_url:
            lines.append(f"Run page: {site_url.rstrip('/')}/{pages.run_href(after)}")
        marker = f"diag-cause:{cause.id}"
        lines += ["", f"<!-- {marker} -->"]
        said = f": {pages.public_paths(cause.text)[:80]}" if cause.text else ""
        title = f"diag: {cause.headline}{said} on {after.get('build_version')}, {cause.hit()}"
        found.append(
            {
                "title": title,
                "marker": marker,
                "owner": cause.owner,
                "tracker": cause.tracker,
                "rows": [rows.label(row) for row in cause.rows],
                "body": "\n".join(lines),
            }
        )
    return found
