"""Shared fixtures. Tests never touch the user's state: DIAG_HOME and the inductor
cache point into pytest's tmp dirs, and every DB is a real file under tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_CASES = Path(__file__).resolve().parent / "cases"


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory) -> Path:
    """One inductor cache for the whole session: a cold inductor compile costs tens of seconds."""
    return tmp_path_factory.mktemp("inductor-cache")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch, inductor_cache):
    monkeypatch.setenv("DIAG_HOME", str(tmp_path / "diag-home"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache))


@pytest.fixture(scope="session")
def torch_envs_home(tmp_path_factory) -> Path:
    """One DIAG_HOME for the tests that provision real torch builds, so each build installs once."""
    return tmp_path_factory.mktemp("provisioned-home")


def diag(*args: str, cwd: Path, check: bool = True, timeout: float = 1200) -> subprocess.CompletedProcess:
    """Run the real ``diag`` command line in a subprocess."""
    done = subprocess.run([sys.executable, "-m", "diag", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))
    if check and done.returncode != 0:
        raise AssertionError(f"diag {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


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
    """
    work = tmp_path_factory.mktemp("findings")
    db = work / "findings.db"
    diag("run", "--case", "all", "--case", str(TEST_CASES / "swallowed_error.py"),
         "--case", str(TEST_CASES / "mismatch.py"), "--backend", "aot_eager",
         "--new-tokens", "6", "--prompt-length", "10", "--batch-size", "2", "--no-timing", "--jobs", "2",
         "--db", str(db), cwd=work)
    return db


@pytest.fixture(scope="session")
def findings(findings_db) -> dict[tuple[str, bool], dict]:
    return runs_by_case(findings_db, findings_db.parent)
