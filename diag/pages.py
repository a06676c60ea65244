"""Where each page of the report lives, defined once: the report writes its pages there and links
to them, and ``diag check`` names a regression's run page by the same rule.

A run's details are on the page of its case on its build (``runs/<build id>-<case>.html``), in the
section ``#run-<id>``: the runs of one case on one nightly side by side, and a site of a year of
nightlies a few hundred files instead of one per run (a file created costs a filesystem more than
rendering the page does).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def page_path(folder: str, name: str, limit: int) -> str:
    """A page's path for ``name`` under ``folder``: the name itself where it is a safe file name of at
    most ``limit`` characters, else its safe first ``limit`` characters and a hash of the whole name."""
    slug = _UNSAFE.sub("_", name)[:limit]
    if slug == name:
        return f"{folder}/{name}.html"
    return f"{folder}/{slug}-{hashlib.sha1(name.encode('utf-8', 'replace')).hexdigest()[:8]}.html"


def case_href(case: str) -> str:
    """The trend charts of ``case``."""
    return page_path("cases", case, 80)


def run_page(run: Mapping[str, Any]) -> str:
    """The page that holds ``run`` (a run record with its ``torch_build_id`` and ``case``)."""
    return page_path("runs", f"{run['torch_build_id']}-{run['case']}", 80)


def run_href(run: Mapping[str, Any]) -> str:
    """``run``'s section on its page, relative to the site's root."""
    return f"{run_page(run)}#run-{run['id']}"


# An absolute path in a page's text: a slash that starts no word, URL or relative path, then folders.
# A component stops at what cannot be in a path a log prints (quotes, brackets, a colon before a line).
_ABSOLUTE = re.compile(r"(?<![\w.~/:\\-])/(?:[^\s/\"'<>:;,()\[\]{}=|]+/)+[^\s/\"'<>:;,()\[\]{}=|]*")
_INSTALLED = ("/site-packages/", "/dist-packages/")


def _shortened(match: re.Match) -> str:
    path = match.group(0)
    for marker in _INSTALLED:  # a package's file as its import path names it: torch/_dynamo/...
        if marker in path:
            return path.split(marker, 1)[1]
    parts = [part for part in path.split("/") if part]
    home = 2 if parts[0] in ("home", "Users") else 1 if parts[0] == "root" else 0  # a home names its user
    rest = parts[home:] if len(parts) > home else parts
    if not home and len(parts) < 3:
        return path
    return ("~/" if home and len(rest) <= 2 else "…/") + "/".join(rest[-2:])


def public_paths(text: str) -> str:
    """``text`` as a published page may show it: each absolute path of the machine that recorded a run
    (its home, its project, its interpreter) as the file's folder and name (``…/cases/x.py``), and a
    package's file as its import path (``torch/_dynamo/eval_frame.py``). Paths of one or two folders
    (``/tmp/x``) are no one's and stay."""
    return _ABSOLUTE.sub(_shortened, text) if "/" in text else text
