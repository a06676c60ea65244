"""Every command README.md shows runs, in the order shown, and prints what README says it prints.

The set-up commands' own ``diag run --case append_last`` (inductor, both fullgraph modes) runs
too, and is where the inductor path is checked end to end (cold timing pass, reused lowering in the
diagnosis); ``bash .ci/run`` is what runs this test. Slow by rule: real probes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO, diag, show

from diag import text

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
                columns = line[: text.RUN_HEADER.index("b r h")]
                assert any(p.startswith(columns) for p in printed.splitlines()), (line, printed)
            elif line == text.RUN_HEADER:
                assert line in printed.splitlines()
            elif line.startswith(("status:", "error:", "run #")):
                assert line in printed, (line, printed)
            elif line.startswith("at: ..."):  # a path shortened in README
                assert any(p.startswith("at: ") and p.endswith(line[7:]) for p in printed.splitlines()), printed
            elif line.endswith("index.html"):
                assert (tmp_path / "site" / "index.html").exists() and "site/index.html" in printed


def test_the_set_up_command_runs_append_last_with_inductor_passes_and_is_timed(tmp_path):
    steps = _setup_diag_commands()
    assert steps == [["run", "--case", "append_last"]]
    done = diag(*steps[0], "--json", "--db", "i.db", cwd=tmp_path)
    listed = json.loads(done.stdout)
    assert [(r["backend"], r["fullgraph"], r["status"]) for r in listed] == [
        ("inductor", 1, "pass"),
        ("inductor", 0, "pass"),
    ]
    run = show(tmp_path / "i.db", listed[0]["id"], tmp_path)
    assert run["graph_break_count"] == 0 and run["tokens_equal"] == 1 and run["compiled_ms_per_token"] > 0
    # The timing pass compiled cold into this run's own inductor cache and torch logged nothing while
    # it did, so the diagnosis pass took the compiled graph from the cache: dynamo traced again with
    # every log on, inductor did not lower again (its output code is not in the log).
    assert run["compile_s"] > 0 and run["compile_warm_s"] is not None
    (frame,) = run["frames"]
    # AOTAutograd's cache served the compiled graph: inductor never ran in the diagnosis pass
    assert frame["entire_frame_compile_time_s"] > 0 and frame["inductor_compile_time_s"] is None
    lowering = run["capabilities"]["lowering_logs"]
    assert lowering["available"] is False and "reused" in lowering["detail"]
    log = (Path(run["artifacts_dir"]) / "torch_debug.log").read_text()
    assert "torch._inductor.graph Output code" not in log
    assert "torch._dynamo" in log
    # the code it compiled is inductor's, from the cache as from a cold lowering: one digest either way
    assert run["code_note"] == "1 graph: inductor's output code" and len(run["code_digest"]) == 16
    # depyf is installed but was not asked for: no dump, and the run says why
    assert run["capabilities"]["depyf"] == {"available": False, "detail": run["capabilities"]["depyf"]["detail"]}
    assert "not asked for" in run["capabilities"]["depyf"]["detail"]
    assert not (Path(run["artifacts_dir"]) / "depyf").exists()
