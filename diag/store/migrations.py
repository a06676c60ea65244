"""The registry of named migrations: each applied once, in the order registered, and recorded by name
in the DB's ``migrations`` table (connection.py); the migrations themselves are in schema.py."""

from __future__ import annotations

from typing import Callable

import sqlite_utils

Migration = Callable[[sqlite_utils.Database], None]

MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration; its name is what a DB records as applied, so a name
    registered twice (a copied function renamed in one place only) would skip the second."""
    if any(name == fn.__name__ for name, _ in MIGRATIONS):
        raise ValueError(f"migration {fn.__name__} is registered twice")
    MIGRATIONS.append((fn.__name__, fn))
    return fn
