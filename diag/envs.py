"""Torch environments: which interpreter a probe runs in.

A spec is ``current`` (the CLI's own interpreter) or a path to an existing
python. Provisioned environments for releases and nightlies are parsed here so
that they fail with a clear message rather than as an unknown spec.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from diag.config import PACKAGE_ROOT

_RELEASE = re.compile(r"^\d+\.\d+(\.\d+)?$")
_NIGHTLY = re.compile(r"^\d+\.\d+\.\d+\.dev(\d{8})?$")


class EnvError(Exception):
    pass


@dataclass(frozen=True)
class TorchEnv:
    spec: str
    python: str
    torch: dict

    def probe_command(self, *args: str) -> list[str]:
        return [self.python, "-m", "diag.probe", *args]

    def probe_environ(self) -> dict[str, str]:
        """The caller's environment plus the probe package on PYTHONPATH (nothing else of diag's)."""
        env = dict(os.environ)
        root = str(PACKAGE_ROOT.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env


def spec_kind(spec: str) -> str:
    """current | python | release | nightly_date | nightly_prefix | nightly; EnvError when malformed."""
    if spec == "current":
        return "current"
    if spec == "nightly":
        return "nightly"
    if "/" in spec or "\\" in spec or Path(spec).name.startswith("python"):
        return "python"
    if _RELEASE.match(spec):
        return "release"
    match = _NIGHTLY.match(spec)
    if match:
        return "nightly_date" if match.group(1) else "nightly_prefix"
    raise EnvError(f"malformed torch spec {spec!r}: expected current, a release (2.13.0), a nightly "
                   "(2.1.0.dev20230621 or 2.1.0.dev), nightly, or a path to a python")


def resolve(spec: str) -> TorchEnv:
    kind = spec_kind(spec)
    if kind == "current":
        return TorchEnv(spec, sys.executable, describe(spec, sys.executable))
    if kind == "python":
        python = Path(spec).expanduser()
        if not python.is_file() or not os.access(python, os.X_OK):
            raise EnvError(f"torch spec {spec!r}: no executable python at that path")
        return TorchEnv(spec, str(python.absolute()), describe(spec, str(python)))
    raise EnvError(f"torch spec {spec!r}: provisioning {kind.replace('_', ' ')} environments is not "
                   "available in this diag; pass --torch current or a path to a python that has torch")


_DESCRIBE = ("import json, torch; print(json.dumps({'torch_version': torch.__version__, "
             "'git_version': getattr(torch.version, 'git_version', None), "
             "'cuda_version': getattr(torch.version, 'cuda', None)}))")


def describe(spec: str, python: str) -> dict:
    """torch version, git commit and CUDA version of ``python``; EnvError naming the spec when it has no torch."""
    try:
        done = subprocess.run([python, "-c", _DESCRIBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"torch spec {spec!r}: cannot run {python}: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"torch spec {spec!r}: {python} cannot import torch ({last})")
    return json.loads(done.stdout.strip().splitlines()[-1])
