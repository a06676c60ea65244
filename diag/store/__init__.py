"""The SQLite store, the only package with SQL.

- ``schema``: tables, named migrations, the Datasette views and what each column holds;
- ``connection``: opening a DB (migrated under one write lock), one-line reasons for a DB diag
  cannot use;
- ``writes``: a run and its child rows in one transaction; a race's rows; merging DBs;
- ``queries``: what commands, the gate and the report read;
- ``policy`` (pure) and ``retention``: what ``diag prune`` keeps, compacts and folds, and doing it.

sqlite-utils creates tables and indexes; a run and its child rows are written with plain
statements inside one ``with conn:`` transaction, because sqlite-utils' own insert commits on its
own and would split the transaction.
"""

from diag.store import _sqlite_utils  # noqa: F401 (first: sqlite-utils without numpy)
from diag.store.connection import (
    StoreError,
    check_path,
    check_writable,
    explain,
    integrity,
    now,
    open_db,
    path_kind,
    path_of,
)
from diag.store.descriptions import DESCRIPTIONS, datasette_metadata
from diag.store.queries import (
    DOC_URL,
    REPORT_COLUMNS,
    bisects,
    break_rows,
    build_stamps,
    builds,
    environments,
    find_build,
    finding_keys,
    finding_keys_of_builds,
    folded_before,
    folded_total,
    full_runs,
    get_run,
    hidden_keys,
    hidden_rows,
    key_texts,
    newest_run,
    newest_status,
    nights_per_build,
    of_builds,
    page_marks,
    races,
    recent_runs,
    report_runs,
    run_builds,
    run_columns,
    run_count,
    run_owners,
    runs_of_build,
    table_counts,
)
from diag.store.retention import prune, thinned
from diag.store.schema import CHILD_TABLES, MIGRATIONS, WHEEL_COLUMNS
from diag.store.writes import (
    RunRecord,
    environment_row,
    merge,
    run_records,
    save_bisect,
    save_races,
    save_run,
    save_runs,
)

__all__ = [
    "CHILD_TABLES",
    "DESCRIPTIONS",
    "DOC_URL",
    "MIGRATIONS",
    "REPORT_COLUMNS",
    "WHEEL_COLUMNS",
    "RunRecord",
    "environment_row",
    "bisects",
    "environments",
    "StoreError",
    "check_path",
    "path_kind",
    "build_stamps",
    "break_rows",
    "hidden_rows",
    "builds",
    "check_writable",
    "datasette_metadata",
    "explain",
    "find_build",
    "finding_keys",
    "finding_keys_of_builds",
    "folded_before",
    "folded_total",
    "full_runs",
    "get_run",
    "hidden_keys",
    "integrity",
    "key_texts",
    "newest_run",
    "newest_status",
    "nights_per_build",
    "of_builds",
    "merge",
    "now",
    "open_db",
    "page_marks",
    "path_of",
    "prune",
    "races",
    "run_columns",
    "run_count",
    "run_owners",
    "recent_runs",
    "report_runs",
    "run_builds",
    "run_records",
    "runs_of_build",
    "save_bisect",
    "save_races",
    "save_run",
    "save_runs",
    "table_counts",
    "thinned",
]
