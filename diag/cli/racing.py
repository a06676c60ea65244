"""diag race: compiled variants of one build timed side by side in one probe process."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, cast

import click

from diag import envs, store, text
from diag import row as rows
from diag.build import Spec, identity
from diag.cli import checks, common, params
from diag.cli.common import cli
from diag.contract import Config, record_types, records
from diag.run import catalog, preflight, runner
from diag.run.spawn import run_probe
from diag.store.typed import TorchBuildRow
from diag.verdicts import race, why

IDENTITY = ("torch_version", "git_version", "cuda_version", "python", "transformers_version")


@cli.command("race")
@click.option(
    "--case",
    "case_values",
    multiple=True,
    required=True,
    help="A case name, hf:<model_type> or a case file; two or more. The first is the baseline.",
)
@click.option(
    "--torch",
    "torch_spec",
    type=params.TORCH_SPEC,
    default="current",
    show_default=True,
    help="Torch environment, as diag run takes it (current, 2.13.0, 2.1.0.dev20230621, a python).",
)
@common.env_options
@common.config_options
@click.option(
    "--sweep",
    type=click.Choice(["batch", "length"]),
    default=None,
    help="Race at each batch size or prompt length (see --sweep-values): one race per point.",
)
@click.option("--sweep-values", default=None, metavar="N,N,...", help="Values for --sweep.")
@common.timeout_option("Seconds each variant may take to compile and race.")
@common.db_option
@common.json_option
def race_command(
    case_values: tuple[str, ...],
    torch_spec: Spec,
    timeout_s: float,
    db_path: str,
    as_json: bool,
    env_options: envs.Options,
    **params: Any,
) -> None:
    """Which variant's compiled decode step is faster, by how much, how sure: the cases timed
    side by side in one process, on one build and config.

    Each case is compiled and warmed, then timed in rounds of one compiled generation per case,
    the order reversed every other round, so that whatever the machine does lands on every case
    alike. Per case after the first: the median over rounds of its median decode step divided by
    the first case's in the same round, the 95% interval of that median, and a verdict (faster,
    slower, no difference; noisy where the interval reaches past +-10%). --timing-seconds sets
    how long each case is timed (default 1 s; more rounds give narrower intervals), and a race
    runs at least the 6 rounds a verdict needs, whatever --repeats and --timing-seconds say. Each race is
    stored in the DB (the races table; the report's variants page shows them), --json prints the
    per-round figures too. Each variant's between-step time (the loop's own work outside its
    compiled calls) is printed beside its decode step.

    --profile: after the timed rounds, 10 rounds of one profiled generation per case, alternating
    as the timed ones do. Per case after the first, its time per token by op group (attention,
    matmuls, compiled kernels, cache moves, Python outside any op, ...) less the first case's,
    with a 95% interval over the profiled rounds, ranked; the share of the race's measured
    difference that the rows whose interval leaves out 0 explain, and the rest, unexplained; which
    SDPA kernels each case ran; and on CUDA, each fused kernel torch refused, with its own reason (a
    mask, the dtype, the head size, dropout). Exits 0 whenever the race ran, whatever a case's compile did (a case
    that fails is named, with its error, and not raced).
    """
    checks.refuse_unhonoured(
        click.get_current_context(),
        ("depyf", "count_instructions", "reuse_compiled"),
        "a race times compiled generations, with no diagnosis or count pass (diag run has them)",
    )
    configs = common.configs_of(params)  # with --sweep and --sweep-values
    refs = _distinct_cases(case_values)
    common.run_preflight(preflight.check_configs, configs)
    # a DB the races cannot be stored in is refused before the cases are raced
    common.run_preflight(preflight.check_database, db_path)
    env = envs.resolve(torch_spec, env_options, log=common.progress)
    common.run_preflight(preflight.check_architectures, [env], refs)
    common.run_preflight(preflight.check_environment, env, refs, configs)
    results, build = _race_each(env, refs, configs, timeout_s, db_path, as_json)
    if as_json:
        click.echo(json.dumps(_as_json(results, build, refs[0].name), indent=2))
    else:
        click.echo(f"recorded {len(results)} race{'s' if len(results) != 1 else ''} in {db_path}")


@dataclass(frozen=True)
class Raced:
    """One config's race: its label, the race record, the verdicts, the variants' breakdowns (--profile)."""

    label: str
    config: Config
    record: record_types.RaceRecord
    verdicts: list[race.Verdict]
    profiles: dict[str, Any]


def _distinct_cases(case_values: tuple[str, ...]) -> list[catalog.CaseRef]:
    refs = catalog.resolve(list(case_values))
    names = [ref.name for ref in refs]
    if len(refs) < 2 or len(set(names)) != len(names):
        raise common.fail(
            f"a race needs two or more different cases, got {', '.join(case_values)}"
            " (to race a case against itself, copy its file under another case name)"
        )
    return refs


def _race_each(
    env: envs.TorchEnv, refs: list[catalog.CaseRef], configs: list[Any], timeout_s: float, db_path: str, as_json: bool
) -> tuple[list[Raced], record_types.BuildRecord]:
    """Race the cases at each config, storing each race as it ends (and printing it, unless JSON)."""
    db = common.open_store(db_path, create=True)
    names = [ref.name for ref in refs]
    sources = {ref.name: ref.source for ref in refs}
    results: list[Raced] = []
    build: record_types.BuildRecord = {}
    for index, config in enumerate(configs, 1):
        label = rows.config_label(asdict(config))
        racing = f"[{index}/{len(configs)}] racing {', '.join(names)}: {label}"
        common.progress(racing)
        started = store.now()
        try:
            with runner.Heartbeat(common.progress) as heartbeat:  # a race runs minutes: say it still does
                heartbeat.started(index, racing)
                build, record = _race(env, refs, config, timeout_s * (len(refs) + 1))
        except click.ClickException as exc:
            stored_before = f"; {len(results)} races stored before it in {db_path}" if results else ""
            raise common.fail(exc.format_message() + stored_before) from exc
        verdicts = race.judge(record, names)
        breakdowns = _breakdowns(record, verdicts, config)
        profiles = {case: found.as_dict() for case, found in breakdowns.items()}
        stored = race.stored(uuid.uuid4().hex, started, build, asdict(config), sources, record, verdicts, profiles)
        try:
            store.save_races(db, _identity(build, env), stored)
        except store.StoreError as exc:
            raise common.fail(f"cannot store the race: {exc}; {len(results)} races stored before it") from exc
        results.append(Raced(label, config, record, verdicts, profiles))
        if not as_json:
            said = race.lines(label, build.get("torch_version") or "unknown", record, verdicts)
            for found in breakdowns.values():  # under the race's lines, each variant's in turn
                said += why.lines(found)
            click.echo("\n".join(text.safe(line) for line in said))
    return results, build


def _breakdowns(
    record: record_types.RaceRecord, verdicts: list[race.Verdict], config: Config
) -> dict[str, why.Breakdown]:
    """With --profile: each raced variant's time set against the baseline's by op group (why.py)."""
    profiled = record.get("profiled")
    if not config.profile or profiled is None:
        return {}
    device = config.device.startswith("cuda")
    found = {}
    for v in verdicts:
        if v.error is not None:
            continue
        measured = v.ms_a * (v.ratio - 1) if v.ms_a is not None and v.ratio is not None else None
        how = (
            f"{v.a}'s median {v.ms_a:.3f} ms x (the median ratio of the rounds {v.ratio:.3f} - 1)"
            if measured is not None
            else None
        )
        found[v.b] = why.explain(profiled, v.a, v.b, measured, device, how)
    return found


def _as_json(results: list[Raced], build: record_types.BuildRecord, baseline: str) -> records.JSONObject:
    races = [
        {
            "config": asdict(raced.config),
            "label": raced.label,
            "verdicts": [v.as_dict() for v in raced.verdicts],
            "generation_median_s": raced.record.get("generation_median_s"),
            "between_ms": {
                name: race.between_ms(raced.record.get("between_median_s") or {}, name)
                for name in raced.record.get("variants") or []
            },
            "profile": raced.profiles or None,
            "threads": raced.record.get("threads"),
            "load_1m": raced.record.get("load_1m"),
        }
        for raced in results
    ]
    return {"build": {k: cast(Mapping[str, Any], build).get(k) for k in IDENTITY}, "baseline": baseline, "races": races}


def _identity(build: record_types.BuildRecord, env: envs.TorchEnv) -> TorchBuildRow:
    """The build as the store keys it, from the probe's own build record."""
    wheel = (env.known_build or {}).get("wheel")
    return identity(build.get("torch_version") or "unknown", build.get("git_version"), build.get("cuda_version"), wheel)


def _race(
    env: envs.TorchEnv, refs: list[catalog.CaseRef], config: Any, timeout_s: float
) -> tuple[record_types.BuildRecord, record_types.RaceRecord]:
    """One race probe for ``config``: its ``build`` and ``race`` records. Its files are kept, and
    named, when it ended without them."""
    folder = Path(tempfile.mkdtemp(prefix="diag-race-"))
    specs = []
    for index, ref in enumerate(refs):
        path = folder / f"{index}.spec.json"
        # at least the rounds a verdict needs, whatever --repeats and --timing-seconds allow
        probed = replace(config, repeats=max(config.repeats, race.MIN_ROUNDS))
        path.write_text(json.dumps({"case": ref.name, "case_path": ref.path, "config": asdict(probed)}), "utf-8")
        specs += ["--spec", str(path)]
    out = folder / "race.jsonl"
    try:
        with tempfile.TemporaryDirectory(prefix="diag-inductor-race-") as cache:
            environ = runner.probe_environ(env.probe_environ(), folder, cache)
            environ.pop("TORCH_TRACE")
            command = env.probe_command("race", *specs, "--out", str(out))
            ended = run_probe(command, folder, environ, timeout_s, "race")
    except BaseException:  # Ctrl-C, a stop signal: the probe is killed with its group, nothing kept
        shutil.rmtree(folder, ignore_errors=True)
        raise
    written = record_types.Found(records.read(out)[0] if out.exists() else [])
    built, raced = written.first(records.BUILD), written.first(records.RACE)
    if built is None or raced is None:
        raise common.fail(f"the race ended without a result ({_how(ended)}); its files are in {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    return built, raced


def _how(ended: record_types.ExitRecord) -> str:
    if ended["timed_out"]:
        return f"timed out after {ended['duration_s']:.0f} s"
    if ended["signal"]:
        return f"killed by signal {ended['signal']}" + (", out of memory" if ended.get("oom_kills") else "")
    return f"exit status {ended['returncode']}"
