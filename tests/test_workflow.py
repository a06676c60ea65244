"""The nightly workflow stays thin: every step that does work is a diag command the tests exercise."""

from __future__ import annotations

import yaml

from conftest import REPO

TESTED = {"run", "merge", "report", "env", "prune", "check"}


def test_every_run_step_is_an_install_or_a_tested_diag_command():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
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
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    runs = [step["run"].split() for step in workflow["jobs"]["cpu"]["steps"] if str(step.get("run", "")).startswith("diag run")]
    architectures = [words for words in runs if "hf:all" in words]
    assert len(architectures) == 1 and "--no-fullgraph" not in architectures[0] and "--fullgraph" not in architectures[0]
    assert "--db" in architectures[0] and architectures[0][architectures[0].index("--db") + 1] == "shard.db"


def test_every_leg_keeps_the_wheels_it_tested_in_the_actions_cache():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    for name in ("cpu", "cuda"):
        caches = [s for s in workflow["jobs"][name]["steps"] if str(s.get("uses", "")).startswith("actions/cache")]
        assert caches and caches[0]["with"]["path"] == "~/.cache/diag/wheels", name


def test_the_workflow_gates_and_publishes_without_losing_history():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    jobs = workflow["jobs"]
    assert workflow["permissions"] == {"contents": "read"}
    assert jobs["publish"]["permissions"] == {"contents": "write", "issues": "write"}
    assert workflow["concurrency"]["group"] and jobs["publish"]["if"] == "${{ !cancelled() }}"
    steps = jobs["publish"]["steps"]
    assert not any(step.get("continue-on-error") for step in steps)  # a failed checkout fails the publish
    commands = [step.get("run", "") for step in steps]
    order = [next(i for i, c in enumerate(commands) if c.startswith(f"diag {name}"))
             for name in ("merge", "prune", "report", "check")]
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
