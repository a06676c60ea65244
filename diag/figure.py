"""A judged figure of a run: its value, the 95% interval and sample count it carries, and how far to
trust it (``STEADY``, ``NOISY``, ``WAITED``, ``UNJUDGED`` with why). Pure: no I/O.

The timing pass's samples are judged once, where they are measured (diag/run/measured.py with
diag/noise.py), and stored as a run's columns: the median, its interval, the verdict and its reason.
This module is the one reader of those columns: the run line, show, runs, compare, check, the pages,
--json and JUnit all take a run's figures from ``of_run``, so that no surface can drop a caveat the
others show (tests/test_trust_surfaces.py; tests/test_figure.py holds the other modules off the
verdict columns).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, Mapping, Optional

Trust = Literal["steady", "noisy", "waited", "unjudged", "not measured"]
STEADY: Final = "steady"
NOISY: Final = "noisy"
WAITED: Final = "waited"
UNJUDGED: Final = "unjudged"
UNMEASURED: Final = "not measured"
LATENCY_MODES = ("eager", "compiled")
# what a latency figure is judged on: the per-token decode steps of its mode (diag/noise.py)
STEP_METRIC = "decode_step"


@dataclass(frozen=True)
class Figure:
    """One figure and how far it can be trusted. ``n`` counts the samples ``value`` is the median of;
    ``why`` says, in plain words, why a figure is not steady (the noise, the wait, what was missing)."""

    name: str  # eager_ms_per_token, compiled_ms_per_token, compile_s
    value: Optional[float]
    unit: str
    trust: Trust
    low: Optional[float] = None
    high: Optional[float] = None
    n: Optional[int] = None
    why: Optional[str] = None

    @property
    def comparable(self) -> bool:
        """Whether a verdict may be drawn from it: measured, neither noisy nor waited (an unjudged
        figure is compared, its ``why`` said beside it)."""
        return self.value is not None and not self.flagged

    @property
    def flagged(self) -> bool:
        """Whether it carries a caveat a reader must see: noisy or waited."""
        return self.trust in (NOISY, WAITED)

    def interval(self, digits: int = 3) -> str:
        """``95% 0.468-0.474, 24 samples``, or what of it the figure has; empty where it has neither."""
        said = [f"95% {self.low:.{digits}f}-{self.high:.{digits}f}"] if None not in (self.low, self.high) else []
        said += [f"{self.n} sample{'s' if self.n != 1 else ''}"] if self.n is not None else []
        return ", ".join(said)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _samples(run: Mapping[str, Any], mode: str) -> Optional[int]:
    """How many decode steps the mode's median was taken over, where the run was read with them."""
    for row in run.get("timings") or []:
        if row.get("mode") == mode and row.get("metric") == STEP_METRIC:
            samples = row.get("samples") or []  # decoded as a run is read; JSON text as a row is written
            try:
                return len(json.loads(samples) if isinstance(samples, str) else samples)
            except (TypeError, ValueError):
                return None
    return None


def latency(run: Mapping[str, Any], mode: str) -> Figure:
    """The median ms per token of ``mode`` (eager or compiled) with its interval, its steps' count
    and the run's timing verdict (one verdict for both modes: a run is noisy where either was)."""
    value, noisy = run.get(f"{mode}_ms_per_token"), run.get("timing_noisy")
    trust: Trust = UNMEASURED if value is None else NOISY if noisy else STEADY if noisy == 0 else UNJUDGED
    why = {
        NOISY: timing_why(run),
        UNJUDGED: "no interval of its steps was stored (a run recorded before diag judged timings, or imported)",
    }.get(trust)
    low, high = run.get(f"{mode}_ms_low"), run.get(f"{mode}_ms_high")
    return Figure(f"{mode}_ms_per_token", value, "ms/token", trust, low, high, _samples(run, mode), why)


def compile_time(run: Mapping[str, Any]) -> Figure:
    """The cold compile's wall seconds, one sample, with whether it waited for a CPU."""
    value, waited = run.get("compile_s"), run.get("compile_noisy")
    trust: Trust = UNMEASURED if value is None else WAITED if waited else STEADY if waited == 0 else UNJUDGED
    device = run.get("device") or "cpu"
    why = {
        WAITED: run.get("compile_note") or "compile waited for a CPU",
        UNJUDGED: f"a compile on {device} is not checked for waiting (its wall time may wait for its kernels' "
        "benchmarks)"
        if device != "cpu"
        else "neither the compile's CPU time nor the machine's waiting was measured",
    }.get(trust)
    return Figure("compile_s", value, "s", trust, n=None if value is None else 1, why=why)


def of_run(run: Mapping[str, Any]) -> dict[str, Figure]:
    """Every judged figure of ``run``, by name."""
    found = [latency(run, mode) for mode in LATENCY_MODES] + [compile_time(run)]
    return {figure.name: figure for figure in found}


def as_json(run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``of_run`` as --json gives it: each figure's value, unit, interval, samples, trust and why."""
    return {name: figure.as_dict() for name, figure in of_run(run).items()}


def timing_noisy(run: Mapping[str, Any]) -> bool:
    """Whether the run's latency was judged noisy (either mode: one verdict for the run)."""
    return bool(run.get("timing_noisy"))


def timing_why(run: Mapping[str, Any]) -> Optional[str]:
    """Why the run's latency is noisy, in plain words; None where it is not."""
    return (run.get("timing_note") or "timing noisy") if timing_noisy(run) else None


def timing_judged(run: Mapping[str, Any]) -> bool:
    """Whether the run's latency was judged at all, steady or noisy."""
    return run.get("timing_noisy") is not None


def compile_waited(run: Mapping[str, Any]) -> bool:
    """Whether the run's cold compile waited for a CPU."""
    return bool(run.get("compile_noisy"))
