"""sqlite-utils, imported without numpy and pandas.

sqlite-utils imports numpy and pandas, where they are installed, only to map their scalar types
when it inserts rows. diag inserts none of them: its rows are written with plain statements and
hold Python values. numpy alone cost a tenth of a second of every command, so the two are hidden
from sqlite-utils' import, and only from it: importing either afterwards works as ever. Imported
first by the store, before any module of it imports sqlite-utils.
"""

from __future__ import annotations

import sys


def _import() -> None:
    hidden = [name for name in ("numpy", "pandas") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import sqlite_utils  # noqa: F401 (imported here so that the modules of the store get it so)
    finally:
        for name in hidden:
            del sys.modules[name]


_import()
