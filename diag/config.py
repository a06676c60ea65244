"""Paths and defaults shared by the orchestrator's commands."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
DEFAULT_DB = "diag.db"
DEFAULT_TIMEOUT_S = 900.0
SQLITE_INTEGER_MAX = 2**63 - 1  # the largest integer SQLite stores: ids, counts and totals beyond it are refused


def cases_dir() -> Path:
    """The built-in cases: ``diag/cases/``, shipped in the package, or ``DIAG_CASES_DIR``."""
    override = os.environ.get("DIAG_CASES_DIR")
    return Path(override) if override else PACKAGE_ROOT / "cases"


def diag_home() -> Path:
    """Caches and provisioned environments: ``DIAG_HOME``, else ~/.cache/diag."""
    override = os.environ.get("DIAG_HOME")
    return Path(override) if override else Path.home() / ".cache" / "diag"


def artifacts_root(db_path: Path) -> Path:
    """Run directories live next to the DB: ``diag.db`` -> ``diag.runs/<run uid>/``."""
    return db_path.parent / f"{db_path.stem}.runs"
