"""Shared fixtures. Tests never touch the user's state: DIAG_HOME and the inductor
cache point into pytest's tmp dirs, and every DB is a real file under tmp_path.

Two tiers. The fast tier (``-m "not slow"``) replays run directories that real probes
recorded (tests/fixtures/runs, see its README) into real SQLite files and drives the
commands through click's CliRunner. The slow tier runs real probes, real compiles, real
faults and the browser.

Slow by rule, whatever its markers say: a test that uses a fixture of real probe runs, or
calls the browser module, is marked slow when collected; and a fast-tier test that starts a
probe process, opens the browser or compiles C++ (inductor) fails, naming what it started.
Every process the test starts is watched, its children too (tests/guard/sitecustomize.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
from click.testing import CliRunner, Result

# The test modules' rewritten asserts and diag's bytecode are cached in __pycache__ even where the
# machine sets PYTHONDONTWRITEBYTECODE: without the cache each xdist worker rewrites and compiles
# every module again, about 3 CPU-s a worker and a run (docs/testing.md).
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parent.parent
TEST_CASES = Path(__file__).resolve().parent / "cases"
RECORDED = Path(__file__).resolve().parent / "fixtures" / "runs"
SLOW_FIXTURES = {"findings", "findings_db", "torch_envs_home"}
GUARD = Path(__file__).resolve().parent / "guard"
_spec = importlib.util.spec_from_file_location("slow_rule_guard", GUARD / "sitecustomize.py")
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)


def _slow_by_rule(item) -> bool:
    if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    function = getattr(item, "function", None)
    try:
        return function is not None and "browser." in inspect.getsource(function)
    except (OSError, TypeError):
        return False


# Tests that share an expensive session fixture run on one worker under pytest-xdist
# (``--dist loadgroup``), so the fixture is built once, not once per worker.
SHARED_FIXTURE_GROUPS = {"findings_db": "findings", "findings": "findings", "torch_envs_home": "provisioned"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into the node ids
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if _slow_by_rule(item):
            item.add_marker(pytest.mark.slow)
        names = set(getattr(item, "fixturenames", ()))
        group = next((g for name, g in SHARED_FIXTURE_GROUPS.items() if name in names), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    # The longest first: a worker that takes a provisioned build or a real probe late leaves the other
    # idle at the end. pytest-xdist hands out work in this order; the sort is stable within each kind.
    items.sort(key=_started_late_costs_most)


# tests that install real builds from a local index: minutes each, like the provisioned group's
REAL_BUILDS = {"real_index"}


def _started_late_costs_most(item) -> int:
    if item.get_closest_marker("xdist_group") or REAL_BUILDS & set(getattr(item, "fixturenames", ())):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


@pytest.fixture(autouse=True)
def slow_rule(request, monkeypatch, tmp_path_factory):
    """A fast-tier test fails if it, or any process it starts, starts what makes a test slow."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    marker = tmp_path_factory.mktemp("slow-rule") / "started"
    monkeypatch.setenv(guard.MARKER, str(marker))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(GUARD), os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(subprocess, "Popen", guard.watching(str(marker), subprocess.Popen))
    yield
    if marker.exists():
        reasons = sorted(set(marker.read_text(encoding="utf-8").splitlines()))
        pytest.fail(f"slow by rule, so mark it @pytest.mark.slow: it {'; '.join(reasons)}", pytrace=False)


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory) -> Path:
    """One inductor cache for the whole session, shared by pytest-xdist's workers (the cache
    writes each entry atomically): a cold inductor compile costs tens of seconds."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / "inductor-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch, inductor_cache):
    monkeypatch.setenv("DIAG_HOME", str(tmp_path / "diag-home"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache))


@pytest.fixture(scope="session")
def torch_envs_home(tmp_path_factory) -> Path:
    """One DIAG_HOME for the tests that provision real torch builds, so each build installs once."""
    return tmp_path_factory.mktemp("provisioned-home")


def installed_tool(name: str) -> Optional[str]:
    """A command the test extra installs (actionlint, zizmor, tlparse): beside the interpreter that runs
    the tests first, as a virtualenv has it whether or not it is activated, then on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which(name)


def diag(
    *args: str, cwd: Path, check: bool = True, timeout: float = 1200, env_extra: Optional[dict[str, str]] = None
) -> subprocess.CompletedProcess:
    """Run the real ``diag`` command line in a subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "diag", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env_extra or {})},
    )
    if check and done.returncode != 0:
        raise AssertionError(f"diag {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def site_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (a published site), by its path there: for comparing two sites byte for byte."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run_section(site: Path | dict, run_id: int) -> str:
    """The section of run ``run_id`` (``<section id="run-N">`` ... ``</section>``) on the page of runs
    that holds it, in ``site``: a published folder, or ``report.render``'s dict. Fails where no page
    of runs holds it, or more than one does."""
    if isinstance(site, dict):
        listed = {path: page for path, page in site.items() if path.startswith("runs/") and isinstance(page, str)}
    else:
        listed = {f"runs/{p.name}": p.read_text(encoding="utf-8") for p in sorted((site / "runs").glob("*.html"))}
    opening = f'<section id="run-{run_id}">'
    found = [
        page[page.index(opening) : page.index("</section>", page.index(opening))]
        for page in listed.values()
        if opening in page
    ]
    assert len(found) == 1, f"run {run_id} is on {len(found)} pages of runs"
    return found[0]


def diag_here(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``diag`` through its entry point (``diag.cli.main``: one-line errors, exit statuses) in this
    process: what a subprocess prints, without a new interpreter per call (the fast tier's bad-input
    tests). An exception main() lets through fails the test, as a traceback would. main() lets stop
    signals go once the command ends (the process is exiting); here the process goes on, so their
    handlers are put back."""
    from diag import stopping
    from diag.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    handlers = stopping.saved()
    sys.argv = ["diag", *args]
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        stopping.restore(handlers)
    return subprocess.CompletedProcess(["diag", *args], code, out.getvalue(), err.getvalue())


def show(db: Path, run_id: int, cwd: Path) -> dict:
    return json.loads(diag("show", str(run_id), "--db", str(db), "--json", cwd=cwd).stdout)


def runs_by_case(db: Path, cwd: Path) -> dict[tuple[str, bool], dict]:
    """Every run in ``db``, full record, keyed by (case, fullgraph)."""
    listed = json.loads(diag("runs", "--db", str(db), "--json", "--limit", "1000", cwd=cwd).stdout)
    return {(r["case"], bool(r["fullgraph"])): show(db, r["id"], cwd) for r in listed}


@pytest.fixture(scope="session")
def findings_db(tmp_path_factory) -> Path:
    """A DB filled by one real matrix: the four cases plus the swallowed-error and mismatch cases,
    both fullgraph settings. aot_eager runs dynamo and AOTAutograd as inductor would, without the C++ compile.
    Every collector is on, depyf's dump too (off unless asked for).
    """
    work = tmp_path_factory.mktemp("findings")
    db = work / "findings.db"
    diag(
        "run",
        "--case",
        "all",
        "--case",
        str(TEST_CASES / "swallowed_error.py"),
        "--case",
        str(TEST_CASES / "mismatch.py"),
        "--backend",
        "aot_eager",
        "--depyf",
        "--new-tokens",
        "6",
        "--prompt-length",
        "10",
        "--batch-size",
        "2",
        "--no-timing",
        "--jobs",
        "2",
        "--db",
        str(db),
        cwd=work,
    )
    return db


@pytest.fixture(scope="session")
def findings(findings_db) -> dict[tuple[str, bool], dict]:
    return runs_by_case(findings_db, findings_db.parent)


def recorded(
    name: str, into: Path, tag: str = "a", build: Optional[dict] = None, diagnosis_from: Optional[str] = None
) -> Path:
    """A copy of the recorded run directory ``name`` under ``into``, paths pointing at this checkout.

    ``build`` replaces fields of its build record (another torch version or commit); ``diagnosis_from``
    takes the diagnosis pass of another recorded run (a status that changed between builds).
    """
    target = into / f"{name}-{tag}"
    target.mkdir(parents=True)
    for file in (RECORDED / name).iterdir():
        source = RECORDED / diagnosis_from / file.name if diagnosis_from and file.name.startswith("diagnose.") else file
        text = source.read_text(encoding="utf-8").replace("{REPO}", str(REPO)).replace("{RUN_DIR}", str(target))
        (target / file.name).write_text(text, encoding="utf-8")
    spec = json.loads((target / "spec.json").read_text())
    spec["run"]["uid"] = f"{spec['run']['uid']}-{target.name}"
    (target / "spec.json").write_text(json.dumps(spec))
    if build:
        lines = []
        for line in (target / "diagnose.jsonl").read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "build":
                record.update(build)
            lines.append(json.dumps(record))
        (target / "diagnose.jsonl").write_text("\n".join(lines) + "\n")
    return target


def recorded_timed(
    into: Path, tag: str, build: Optional[dict] = None, step_s: float = 1e-3, seed: int = 0, **spec: Any
) -> Path:
    """The recorded append_last run (fullgraph) with steady timings: 4 generations of 7 decode steps
    of ``step_s`` with 1% jitter in each mode, the pure-Python host reference unchanged. ``spec``
    replaces fields of its spec: ``case``, ``config`` (merged), ``run`` (merged: invocation, started_at)."""
    rng = random.Random(seed)
    target = recorded("append_last-fullgraph", into, tag, build)
    written = json.loads((target / "spec.json").read_text())
    written["config"].update(spec.pop("config", {}))
    written["run"].update(spec.pop("run", {}))
    written.update(spec)
    (target / "spec.json").write_text(json.dumps(written))
    lines = []
    for line in (target / "time.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "timing":
            steps = [step_s * (1 + rng.gauss(0, 0.01)) for _ in range(4 * 7)]
            record.update(
                step_samples_s=steps,
                totals_s=[sum(steps[i : i + 7]) for i in range(0, 28, 7)],
                host_samples_s=[6e-4] * 4,
                median_ms_per_token=sorted(steps)[14] * 1e3,
            )
        lines.append(json.dumps(record))
    (target / "time.jsonl").write_text("\n".join(lines) + "\n")
    return target


def replay(run_dirs: list[Path], db_path: Path) -> list[int]:
    """Store recorded run directories through the same path a real run takes (assemble, save)."""
    from diag import store
    from diag.run.runner import record_of

    db = store.open_db(db_path)
    unknown = {"torch_version": "unknown", "git_version": None, "cuda_version": None}
    return [store.save_run(db, record_of(run_dir, lambda: unknown)) for run_dir in run_dirs]


NIGHTLY = {"torch_version": "2.14.0.dev20260101+cpu", "git_version": "b" * 40}


@pytest.fixture(scope="session")
def recorded_db(tmp_path_factory) -> Path:
    """A real DB of recorded runs on two builds: torch 2.13.0 as recorded, then a nightly on which
    append_last with fullgraph fails the way dynamic_slice does (a regression for check and report)."""
    work = tmp_path_factory.mktemp("recorded")
    runs = work / "recorded.runs"
    names = sorted(p.name for p in RECORDED.iterdir())
    first = [recorded(name, runs, "a") for name in names]
    second = [
        recorded(name, runs, "b", NIGHTLY, "dynamic_slice-fullgraph" if name == "append_last-fullgraph" else None)
        for name in names
    ]
    db = work / "recorded.db"
    replay(first + second, db)
    return db


@pytest.fixture
def copied_db(recorded_db, tmp_path) -> Path:
    """A private copy of the recorded DB (and its WAL checkpointed first), for tests that write."""
    from diag import store

    store.open_db(recorded_db).conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    target = tmp_path / "copy.db"
    shutil.copy(recorded_db, target)
    return target


def cli(*args: str, input: Optional[str] = None) -> Result:
    """The diag command line in this process (click's CliRunner): the fast tier's way in."""
    from diag.cli import cli as group

    return CliRunner().invoke(group, list(args), input=input, catch_exceptions=False)
