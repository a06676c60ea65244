"""diag repro: a standalone script that raises what the recorded run raised, without importing diag."""

from __future__ import annotations

import subprocess
import sys

from conftest import diag

RUNNER = """
import runpy, sys
sys.argv = ["repro.py"]
try:
    runpy.run_path("repro.py", run_name="__main__")
except BaseException as exc:
    print("RAISED", type(exc).__module__ + "." + type(exc).__name__)
finally:
    print("DIAG IMPORTED", any(name == "diag" or name.startswith("diag.") for name in sys.modules))
"""


def _repro(findings_db, findings, key, tmp_path):
    run = findings[key]
    diag("repro", str(run["id"]), "--db", str(findings_db), "-o", str(tmp_path / "repro.py"), cwd=tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(temp)},
    )
    assert [p.name for p in temp.iterdir() if p.name.startswith("repro-")] == []  # it cleans up after itself
    return done


def test_repro_of_the_dynamic_slice_fullgraph_failure_raises_the_same_type(findings_db, findings, tmp_path):
    done = _repro(findings_db, findings, ("dynamic_slice", True), tmp_path)
    assert f"RAISED torch._dynamo.exc.{findings[('dynamic_slice', True)]['error_type']}" in done.stdout, done.stderr[
        -3000:
    ]
    assert "DIAG IMPORTED False" in done.stdout
    assert "dynamic_slice" in (tmp_path / "repro.py").read_text().split("\n")[1]


def test_repro_of_a_graph_break_run_prints_the_breaks(findings_db, findings, tmp_path):
    done = _repro(findings_db, findings, ("dynamic_slice", False), tmp_path)
    assert "RAISED" not in done.stdout, done.stdout + done.stderr[-3000:]
    assert "tokens equal eager: True" in done.stdout
    assert "Graph break" in done.stderr
    assert "DIAG IMPORTED False" in done.stdout
