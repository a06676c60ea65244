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
from pathlib import Path
from typing import Any, Optional

from diag import __version__

INPUTS = ".diag-report-inputs.json"
_PACKAGE = Path(__file__).resolve().parent.parent  # diag/


class Kept(str):
    """A page whose inputs are those it was published from: neither rendered nor written again."""


class Written(Kept):
    """A page a forked helper rendered and wrote itself, as ``publish`` would have (forked.py)."""


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


def digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()


class Pages:
    """The digests of the pages published in ``out_dir`` before, and those of this render."""

    def __init__(self, out_dir: Path, published: bool) -> None:
        self.out_dir, self.now = out_dir, {}
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
