"""``diag bisect``: the first bad build between a good one and a bad one.

The search is pure (diag/searching.py: judged on a signal, over one run or many a build); ``bisect``
supplies the runs, reusing those already in the DB and provisioning the builds it still has to
probe. A build that cannot be installed is skipped and named, never taken as good or bad.
"""

from __future__ import annotations

import datetime
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from diag import envs, store
from diag import row as rows
from diag.build import Spec, Version, nightly_spec, version_key
from diag.contract import Config
from diag.envs import wheels
from diag.run import runner
from diag.run.catalog import CaseRef
from diag.searching import STEADY, BisectError, BuildTester, confirmed_search
from diag.signal import STATUS, Signal, SignalError, calibrated
from diag.store.typed import StoredRun


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


def find_stored(db, spec: str, row: rows.Row) -> Optional[StoredRun]:
    """The newest stored run of ``row`` on the build whose version is ``spec``."""
    found = stored_runs(db, spec, row)
    return found[-1] if found else None


def stored_runs(db, spec: str, row: rows.Row) -> list[StoredRun]:
    """Every stored run of ``row`` on the build whose version is ``spec``, oldest first."""
    for build in store.builds(db):
        if _base(build["version"] or "") == spec:
            runs = [r for r in store.runs_of_build(db, build["id"]) if rows.of(r) == row]
            if runs:
                return runs
    return []


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
    """What a bisect moves: torch builds (the default), or one package's releases with torch fixed
    (transformers, or any installed distribution: its version read from the runs' environments)."""

    name: str = "torch"
    torch: Optional[str] = None  # the fixed torch spec, when a package moves

    def find_stored(self, db, spec: str, row: rows.Row) -> Optional[StoredRun]:
        found = self.stored(db, spec, row)
        return found[-1] if found else None

    def stored(self, db, spec: str, row: rows.Row) -> list[StoredRun]:
        """The stored runs of ``row`` at ``spec`` on this axis, oldest first."""
        if self.name == "torch":
            return stored_runs(db, spec, row)
        for build in reversed(store.builds(db)):
            if _base(build["version"] or "") != self.torch:
                continue
            runs = [r for r in store.runs_of_build(db, build["id"]) if rows.of(r) == row]
            held = {} if self.name == "transformers" else store.environments(db, (r.get("environment") for r in runs))
            runs = [r for r in runs if self._version(r, held) == spec]
            if runs:
                return runs
        return []

    def _version(self, run: StoredRun, held: dict[str, dict[str, Any]]) -> Optional[str]:
        """The moved package's version in the run's environment (``held``: the runs' environments by
        digest, read once for a build's runs; transformers' is the run's own column)."""
        if self.name == "transformers":
            return run.get("transformers_version")
        environment = held.get(run.get("environment") or "")
        return environment["packages"].get(self.name) if environment else None

    def summary(self, run: Optional[StoredRun], spec: str) -> dict:
        found = _build_summary(run)
        if self.name != "torch":
            found.update({"package": self.name, self.name: spec})
        return found

    def reproduce(self, spec: str, row: rows.Row) -> str:
        """The one command that runs ``row`` on ``spec`` again."""
        moved = (
            ["--torch", spec]
            if self.name == "torch"
            else ["--torch", self.torch or "", "--with", f"{self.name}=={spec}"]
        )
        return shlex.join(["diag", "run", *moved, *rows.flags(row)])

    def compare(self, last_good: dict, first_bad: dict) -> tuple[Optional[str], Optional[str]]:
        """The range of changes between the two ends (``git log`` form) and a page that shows it."""
        if self.name != "torch":
            good, bad = last_good[self.name], first_bad[self.name]
            if self.name != "transformers":  # no repository known: the first bad release's page
                return f"{self.name} {good}..{bad}", f"https://pypi.org/project/{self.name}/{bad}/"
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


@dataclass
class Probe:
    """The runs of one row on each build a bisect asks of: those stored first, then fresh ones (the
    build provisioned once it is first run; one that cannot be is named in ``failures``)."""

    db: Any
    db_path: Path
    case: CaseRef
    config: Config
    provision: Callable[[str], envs.TorchEnv]
    timeout_s: float
    axis: Axis
    signal: Signal
    log: Callable[[str], None]
    runs: dict[str, list[StoredRun]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def row(self) -> rows.Row:
        return rows.of_config(asdict(self.config), self.case.name, self.case.source)

    def read(self, spec: str, index: int) -> Any:
        """The signal's value of run ``index`` of ``spec``; None where the build cannot be had."""
        if spec not in self.runs:
            # a ratio's stored runs only where they measured its figure (a count pass, a timing pass)
            stored = self.axis.stored(self.db, spec, self.row)
            self.runs[spec] = [r for r in stored if self.signal.needs is None or self.signal.figure(r) is not None]
            if self.runs[spec]:
                self.log(f"{spec}: reusing {len(self.runs[spec])} stored run(s)")
        if index >= len(self.runs[spec]):
            if spec in self.failures:
                return None
            try:
                env = self.provision(spec)
            except envs.EnvError as exc:
                self.failures[spec] = str(exc)
                self.log(f"{spec}: skipped, not installed ({exc})")
                return None
            self.log(f"{spec}: running {self.case.name} (run {index + 1})")
            needs = self.signal.needs
            config = replace(self.config, count_instructions=True) if needs == "count_instructions" else self.config
            job = runner.Job(env, self.case, config)
            record = runner.execute(job, self.db_path, self.timeout_s, timing=needs == "timing")
            made = store.get_run(self.db, store.save_run(self.db, record))
            assert made is not None  # just stored
            self.runs[spec].append(made)
        return self.signal.read(self.runs[spec][index])

    def end(self, spec: str, good_value: Any) -> dict:
        """What the answer says of a build: its first run that differed from the good end, else its newest."""
        made = self.runs.get(spec) or []
        differing = next((r for r in made if self.signal.read(r) != good_value), None)
        return self.axis.summary(differing or (made[-1] if made else None), spec)


def calibrated_against(probe: Probe, good: str, runs: int) -> Signal:
    """``probe``'s ratio signal set against the median of ``runs`` runs of the good end."""
    for index in range(runs):  # a run without the figure reads None: calibrated says so below
        if probe.read(good, index) is None and good in probe.failures:
            raise BisectError(f"cannot test {good}: {probe.failures[good]}")
    try:
        return calibrated(probe.signal, probe.runs[good][:runs])
    except SignalError as exc:
        raise BisectError(str(exc)) from exc


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
    signal: Signal = STATUS,
    confirm: int = 1,
) -> dict:
    """Search ``candidates`` (good first, bad last; torch specs, or transformers versions for ``axis``
    transformers) on ``signal``, confirming the last good build ``confirm`` times
    (``searching.confirmed_search``); a summary of the result."""
    probe = Probe(db, db_path, case, config, provision, timeout_s, axis or Axis(), signal, log)
    if signal.kind == "ratio":  # set against the good end's figure, from the runs that judge it
        signal = probe.signal = calibrated_against(probe, candidates[0], STEADY if confirm else 1)
    tester = BuildTester(probe.read, log=log, failures=probe.failures)
    found = confirmed_search(candidates, tester, confirm, signal.said)
    result, runs = found.result, probe.runs
    last_good, first_bad = probe.end(result.last_good, found.good_value), probe.end(result.first_bad, found.good_value)
    good, bad = runs[candidates[0]][0], runs[candidates[-1]][0]
    summary: dict[str, Any] = {
        "case": case.name,
        "row": rows.label(probe.row),
        "moved": probe.axis.name,
        "torch": probe.axis.torch,
        "signal": signal.text,
        "good_value": signal.said(found.good_value),
        "bad_values": [signal.said(v) for v in found.bad_values],
        "good_status": good["status"],
        "bad_status": bad["status"],
        "good_note": good.get("case_note"),
        "bad_note": bad.get("case_note"),
        "confirm": confirm,
        "runs_to_judge": found.runs_needed,
        "miss": found.miss,
        "topped_up": found.topped_up,
        "candidates": len(candidates),
        "tested": result.tested,
        "runs": {spec: len(made) for spec, made in runs.items()},
        "skipped": {spec: probe.failures.get(spec) for spec in result.skipped},
        "last_good": last_good,
        "first_bad": first_bad,
        "reproduce": probe.axis.reproduce(result.first_bad, probe.row)
        + (" --count-instructions" if signal.needs == "count_instructions" else ""),
        "reference": signal.reference,
    }
    summary["commit_range"], summary["compare_url"] = probe.axis.compare(last_good, first_bad)
    return summary
