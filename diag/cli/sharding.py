"""The matrix as parts and units, for ``diag run --shard`` and ``diag plan``.

A *part* is the arguments of one ``diag run`` (its cases, torch specs, configs and options); a
matrix file lists several, as a nightly does. Every worker parses the same parts and plans the
same units (diag/shard.py), then runs the units of its own share. ``hf:all`` is expanded by the
transformers beside diag, not in each torch environment, so that planning provisions nothing.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import click
import tomllib

from diag import catalog, envs, shard, store
from diag import row as rows
from diag.catalog import CaseRef
from diag.cli import params
from diag.cli.common import cli, configs_of, fail, json_option, pop_env_options, progress
from diag.contract import Config

# Options of diag run that belong to the invocation, not to a part of the matrix.
NOT_IN_A_PART = ("--db", "--json", "--shard", "--matrix", "--plan", "--history")
PLAN_FORMAT = 1


@dataclass
class Part:
    index: int
    args: tuple[str, ...]
    case_values: tuple[str, ...]
    torch_specs: tuple[str, ...]
    env_options: envs.Options
    configs: list[Config]
    timing: bool
    repeat: int
    timeout_s: float
    jobs: int
    refs: Optional[list[CaseRef]] = None  # resolved by ``resolve_cases``

    def unit_specs(self, spec: str) -> tuple[str, ...]:
        """The torch specs of the unit a run on ``spec`` belongs to: a timed row's unit holds every
        torch spec of the part (one host times them all)."""
        return self.torch_specs if self.timing else (spec,)

    def unit_key(self, spec: str, case: CaseRef, config_index: int, repeat: int) -> str:
        named = case.name if case.builtin else f"{case.name} [{case.path}]"
        config = f"config {config_index}: {rows.config_label(asdict(self.configs[config_index]))}"
        return shard.unit_key(self.index, self.unit_specs(spec), named, config, repeat)

    def cells(self) -> Iterator[tuple[int, str, CaseRef, int, Config]]:
        """Every (repeat, spec, case, config index, config) of the part (cases resolved), in run order:
        the whole matrix ``repeat`` times over, so that the runs of a row spread over the invocation."""
        for repeat in range(self.repeat):
            for spec in self.torch_specs:
                for case in self.refs or []:
                    for index, config in enumerate(self.configs):
                        yield repeat, spec, case, index, config

    def runs_of(self, keys: Optional[set[str]]) -> Iterator[tuple[int, str, CaseRef, Config]]:
        """The (repeat, spec, case, config) of the units in ``keys`` (all of them where None), in run order."""
        for repeat, spec, case, index, config in self.cells():
            if keys is None or self.unit_key(spec, case, index, repeat) in keys:
                yield repeat, spec, case, config


def part_of(index: int, args: Iterable[str], params: dict[str, Any]) -> Part:
    """A part from ``diag run``'s parsed parameters."""
    configs = configs_of(params)
    if not params["timing"] and any(c.profile for c in configs):
        raise fail("--profile profiles after the timing pass: it cannot be combined with --no-timing")
    if not params["case_values"]:
        raise click.UsageError("Missing option '--case'.")
    return Part(
        index,
        tuple(args),
        tuple(params["case_values"]),
        tuple(params["torch_specs"]),
        params["env_options"] if "env_options" in params else pop_env_options(dict(params)),
        configs,
        params["timing"],
        params["repeat"],
        params["timeout_s"],
        params["jobs"],
    )


def parse_part(index: int, args: list[str], source: str) -> Part:
    """A part from its ``diag run`` arguments, checked as the command line checks them."""
    for arg in args:
        option = arg.split("=", 1)[0]
        if option in NOT_IN_A_PART:
            raise fail(f"{source}: part {index} gives {option}, an option of the whole invocation, not of a part")
    command = cli.get_command(None, "run")
    try:
        with command.make_context("diag run", list(args), resilient_parsing=False) as ctx:
            return part_of(index, args, ctx.params)
    except click.ClickException as exc:
        raise fail(f"{source}: part {index} ({shlex.join(args)}): {exc.format_message()}") from exc


def read_matrix(path: str) -> list[Part]:
    """A matrix file (TOML): ``[[part]]`` tables, each with ``run``, the arguments of one ``diag run``."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise fail(f"--matrix {path}: {exc}") from exc
    tables = data.get("part")
    if (
        not isinstance(tables, list)
        or not tables
        or not all(isinstance(t, dict) and isinstance(t.get("run"), str) for t in tables)
    ):
        raise fail(f'--matrix {path}: expected [[part]] tables, each with run = "<diag run arguments>"')
    parts = []
    for index, table in enumerate(tables):
        try:
            words = params.split_words(table["run"])
        except ValueError as exc:
            raise fail(f"--matrix {path}: part {index}: {exc}") from exc
        parts.append(parse_part(index, words, f"--matrix {path}"))
    return parts


def hf_architectures(environments: list[envs.TorchEnv]) -> list[str]:
    """The model types ``hf:all`` stands for: every decoder-only causal-LM architecture of the
    transformers in any of the environments (asked in each, where its transformers is installed)."""
    found: set[str] = set()
    for env in environments:
        try:
            done = subprocess.run(
                env.probe_command("architectures"), capture_output=True, text=True, env=env.probe_environ(), timeout=600
            )
            listed = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            listed = None
        if listed is None:
            raise fail(f"hf:all: cannot list transformers' architectures in {env.python} (is transformers installed?)")
        found.update(listed)
    progress(f"hf:all: {len(found)} decoder-only causal-LM architectures")
    return sorted(found)


def current_architectures() -> list[str]:
    """hf:all's architectures when sharding: the transformers beside diag's own interpreter, so
    that every worker plans the same list without provisioning an environment."""
    return hf_architectures([envs.resolve("current")])


def resolve_cases(parts: list[Part]) -> None:
    architectures: Optional[list[str]] = None
    for part in parts:
        refs = catalog.resolve([value for value in part.case_values if value != catalog.HF_ALL])
        if catalog.HF_ALL in part.case_values:
            architectures = current_architectures() if architectures is None else architectures
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
                key, part.unit_specs(spec), cost + (unit.cost if unit else 0.0), 1 + (unit.runs if unit else 0)
            )
    return list(found.values())


def history_costs(path: Optional[str]) -> dict[tuple, float]:
    """Recorded costs by (row, timed). A history that does not exist yet (the first night) costs
    every row by the estimates, and says so."""
    if path is None:
        return {}
    if not Path(path).is_file():
        progress(f"--history {path}: no such file yet; every row is costed by the estimates")
        return {}
    runs = store.run_columns(store.open_db(path, readonly=True), [*rows.FIELDS, *shard.COST_COLUMNS])
    return shard.recorded_costs({**run, "row": rows.of(run)} for run in runs)


NIGHTLY_KINDS = ("nightly", "nightly_prefix")


def pin_nightlies(parts: list[Part]) -> list[Part]:
    """``nightly`` and nightly prefixes resolved once, to the dated build they name now: every worker
    of a saved plan then runs the same build, whenever it starts."""
    pinned = []
    for part in parts:
        args, specs = list(part.args), []
        for spec in part.torch_specs:
            if envs.parse_spec(spec).kind in NIGHTLY_KINDS:
                try:
                    dated = envs.find_wheel(part.env_options.request(spec)).base_version
                except envs.EnvError as exc:
                    raise fail(f"part {part.index}: {exc}") from exc
                progress(f"part {part.index}: {spec} is {dated} now; the plan names {dated}")
                args = [dated if arg == spec and args[i - 1] == "--torch" else arg for i, arg in enumerate(args)]
                args = [f"--torch={dated}" if arg == f"--torch={spec}" else arg for arg in args]
                spec = dated
            specs.append(spec)
        pinned.append(replace(part, args=tuple(args), torch_specs=tuple(specs)))
    return pinned


def plan(parts: list[Part], shards: int, history: Optional[str]) -> shard.Plan:
    resolve_cases(parts)
    return shard.balance(units(parts, history_costs(history)), shards)


def plan_document(parts: list[Part], planned: shard.Plan) -> dict[str, Any]:
    """What ``diag plan --out`` writes and ``diag run --plan`` reads back."""
    return {
        "format": PLAN_FORMAT,
        "shards": planned.shards,
        "parts": [list(part.args) for part in parts],
        "shares": [
            {"shard": f"{index}/{planned.shards}", "estimate_s": round(load, 1), "units": [u.key for u in share]}
            for index, (share, load) in enumerate(zip(planned.shares, planned.loads()))
        ],
    }


def read_plan(path: str, wanted: shard.Shard) -> tuple[list[Part], set[str]]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        parts_args, shares = document["parts"], document["shares"]
        if document.get("format") != PLAN_FORMAT:
            raise ValueError(f"format {document.get('format')!r}, this diag reads {PLAN_FORMAT}")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise fail(f"--plan {path}: not a plan diag wrote ({exc})") from exc
    if not _plan_shaped(parts_args, shares):
        raise fail(f"--plan {path}: not a plan diag wrote (its parts or shares are of another shape)")
    if len(shares) != wanted.count:
        raise fail(f"--plan {path} has {len(shares)} shards, --shard asks for {wanted}")
    parts = [parse_part(index, args, f"--plan {path}") for index, args in enumerate(parts_args)]
    resolve_cases(parts)
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


@cli.command("plan")
@click.option(
    "--matrix",
    "matrix_path",
    type=params.INPUT_FILE,
    default=None,
    help='Matrix file (TOML): [[part]] tables, each with run = "<diag run arguments>".',
)
@click.option(
    "--part",
    "part_args",
    multiple=True,
    type=params.RUN_ARGS,
    metavar="'RUN ARGS'",
    help="A part on the command line: the arguments of one diag run, quoted. Repeatable; adds to --matrix.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, shard.MAX_SHARDS),
    required=True,
    help=f"Number of workers, 1 to {shard.MAX_SHARDS} (the most jobs a GitHub Actions matrix holds).",
)
@click.option(
    "--history",
    "history_path",
    type=params.DB_FILE,
    default=None,
    help="A diag DB whose recorded run durations cost the rows (default: estimates, docs/scale-out.md).",
)
@click.option(
    "--out",
    "out_path",
    type=params.OUTPUT_FILE,
    default=None,
    help="Write the plan here, for diag run --plan FILE --shard K/N.",
)
@click.option(
    "--github-output",
    "output_name",
    default=None,
    metavar="NAME",
    help="Also write NAME=<the --json matrix> to the file $GITHUB_OUTPUT names (a GitHub Actions step output).",
)
@json_option
def plan_command(
    matrix_path: Optional[str],
    part_args: tuple[list[str], ...],
    shards: int,
    history_path: Optional[str],
    out_path: Optional[str],
    output_name: Optional[str],
    as_json: bool,
) -> None:
    """Split a matrix into shards balanced by estimated cost.

    Prints one line per shard (its runs and estimated seconds); --json prints the GitHub Actions
    matrix ({"include": [{"shard": "K/N", ...}]}) for fromJSON. With --out, workers run
    `diag run --plan FILE --shard K/N`, and nightly specs are pinned to today's dated build
    first, so that every worker runs the same one. Workers may instead plan the same matrix
    themselves (`diag run ... --shard K/N`): the same inputs give the same shares everywhere.
    """
    parts = read_matrix(matrix_path) if matrix_path else []
    parts += [parse_part(len(parts) + i, args, "--part") for i, args in enumerate(part_args)]
    if not parts:
        raise click.UsageError("give --matrix FILE or --part 'RUN ARGS'")
    if out_path:
        parts = pin_nightlies(parts)
    planned = plan(parts, shards, history_path)
    if out_path:
        Path(out_path).write_text(json.dumps(plan_document(parts, planned), indent=1) + "\n", encoding="utf-8")
    matrix = json.dumps(actions_matrix(planned))
    if output_name:
        target = os.environ.get("GITHUB_OUTPUT")
        if not target:
            raise fail("--github-output: $GITHUB_OUTPUT is not set (it is, inside a GitHub Actions step)")
        with open(target, "a", encoding="utf-8") as out:
            out.write(f"{output_name}={matrix}\n")
    if as_json:
        click.echo(matrix)
        return
    total = sum(unit.runs for share in planned.shares for unit in share)
    for index, (share, load) in enumerate(zip(planned.shares, planned.loads())):
        click.echo(f"shard {index}/{shards}: {sum(u.runs for u in share)} runs, about {load:.0f} s")
    spread = shard.spread(planned)
    progress(f"{total} runs in {shards} shards; largest shard {spread:.2f}x the mean" if spread else f"{total} runs")
