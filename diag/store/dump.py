"""Whole tables read out of a DB for another format (``diag export``): each table's columns with their
declared types, its rows in id order, and the build each row belongs to. The DB is opened read-only."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Iterator, Optional

from diag.store.connection import StoreError, connect

# A table, its columns (name, declared type), its rows, and the build id of each row.
Table = tuple[str, list[tuple[str, str]], list[tuple[Any, ...]], list[Optional[int]]]


def tables(db_path: Path, links: dict[str, str]) -> Iterator[Table]:
    """Each table of ``links`` the DB has, in that order. ``links`` names, per table, the column that
    leads to a row's build: the build's own id, ``torch_build_id``, or ``run_id`` (through the run)."""
    conn = connect(Path(db_path), readonly=True)  # a path, never read as a URI
    try:
        present = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "runs" not in present or "torch_builds" not in present:
            raise StoreError(f"{db_path} is not a diag history (no runs or torch_builds table)")
        run_builds = dict(conn.execute("SELECT id, torch_build_id FROM runs"))
        for table, link in links.items():
            if table not in present:
                continue
            columns = [(row[1], row[2] or "") for row in conn.execute(f"PRAGMA table_info({table})")]
            names = [name for name, _ in columns]
            position = names.index(link)
            records = conn.execute(f"SELECT {', '.join(_quoted(n) for n in names)} FROM {table} ORDER BY id").fetchall()
            builds = [record[position] if link != "run_id" else run_builds.get(record[position]) for record in records]
            yield table, columns, records, builds
    finally:
        conn.close()


def build_days(db_path: Path) -> dict[int, tuple[Optional[str], Optional[str]]]:
    """Per build id: its nightly date and when diag first stored a run of it."""
    conn = connect(Path(db_path), readonly=True)  # a path, never read as a URI
    try:
        found = conn.execute("SELECT id, nightly_date, first_seen FROM torch_builds").fetchall()
    except sqlite3.Error as exc:
        raise StoreError(f"{db_path} is not a diag history ({exc})") from exc
    finally:
        conn.close()
    return {build_id: (nightly, first_seen) for build_id, nightly, first_seen in found}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
