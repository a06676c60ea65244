"""The slow-by-rule watch, in every Python process a fast-tier test starts.

conftest.py puts this folder on PYTHONPATH for fast-tier tests and names a marker file in
``DIAG_SLOW_RULE_MARKER``; Python imports this module at start-up, and each process it then
starts that makes a test slow by rule (a probe, the browser, a C++ compiler, as inductor runs
it) is written to the marker. conftest fails the test with what the marker says. The test
process itself is watched the same way (conftest installs ``watching``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Optional

MARKER = "DIAG_SLOW_RULE_MARKER"
BROWSERS = {"chromium", "chromium-browser", "chrome", "google-chrome"}
COMPILERS = {"cc", "c++", "gcc", "g++", "clang", "clang++"}


def slow_reason(args: Any) -> Optional[str]:
    """Why starting ``args`` makes a test slow by rule, or None."""
    if isinstance(args, (str, bytes, os.PathLike)):
        words = os.fsdecode(args).split()
    else:
        words = [os.fsdecode(word) for word in args]
    if not words:
        return None
    program = Path(words[0]).name
    if "diag.probe" in words or any(word.endswith("/diag/probe/__main__.py") for word in words):
        return f"starts a probe process ({' '.join(words[:6])} ...)"
    if program in BROWSERS:
        return "opens the browser"
    if program in COMPILERS:
        return f"compiles C++ ({program}), as inductor does"
    return None


def watching(marker: str, original: type) -> type:
    """A Popen that notes, in ``marker``, each slow-by-rule process it starts."""

    class Watched(original):  # type: ignore[misc, valid-type]
        def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
            reason = slow_reason(args)
            if reason:
                with open(marker, "a", encoding="utf-8") as noted:
                    noted.write(reason + "\n")
            super().__init__(args, *rest, **kwargs)

    return Watched


if os.environ.get(MARKER):
    subprocess.Popen = watching(os.environ[MARKER], subprocess.Popen)  # type: ignore[misc]
