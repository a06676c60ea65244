"""The registry of named migrations: each applied once, in the order of its name (m001, m002, ...),
and recorded by name in the DB's ``migrations`` table (connection.py); the migrations themselves
are in schema.py (the first schema, through m012) and schema_added.py (what came after)."""

from __future__ import annotations

import re
from typing import Callable

import sqlite_utils

Migration = Callable[[sqlite_utils.Database], None]

MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration; its name is what a DB records as applied, so a name
    registered twice (a copied function renamed in one place only) would skip the second."""
    if any(name == fn.__name__ for name, _ in MIGRATIONS):
        raise ValueError(f"migration {fn.__name__} is registered twice")
    if not re.match(r"m\d{3}_", fn.__name__):
        raise ValueError(f"migration {fn.__name__}: its name must start with mNNN_, the order it applies in")
    MIGRATIONS.append((fn.__name__, fn))
    MIGRATIONS.sort(key=lambda item: item[0])  # by name, whichever module registered it first
    return fn
