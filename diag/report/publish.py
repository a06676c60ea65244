"""Writing the site: only what changed, never over files diag did not write, stale pages removed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from diag.errors import DiagError
from diag.pages import public_paths
from diag.report.inputs import Carried, Kept, Written

MANIFEST = ".diag-report-manifest.json"


class ReportError(DiagError):
    """The site cannot be written where asked; one line that says why."""


def _others(out_dir: Path, db_path: Optional[Path]) -> list[str]:
    """What in ``out_dir`` makes it someone else's folder: anything but hidden entries (a git
    checkout's .git, .nojekyll) and the DB being reported with its -wal/-shm/-journal files."""
    own = set()
    if db_path is not None:
        own = {db_path.resolve().with_name(db_path.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")}
    return sorted(p.name for p in out_dir.iterdir() if not p.name.startswith(".") and p.resolve() not in own)


def publish(files: dict[str, str], out_dir: Path, db_path: Optional[Path] = None) -> dict[str, int]:
    """Write ``files`` under ``out_dir`` (``Site.publish``)."""
    return Site(out_dir, db_path).publish(files)


class Site:
    """The folder a report is published in, claimed before anything is written to it.

    The manifest of the previous publish marks the folder as diag's and says which files diag
    wrote. A folder without one that holds anything but hidden entries and the DB at ``db_path``
    is someone else's: ReportError, before anything is written. So is a file that is there, not in
    the manifest, and would be overwritten. Files are claimed (named in the manifest) before they
    are written, by ``publish`` or, for the pages a forked helper writes meanwhile, by ``claim``.
    """

    def __init__(self, out_dir: Path, db_path: Optional[Path] = None) -> None:
        self.out_dir, self.db_path = out_dir, db_path
        self.manifest = out_dir / MANIFEST
        self.previous: Optional[set[str]] = None  # what the manifest named before this publish
        self.claimed: set[str] = set()
        self.folders: set[Path] = set()

    @contextlib.contextmanager
    def exclusive(self, waiting: Callable[[str], None]) -> Iterator[None]:
        """The folder to this report alone, from reading the state an earlier render kept to its last
        write: a second ``diag report`` into it waits (``waiting`` says so), then renders after it,
        rather than taking the first one's half-written files for a stranger's. The lock is the
        folder's own (flock on it), so no file is left behind."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        handle = os.open(self.out_dir, os.O_RDONLY)
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waiting(f"another diag report is writing {self.out_dir}; waiting for it to finish")
                fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)

    def _read(self) -> set[str]:
        if self.previous is None:
            previous: list[str] = []
            if self.manifest.exists():
                try:
                    previous = json.loads(self.manifest.read_text(encoding="utf-8"))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    previous = []
            elif self.out_dir.is_dir() and (others := _others(self.out_dir, self.db_path)):
                raise ReportError(
                    f"{self.out_dir} is not empty ({', '.join(others[:3])}{' ...' if len(others) > 3 else ''}) "
                    f"and holds no diag report (no {MANIFEST}); choose an empty or new --out folder"
                )
            self.previous = set(previous)
            self.claimed = set(previous)
        return self.claimed

    def claim(self, names: Iterable[str]) -> None:
        """Check that ``names`` may be written here and name them in the manifest, before any is.
        A publish interrupted partway (Ctrl-C, a killed job) leaves files the manifest already
        names, so the next publish takes them as its own and goes on."""
        ours = self._read()
        wanted = set(names)
        foreign = sorted(r for r in wanted if r not in ours and (self.out_dir / r).exists())
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise ReportError(
                f"{self.out_dir} holds files diag did not write that the report would overwrite ({shown}); "
                "move them or choose another --out"
            )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if not wanted <= ours or not self.manifest.exists():
            self.claimed = ours | wanted
            _write_atomically(self.manifest, json.dumps(sorted(self.claimed)).encode("utf-8"))

    def write(self, relative: str, content: str) -> bool:
        """Write one claimed file, unless it holds ``content`` already; whether it was written. A file
        the site shows (any not hidden) holds no absolute path of the recording machine
        (``pages.public_paths``): the site is published as it is."""
        target = self.out_dir / relative
        data = (content if relative.startswith(".") else public_paths(content)).encode("utf-8")
        try:
            if target.read_bytes() == data:
                return False
        except OSError:
            pass
        if target.parent not in self.folders:
            target.parent.mkdir(parents=True, exist_ok=True)
            self.folders.add(target.parent)
        _write_atomically(target, data)
        return True

    def carry(self, relative: str, source: Path) -> bool:
        """Copy one claimed file of a run's directory, unless the copy there has its size and time."""
        target = self.out_dir / relative
        try:
            kept, there = source.stat(), target.stat()
            if (kept.st_size, kept.st_mtime_ns) == (there.st_size, there.st_mtime_ns):
                return False
        except OSError:
            pass
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(target.name + ".tmp")
        shutil.copy2(source, temporary)
        os.replace(temporary, target)
        return True

    def publish(self, files: dict[str, str]) -> dict[str, int]:
        """Write ``files``; remove only files an earlier publish wrote that are now stale. A file
        whose content is unchanged is not rewritten (its mtime stays); a ``Kept`` one is not
        rendered either, and a ``Written`` one a helper wrote already."""
        self.claim(files)
        written = 0
        for relative, content in files.items():
            if isinstance(content, Carried):
                written += self.carry(relative, Path(content))
                continue
            if isinstance(content, Kept):
                if isinstance(content, Written):
                    written += 1
                    continue
                if (self.out_dir / relative).is_file():
                    continue  # made from the same inputs as the file there: not rendered, not written
            written += self.write(relative, content)
        removed = 0
        for relative in (self.previous or set()) - set(files):
            stale = self.out_dir / relative
            if stale.is_file() and self.out_dir.resolve() in stale.resolve().parents:
                stale.unlink()
                removed += 1
        if sorted(files) != sorted(self.claimed):
            _write_atomically(self.manifest, json.dumps(sorted(files)).encode("utf-8"))
        return {"files": len(files), "written": written, "unchanged": len(files) - written, "removed": removed}


def _write_atomically(target: Path, data: bytes) -> None:
    """The whole file or the one before it, never a part: a web server never serves half a page."""
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, target)
