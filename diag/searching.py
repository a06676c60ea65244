"""The search a bisect makes, pure: over ordered builds, each judged by its runs of a signal.

``search`` is a binary search that skips what cannot be tested. ``confirmed_search`` runs it with
builds judged on as many runs as the change needs to show: the ends first (the good end must agree
with itself; the share of the bad end's runs that differ says whether one run decides or a dozen),
then the last good build again. bench/bisect_flaky.py measures it on seeded flaky changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from diag.errors import DiagError


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


MISS = 0.01  # how likely a build the signal shows on as often as on the bad end may still pass as good
MOST_RUNS = 30  # of one build, whatever the bad end's rate
MOST_ENDS = 14  # runs of the bad end where the change shows in some only
BOUND = 0.1  # one-sided: the bad end's rate taken as the lowest this likely to give what its runs gave


def _tail(runs: int, shown: int, rate: float) -> float:
    """P(at least ``shown`` of ``runs`` show the signal) where each shows it at ``rate``."""
    return sum(math.comb(runs, k) * rate**k * (1 - rate) ** (runs - k) for k in range(shown, runs + 1))


def runs_to_judge(runs: int, shown: int) -> tuple[int, Optional[float]]:
    """How many runs a build must agree with the good end on before it is judged good, from the bad
    end (``shown`` of its ``runs`` differed from the good end), and how likely a build that shows the
    change as rarely as the bad end plausibly does (the lower ``BOUND`` of its rate) still passes them
    all. Every run of the bad end showing it: the signal is steady there, and one run decides."""
    if shown >= runs:
        return 1, None
    low, high = 0.0, shown / runs
    for _ in range(40):  # the rate at which seeing ``shown`` or more is BOUND likely
        middle = (low + high) / 2
        low, high = (middle, high) if _tail(runs, shown, middle) < BOUND else (low, middle)
    rate = max(high, 1e-6)
    needed = min(MOST_RUNS, max(1, math.ceil(math.log(MISS) / math.log(1 - rate))))
    return needed, (1 - rate) ** needed


@dataclass
class BuildTester:
    """How one build is judged on the signal: its runs (stored ones first, then fresh ones) against
    the good end's value. One run that differs makes it bad; it is good once ``runs_needed`` runs all
    agree (a flaky change shows in some runs only)."""

    read: Callable[[str, int], Any]  # (spec, index of the run) -> the signal's value; None: cannot be tested
    good_value: Any = None
    runs_needed: int = 1
    log: Callable[[str], None] = lambda message: None
    failures: dict[str, str] = field(default_factory=dict)
    seen: dict[str, list[Any]] = field(default_factory=dict)
    judged: dict[str, Verdict] = field(default_factory=dict)

    def values(self, spec: str, runs: int) -> Optional[list[Any]]:
        """The signal's values of the first ``runs`` runs of ``spec``; None where one cannot be had."""
        found = self.seen.setdefault(spec, [])
        while len(found) < runs:
            value = self.read(spec, len(found))
            if value is None:
                return None
            found.append(value)
        return found[:runs]

    def is_bad(self, spec: str, runs: Optional[int] = None) -> Verdict:
        """One run that differs from the good end: bad; ``runs`` (default ``runs_needed``) that agree:
        good; None where a run cannot be had (the build is skipped)."""
        if spec in self.judged and runs is None:
            return self.judged[spec]
        wanted = runs or self.runs_needed
        for index in range(wanted):
            values = self.values(spec, index + 1)
            if values is None:
                self.judged[spec] = None
                return None
            if values[index] != self.good_value:
                self.log(f"{spec}: run {index + 1} differs from the good end -> bad")
                self.judged[spec] = True
                return True
        self.log(f"{spec}: {wanted} run{'s' if wanted != 1 else ''} agree with the good end -> good")
        self.judged[spec] = False
        return False


@dataclass
class Confirmed:
    """A search whose ends ran ``confirm`` times each and whose last good build was topped up to as
    many runs: the result, and how sure it is."""

    result: SearchResult
    good_value: Any
    bad_values: list[Any]
    runs_needed: int
    miss: Optional[float]  # how likely a build before the boundary hid the change in all its runs
    topped_up: list[str] = field(default_factory=list)  # builds judged good that a confirming run showed bad


STEADY = 4  # runs of each end: the good end must agree with itself, and a bad end that differs in all is steady


def confirmed_search(candidates: list[str], tester: BuildTester, confirm: int, said: Callable[[Any], str]) -> Confirmed:
    """Run the good end ``STEADY`` times (it must agree with itself) and the bad end until it differs
    from it in ``STEADY`` runs running, or ``MOST_ENDS`` runs (it must differ at least once: what share
    it differs in sets how many runs judge a build good, ``runs_to_judge``); search the builds between,
    then run the last good build ``confirm`` more times: where one of those differs, it is bad and the
    search goes on below it. ``confirm`` 0: one run of each build decides, as a bisect that trusts
    its runs (or has one stored of each) asks."""
    good, bad = candidates[0], candidates[-1]
    steady, most = (STEADY, MOST_ENDS) if confirm else (1, 1)  # --confirm 0: one run of each build decides
    good_values = tester.values(good, steady)
    if good_values is None:
        raise BisectError(f"cannot test {good}: {tester.failures.get(good)}")
    if len({repr(v) for v in good_values}) > 1:
        gave = ", ".join(map(said, good_values))
        raise BisectError(f"{good} is not steady on the signal: its {steady} runs gave {gave}")
    tester.good_value = good_values[0]
    bad_values: list[Any] = []
    while len(bad_values) < most:
        found = tester.values(bad, len(bad_values) + 1)
        if found is None:
            raise BisectError(f"cannot test {bad}: {tester.failures.get(bad)}")
        bad_values = found
        if len(bad_values) == steady and all(v != tester.good_value for v in bad_values):
            break
    shown = sum(v != tester.good_value for v in bad_values)
    if not shown:
        raise BisectError(
            f"{good} and {bad} both give {said(tester.good_value)} in {steady} and {len(bad_values)} runs: "
            "nothing to bisect"
        )
    tester.runs_needed, miss = runs_to_judge(len(bad_values), shown)
    tester.judged.update({good: False, bad: True})
    topped: list[str] = []
    while True:
        result = search(candidates, tester.is_bad)
        last = result.last_good
        runs = len(tester.seen.get(last, [])) + confirm
        if last == good or confirm == 0 or not tester.is_bad(last, runs=runs):
            break
        topped.append(last)
        candidates = candidates[: candidates.index(last) + 1]
    result.tested = {spec: verdict for spec, verdict in tester.judged.items() if spec not in (good, bad)}
    result.skipped = [spec for spec, verdict in result.tested.items() if verdict is None]
    return Confirmed(result, tester.good_value, bad_values, tester.runs_needed, miss, topped)
