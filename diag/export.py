"""``diag export``: the history as Parquet, one dataset per table, for pandas, DuckDB and notebooks.

Each table of the DB (runs, the findings of each run, timings, frames, the folded runs, the torch
builds) becomes a directory of Parquet files partitioned by build date (hive style:
``runs/build_date=2026-01-05/part-0.parquet``). A build's date is its nightly date, or for any other
build the day diag first recorded it. Every row carries its build's id and date; a run's findings
carry their run's. The columns are the DB's own (docs/data-model.md); JSON columns stay JSON text.

An export is whole or not there: it is written into a hidden folder beside ``out``, with a marker
(``.diag-export.json``: the DB, when, the rows and every file written), and takes ``out``'s place only
when complete, the earlier export moved aside and removed in the same step, with stop signals held
back meanwhile. An interrupted export leaves the earlier one as it was. A folder that holds any file
its marker does not list (a user's own) is never replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from diag.errors import DiagError
from diag.store import dump

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
# The files an export writes: a table's partitions, or the one empty file of a table with no rows.
_EXPORTED = re.compile(rf"(?:{'|'.join(TABLES)})/(?:build_date=[^/]+/part-\d+|empty)\.parquet")
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


MARKER = ".diag-export.json"
STAGING = ".diag-export-"  # the hidden folders an export is written in, beside its ``out``


def export(db_path: Path, out: Path, progress: Callable[[str], None] = lambda message: None) -> dict[str, int]:
    """Write every table of ``db_path`` as ``out`` (replacing an earlier export there, whole);
    returns the rows written per table."""
    why = check_out(out)
    if why:
        raise ExportError(why)
    out = Path(os.path.abspath(out))  # ``.`` or ``a/..`` named: the folder's own name and its parent
    parent = out.parent
    for stale in parent.glob(f".{out.name}{STAGING}*"):  # left by an export killed outright (SIGKILL)
        shutil.rmtree(stale, ignore_errors=True)
    stage = _folder(prefix=f".{out.name}{STAGING}", parent=parent)
    try:
        written = _write_tables(db_path, stage, progress)
        files = sorted(str(path.relative_to(stage)) for path in stage.rglob("*") if path.is_file())
        marker = {
            "db": str(db_path.absolute()),
            "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "rows": written,
            "files": files,
        }
        (stage / MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
        _replace(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # gone already where it took out's place
    return written


def _replace(stage: Path, out: Path) -> None:
    """``stage`` in ``out``'s place; the earlier export there moved aside first and removed after."""
    with _signals_held():
        if not out.exists():
            os.rename(stage, out)
            return
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}{STAGING}old-", dir=out.parent))
        try:
            os.rename(out, aside / "export")
        except OSError:  # the earlier export cannot be moved (a folder nothing may write): left as it was
            os.rmdir(aside)
            raise
        try:
            os.rename(stage, out)
        except OSError:  # the earlier export goes back where it was, and nothing is left beside it
            os.rename(aside / "export", out)
            os.rmdir(aside)
            raise
    try:
        shutil.rmtree(aside, ignore_errors=True)
    finally:  # a stop during the removal: the earlier export is removed all the same before it goes on
        if aside.exists():
            shutil.rmtree(aside, ignore_errors=True)


def _folder(prefix: str, parent: Path) -> Path:
    """A new hidden folder in ``parent`` with the permissions the user's umask gives a folder (mkdtemp
    makes it 0700: a published export would be readable by nobody else)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    return folder


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Stop signals (Ctrl-C, SIGTERM, SIGHUP) held back for the two renames that swap the exports,
    and delivered after: a stop then finds either export whole, never neither."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _write_tables(db_path: Path, out: Path, progress: Callable[[str], None]) -> dict[str, int]:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    found = dump.build_days(db_path)
    days: dict[Optional[int], str] = {
        build: nightly or (first_seen or "")[:10] or UNDATED for build, (nightly, first_seen) in found.items()
    }
    written: dict[str, int] = {}
    for table, columns, records, builds in dump.tables(db_path, TABLES):
        names = [name for name, _ in columns]
        values: dict[str, list[Any]] = {name: [record[i] for record in records] for i, name in enumerate(names)}
        values["build_id"], values["build_date"] = builds, [days.get(build, UNDATED) for build in builds]
        schema = pa.schema(
            [(name, getattr(pa, _sql_type(declared))()) for name, declared in columns]
            + [("build_id", pa.int64()), ("build_date", pa.string())]
        )
        arrays = pa.table(values, schema=schema)
        target = out / table
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


def check_out(out: Path) -> Optional[str]:
    """Why ``out`` cannot take an export, or None: it is nothing yet, an empty folder, or an earlier
    export holding only the files its marker lists."""
    if not out.is_dir():
        return f"--out {out}: not a folder" if os.path.lexists(out) else None
    here, there = Path.cwd().resolve(), out.resolve()
    if there == here or there in here.parents:  # replaced whole, it would take the shell's folder away
        return f"--out {out}: the folder diag runs in, or one above it (name a folder of its own)"
    try:  # a folder nothing may write into cannot be moved aside either (immutable, or not the user's)
        os.close((probe := tempfile.mkstemp(prefix=".diag-write-test-", dir=out))[0])
        os.unlink(probe[1])
    except OSError as exc:
        return f"--out {out}: the earlier export there cannot be replaced ({exc.strerror or exc})"
    found = {str(path.relative_to(out)) for path in out.rglob("*") if path.is_file() or path.is_symlink()}
    if not found:
        return None
    try:
        listed = set(json.loads((out / MARKER).read_text(encoding="utf-8"))["files"]) | {MARKER}
    except (OSError, ValueError, KeyError, TypeError):
        # an export written before the marker: only the Parquet files it names as it names them
        listed = {name for name in found if _EXPORTED.fullmatch(name)}
    foreign = sorted(found - listed)
    if foreign:
        what = "not an earlier export" if not listed else "files an earlier export did not write"
        return f"--out {out}: holds {', '.join(foreign[:3])}, {what} (choose an empty or new folder)"
    return None
