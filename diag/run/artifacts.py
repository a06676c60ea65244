"""What a run directory holds, named for people: used by ``diag show`` and the report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

NAMED = [
    ("tlparse report", "tlparse/index.html"),
    ("depyf dump (decompiled bytecode, graphs)", "depyf"),
    ("TORCH_TRACE structured log", "trace"),
]


def listing(directory: Optional[str]) -> list[tuple[str, Path]]:
    """(label, path) for the run's files and its tlparse, depyf and trace outputs; [] when it is gone."""
    if not directory:
        return []
    root = Path(directory)
    if not root.is_dir():
        return []
    entries = []
    for label, relative in NAMED:
        path = root / relative
        if path.is_dir():
            logs = sorted(p for p in path.iterdir() if p.is_file())
            if relative == "trace" and logs:
                path = logs[0]
            elif not logs:
                continue
        if path.exists():
            entries.append((label, path))
    entries += [(p.name, p) for p in sorted(root.iterdir()) if p.is_file()]
    return entries
