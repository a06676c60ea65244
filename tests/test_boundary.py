"""The probe runs in bare torch environments: it must never import the orchestrator's packages."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

ORCHESTRATOR_ONLY = ("click", "jinja2", "sqlite_utils", "matplotlib")


def test_probe_modules_import_without_orchestrator_packages():
    code = (
        "import sys\n"
        "import diag.probe.__main__, diag.probe.diagnose, diag.probe.timing, diag.probe.capture\n"
        "import diag.probe.compat, diag.probe.keys, diag.probe.hf, diag.probe.llama, diag.probe.session\n"
        f"bad = [m for m in {ORCHESTRATOR_ONLY!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == ""


def test_cases_do_not_import_orchestrator_packages():
    for file in sorted((REPO / "diag" / "cases").glob("*.py")):
        source = file.read_text()
        for name in ORCHESTRATOR_ONLY:
            assert f"import {name}" not in source and f"from {name}" not in source, file
