"""The Datasette views over the runs: made again after each migration, from the current schema and
the one row definition (diag/row.py)."""

from __future__ import annotations

import sqlite3

from diag.store.schema import row_columns


def create_views(conn: sqlite3.Connection) -> None:
    """The Datasette views, over the current schema and the one row definition (re-made after migrating).

    ``latest_status`` is the newest run of each row on each build, by the runs_row index.
    """
    for view in ("latest_status", "run_summary"):
        conn.execute(f"DROP VIEW IF EXISTS {view}")
    conn.execute(f"""CREATE VIEW run_summary AS
        SELECT runs.id, b.version AS torch_version, b.nightly_date, b.git_version, b.variant,
               {row_columns("runs.")}, runs.status, runs.error_type, runs.error_message, runs.graph_break_count,
               runs.recompile_count, runs.hidden_error_count, runs.compile_s, runs.eager_ms_per_token,
               runs.compiled_ms_per_token, runs.transformers_version, runs.python, runs.started_at
        FROM runs JOIN torch_builds b ON b.id = runs.torch_build_id""")
    conn.execute(f"""CREATE VIEW latest_status AS
        SELECT s.* FROM run_summary s
        JOIN (SELECT MAX(id) AS id FROM runs GROUP BY torch_build_id, {row_columns()}) newest ON newest.id = s.id""")
