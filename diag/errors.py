"""The one kind of error a user can cause and fix: bad input, an unusable file or environment.

Each module's own error (a store that cannot be opened, a spec that names no build, a plan of the
wrong shape) is a ``DiagError``, whose message is the one line diag prints for it. The command line
has one error path (``diag.cli.main``): a DiagError, or an OSError the filesystem raised, becomes
``Error: <message>`` and exit status 1, wherever it is raised; commands never wrap them.
"""

from __future__ import annotations


class DiagError(Exception):
    """Something the user can change: its message says what is wrong, in one line."""
