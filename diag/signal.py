"""What a bisect searches on: a signal of a run that a good build and a bad build differ on.

- ``status``: the run's status, and whether the case noted a fallback (what ``diag bisect`` always
  compared);
- ``key:KEY``: whether the run has a finding of that key: a GB id or graph-break key, a recompile's
  guard key or the property its guard checked (``size[1]``), a hidden error's key;
- ``count:NAME``: one of the exact counts a contract holds (``counts``: ``graphs``, ``graph_breaks``,
  ``graph_breaks GB0124``, ``recompiles size[1]``, ``hidden_errors``, ``counter inductor.fusions``...),
  changed from the good build's; ``count:NAME>=V`` (or ``>``, ``<=``, ``<``): crossing V;
- ``code``: the code the run compiled (its ``code_digest``: each graph's, inductor's output code or
  dynamo's graph), changed from the good build's; where the run holds no digest, why not;
- ``ratio:instructions>=R``, ``ratio:latency>=R`` (or ``<=R``, for a speed-up): the cold compile's
  instructions, or the compiled latency, at R times the good end's (the median of its runs, set by
  ``calibrated`` before the search) or past it. A latency counts as past only where its whole 95%
  interval is: a noisy run that cannot show the change reads as within, and the search's runs per
  build (searching.py) make up for a change some runs hide.

A count absent from a run is 0. Pure: no I/O.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from diag.store.typed import children

# counters whose keys are torch's messages, not names (the graph breaks' texts): counted per GB id above
_MESSAGE_SECTIONS = {"unimplemented", "graph_break"}
_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


def _per(found: list[Any], field: str, fallback: str, weight: str) -> dict[str, int]:
    counted: dict[str, int] = {}
    for item in found:
        key = item.get(field) or item.get(fallback) or "?"
        counted[key] = counted.get(key, 0) + ((item.get(weight) or 1) if weight else 1)
    return counted


def _gb_id(item: Mapping[str, Any]) -> Optional[str]:
    key = item.get("key") or ""
    return key if re.fullmatch(r"GB\d+", key) else None


def counts(run: Mapping[str, Any]) -> dict[str, int]:
    """The exact counts of ``run`` as a contract holds them, zeros left out but the totals'."""
    found: dict[str, int] = {}
    for name, column in (
        ("graphs", "graph_count"),
        ("graph_breaks", "graph_break_count"),
        ("recompiles", "recompile_count"),
        ("hidden_errors", "hidden_error_count"),
        ("second_call_recompiles", "second_call_recompiles"),
    ):
        value = run.get(column)
        if isinstance(value, int):
            found[name] = value
    breaks = [{**gb, "id": _gb_id(gb)} for gb in children(run, "graph_breaks")]
    for key, n in _per(breaks, "id", "reason", "count").items():
        found[f"graph_breaks {key[:80]}"] = n
    for key, n in _per(children(run, "recompiles"), "guard_property", "key", "").items():
        found[f"recompiles {key[:80]}"] = n
    for key, n in _per(children(run, "hidden_errors"), "key", "exc_type", "count").items():
        found[f"hidden_errors {key[:80]}"] = n
    for section, named in (run.get("counters") or {}).items():
        if section in _MESSAGE_SECTIONS or not isinstance(named, dict):
            continue
        for name, value in named.items():
            if isinstance(value, int) and not isinstance(value, bool) and value and _NAME.match(str(name)):
                found[f"counter {section}.{name}"] = value
    return dict(sorted(found.items()))


FINDINGS = ("graph_breaks", "recompiles", "hidden_errors")
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_COUNT = re.compile(r"^(?P<name>.+?)\s*(?:(?P<op>>=|<=|>|<)\s*(?P<value>-?\d+))?$")


class SignalError(ValueError):
    """A --on that names no signal: said in one line."""


def outcome(run: Mapping[str, Any]) -> str:
    """The status, and whether the case had to note a fallback (``Generation.note``). A release on
    which transformers' static cache stops working, so that the case decodes with another cache, is a
    change to find even where both compile whole."""
    return str(run["status"]) + (" (the case noted a fallback)" if run.get("case_note") else "")


def keys(run: Mapping[str, Any]) -> set[str]:
    """Every key the run's findings carry: a finding's key, a graph break's type, a recompile's
    guard property."""
    found: set[str] = set()
    for table in FINDINGS:
        for item in children(run, table):
            for field in ("key", "gb_type", "guard_property"):
                if item.get(field):
                    found.add(str(item[field]))
    return found


# a ratio's figure: the column read, and for latency the ends of its 95% interval (past R only where
# the whole interval is), with what a run needs to have it
RATIO_FIGURES = {
    "instructions": ("compile_instructions", None, None, "count_instructions"),
    "latency": ("compiled_ms_per_token", "compiled_ms_low", "compiled_ms_high", "timing"),
}
_RATIO = re.compile(r"^(?P<name>\w+)\s*(?P<op>>=|<=)\s*(?P<value>\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class Signal:
    kind: str  # status, code, key, count, ratio
    name: str = ""
    op: Optional[str] = None
    value: Optional[float] = None
    reference: Optional[float] = None  # a ratio's: the good end's figure, once calibrated

    @property
    def needs(self) -> Optional[str]:
        """The pass a run needs for the signal (``count_instructions``, ``timing``); None: the diagnosis."""
        return RATIO_FIGURES[self.name][3] if self.kind == "ratio" else None

    def figure(self, run: Mapping[str, Any]) -> Optional[float]:
        """A ratio's figure of ``run`` (None where the run has none)."""
        value = run.get(RATIO_FIGURES[self.name][0])
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def _past(self, run: Mapping[str, Any]) -> bool:
        _, low, high, _ = RATIO_FIGURES[self.name]
        assert self.reference is not None and self.value is not None and self.op is not None
        bound = low if self.op == ">=" else high  # the interval's end nearest the good end
        value = run.get(bound) if bound else None
        value = value if isinstance(value, (int, float)) else self.figure(run)
        return value is not None and OPERATORS[self.op](value, self.value * self.reference)

    def read(self, run: Mapping[str, Any]) -> Any:
        """The run's value of the signal: its outcome, whether it has the key, its count (or, for a
        crossing, whether the count is past the value)."""
        if self.kind == "status":
            return outcome(run)
        if self.kind == "key":
            return self.name in keys(run)
        if self.kind == "code":
            return run.get("code_digest") or f"not known: {run.get('code_note') or 'stored before diag hashed it'}"
        if self.kind == "ratio":
            return self.figure(run) if self.reference is None else self._past(run)
        count = counts(run).get(self.name, 0)
        return count if self.op is None else OPERATORS[self.op](count, self.value)

    def said(self, value: Any) -> str:
        """A value of the signal in words."""
        if self.kind == "status":
            return str(value)
        if self.kind == "key":
            return f"{self.name} {'present' if value else 'absent'}"
        if self.kind == "code":
            return f"code {value}"
        if self.kind == "ratio":
            if self.reference is None:
                return f"{self.name} {value:,.6g}" if value is not None else f"{self.name} not measured"
            return f"{self.name} {'past' if value else 'within'} {self.value:g}x the good end's {self.reference:,.6g}"
        if self.op is None:
            return f"{self.name} = {value}"
        return f"{self.name} {self.op} {self.value}: {'yes' if value else 'no'}"

    @property
    def text(self) -> str:
        """The signal as --on takes it."""
        if self.kind in ("status", "code"):
            return self.kind
        return f"{self.kind}:{self.name}" + (f"{self.op}{self.value}" if self.op else "")


STATUS = Signal("status")


def parse(text: str) -> Signal:
    """``status``, ``key:KEY`` or ``count:NAME[OP VALUE]``; SignalError otherwise."""
    kind, _, rest = text.strip().partition(":")
    if kind == "status" and not rest:
        return STATUS
    if kind == "code" and not rest:
        return Signal("code")
    if kind == "ratio":
        found = _RATIO.match(rest.strip())
        if found and found["name"] in RATIO_FIGURES and float(found["value"]) > 0:
            return Signal("ratio", found["name"], found["op"], float(found["value"]))
    if kind == "key" and rest.strip():
        return Signal("key", rest.strip())
    if kind == "count" and rest.strip():
        found = _COUNT.match(rest.strip())
        if found and not set("<>=") & set(found["name"]):  # no count's name has one: a bad crossing
            value = found["value"]
            return Signal("count", found["name"].strip(), found["op"], int(value) if value is not None else None)
    raise SignalError(
        f"{text!r} names no signal: status, code, key:KEY (a GB id, a guard key, a hidden error's key), "
        "count:NAME with an optional >=N, >N, <=N or <N (a count as diag expect writes it), or "
        "ratio:instructions>=R or ratio:latency>=R (or <=R) against the good end"
    )


def calibrated(signal: Signal, good_runs: Sequence[Mapping[str, Any]]) -> Signal:
    """A ratio signal set against the good end: the median of its runs' figure. SignalError where a
    run has none (no count pass, a timing that failed), saying which."""
    import statistics
    from dataclasses import replace

    figures = [signal.figure(run) for run in good_runs]
    if not figures or any(f is None for f in figures):
        raise SignalError(
            f"the good end's runs have no {signal.name} ({RATIO_FIGURES[signal.name][0]}) to set the ratio against"
        )
    return replace(signal, reference=statistics.median([f for f in figures if f is not None]))
