"""``diag bisect``: the first bad build between a good one and a bad one.

The search is pure (``search``); ``Bisector`` supplies the verdicts, reusing
runs already in the DB and provisioning the builds it still has to probe. A
build that cannot be installed is skipped and reported, never fatal.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from diag import envs, store
from diag import row as rows
from diag.build import Spec, Version, nightly_spec, version_key
from diag.contract import Config
from diag.envs import wheels
from diag.errors import DiagError
from diag.run import runner
from diag.run.catalog import CaseRef
from diag.store.typed import StoredRun


class BisectError(DiagError):
    pass


Verdict = Optional[bool]  # True: bad, False: good, None: could not be tested


@dataclass
class SearchResult:
    last_good: str
    first_bad: str
    tested: dict[str, Verdict] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def search(candidates: list[str], is_bad: Callable[[str], Verdict]) -> SearchResult:
    """Binary search over ``candidates`` (ordered; the first is good, the last is bad).

    Candidates that cannot be tested are skipped; the next probe is the untested
    candidate nearest the middle of the remaining range.
    """
    low, high = 0, len(candidates) - 1
    tested: dict[str, Verdict] = {}
    skipped: set[int] = set()
    while True:
        inner = [i for i in range(low + 1, high) if i not in skipped]
        if not inner:
            break
        middle = (low + high) / 2
        probe = min(inner, key=lambda i: (abs(i - middle), i))
        verdict = is_bad(candidates[probe])
        tested[candidates[probe]] = verdict
        if verdict is None:
            skipped.add(probe)
        elif verdict:
            high = probe
        else:
            low = probe
    return SearchResult(candidates[low], candidates[high], tested, [candidates[i] for i in sorted(skipped)])


def index_versions(index_url: str) -> list[str]:
    """torch versions listed on a PEP 503 simple index (``URL/torch/``), local labels dropped."""
    try:
        listed = wheels.listed_wheels(index_url)
    except wheels.WheelError as exc:
        raise envs.EnvError(str(exc)) from exc
    return sorted({w.base_version for w in listed}, key=version_key)


@dataclass
class Candidates:
    """The builds to search (good first, bad last), where each came from, and the dates with no build."""

    specs: list[str]
    sources: dict[str, list[str]] = field(default_factory=dict)
    missing_dates: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def candidates(
    good: Spec,
    bad: Spec,
    candidates_file: Optional[str],
    listing_index: Optional[str],
    variant: str,
    stored: Iterable[str] = (),
    request: Optional[envs.Request] = None,
) -> Candidates:
    """The builds to search, good first and bad last.

    With a file of specs, those. Otherwise the union of what the index lists, the builds already
    in the DB (``stored``), and, between two dated nightlies, every date in between whose wheel
    is served at its direct URL (the index lists only about two months); the dates with none are
    reported. envs.EnvError for a spec that is not installable, or when nothing can be searched.
    """
    check_ends(good, bad)
    if candidates_file:
        listed = [
            line.strip()
            for line in Path(candidates_file).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")
        ]
        for spec in listed:
            envs.parse_spec(spec)  # refuses a malformed spec before anything runs
        return Candidates(between(listed, good.text, bad.text), {spec: ["file"] for spec in listed})
    found = Candidates([])
    index = listing_index or envs.NIGHTLY_INDEX.format(variant=variant)
    try:
        for version in index_versions(index):
            found.sources.setdefault(version, []).append("index")
    except envs.EnvError as exc:
        found.notes.append(f"the index could not be listed ({exc}); searching stored builds and direct URLs")
    for version in stored:
        found.sources.setdefault(_base(version), []).append("db")
    if request is not None:
        _walk_dates(good, bad, request, found)
    found.specs = between(list(found.sources), good.text, bad.text)
    return found


def check_ends(good: Spec, bad: Spec) -> None:
    """EnvError unless both ends are releases or dated nightlies, good before bad."""
    for spec in (good, bad):
        if spec.kind not in ("release", "nightly_date"):
            raise envs.EnvError(
                f"bisect needs a release or a dated nightly at each end, not {spec.text!r} "
                "(a dated nightly: 2.1.0.dev20230621)"
            )
    if version_key(good.text) >= version_key(bad.text):
        raise envs.EnvError(f"the good build {good.text} must come before the bad build {bad.text}")


def _walk_dates(good: Spec, bad: Spec, request: envs.Request, found: Candidates) -> None:
    """Each date between two dated nightlies whose wheel exists at its direct URL (or locally)."""
    if good.kind != "nightly_date" or bad.kind != "nightly_date":
        return
    ends = [spec.version for spec in (good, bad) if spec.version is not None and spec.version.nightly_date]
    if len(ends) != 2:  # a dated nightly's spec always has both: nothing to walk otherwise
        return
    first, last = (datetime.date.fromisoformat(str(end.nightly_date)) for end in ends)
    series = sorted({".".join(map(str, end.release)) for end in ends}, key=version_key)
    tags = wheels.supported_tags(request.python)
    day = first + datetime.timedelta(days=1)
    while day < last:
        stamp = day.strftime("%Y%m%d")
        known = [nightly_spec(s, stamp) for s in series if nightly_spec(s, stamp) in found.sources]
        if not known:
            served = at_direct_url(series, stamp, request, tags)
            if served is not None:
                found.sources.setdefault(served, []).append("direct URL")
            else:
                found.missing_dates.append(stamp)
        day += datetime.timedelta(days=1)


def at_direct_url(series: Iterable[str], stamp: str, request: envs.Request, tags: list[str]) -> Optional[str]:
    """The dated nightly of ``stamp`` (YYYYMMDD) in the first of ``series`` whose wheel is served at
    its direct URL on the request's index, or None."""
    for name in series:
        spec = nightly_spec(name, stamp)
        if any(wheels.exists(url) for url in wheels.direct_urls(request.index, spec, request.variant, tags)):
            return spec
    return None


def _base(version: str) -> str:
    parsed = Version.lenient(version)
    return parsed.base if parsed else version


def between(versions: list[str], good: str, bad: str) -> list[str]:
    """``versions`` from ``good`` to ``bad`` inclusive, ordered; both ends always present."""
    order = version_key
    low, high = order(good), order(bad)
    if low >= high:
        raise envs.EnvError(f"the good build {good} must come before the bad build {bad}")
    inside = [v for v in versions if low < order(v) < high]
    return [good, *sorted(set(inside), key=order), bad]


@dataclass
class BuildTester:
    """How one build is tested: provision it (or reuse runs already stored), run the case, read the status."""

    run_build: Callable[[str], Optional[StoredRun]]  # spec -> the stored run, or None when it cannot be installed
    good_status: Optional[str] = None
    log: Callable[[str], None] = lambda message: None
    failures: dict[str, str] = field(default_factory=dict)

    def status(self, spec: str) -> Optional[str]:
        """The build's outcome (``outcome``), or None where it cannot be tested."""
        run = self.run_build(spec)
        return None if run is None else outcome(run)

    def is_bad(self, spec: str) -> Verdict:
        status = self.status(spec)
        if status is None:
            return None
        self.log(f"{spec}: {status} -> {'bad' if status != self.good_status else 'good'}")
        return status != self.good_status


def outcome(run: Mapping[str, Any]) -> str:
    """What a bisect compares between builds: the status, and whether the case had to note a fallback
    (``Generation.note``). A release on which transformers' static cache stops working, so that the
    case decodes with another cache, is a change to find even where both compile whole."""
    return run["status"] + (" (the case noted a fallback)" if run.get("case_note") else "")


def find_stored(db, spec: str, row: rows.Row) -> Optional[StoredRun]:
    """The newest stored run of ``row`` on the build whose version is ``spec``."""
    for build in store.builds(db):
        if _base(build["version"] or "") == spec:
            runs = [r for r in store.runs_of_build(db, build["id"]) if rows.of(r) == row]
            if runs:
                return runs[-1]
    return None


def _build_summary(run: Optional[StoredRun]) -> dict:
    if run is None:
        return {
            "version": None,
            "nightly_date": None,
            "git_version": None,
            "run": None,
            "status": None,
            "case_note": None,
        }
    return {
        "version": run["build_version"],
        "nightly_date": run["build_nightly_date"],
        "git_version": run["build_git_version"],
        "run": run["id"],
        "status": run["status"],
        "case_note": run.get("case_note"),
    }


@dataclass
class Axis:
    """What a bisect moves: torch builds (the default), or transformers releases with torch fixed."""

    name: str = "torch"
    torch: Optional[str] = None  # the fixed torch spec, when transformers moves

    def find_stored(self, db, spec: str, row: rows.Row) -> Optional[StoredRun]:
        if self.name == "torch":
            return find_stored(db, spec, row)
        for build in reversed(store.builds(db)):
            if _base(build["version"] or "") != self.torch:
                continue
            runs = [
                r
                for r in store.runs_of_build(db, build["id"])
                if rows.of(r) == row and r.get("transformers_version") == spec
            ]
            if runs:
                return runs[-1]
        return None

    def summary(self, run: Optional[StoredRun], spec: str) -> dict:
        found = _build_summary(run)
        if self.name == "transformers":
            found["transformers"] = spec
        return found

    def compare(self, last_good: dict, first_bad: dict) -> tuple[Optional[str], Optional[str]]:
        """The range of changes between the two ends (``git log`` form) and a page that shows it."""
        if self.name == "transformers":
            good, bad = last_good["transformers"], first_bad["transformers"]
            return f"v{good}..v{bad}", f"https://github.com/huggingface/transformers/compare/v{good}...v{bad}"
        good_git, bad_git = last_good["git_version"], first_bad["git_version"]
        if not (good_git and bad_git):
            return None, None
        return f"{good_git}..{bad_git}", f"https://github.com/pytorch/pytorch/compare/{good_git}...{bad_git}"


def release_versions(listed: Iterable[str], good: str, bad: str) -> list[str]:
    """The final releases in ``listed`` from ``good`` to ``bad`` (both always present), in order:
    pre-releases and development versions are left out, as users pin releases."""
    for end in (good, bad):
        parsed = Version.lenient(end)
        if parsed is None or parsed.pre or parsed.dev is not None:
            raise BisectError(f"{end!r} is not a release version (for example 4.57.1)")
    finals = []
    for version in listed:
        parsed = Version.lenient(version)
        if parsed is not None and not parsed.pre and parsed.dev is None and not parsed.local:
            finals.append(version)
    try:
        return between(finals, good, bad)
    except envs.EnvError as exc:
        raise BisectError(str(exc)) from exc


def _tested(spec: str, run: Optional[StoredRun], failures: dict[str, str]) -> StoredRun:
    """An end's run; BisectError where the build could not be tested."""
    if run is None:
        raise BisectError(f"cannot test {spec}: {failures.get(spec)}")
    return run


def bisect(
    db,
    db_path: Path,
    case: CaseRef,
    config: Config,
    candidates: list[str],
    provision: Callable[[str], envs.TorchEnv],
    timeout_s: float,
    log: Callable[[str], None] = lambda message: None,
    axis: Optional[Axis] = None,
) -> dict:
    """Test both ends, then search ``candidates`` (good first, bad last; torch specs, or transformers
    versions for ``axis`` transformers); a summary of the result."""
    axis = axis or Axis()
    row = rows.of_config(asdict(config), case.name, case.source)
    probe = BuildTester(lambda spec: None, log=log)

    def run_build(spec: str) -> Optional[StoredRun]:
        stored = axis.find_stored(db, spec, row)
        if stored is not None:
            log(f"{spec}: reusing run #{stored['id']}")
            return stored
        try:
            env = provision(spec)
        except envs.EnvError as exc:
            probe.failures[spec] = str(exc)
            log(f"{spec}: skipped ({exc})")
            return None
        log(f"{spec}: running {case.name}")
        record = runner.execute(runner.Job(env, case, config), db_path, timeout_s, timing=False)
        return store.get_run(db, store.save_run(db, record))

    probe.run_build = run_build
    good, bad = candidates[0], candidates[-1]
    good_run, bad_run = _tested(good, run_build(good), probe.failures), _tested(bad, run_build(bad), probe.failures)
    if outcome(good_run) == outcome(bad_run):
        raise BisectError(f"{good} and {bad} both give status {outcome(good_run)}: nothing to bisect")
    probe.good_status = outcome(good_run)
    result = search(candidates, probe.is_bad)
    last_good = axis.summary(axis.find_stored(db, result.last_good, row), result.last_good)
    first_bad = axis.summary(axis.find_stored(db, result.first_bad, row), result.first_bad)
    summary: dict[str, Any] = {
        "case": case.name,
        "moved": axis.name,
        "torch": axis.torch,
        "good_status": good_run["status"],
        "bad_status": bad_run["status"],
        "good_note": good_run.get("case_note"),
        "bad_note": bad_run.get("case_note"),
        "candidates": len(candidates),
        "tested": result.tested,
        "skipped": {spec: probe.failures.get(spec) for spec in result.skipped},
        "last_good": last_good,
        "first_bad": first_bad,
    }
    summary["commit_range"], summary["compare_url"] = axis.compare(last_good, first_bad)
    return summary
