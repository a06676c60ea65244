"""What each page of the site was made from: a digest of its inputs per page, kept beside the site
(``.diag-report-inputs.json``), so that a re-render after one new night makes only the pages whose
inputs changed. Digests are kept for the run pages (a run page is made once) and for the matrix's
archive pages (a whole chunk of builds each, which a new night leaves as it was). The front page,
the transitions, the charts and report.json change with every night and are made each time.

A digest covers the code that renders (diag's version, the sources of the report and its templates,
and the modules of diag they take words and verdicts from), the navigation every page carries and
the page's own data. A page whose digest is the one published, and whose file is still there, is
``Kept``: not rendered, not written."""

from __future__ import annotations

import functools
import hashlib
import json
import secrets
from pathlib import Path
from typing import Any, Callable, Optional

from diag import __version__
from diag.store.typed import TorchBuildRow

INPUTS = ".diag-report-inputs.json"
MEMO = ".diag-report-memo.json"
_PACKAGE = Path(__file__).resolve().parent.parent  # diag/


class Kept(str):
    """A page whose inputs are those it was published from: neither rendered nor written again."""


class Written(Kept):
    """A page a forked helper rendered and wrote itself, as ``publish`` would have (forked.py)."""


class Carried(str):
    """A file of a run's directory the site carries (``diag report --carry-artifacts``): its value is
    the path it is copied from, once, and again only where its size or time changed."""


def source_files() -> list[Path]:
    """Every module and template of diag: the report's code and all it imports (the store's queries,
    page addresses, the status vocabulary, the probe's parsers through them). A list of the modules
    that matter would miss the next one imported; hashing them all costs milliseconds."""
    return sorted(p for p in _PACKAGE.rglob("*") if p.suffix in (".py", ".j2") and "__pycache__" not in p.parts)


@functools.lru_cache(maxsize=1)
def sources() -> str:
    """The code that renders the site, as one digest."""
    hashed = hashlib.sha1(__version__.encode())
    for path in source_files():
        hashed.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()


def build_marks(builds: list[TorchBuildRow], stamps: dict[int, int]) -> dict[int, str]:
    """Per build of ``builds``, a digest of it and its stamp (``store.build_stamps``: replaced by
    every write touching the build's runs); one never made before where it has none."""
    return {build["id"]: stamped(build, stamps) for build in builds}


def build_history(builds: list[TorchBuildRow], marks: dict[int, str]) -> list[str]:
    """Per build of ``builds`` (oldest first), a digest of its mark (``build_marks``) and of every
    build's before it. Equal digests mean the same builds in the same order holding the same runs. A
    build without a stamp counts as changed at every render."""
    hashed = hashlib.sha1()
    found = []
    for build in builds:
        hashed.update(marks[build["id"]].encode())
        found.append(hashed.hexdigest())
    return found


def stamped(build: TorchBuildRow, stamps: dict[int, int]) -> str:
    """A digest of ``build`` and its stamp; a digest never made before where it has none."""
    stamp = stamps.get(build["id"])
    return digest(build, stamp) if stamp is not None else secrets.token_hex(20)


def digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()


class Pages:
    """The digests of the pages published in ``out_dir`` before, and those of this render."""

    def __init__(self, out_dir: Path, published: bool) -> None:
        self.out_dir = out_dir
        self.now: dict[str, str] = {}
        self.before: dict[str, str] = {}
        self.sources_before: Optional[str] = None
        if published:
            try:
                kept = json.loads((out_dir / INPUTS).read_text(encoding="utf-8"))
                self.before, self.sources_before = dict(kept["pages"]), kept["sources"]
            except (OSError, ValueError, KeyError, TypeError):
                self.before = {}

    def fresh(self) -> bool:
        """Whether most pages will be rendered: nothing published here yet, or by other code."""
        return not self.before or self.sources_before != sources()

    def stale(self, path: str, made_from: str) -> bool:
        """Whether ``path`` must be rendered: its inputs changed, or its file is gone."""
        self.now[path] = made_from
        return self.before.get(path) != made_from or not (self.out_dir / path).is_file()

    def written(self) -> str:
        return json.dumps({"sources": sources(), "pages": self.now}, sort_keys=True, indent=0)


class Memo:
    """Per build, what a render derived from that build's runs alone (the case charts' overview
    points, ``charts.build_points``, and what they draw in detail, ``charts.build_cells``; the graph
    breaks, ``breaks_page.build_summaries``; the rows it ran, ``matrix_pages.build_rows``), kept
    beside the site (``.diag-report-memo.json``) and used again while the code, the build and its
    stamp are those it was made from: a night then derives it for the new build, not for the whole
    history. A build without a stamp, or a memo that cannot be read, has it made again; the pages
    are the same either way.

    The file is a line naming the code, then a line per build: its id, its mark and what was derived
    of it (JSON), apart by tabs. A build whose line says all this render asked of it is written back
    as it was read, not encoded again: a night encodes the new build's line."""

    def __init__(self, out_dir: Path, published: bool, marks: dict[int, str]) -> None:
        self.marks = marks  # per build id, its mark (``build_marks``)
        self.before: dict[str, tuple[str, str]] = {}  # per build id: its mark, what was derived (JSON)
        self.now: dict[str, Any] = {}
        if published:
            try:
                head, _, body = (out_dir / MEMO).read_text(encoding="utf-8").partition("\n")
                if json.loads(head)["sources"] == sources():
                    for line in body.splitlines():
                        key, mark, made = line.split("\t", 2)
                        self.before[key] = (mark, made)
            except (OSError, ValueError, KeyError, TypeError):
                self.before = {}

    def _entry(self, build: TorchBuildRow) -> dict[str, Any]:
        key = str(build["id"])
        entry = self.now.get(key)
        if entry is None:
            mark = self.marks.get(build["id"]) or secrets.token_hex(20)
            entry = self.now[key] = {"mark": mark, "made": {}, "kept": {}, "text": None}
            old = self.before.get(key)
            if old is not None and old[0] == mark:
                try:
                    kept = json.loads(old[1])
                except ValueError:
                    kept = None
                if isinstance(kept, dict):
                    entry["kept"], entry["text"] = kept, old[1]
        return entry

    def has(self, kind: str, build: TorchBuildRow) -> bool:
        """Whether ``kind`` of ``build`` is kept (or made in this render)."""
        entry = self._entry(build)
        return kind in entry["made"] or kind in entry["kept"]

    def of(self, kind: str, build: TorchBuildRow, make: Callable[[], Any]) -> Any:
        """``kind`` of ``build``: as kept, where the build and its stamp are unchanged; else ``make()``."""
        entry = self._entry(build)
        if kind in entry["made"]:
            return entry["made"][kind]
        made = entry["kept"][kind] if kind in entry["kept"] else make()
        entry["made"][kind] = made
        return made

    def written(self) -> str:
        """The memo of what this render asked for. A kind never asked for is left out, and where each
        kind asked for was kept (and none made), the build's line is the one read."""
        lines = [json.dumps({"sources": sources()})]
        for key, entry in self.now.items():
            text = entry["text"]
            if text is None or entry["made"].keys() != entry["kept"].keys():
                text = json.dumps(entry["made"], sort_keys=True, separators=(",", ":"))
            lines.append(f"{key}\t{entry['mark']}\t{text}")
        return "\n".join(lines) + "\n"
