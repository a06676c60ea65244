"""Stands in for a regression between two real builds: append_last on torch < 2.14, the data-dependent
dynamic_slice loop from 2.14 on (so fullgraph fails there). Bisect tests search for that boundary."""

import sys
from pathlib import Path

import torch

from diag.probe.cases import case

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "diag" / "cases"))
import append_last  # after sys.path names the built-in cases
import dynamic_slice  # after sys.path names the built-in cases


def _version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


@case("version_gate", "append_last before torch 2.14, dynamic_slice from 2.14")
def generate(gen):
    (dynamic_slice if _version() >= (2, 14) else append_last).generate(gen)
