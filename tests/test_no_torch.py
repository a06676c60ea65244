"""The orchestrator needs no torch: the nightly publish job merges, reports and gates without it.

Each command runs in a real interpreter in which importing torch, transformers or depyf
fails as it does where they are not installed (a sitecustomize on PYTHONPATH refuses them).
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys

import pytest
from conftest import NIGHTLY, REPO

BLOCKER = """
import importlib.abc, sys

class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "depyf"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
"""
# Probe modules that import torch at their top, by design: they run only inside target environments.
PROBE_ONLY = {"diag.probe.diagnose", "diag.probe.hf", "diag.probe.llama"}


@pytest.fixture
def no_torch(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )

    assert "No module named 'torch'" in run("-c", "import torch").stderr
    return run


def _orchestrator_modules() -> list[str]:
    import diag

    names = [m.name for m in pkgutil.walk_packages(diag.__path__, "diag.") if m.name != "diag.__main__"]
    return sorted(set(names) - PROBE_ONLY)


def test_every_orchestrator_module_imports_without_torch(no_torch):
    modules = _orchestrator_modules()
    assert "diag.cli" in modules and "diag.probe.records" in modules and "diag.report" in modules
    done = no_torch(
        "-c",
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_merge_report_check_and_compare_run_without_torch(no_torch, copied_db, tmp_path):
    history = tmp_path / "history.db"
    merged = no_torch("-m", "diag", "merge", str(history), str(copied_db), "--json")
    assert merged.returncode == 0, merged.stderr[-2000:]
    assert json.loads(merged.stdout)[0]["added"] == 30
    report = no_torch("-m", "diag", "report", "--db", str(history), "--out", str(tmp_path / "report-site"))
    assert report.returncode == 0, report.stderr[-2000:]
    assert (tmp_path / "report-site" / "index.html").exists()
    check = no_torch("-m", "diag", "check", "--db", str(history), "--json")
    assert check.returncode == 1 and json.loads(check.stdout)["regressions"], check.stderr[-2000:]
    compare = no_torch("-m", "diag", "compare", "2.13.0+cpu", NIGHTLY["torch_version"], "--db", str(history))
    assert compare.returncode == 0 and "pass -> fullgraph_error" in compare.stdout, compare.stderr[-2000:]
