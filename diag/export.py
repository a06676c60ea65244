"""``diag export``: the history as Parquet, one dataset per table, for pandas, DuckDB and notebooks.

Each table of the DB (runs, the findings of each run, timings, frames, the folded runs, the torch
builds) becomes a directory of Parquet files partitioned by build date (hive style:
``runs/build_date=2026-01-05/part-0.parquet``). A build's date is its nightly date, or for any other
build the day diag first recorded it. Every row carries its build's id and date; a run's findings
carry their run's. The columns are the DB's own (docs/data-model.md); JSON columns stay JSON text.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any, Callable, Optional

from diag.errors import DiagError

# (table, how a row finds its build): runs and folded runs name their build, findings their run.
TABLES = {
    "torch_builds": "id",
    "runs": "torch_build_id",
    "folded_runs": "torch_build_id",
    "graph_breaks": "run_id",
    "recompiles": "run_id",
    "hidden_errors": "run_id",
    "timings": "run_id",
    "frames": "run_id",
    "races": "torch_build_id",
}
UNDATED = "unknown"  # a build with neither a nightly date nor a first-seen time


class ExportError(DiagError):
    pass


def _sql_type(declared: str) -> str:
    declared = declared.upper()
    if "INT" in declared:
        return "int64"
    if "REAL" in declared or "FLOA" in declared or "DOUB" in declared:
        return "float64"
    return "string"


def export(db_path: Path, out: Path, progress: Callable[[str], None] = lambda message: None) -> dict[str, int]:
    """Write every table of ``db_path`` under ``out`` (replacing what an earlier export put there);
    returns the rows written per table."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        present = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "runs" not in present or "torch_builds" not in present:
            raise ExportError(f"{db_path} is not a diag history (no runs or torch_builds table)")
        build_dates = _build_dates(conn)
        run_builds = dict(conn.execute("SELECT id, torch_build_id FROM runs"))
        written: dict[str, int] = {}
        for table, link in TABLES.items():
            if table not in present:
                continue
            columns = [(row[1], _sql_type(row[2] or "")) for row in conn.execute(f"PRAGMA table_info({table})")]
            names = [name for name, _ in columns]
            values: dict[str, list[Any]] = {name: [] for name in names}
            values["build_id"], values["build_date"] = [], []
            position = names.index(link)
            for record in conn.execute(f"SELECT {', '.join(_quoted(n) for n in names)} FROM {table} ORDER BY id"):
                for name, value in zip(names, record):
                    values[name].append(value)
                build = record[position] if link != "run_id" else run_builds.get(record[position])
                values["build_id"].append(build)
                values["build_date"].append(build_dates.get(build, UNDATED))
            schema = pa.schema(
                [(name, getattr(pa, kind)()) for name, kind in columns]
                + [("build_id", pa.int64()), ("build_date", pa.string())]
            )
            arrays = pa.table(values, schema=schema)
            target = out / table
            if target.exists():
                shutil.rmtree(target)
            if arrays.num_rows == 0:  # no partition to write: one empty file keeps the table and its schema
                target.mkdir(parents=True)
                pq.write_table(arrays, target / "empty.parquet")
                written[table] = 0
                continue
            ds.write_dataset(
                arrays,
                target,
                format="parquet",
                partitioning=ds.partitioning(pa.schema([("build_date", pa.string())]), flavor="hive"),
                basename_template="part-{i}.parquet",
                existing_data_behavior="overwrite_or_ignore",
            )
            written[table] = arrays.num_rows
            progress(f"{table}: {arrays.num_rows} rows")
        return written
    finally:
        conn.close()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _build_dates(conn: sqlite3.Connection) -> dict[int, str]:
    dates: dict[int, str] = {}
    for build_id, nightly_date, first_seen in conn.execute("SELECT id, nightly_date, first_seen FROM torch_builds"):
        dates[build_id] = nightly_date or (first_seen or "")[:10] or UNDATED
    return dates


def check_out(out: Path) -> Optional[str]:
    """Why ``out`` cannot take an export, or None."""
    if out.is_dir():
        foreign = [p.name for p in out.iterdir() if p.name not in TABLES]
        if foreign:
            return (
                f"--out {out}: holds {', '.join(sorted(foreign)[:3])}, not an earlier export (choose an empty folder)"
            )
    return None
