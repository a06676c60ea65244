"""Lets the A/B case files reuse the built-in cases' loops (cases/ is not a package)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "diag" / "cases"))
