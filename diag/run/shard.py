"""Shares of one matrix: every worker plans the same units and runs its own share.

A *unit* is the least that goes to one worker: a row (case x config) on one torch spec, with its
``--repeat`` index. A timed row keeps every torch spec of its part in one unit: the builds a
night compares (``check --stable``, ``compare`` across builds) are then timed on one host, so a
difference between hosts cannot read as a difference between builds. Untimed rows (verdicts and
graph breaks only) are one unit per spec.

Shares are balanced by cost, provisioning included: a worker that has no unit of a spec yet pays
that spec's provisioning. The search (``balance``) keeps the largest share as small as it can while
rows of one spec stay on the workers that have that spec, spreading to another worker only when
balance needs it. Costs are the recorded durations of earlier runs of the same row (the median,
timed and untimed apart) where the history has them, else the estimates below. Nothing here reads
the clock or the environment but ``from_environ``: the same units give the same shares on every
machine.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Optional

from diag.errors import DiagError

MAX_SHARDS = 256  # the most jobs one GitHub Actions matrix may hold

# Estimates (seconds) for a row without recorded runs, from runs of the tiny Llama on a 2-core
# machine (docs/BENCHMARKS.md): a run's diagnosis pass by backend, the timing pass on top when timed.
DIAGNOSIS_S = {"eager": 6.0, "aot_eager": 9.0, "inductor": 25.0, "cudagraphs": 9.0}
TIMING_S = {"eager": 8.0, "aot_eager": 12.0, "inductor": 25.0, "cudagraphs": 12.0}
HF_FACTOR = 1.5  # a transformers architecture through generate, against a built-in case
PROVISION_S = 120.0  # installing one torch environment; the running interpreter ("current") costs 0

# (index, count) variables of the schedulers whose workers are "task K of N"; see docs/scale-out.md.
SCHEDULERS = (
    ("Slurm job array", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),
    ("Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", "JOB_COMPLETIONS"),
    ("Buildkite parallel step", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT"),
)


class ShardError(DiagError, ValueError):
    pass


@dataclass(frozen=True)
class Shard:
    index: int  # counted from 0, as the schedulers count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str) -> Shard:
    """``K/N``: worker K (from 0) of N."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not found:
        raise ShardError(f"--shard {text!r}: expected K/N with whole numbers, worker K of N counted from 0 (0/4)")
    index, count = int(found.group(1)), int(found.group(2))
    if count < 1 or count > MAX_SHARDS:
        raise ShardError(f"--shard {text}: N must be 1 to {MAX_SHARDS}")
    if index >= count:
        raise ShardError(f"--shard {text}: K must be below N (workers are counted 0 to {count - 1})")
    return Shard(index, count)


def from_environ(environ: Mapping[str, str]) -> Shard:
    """``--shard auto``: K and N from the scheduler's variables. A Slurm array that does not start
    at 0 (``--array=1-4``) counts from ``SLURM_ARRAY_TASK_MIN``, one with a step (``--array=1-7:2``)
    in steps; one whose ids are not evenly spaced (``--array=1,3,6``) names no share, and is refused."""
    for name, index_var, count_var in SCHEDULERS:
        if index_var not in environ:
            continue
        if count_var not in environ:
            raise ShardError(f"--shard auto: {index_var} is set ({name}) but {count_var} is not")
        index, count = _whole(environ, index_var), _whole(environ, count_var)
        if index_var == "SLURM_ARRAY_TASK_ID":
            index = _slurm_position(environ, index, count)
        try:
            return parse(f"{index}/{count}")
        except ShardError as exc:  # said of the variables the user has, not of a K/N never typed
            given = f"{index_var}={environ[index_var]} and {count_var}={environ[count_var]}"
            raise ShardError(f"--shard auto: {given} give share {index}/{count}: {str(exc).split(': ', 1)[1]}") from exc
    names = ", ".join(f"{index_var} and {count_var}" for _, index_var, count_var in SCHEDULERS)
    raise ShardError(f"--shard auto: none of the scheduler variables is set ({names})")


def _whole(environ: Mapping[str, str], name: str) -> int:
    value = environ[name]
    if not value.strip().isdigit():
        raise ShardError(f"--shard auto: {name}={value!r} is not a whole number")
    return int(value)


def _slurm_position(environ: Mapping[str, str], task: int, count: int) -> int:
    """Where task id ``task`` stands among the array's ``count`` ids, counted from 0."""
    if "SLURM_ARRAY_TASK_MIN" not in environ:
        return task
    low = _whole(environ, "SLURM_ARRAY_TASK_MIN")
    high = _whole(environ, "SLURM_ARRAY_TASK_MAX") if "SLURM_ARRAY_TASK_MAX" in environ else low + count - 1
    step = _whole(environ, "SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in environ else 1
    if count == 1 and task == low:
        return 0
    if step < 1 or (high - low) != step * (count - 1) or (task - low) % step or not low <= task <= high:
        raise ShardError(
            f"--shard auto: the Slurm array's {count} task ids from {low} to {high} (step {step}) are not "
            f"evenly spaced, so task {task} names no share (an array such as --array=1,3,6); give --shard K/N, "
            f"or submit --array=0-{count - 1}"
        )
    return (task - low) // step


@dataclass(frozen=True)
class Unit:
    key: str  # stable across machines: what a share lists
    specs: tuple[str, ...]  # the torch specs its runs use
    cost: float  # estimated seconds, provisioning left out
    runs: int


def unit_key(part: int, specs: Iterable[str], case: str, config: str, repeat: int) -> str:
    return f"part {part} | {' + '.join(specs)} | {case} | {config} | repeat {repeat}"


def estimate(backend: str, timed: bool, hf: bool) -> float:
    seconds = DIAGNOSIS_S.get(backend, DIAGNOSIS_S["inductor"])
    if timed:
        seconds += TIMING_S.get(backend, TIMING_S["inductor"])
    return seconds * (HF_FACTOR if hf else 1.0)


# What recorded_costs reads of a run, beside its row.
COST_COLUMNS = ("duration_s", "timing_pass_s", "diagnosis_pass_s", "orchestrator_s", "eager_ms_per_token")


def recorded_costs(runs: Iterable[Mapping]) -> dict[tuple, float]:
    """The median recorded duration per (row, timed): its probe's, start to exit, where it has one, else
    the sum of its passes' times. A run is timed where it recorded a timing pass or a latency."""
    found: dict[tuple, list[float]] = {}
    for run in runs:
        seconds = run.get("duration_s")
        if seconds is None and run.get("diagnosis_pass_s") is not None:
            passes = (run.get("timing_pass_s"), run["diagnosis_pass_s"], run.get("orchestrator_s"))
            seconds = sum(value for value in passes if value is not None)
        if seconds is None:
            continue
        timed = run.get("timing_pass_s") is not None or run.get("eager_ms_per_token") is not None
        found.setdefault((run["row"], timed), []).append(seconds)
    return {key: statistics.median(values) for key, values in found.items()}


def provision_cost(spec: str) -> float:
    return 0.0 if spec == "current" else PROVISION_S


def provisioning(specs: Iterable[str], held: Collection[str] = ()) -> float:
    """What a worker that holds ``held`` pays to install the rest of ``specs``."""
    return sum(provision_cost(spec) for spec in specs if spec not in held)


@dataclass
class Plan:
    shards: int
    shares: list[list[Unit]] = field(default_factory=list)

    def loads(self) -> list[float]:
        return [share_cost(share) for share in self.shares]

    def share_keys(self, index: int) -> set[str]:
        return {unit.key for unit in self.shares[index]}


def share_cost(units: Iterable[Unit]) -> float:
    units = list(units)
    return sum(unit.cost for unit in units) + provisioning({spec for unit in units for spec in unit.specs})


def balance(units: Iterable[Unit], shards: int) -> Plan:
    """Shares whose largest estimated cost (provisioning included) is as small as this search finds:
    the least bound every unit packs under, found by bisection between the lower bound (the costliest
    unit alone; every run and every spec's provisioning once, spread evenly) and the bound of a
    longest-first greedy assignment. A unit of a build goes to a worker that has that build already
    while one fits under the bound, so rows of one build stay together unless balance needs a second
    worker for them. A unit key appears once; more workers than units leaves some shares empty."""
    ordered = sorted({unit.key: unit for unit in units}.values(), key=lambda unit: (-unit.cost, unit.key))
    if not ordered:
        return Plan(shards, [[] for _ in range(shards)])
    groups: dict[tuple[str, ...], list[Unit]] = {}
    for unit in ordered:
        groups.setdefault(unit.specs, []).append(unit)
    by_size = sorted(groups.values(), key=lambda group: (-sum(u.cost for u in group), group[0].key))
    specs = {spec for unit in ordered for spec in unit.specs}
    lower = max(
        max(unit.cost + provisioning(unit.specs) for unit in ordered),
        (sum(unit.cost for unit in ordered) + provisioning(specs)) / shards,
    )
    best = _greedy(ordered, shards)
    high = max(best.loads())
    while high - lower > max(0.002 * lower, 0.1):
        bound = (lower + high) / 2
        packed = _pack(by_size, shards, bound)
        if packed is None:
            lower = bound
        else:
            best, high = packed, max(packed.loads())
    return best


def _greedy(ordered: list[Unit], shards: int) -> Plan:
    """Longest unit first, each to the worker whose load (provisioning included) grows least."""
    shares: list[list[Unit]] = [[] for _ in range(shards)]
    loads = [0.0] * shards
    held: list[set[str]] = [set() for _ in range(shards)]
    for unit in ordered:

        def grown(worker: int, unit: Unit = unit) -> tuple[float, int]:
            return loads[worker] + unit.cost + provisioning(unit.specs, held[worker]), worker

        worker = min(range(shards), key=grown)
        loads[worker] = grown(worker)[0]
        held[worker].update(unit.specs)
        shares[worker].append(unit)
    return Plan(shards, shares)


def _pack(groups: list[list[Unit]], shards: int, bound: float) -> Optional[Plan]:
    """Every unit under ``bound``, or None: the costliest build group first, each unit to the least
    loaded worker that has its builds and room, else to the least loaded worker with room for the
    unit and its provisioning."""
    shares: list[list[Unit]] = [[] for _ in range(shards)]
    loads = [0.0] * shards
    held: list[set[str]] = [set() for _ in range(shards)]
    for group in groups:
        holders: set[int] = set()
        for unit in group:
            fits = [w for w in holders if loads[w] + unit.cost <= bound]
            extra = 0.0
            if fits:
                worker = min(fits, key=lambda w: (loads[w], w))
            else:
                room = [
                    (loads[w], w, added)
                    for w in range(shards)
                    if w not in holders and loads[w] + unit.cost + (added := provisioning(unit.specs, held[w])) <= bound
                ]
                if not room:
                    return None
                _, worker, extra = min(room)
            holders.add(worker)
            loads[worker] += unit.cost + extra
            held[worker].update(unit.specs)
            shares[worker].append(unit)
    return Plan(shards, shares)


def spread(plan: Plan) -> Optional[float]:
    """The largest share's estimated cost over the mean share's (1.0 is perfectly even)."""
    loads = plan.loads()
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean else None
