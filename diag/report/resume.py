"""Where a render takes up the matrix from the one before (history.py): the fold's state as it stood
some builds back from the newest, kept beside the site (``.diag-report-fold.json``) with what it
was made from, and used where the code, the strip's length and every build up to there (each with
its stamp) are unchanged. The render then reads the runs of the builds after it alone.

The state is kept far enough back that the next nights' pages hold every cell they show: the front
page's and the run pages' newest builds, and the archive pages a night changes (``keep_at``). A page
that does show a settled cell all the same (every page, whose navigation names a case run for the
first time) makes the render start again from scratch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from diag.report import inputs
from diag.store.typed import TorchBuildRow

FOLD = ".diag-report-fold.json"


def kept(out_dir: Path, published: bool, marks: list[str], strip: int, keep: int) -> Optional[dict[str, Any]]:
    """The state kept beside the site, where it can be taken up: the same code and strip, the
    builds it folded the first ones of ``marks`` (``inputs.build_history`` of the builds with
    runs), unchanged, and no more of them than the render will keep its state after (``keep``).
    None where there is none, or it cannot be read or used."""
    if not published:
        return None
    try:
        found = json.loads((out_dir / FOLD).read_text(encoding="utf-8"))
        at = found["at"]
        if found["sources"] != inputs.sources() or found["strip"] != strip or not isinstance(at, int):
            return None
        if not 0 < at <= min(keep, len(marks)) or marks[at - 1] != found["history"]:
            return None
        if len(found["state"]["folded"]) != at:
            return None
        return found["state"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep_at(line: list[TorchBuildRow], detail_builds: int, per_page: int) -> int:
    """After how many of ``line`` (the builds with runs, oldest first) to keep the fold's state, so
    that the renders of the next nights hold every cell they show: the front page's newest
    ``per_page`` builds and the run pages' newest ``detail_builds``, one more build each; the
    archive page (a chunk of ``per_page`` builds) of the build that leaves the run pages' window next,
    whose cells lose their links; and the newest whole archive page, whose navigation gains a link
    when the next page joins. The charts draw further back, from what the memo keeps of each build
    (``charts.build_cells``), not from the matrix's cells."""
    size = max(1, per_page)
    window = len(line) - max(detail_builds, 0)
    at = min(len(line) - max(detail_builds, size) - 1, window // size * size, (len(line) // size - 1) * size)
    return max(0, at)


def written(state: Optional[dict[str, Any]], at: int, marks: list[str], strip: int) -> Optional[str]:
    """The file that keeps ``state`` (the fold after the first ``at`` builds), or None without one."""
    if state is None or at <= 0:
        return None
    found = {"sources": inputs.sources(), "strip": strip, "at": at, "history": marks[at - 1], "state": state}
    return json.dumps(found, separators=(",", ":"))
