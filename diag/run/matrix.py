"""The matrix a night runs, as parts and units: what ``diag run``, ``diag plan``, ``diag backfill``
and the scale-out benchmark share.

A *part* is the arguments of one ``diag run`` (its cases, torch specs, configs and options); a
matrix file lists several, as a nightly does. Every worker parses the same parts and plans the same
units (diag/run/shard.py), then runs the units of its own share. ``hf:all`` is expanded by the
transformers beside diag, not in each torch environment, so that planning provisions nothing.

Parsing a part's words is the command line's (``diag.cli.sharding.parse_part``, the ``diag run``
parser itself): the functions that read parts from a file are given it as ``parse``.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import tomllib

from diag import envs, store
from diag import row as rows
from diag.build import Spec
from diag.contract import Config
from diag.errors import DiagError
from diag.run import catalog, shard
from diag.run.catalog import CaseRef

PLAN_FORMAT = 1
NIGHTLY_KINDS = ("nightly", "nightly_prefix")


class MatrixError(DiagError):
    pass


Log = Callable[[str], None]


@dataclass
class Part:
    """One part of a matrix, as values: its cases, torch specs, environment options, configs and run
    options, parsed where they entered. ``args`` keeps the part's other words as written (every word
    but its torch specs), so that a plan can write the part back (``words``) for workers to parse."""

    index: int
    args: tuple[str, ...]
    case_values: tuple[str, ...]
    torch_specs: tuple[Spec, ...]
    env_options: envs.Options
    configs: list[Config]
    timing: bool
    repeat: int
    timeout_s: float
    jobs: int
    refs: Optional[list[CaseRef]] = None  # resolved by ``resolve_cases``

    def words(self) -> list[str]:
        """The part as ``diag run`` arguments: its own words, then its torch specs as they are now."""
        return [*self.args, *(word for spec in self.torch_specs for word in ("--torch", spec.text))]

    def unit_specs(self, spec: Spec) -> tuple[Spec, ...]:
        """The torch specs of the unit a run on ``spec`` belongs to: a timed row's unit holds every
        torch spec of the part (one host times them all)."""
        return self.torch_specs if self.timing else (spec,)

    def unit_key(self, spec: Spec, case: CaseRef, config_index: int, repeat: int) -> str:
        named = case.name if case.builtin else f"{case.name} [{case.path}]"
        config = f"config {config_index}: {rows.config_label(asdict(self.configs[config_index]))}"
        return shard.unit_key(self.index, tuple(s.text for s in self.unit_specs(spec)), named, config, repeat)

    def cells(self) -> Iterator[tuple[int, Spec, CaseRef, int, Config]]:
        """Every (repeat, spec, case, config index, config) of the part (cases resolved), in run order:
        the whole matrix ``repeat`` times over, so that the runs of a row spread over the invocation."""
        for repeat in range(self.repeat):
            for spec in self.torch_specs:
                for case in self.refs or []:
                    for index, config in enumerate(self.configs):
                        yield repeat, spec, case, index, config

    def runs_of(self, keys: Optional[set[str]]) -> Iterator[tuple[int, Spec, CaseRef, Config]]:
        """The (repeat, spec, case, config) of the units in ``keys`` (all of them where None), in run order."""
        for repeat, spec, case, index, config in self.cells():
            if keys is None or self.unit_key(spec, case, index, repeat) in keys:
                yield repeat, spec, case, config


Parse = Callable[[int, list[str], str], Part]


def read_matrix(path: str, parse: Parse) -> list[Part]:
    """A matrix file (TOML): ``[[part]]`` tables, each with ``run``, the arguments of one ``diag run``."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"--matrix {path}: {exc}") from exc
    tables = data.get("part")
    if (
        not isinstance(tables, list)
        or not tables
        or not all(isinstance(t, dict) and isinstance(t.get("run"), str) for t in tables)
    ):
        raise MatrixError(f'--matrix {path}: expected [[part]] tables, each with run = "<diag run arguments>"')
    parts = []
    for index, table in enumerate(tables):
        try:
            words = split_words(table["run"])
        except ValueError as exc:
            raise MatrixError(f"--matrix {path}: part {index}: {exc}") from exc
        parts.append(parse(index, words, f"--matrix {path}"))
    return parts


def split_words(text: str) -> list[str]:
    """The words of a quoted argument list, as a shell splits them; ValueError names what is wrong."""
    import shlex

    try:
        return shlex.split(text)
    except ValueError as exc:  # shlex says "No closing quotation" / "No escaped character"
        raise ValueError(f"{str(exc)[0].lower()}{str(exc)[1:]} in {text!r}") from exc


def hf_architectures(environments: list[envs.TorchEnv], log: Log) -> list[str]:
    """The model types ``hf:all`` stands for: every decoder-only causal-LM architecture of the
    transformers in any of the environments (asked in each, where its transformers is installed)."""
    found: set[str] = set()
    for env in environments:
        found.update(_architectures_of(env))
    log(f"hf:all: {len(found)} decoder-only causal-LM architectures")
    return sorted(found)


_ARCHITECTURES: dict[tuple[str, ...], list[str]] = {}  # per probe command: asked once per invocation


def _architectures_of(env: envs.TorchEnv) -> list[str]:
    """The environment's transformers architectures, asked of it once (hf:all's expansion and the
    check of each hf: case both need them; each asking imports transformers there)."""
    command = tuple(env.probe_command("architectures"))
    if command in _ARCHITECTURES:
        return _ARCHITECTURES[command]
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, env=env.probe_environ(), timeout=600)
        listed = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        listed = None
    if listed is None:
        raise MatrixError(
            f"hf:all: cannot list transformers' architectures in {env.python} (is transformers installed?)"
        )
    _ARCHITECTURES[command] = listed
    return listed


def resolve_cases(parts: list[Part], log: Log) -> None:
    """Each part's case values as cases; ``hf:all`` by the transformers beside diag's own interpreter,
    so that every worker plans the same list without provisioning an environment. A part already
    resolved is left as it is."""
    architectures: Optional[list[str]] = None
    for part in parts:
        if part.refs is not None:
            continue
        refs = catalog.resolve([value for value in part.case_values if value != catalog.HF_ALL])
        if catalog.HF_ALL in part.case_values:
            if architectures is None:
                architectures = hf_architectures([envs.resolve(Spec.parse("current"))], log)
            names = {ref.name for ref in refs}
            refs += [catalog.hf_case(arch) for arch in architectures if catalog.hf_case(arch).name not in names]
        part.refs = refs


def units(parts: list[Part], costs: dict[tuple, float]) -> list[shard.Unit]:
    """Every unit of the parts (cases resolved), its cost from ``costs`` or the estimate."""
    found: dict[str, shard.Unit] = {}
    for part in parts:
        for repeat, spec, case, index, config in part.cells():
            key = part.unit_key(spec, case, index, repeat)
            row = rows.of_config(asdict(config), case.name, case.source)
            cost = costs.get((row, part.timing)) or shard.estimate(
                config.backend, part.timing, case.name.startswith(catalog.HF_PREFIX)
            )
            unit = found.get(key)
            found[key] = shard.Unit(
                key,
                tuple(s.text for s in part.unit_specs(spec)),
                cost + (unit.cost if unit else 0.0),
                1 + (unit.runs if unit else 0),
            )
    return list(found.values())


def history_costs(path: Optional[str], log: Log) -> dict[tuple, float]:
    """Recorded costs by (row, timed). A history that does not exist yet (the first night) costs
    every row by the estimates, and says so."""
    if path is None:
        return {}
    if not Path(path).is_file():
        log(f"--history {path}: no such file yet; every row is costed by the estimates")
        return {}
    runs = store.run_columns(store.open_db(path, readonly=True), [*rows.FIELDS, *shard.COST_COLUMNS])
    return shard.recorded_costs({**run, "row": rows.of(run)} for run in runs)


def plan(parts: list[Part], shards: int, history: Optional[str], log: Log) -> shard.Plan:
    """The one planner: the parts' cases resolved, their units costed by the history (else the
    estimates) and balanced over ``shards`` workers. Every worker that calls it with the same inputs
    gets the same shares."""
    resolve_cases(parts, log)
    return shard.balance(units(parts, history_costs(history, log)), shards)


def pin_nightlies(parts: list[Part], log: Log) -> list[Part]:
    """``nightly`` and nightly prefixes resolved once, to the dated build they name now: every worker
    of a saved plan then runs the same build, whenever it starts."""
    pinned = []
    for part in parts:
        specs = []
        for spec in part.torch_specs:
            if spec.kind in NIGHTLY_KINDS:
                try:
                    dated = envs.find_wheel(part.env_options.request(spec)).base_version
                except envs.EnvError as exc:
                    raise MatrixError(f"part {part.index}: {exc}") from exc
                log(f"part {part.index}: {spec.text} is {dated} now; the plan names {dated}")
                spec = Spec.parse(dated)
            specs.append(spec)
        pinned.append(replace(part, torch_specs=tuple(specs)))
    return pinned


def plan_document(parts: list[Part], planned: shard.Plan) -> dict[str, Any]:
    """What ``diag plan --out`` writes and ``diag run --plan`` reads back."""
    return {
        "format": PLAN_FORMAT,
        "shards": planned.shards,
        "parts": [part.words() for part in parts],
        "shares": [
            {"shard": f"{index}/{planned.shards}", "estimate_s": round(load, 1), "units": [u.key for u in share]}
            for index, (share, load) in enumerate(zip(planned.shares, planned.loads()))
        ],
    }


def read_plan(path: str, wanted: shard.Shard, parse: Parse, log: Log) -> tuple[list[Part], set[str]]:
    """The parts of a saved plan (cases resolved) and the keys of worker ``wanted``'s units."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        parts_args, shares = document["parts"], document["shares"]
        if document.get("format") != PLAN_FORMAT:
            raise ValueError(f"format {document.get('format')!r}, this diag reads {PLAN_FORMAT}")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise MatrixError(f"--plan {path}: not a plan diag wrote ({exc})") from exc
    if not _plan_shaped(parts_args, shares):
        raise MatrixError(f"--plan {path}: not a plan diag wrote (its parts or shares are of another shape)")
    if len(shares) != wanted.count:
        raise MatrixError(f"--plan {path} has {len(shares)} shards, --shard asks for {wanted}")
    parts = [parse(index, args, f"--plan {path}") for index, args in enumerate(parts_args)]
    resolve_cases(parts, log)
    return parts, set(shares[wanted.index]["units"])


def _plan_shaped(parts_args: Any, shares: Any) -> bool:
    """A plan's parts (lists of words) and shares (each a dict naming its units), as plan writes them."""
    words = isinstance(parts_args, list) and all(
        isinstance(args, list) and all(isinstance(word, str) for word in args) for args in parts_args
    )
    return (
        words
        and isinstance(shares, list)
        and all(
            isinstance(share, dict)
            and isinstance(share.get("units"), list)
            and all(isinstance(unit, str) for unit in share["units"])
            for share in shares
        )
    )


def actions_matrix(planned: shard.Plan) -> dict[str, Any]:
    """GitHub Actions' ``strategy.matrix`` (``fromJSON``): one job per non-empty share."""
    return {
        "include": [
            {"shard": f"{index}/{planned.shards}", "runs": sum(u.runs for u in share), "estimate_s": round(load)}
            for index, (share, load) in enumerate(zip(planned.shares, planned.loads()))
            if share
        ]
    }
