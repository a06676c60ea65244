"""Writing the site: only what changed, never over files diag did not write, stale pages removed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from diag.report.inputs import Kept

MANIFEST = ".diag-report-manifest.json"


class ReportError(Exception):
    """The site cannot be written where asked; one line that says why."""


def _others(out_dir: Path, db_path: Optional[Path]) -> list[str]:
    """What in ``out_dir`` makes it someone else's folder: anything but hidden entries (a git
    checkout's .git, .nojekyll) and the DB being reported with its -wal/-shm/-journal files."""
    own = set()
    if db_path is not None:
        own = {db_path.resolve().with_name(db_path.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")}
    return sorted(p.name for p in out_dir.iterdir() if not p.name.startswith(".") and p.resolve() not in own)


def publish(files: dict[str, str], out_dir: Path, db_path: Optional[Path] = None) -> dict[str, int]:
    """Write ``files`` under ``out_dir``; remove only files an earlier publish wrote that are now stale.

    The manifest of the previous publish marks the folder as diag's and says which files diag
    wrote. A folder without one that holds anything but hidden entries and the DB at ``db_path``
    is someone else's: ReportError, before anything is written. So is a file that is there, not in
    the manifest, and would be overwritten. A file whose content is unchanged is not rewritten
    (its mtime stays).
    """
    manifest_path = out_dir / MANIFEST
    previous: list[str] = []
    if manifest_path.exists():
        try:
            previous = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            previous = []
    elif out_dir.is_dir() and (others := _others(out_dir, db_path)):
        raise ReportError(
            f"{out_dir} is not empty ({', '.join(others[:3])}{' ...' if len(others) > 3 else ''}) "
            f"and holds no diag report (no {MANIFEST}); choose an empty or new --out folder"
        )
    ours = set(previous)
    foreign = sorted(r for r in files if r not in ours and (out_dir / r).exists())
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ReportError(
            f"{out_dir} holds files diag did not write that the report would overwrite ({shown}); "
            "move them or choose another --out"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    # Claimed before the first write: a publish interrupted partway (Ctrl-C, a killed job) leaves
    # files the manifest already names, so the next publish takes them as its own and goes on.
    claimed = json.dumps(sorted(ours | set(files)))
    if claimed != json.dumps(sorted(ours)) or not manifest_path.exists():
        _write_atomically(manifest_path, claimed.encode("utf-8"))
    written = 0
    folders: set[Path] = set()
    for relative, content in files.items():
        target = out_dir / relative
        if isinstance(content, Kept) and target.is_file():
            continue  # made from the same inputs as the file there: not rendered, not written
        data = content.encode("utf-8")
        try:
            if target.read_bytes() == data:
                continue
        except OSError:
            pass
        if target.parent not in folders:
            target.parent.mkdir(parents=True, exist_ok=True)
            folders.add(target.parent)
        _write_atomically(target, data)
        written += 1
    removed = 0
    for relative in ours - set(files):
        stale = out_dir / relative
        if stale.is_file() and out_dir.resolve() in stale.resolve().parents:
            stale.unlink()
            removed += 1
    manifest = json.dumps(sorted(files))
    if manifest != claimed:
        _write_atomically(manifest_path, manifest.encode("utf-8"))
    return {"files": len(files), "written": written, "unchanged": len(files) - written, "removed": removed}


def _write_atomically(target: Path, data: bytes) -> None:
    """The whole file or the one before it, never a part: a web server never serves half a page."""
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, target)
