"""The nightly workflow stays thin: every step that does work is a diag command the tests exercise."""

from __future__ import annotations

import yaml

from conftest import REPO

TESTED = {"run", "merge", "report", "env"}


def test_every_run_step_is_an_install_or_a_tested_diag_command():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    commands = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    assert commands
    for command in commands:
        if command.startswith("python -m pip install"):
            continue
        words = command.split()
        assert words[0] == "diag" and words[1] in TESTED, command
    legs = workflow["jobs"]["cpu"]["strategy"]["matrix"]["torch"]
    assert "nightly" in legs and len(legs) >= 3
    assert set(workflow["jobs"]["publish"]["needs"]) == {"cpu", "cuda"}


def test_every_leg_keeps_the_wheels_it_tested_in_the_actions_cache():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    for name in ("cpu", "cuda"):
        caches = [s for s in workflow["jobs"][name]["steps"] if str(s.get("uses", "")).startswith("actions/cache")]
        assert caches and caches[0]["with"]["path"] == "~/.cache/diag/wheels", name
