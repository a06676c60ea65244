"""Interpreters: which python a probe runs in, what torch it has, and whether that torch can compile there.

The probe is not installed into an environment: every probe process gets the orchestrator's own
``diag`` package on PYTHONPATH (nothing of the orchestrator's dependencies), so an environment can
never run a stale probe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from diag.build import BuildError, Spec, python_request
from diag.config import PACKAGE_ROOT, diag_home
from diag.errors import DiagError

# The first torch whose torch.compile runs on each Python: older builds install there but refuse to compile
# ("Python 3.11+ not yet supported for torch.compile" on torch 2.0).
COMPILE_SINCE = {(3, 11): (2, 1), (3, 12): (2, 4), (3, 13): (2, 6)}


class EnvError(DiagError):
    pass


@dataclass(frozen=True)
class TorchEnv:
    spec: str
    python: str
    known_build: Optional[dict] = field(default=None, hash=False)  # None: not looked up yet (see build)
    path: Optional[str] = None

    def build(self) -> dict:
        """torch version, commit and CUDA version; looked up only when a probe died before reporting them."""
        if self.known_build is not None:
            return self.known_build
        try:
            return describe(self.spec, self.python)
        except EnvError:
            return {"torch_version": "unknown", "git_version": None, "cuda_version": None}

    def probe_command(self, *args: str) -> list[str]:
        return [self.python, "-m", "diag.probe", *args]

    def probe_environ(self) -> dict[str, str]:
        """The caller's environment plus the diag package on PYTHONPATH (nothing of diag's dependencies)."""
        env = dict(os.environ)
        root = str(probe_path())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env


def probe_path() -> Path:
    """A folder that holds the diag package alone, for the probe's PYTHONPATH.

    Installed from a wheel, diag's parent folder is a site-packages full of the orchestrator's
    dependencies, which must not shadow the target environment's own. A link named ``diag`` in a
    folder of its own exposes the package and nothing beside it. Where links cannot be made,
    the package's parent folder is used.
    """
    folder = diag_home() / "probe-path" / hashlib.sha1(str(PACKAGE_ROOT).encode()).hexdigest()[:12]
    link = folder / "diag"
    if link.exists():
        return folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        link.symlink_to(PACKAGE_ROOT, target_is_directory=True)
    except FileExistsError:
        pass
    except OSError:
        return PACKAGE_ROOT.parent
    return folder


def parse_spec(spec: str) -> Spec:
    """What a ``--torch`` value asks for (``build.Spec``); EnvError, in one line, when it names nothing."""
    try:
        return Spec.parse(spec)
    except BuildError as exc:
        raise EnvError(str(exc)) from exc


def python_version(python: str) -> tuple[int, int, int]:
    """``sys.version_info[:3]`` of ``python``; EnvError when it does not run."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"python {python}: cannot run it: {exc}") from exc
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 3 or not all(word.isdigit() for word in words):
        last = (done.stderr.strip().splitlines() or [_printed(done.stdout)])[-1]
        raise EnvError(f"python {python}: not a python that runs ({last})")
    major, minor, micro = (int(part) for part in words)
    return major, minor, micro


def _printed(stdout: str) -> str:
    """What a program that should have printed one answer printed instead, for a one-line error."""
    lines = stdout.strip().splitlines()
    return f"it printed {lines[-1][:80]!r}" if lines else "it printed nothing"


def _pyenv_pythons(version: str) -> list[str]:
    """Interpreters pyenv installed for ``version`` (3.10 matches 3.10.13), newest first."""
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        done = subprocess.run([pyenv, "root"], capture_output=True, text=True)
        roots.insert(0, done.stdout.strip() if done.returncode == 0 else "")
    found: list[str] = []
    for root in dict.fromkeys(r for r in roots if r):
        versions = Path(root) / "versions"
        if versions.is_dir():
            for directory in sorted(versions.glob(f"{version}*"), reverse=True):
                name = directory.name
                if name == version or name.startswith(version + "."):
                    found.append(str(directory / "bin" / "python"))
    return found


def _uv_python(version: str) -> list[str]:
    uv = shutil.which("uv")
    if uv is None:
        return []
    done = subprocess.run([uv, "python", "find", version], capture_output=True, text=True)
    return [done.stdout.strip()] if done.returncode == 0 and done.stdout.strip() else []


def find_python(value: Optional[str]) -> str:
    """The interpreter ``--python`` names: a path, or a version found on PATH, through pyenv or uv.

    None is the CLI's own interpreter. A version (``3.10``) is checked by running each candidate,
    since a pyenv shim on PATH may exist for a version that is not active. The error names what was tried.
    """
    if value is None:
        return sys.executable
    wanted = python_request(value)
    if wanted is None:
        path = Path(value).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            python_version(str(path.absolute()))
            return str(path.absolute())
        raise EnvError(f"--python {value!r}: not an executable file, and not a version like 3.10")
    version = f"{wanted[0]}.{wanted[1]}"
    tried: list[str] = []
    sources = [
        ("PATH", [shutil.which(f"python{version}") or ""]),
        ("pyenv", _pyenv_pythons(version)),
        ("uv python find", _uv_python(version)),
    ]
    for source, candidates in sources:
        candidates = [c for c in candidates if c]
        tried.append(f"{source} ({', '.join(candidates) or 'none'})")
        for candidate in candidates:
            try:
                if python_version(candidate)[:2] == wanted:
                    return candidate
            except EnvError:
                continue
    raise EnvError(f"--python {value}: no Python {version} found; tried {'; '.join(tried)}")


def check_compile_support(spec: Spec, version: tuple[int, ...]) -> None:
    """EnvError, before anything is installed, when the spec's torch has no torch.compile on this Python."""
    series = spec.series
    needed = COMPILE_SINCE.get((version[0], version[1]))
    if series is None or needed is None or series >= needed:
        return
    supported = [p for p, t in COMPILE_SINCE.items() if t <= series]
    fits = max(supported) if supported else (3, min(COMPILE_SINCE)[1] - 1)
    raise EnvError(
        f"torch spec {spec.text!r}: torch {series[0]}.{series[1]} has no torch.compile on Python "
        f"{version[0]}.{version[1]} (it needs torch >= {needed[0]}.{needed[1]}); "
        f"choose an older Python, e.g. --python {fits[0]}.{fits[1]}"
    )


_DESCRIBE = (
    "import json, torch; print(json.dumps({'torch_version': torch.__version__, "
    "'git_version': getattr(torch.version, 'git_version', None), "
    "'cuda_version': getattr(torch.version, 'cuda', None)}))"
)


def describe(spec: str, python: str) -> dict:
    """torch version, git commit and CUDA version of ``python``; EnvError naming the spec when it has no torch."""
    try:
        done = subprocess.run([python, "-c", _DESCRIBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"torch spec {spec!r}: cannot run {python}: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"torch spec {spec!r}: {python} cannot import torch ({last})")
    try:
        described = json.loads((done.stdout.strip().splitlines() or [""])[-1])
    except json.JSONDecodeError:
        described = None
    if not isinstance(described, dict) or not isinstance(described.get("torch_version"), str):
        raise EnvError(f"torch spec {spec!r}: {python} is not a python with torch ({_printed(done.stdout)})")
    return described


_PURELIB = "import json, sysconfig\nprint(json.dumps(sysconfig.get_paths()['purelib']))"


def site_packages(python: str) -> str:
    """Where ``python`` installs pure-Python distributions (its environment's own site-packages)."""
    done = subprocess.run([python, "-c", _PURELIB], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise EnvError(f"cannot read the site-packages of {python}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def byte_compile(python: str) -> None:
    """Byte-compile the site-packages of ``python`` on every core. Installs run with --no-compile, as
    pip compiles torch's 10,000 modules on one core (23 of an install's 31 s on a 2-core machine); and
    a module left uncompiled would be compiled inside a probe's first compile, and timed with it.
    A file this Python cannot compile (torch ships some for newer ones) is passed over, as pip does."""
    command = [python, "-m", "compileall", "-q", "-q", "-j", "0", site_packages(python)]
    subprocess.run(command, capture_output=True, timeout=3600)
