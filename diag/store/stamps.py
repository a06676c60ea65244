"""The triggers that keep each build's stamp (``schema_added.m018_build_stamps``): a random number that
every write touching the build replaces, which a render compares to know what changed."""

from __future__ import annotations

import sqlite3

_RESTAMP = "ON CONFLICT (torch_build_id) DO UPDATE SET stamp = excluded.stamp"


def stamp_triggers(conn: sqlite3.Connection) -> None:
    """The triggers that keep ``build_stamps``: on every table with a ``torch_build_id`` (the builds'
    runs, races) or a ``run_id`` (what a run found: breaks, recompiles, timings, frames, ...), each
    insert, update and delete restamps the build of the old row and of the new one; an update of a
    build restamps it. Made for every such table after each migration, so a table added later has
    them too."""
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
        if table == "build_stamps":
            continue
        if table == "torch_builds":
            owner = "SELECT {row}.id, random() WHERE true"
        elif "torch_build_id" in columns:
            owner = "SELECT {row}.torch_build_id, random() WHERE {row}.torch_build_id IS NOT NULL"
        elif "run_id" in columns:
            owner = "SELECT torch_build_id, random() FROM runs WHERE id = {row}.run_id"
        else:
            continue
        for event, sides in (("INSERT", ("NEW",)), ("UPDATE", ("OLD", "NEW")), ("DELETE", ("OLD",))):
            body = "".join(
                f"INSERT INTO build_stamps (torch_build_id, stamp) {owner.format(row=side)} {_RESTAMP};\n"
                for side in sides
            )
            conn.execute(
                f'CREATE TRIGGER IF NOT EXISTS "stamp_{table}_{event.lower()}" AFTER {event} ON "{table}"\n'
                f"BEGIN\n{body}END"
            )
