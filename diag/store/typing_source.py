"""The source of ``diag/store/rows.py``: a ``TypedDict`` per table of a DB migrated
from blank, a field per column with the Python type SQLite hands back for its declared type (cog -r
diag/store/rows.py writes it; tests/test_typed_store.py fails where it is stale)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from diag.store.schema import CHILD_TABLES

PYTHON_TYPES = {"INTEGER": "int", "REAL": "float", "TEXT": "str", "BLOB": "bytes"}
# The run's columns that hold a JSON object, decoded where a stored run is read (queries.full_runs).
DECODED = ("config", "capabilities", "counters", "extra")
# A stored run is read joined to its build (queries.full_runs): its build is never NULL there.
JOINED = ("torch_build_id",)
# A child row's JSON columns, decoded where it is read with its run: typed Any in either form.
CHILD_JSON = ("samples", "summary", "extra")


def class_name(table: str) -> str:
    """``torch_builds`` -> ``TorchBuildRow``: one row of the table."""
    singular = table[:-1] if table.endswith("s") else table
    return "".join(part.capitalize() for part in singular.split("_")) + "Row"


def _class(
    name: str,
    doc: str,
    columns: dict[str, tuple[str, bool]],
    decoded: tuple[str, ...] = (),
    untyped: tuple[str, ...] = (),
) -> list[str]:
    """A column NOT NULL (or the key) is its type; any other may be None."""
    lines = [f"class {name}(TypedDict, total=False):", f'    """{doc}"""', ""]
    for column, (declared, required) in columns.items():
        kind = "dict[str, Any]" if column in decoded else PYTHON_TYPES.get(declared.upper(), "Any")
        kind = "Any" if column in untyped else kind
        lines.append(
            f"    {column}: {kind}" if required and column not in decoded else f"    {column}: Optional[{kind}]"
        )
    return [*lines, "", ""]


def typed_source() -> str:
    from diag.store.connection import open_db

    with tempfile.TemporaryDirectory() as folder:
        db = open_db(Path(folder) / "schema.db")
        tables = {
            table: {name: (declared, bool(notnull or key)) for _, name, declared, notnull, _, key in info}
            for table in db.table_names()
            for info in [db.execute(f'PRAGMA table_info("{table}")').fetchall()]
        }
        db.conn.close()
    lines: list[str] = []
    for table, columns in tables.items():
        untyped = CHILD_JSON if table in CHILD_TABLES else ()
        lines += _class(class_name(table), f"A row of {table}, as SQLite holds it.", columns, untyped=untyped)
    doc = "A row of runs as read: JSON objects decoded (None where unreadable), joined to its build."
    joined = {name: (declared, required or name in JOINED) for name, (declared, required) in tables["runs"].items()}
    lines += _class("StoredRunColumns", doc, joined, DECODED)
    return "\n".join(lines).rstrip() + "\n\n\n"  # as ruff formats it: two blank lines before the end marker
