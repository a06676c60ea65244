"""``diag bisect``: the first bad torch build between two, or with --package (--transformers), the
first bad release of one package with torch fixed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional

import click

from diag import envs, store, text, verdict_text
from diag.build import Spec
from diag.cli import params
from diag.cli.checks import TIMING_OPTIONS, refuse_unhonoured
from diag.cli.common import (
    build_configs,
    cli,
    config_options,
    db_option,
    env_options,
    fail,
    json_option,
    open_store,
    progress,
    run_preflight,
)
from diag.config import DEFAULT_TIMEOUT_S
from diag.run import catalog, preflight


@cli.command("bisect")
@click.option("--case", "case_value", required=True, help="Case name or path to a case file.")
@click.option(
    "--good", default=None, type=params.TORCH_SPEC, help="A torch spec that behaves (e.g. 2.1.0.dev20230601)."
)
@click.option("--bad", default=None, type=params.TORCH_SPEC, help="A later torch spec that does not.")
@click.option(
    "--transformers",
    "transformers_range",
    default=None,
    metavar="GOOD..BAD",
    help="Move transformers instead of torch: the releases from GOOD to BAD (e.g. 4.45.2..4.57.1), "
    "each installed beside the torch of --torch (--package transformers=GOOD..BAD).",
)
@click.option(
    "--package",
    "package_range",
    default=None,
    metavar="NAME=GOOD..BAD",
    help="Move any one package instead of torch: its releases from GOOD to BAD as the index lists them, "
    "each an overlay of one environment of --torch that holds everything else (e.g. depyf=0.18.0..0.19.0); "
    "not torch or pip.",
)
@click.option(
    "--torch",
    "torch_spec",
    type=params.TORCH_SPEC,
    default=None,
    help="With --transformers: the torch release or dated nightly every step uses "
    "(default: the version of the torch installed here).",
)
@click.option(
    "--candidates",
    "candidates_file",
    type=params.TEXT_FILE,
    default=None,
    help="File of torch specs to search, one per line (default: the versions on --index).",
)
@click.option(
    "--index",
    "listing_index",
    default=None,
    help="Simple index whose torch builds are the candidates (default: the PyTorch nightly index "
    "for --variant). Installs still use --index-url, else the installer's defaults.",
)
@click.option(
    "--on",
    "signal",
    type=params.SIGNAL,
    default="status",
    show_default=True,
    metavar="SIGNAL",
    help="What a build is judged on: status; code (the code it compiled: each graph's, inductor's output "
    "code or dynamo's graph, changed from the good end's; needs torch >= 2.3's trace); key:KEY (a GB id, "
    "graph-break type, recompile guard key or property, hidden error's key: present or not); count:NAME "
    "(a count as diag expect writes it, changed from the good end's) or count:NAME>=N (crossing N; also "
    ">, <=, <); ratio:instructions>=R or ratio:latency>=R (or <=R: the cold compile's instructions, or "
    "the compiled latency's whole 95% interval, at R times the good end's median or past it).",
)
@click.option(
    "--confirm",
    type=click.IntRange(min=0, max=50),
    default=2,
    show_default=True,
    help="Runs of the last good build after the search; where one differs, it is bad and the search goes on "
    "below it. The ends run 4 times first (up to 14 for the bad end where the change shows in some runs). "
    "0: one run of each build decides, a stored one where there is one.",
)
@env_options
@config_options
@db_option
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True)
@json_option
def bisect_command(
    case_value: str,
    good: Optional[Spec],
    bad: Optional[Spec],
    transformers_range: Optional[str],
    package_range: Optional[str],
    torch_spec: Optional[Spec],
    candidates_file: Optional[str],
    listing_index: Optional[str],
    signal: Any,
    confirm: int,
    env_options: envs.Options,
    db_path: str,
    timeout_s: float,
    as_json: bool,
    **config: Any,
) -> None:
    """Binary-search the builds between --good and --bad for the first one that differs from --good on
    --on (default: the status; a fallback the case notes counts as a difference).

    A build is bad once one run differs from the good end, good once enough agree: one where the bad
    end differed in each of its first 4 runs, more where the change shows in some runs only (enough
    that a build hiding it as often as the bad end plausibly does passes in under 1% of cases).
    Stored runs are reused; a build that fails to install is skipped and named. Prints the first bad
    build, the commit range, how sure the answer is and the command that reproduces it.

    With --package NAME=GOOD..BAD (--transformers GOOD..BAD for transformers), torch stays fixed
    (--torch) and that package's releases between the two are searched instead: one base
    environment holds everything but the package, and each release is a small overlay of it.
    """

    refuse_unhonoured(
        click.get_current_context(),
        (*TIMING_OPTIONS, "count_instructions"),
        "a bisect runs the passes its signal needs: the diagnosis, with the timing pass for ratio:latency "
        "and the count pass for ratio:instructions, at their defaults",
    )
    if signal.name == "latency" and signal.kind == "ratio" and confirm == 0:
        raise fail("ratio:latency needs runs enough a side for a verdict: --confirm 1 or more (each end runs 4 times)")
    config["fullgraph"] = True if config["fullgraph"] is None else config["fullgraph"]
    asked = Asked(build_configs(**config)[0], env_options, db_path, timeout_s, as_json, signal, confirm)
    if transformers_range is not None and package_range is not None:
        raise fail("--transformers is --package transformers=GOOD..BAD: give one of them")
    option, value = ("--transformers", transformers_range) if transformers_range else ("--package", package_range)
    if value is not None:
        if good or bad or candidates_file or listing_index:
            raise fail(f"{option} takes the place of --good/--bad (and of --candidates/--index)")
        _bisect_package(case_value, *_package(option, value), torch_spec, asked)
        return
    if not (good and bad):
        raise fail("bisect needs --good and --bad (torch specs), or --package NAME=GOOD..BAD")
    if torch_spec is not None:
        raise fail("--torch fixes torch for --package; a torch bisect moves between --good and --bad")
    _bisect_torch(case_value, good, bad, candidates_file, listing_index, asked)


class Asked(NamedTuple):
    """What every bisect was asked beside its ends: the run's config, environments, DB, timeout,
    output, and the signal it judges builds on with how many confirming runs."""

    run_config: Any
    env_options: envs.Options
    db_path: str
    timeout_s: float
    as_json: bool
    signal: Any
    confirm: int


def _bisect_torch(
    case_value: str, good: Spec, bad: Spec, candidates_file: Optional[str], listing_index: Optional[str], asked: Asked
) -> None:
    """The torch builds from ``good`` to ``bad`` searched: listed, provisioned (a build run before from
    its recorded wheel), run where the DB has no run of them yet."""
    from diag import bisect

    refs = catalog.resolve([case_value])
    bisect.check_ends(good, bad)
    run_preflight(preflight.check_configs, [asked.run_config])
    run_preflight(preflight.check_database, asked.db_path)
    db = open_store(asked.db_path, create=True)
    recorded = {(b["version"] or "").split("+", 1)[0]: b for b in store.builds(db) if b.get("wheel_url")}
    stored = [b["version"] for b in store.builds(db) if b["version"]]
    variant, request = asked.env_options.variant, asked.env_options.request(good)
    found = bisect.candidates(good, bad, candidates_file, listing_index, variant, stored=stored, request=request)
    for note in found.notes:
        progress(text.safe(note))
    if found.missing_dates:
        progress(
            f"no nightly at its direct URL for {len(found.missing_dates)} dates in range: "
            f"{', '.join(found.missing_dates[:10])}{' ...' if len(found.missing_dates) > 10 else ''}"
        )

    def provision(version: str) -> envs.TorchEnv:
        build = recorded.get(version)
        if build is not None:
            # a build diag ran before: the same wheel again, checked by its sha256
            wheel = envs.parse_spec(build["wheel_url"] or "")
            return envs.resolve(wheel, asked.env_options, log=progress, sha256=build["wheel_sha256"])
        return envs.resolve(envs.parse_spec(version), asked.env_options, log=progress)

    sources = {spec: found.sources.get(spec, []) for spec in found.specs}
    _search(db, refs[0], found.specs, provision, asked, missing_dates=found.missing_dates, sources=sources)


def _package(option: str, value: str) -> tuple[str, str, str, str]:
    """(package, GOOD, BAD, how the option was given) of --package NAME=GOOD..BAD or --transformers GOOD..BAD."""
    name, _, span = value.partition("=") if option == "--package" else ("transformers", "=", value)
    good, sep, bad = span.partition("..")
    if not name.strip() or not sep or not good.strip() or not bad.strip():
        shape = (
            "NAME=GOOD..BAD, e.g. depyf=0.18.0..0.19.0" if option == "--package" else "GOOD..BAD, e.g. 4.45.2..4.57.1"
        )
        raise fail(f"{option} {value!r}: give two releases as {shape}")
    return name.strip().lower(), good.strip(), bad.strip(), option


def _bisect_package(
    case_value: str, name: str, good: str, bad: str, option: str, torch_spec: Optional[Spec], asked: Asked
) -> None:
    """``diag bisect --package NAME=GOOD..BAD``: torch fixed, the package's releases searched, each
    installed over one base environment that holds everything else (envs.overlay)."""
    from diag import bisect

    if any(re.split(r"[<>=!~\[ ;]", extra, maxsplit=1)[0].lower() == name for extra in asked.env_options.extras):
        raise fail(f"{option} moves {name} itself: leave it out of --with")
    envs.check_movable(name)
    torch_spec = torch_spec or envs.parse_spec(envs.installed_torch_release())
    refs = catalog.resolve([case_value])
    if torch_spec.kind not in ("release", "nightly_date"):
        raise envs.EnvError(f"--torch {torch_spec.text!r}: a bisect of {name} needs a torch release or dated nightly")
    listed = envs.package_versions(name, asked.env_options)
    candidates = bisect.release_versions(listed, good, bad)
    progress(f"{name} {good}..{bad}: {len(candidates)} releases, each over one environment of torch {torch_spec}")
    run_preflight(preflight.check_configs, [asked.run_config])
    run_preflight(preflight.check_database, asked.db_path)
    db = open_store(asked.db_path, create=True)

    request = asked.env_options.request(torch_spec)

    def provision(version: str) -> envs.TorchEnv:
        return envs.overlay(request, name, version, log=progress)

    axis = bisect.Axis(name, torch_spec.text)
    _search(db, refs[0], candidates, provision, asked, axis, missing_dates=[])


def _search(
    db, ref: catalog.CaseRef, candidates: list[str], provision, asked: Asked, axis: Optional[Any] = None, **extra: Any
) -> None:
    """Run the search and print its answer (``extra``: fields added to the summary)."""
    from diag import bisect

    summary = bisect.bisect(
        db,
        Path(asked.db_path),
        ref,
        asked.run_config,
        candidates,
        provision,
        asked.timeout_s,
        log=lambda message: progress(text.safe(message)),
        axis=axis,
        signal=asked.signal,
        confirm=asked.confirm,
    )
    summary.update(extra)
    summary["stored_as"] = store.save_bisect(db, summary["row"], summary)
    progress(f"stored as bisect #{summary['stored_as']}: diag check --alerts links it beside a cause of this row")
    if asked.as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo("\n".join(verdict_text.bisect_lines(summary)))
