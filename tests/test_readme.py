"""Every command README.md shows runs, in the order shown, and prints what README says it prints.

The set-up commands' own ``diag run --case append_last`` (inductor, both fullgraph modes) runs
too; ``bash .ci/run`` is what runs this test. Slow by rule: real probes.
"""

from __future__ import annotations

import re

import pytest
from conftest import REPO, diag

pytestmark = pytest.mark.slow


def _tour() -> list[tuple[list[str], str]]:
    """(argv after ``diag``, the output README shows) for each ``$ diag ...`` of its console blocks."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```console\n(.*?)```", readme, re.S):
        for command, shown in re.findall(r"^\$ diag (.+)\n((?:(?!\$ ).*\n)*)", block, re.M):
            found.append((command.split(), shown))
    return found


def _setup_diag_commands() -> list[list[str]]:
    """The ``diag ...`` steps of README's set-up commands (what follows the installs)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Set-up: two commands.*?```bash\n(.*?)```", readme, re.S).group(1)
    return [step.split()[1:] for line in block.splitlines() for step in line.split(" && ") if step.startswith("diag ")]


def test_the_tour_runs_as_the_readme_shows_it(tmp_path):
    tour = _tour()
    assert [argv[0] for argv, _ in tour] == ["run", "show", "report"]
    for argv, shown in tour:
        done = diag(*argv, cwd=tmp_path)
        printed = done.stdout + done.stderr
        for line in shown.splitlines():
            if line.startswith("#"):  # a run line: the same run, case, config and status
                number, case, config_status = line.split(None, 2)[0], line.split()[1], line.split("breaks")[0]
                assert any(
                    p.startswith(number) and case in p and p.split("breaks")[0].split() == config_status.split()
                    for p in printed.splitlines()
                ), (line, printed)
            elif line.startswith(("status:", "error:", "run #")):
                assert line in printed, (line, printed)
            elif line.startswith("at: ..."):  # a path shortened in README
                assert any(p.startswith("at: ") and p.endswith(line[7:]) for p in printed.splitlines()), printed
            elif line.endswith("index.html"):
                assert (tmp_path / "site" / "index.html").exists() and "site/index.html" in printed


def test_the_set_up_command_runs(tmp_path):
    steps = _setup_diag_commands()
    assert steps == [["run", "--case", "append_last"]]
    for argv in steps:
        done = diag(*argv, "--json", cwd=tmp_path)
        assert '"status": "pass"' in done.stdout
