"""bench/instructions.py's "build whose dynamo does extra work per compiled frame": where
DIAG_BENCH_EXTRA_WORK is set, dynamo's per-frame compile (torch._dynamo.convert_frame._compile) runs a
loop of that many iterations before it compiles. Loaded by Python at start from PYTHONPATH; the
module is patched once it is imported."""

from __future__ import annotations

import importlib.abc
import os
import sys

ITERATIONS = int(os.environ.get("DIAG_BENCH_EXTRA_WORK") or 0)
TARGET = "torch._dynamo.convert_frame"


def _patch(module) -> None:
    original = module._compile

    def _compile(*args, **kwargs):
        total = 0
        for i in range(ITERATIONS):
            total += i
        return original(*args, **kwargs)

    module._compile = _compile


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def patched_exec(module):
            exec_module(module)
            _patch(module)
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]

        loader.exec_module = patched_exec
        return spec


if ITERATIONS > 0:
    import importlib.util

    sys.meta_path.insert(0, _AfterImport())
