"""Torch environments: which interpreter a probe runs in, and provisioning new ones.

A spec is ``current`` (the CLI's own interpreter), a path to an existing python, a release
(``2.13.0``), a dated nightly (``2.1.0.dev20230621``), a nightly prefix (``2.1.0.dev``: the newest
nightly of that series), ``nightly`` (the newest nightly) or a wheel; ``build.Spec`` parses it.
Releases, nightlies and wheels are provisioned as virtualenvs (``installing.py``); a package bisect's
releases as overlays of one base (``overlays.py``); interpreters are used as they are
(``interpreters.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from diag.build import Spec, nightly_date
from diag.envs.installing import (
    NIGHTLY_INDEX,
    STAMP,
    TRANSFORMERS_FALLBACKS,
    Request,
    env_key,
    envs_dir,
    extras_install_command,
    find_wheel,
    names_transformers,
    provision,
    read_stamp,
    torch_install_command,
    wheel_install_command,
)
from diag.envs.interpreters import (
    COMPILE_SINCE,
    EnvError,
    TorchEnv,
    check_compile_support,
    describe,
    find_python,
    parse_spec,
    probe_path,
    python_version,
)
from diag.envs.overlays import UNMOVABLE, check_movable
from diag.envs.overlays import resolve as overlay

__all__ = [
    "COMPILE_SINCE",
    "NIGHTLY_INDEX",
    "STAMP",
    "TRANSFORMERS_FALLBACKS",
    "EnvError",
    "Options",
    "Request",
    "TorchEnv",
    "UNMOVABLE",
    "check_compile_support",
    "check_movable",
    "describe",
    "env_key",
    "extras_install_command",
    "find_python",
    "find_wheel",
    "listing",
    "installed_torch_release",
    "names_transformers",
    "overlay",
    "package_versions",
    "parse_spec",
    "probe_path",
    "provision",
    "python_version",
    "read_stamp",
    "remove",
    "resolve",
    "torch_install_command",
    "wheel_install_command",
]


@dataclass(frozen=True)
class Options:
    """How environments are provisioned: the CLI's --with, --index-url, --extra-index-url, --variant,
    --installer, --python and --find-links."""

    extras: tuple[str, ...] = ()
    index_url: Optional[str] = None
    variant: str = "cpu"
    installer: str = "pip"
    python: Optional[str] = None
    find_links: tuple[str, ...] = ()
    extra_index_urls: tuple[str, ...] = ()

    def request(self, spec: Spec, sha256: Optional[str] = None) -> Request:
        return Request(
            spec=spec,
            extras=tuple(self.extras),
            python=find_python(self.python),
            index_url=self.index_url,
            extra_index_urls=tuple(self.extra_index_urls),
            variant=self.variant,
            installer=self.installer,
            find_links=tuple(self.find_links),
            sha256=sha256,
        )


def resolve(
    spec: Spec, options: Options = Options(), log=lambda message: None, sha256: Optional[str] = None
) -> TorchEnv:
    """The environment for a spec: an interpreter as it is, else a provisioned one.

    A nightly prefix or ``nightly`` is first resolved to the newest dated nightly there is, and
    the environment is that build's: a machine that keeps its environments never reuses
    yesterday's nightly for today's.
    """
    if spec.kind == "current" and options.python is not None:
        spec = Spec(find_python(options.python), "python")
    if spec.kind == "current":
        # The CLI's own interpreter: importing torch just to name it would add seconds to every run.
        return TorchEnv(spec.text, sys.executable)
    if spec.kind == "python":
        path = Path(spec.text).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise EnvError(f"torch spec {spec.text!r}: no executable python at that path")
        return TorchEnv(spec.text, str(path.absolute()), describe(spec.text, str(path.absolute())))
    request = options.request(spec, sha256)
    if spec.kind in ("nightly_prefix", "nightly"):
        wheel = find_wheel(request)
        log(f"{spec.text}: the newest is {wheel.base_version} ({wheel.origin})")
        return provision(replace(request, spec=parse_spec(wheel.base_version)), log, wheel, label=spec.text)
    return provision(request, log)


def installed_torch_release() -> str:
    """The version of the torch installed beside diag, without its local label (``2.13.0``)."""
    try:
        return metadata.version("torch").split("+", 1)[0]
    except metadata.PackageNotFoundError:
        raise EnvError("no torch is installed here to fix; name one with --torch (e.g. --torch 2.13.0)") from None


def package_versions(name: str, options: Options = Options()) -> list[str]:
    """The versions of package ``name`` the installer's index offers (pip's configuration, and the
    index options given), newest first, as ``pip index versions`` lists them."""
    command = [find_python(options.python), "-m", "pip", "index", "versions", name, "--disable-pip-version-check"]
    if options.index_url:
        command += ["--index-url", options.index_url]
    for url in options.extra_index_urls:
        command += ["--extra-index-url", url]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"cannot list the versions of {name}: {exc}") from exc
    listed = re.search(r"^Available versions:\s*(.+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or listed is None:
        reason = (done.stderr.strip().splitlines() or ["no versions listed"])[-1]
        raise EnvError(f"cannot list the versions of {name} on the index: {reason}")
    return [version.strip() for version in listed.group(1).split(",") if version.strip()]


def listing() -> list[dict[str, Any]]:
    """Provisioned environments with their torch build, size on disk and path. A package bisect's
    base names the package it leaves out (``without``); an overlay, the base it is over (``over``)
    and the release it adds (``moved``): its size is its own, the base's is apart."""
    rows: list[dict[str, Any]] = []
    if not envs_dir().is_dir():
        return rows
    for directory in sorted(envs_dir().iterdir()):
        stamp = read_stamp(directory) if directory.is_dir() else None
        if stamp is None:
            continue
        size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
        torch = stamp["torch"]
        rows.append(
            {
                "name": directory.name,
                "spec": stamp["spec"],
                "torch_version": torch["torch_version"],
                "git_version": torch.get("git_version"),
                "nightly_date": nightly_date(torch["torch_version"]),
                "size_mb": round(size / 2**20, 1),
                "path": str(directory),
                "without": torch.get("without"),
                "over": Path(stamp["base"]).name if stamp.get("base") else None,
                "moved": torch.get("moved"),
            }
        )
    return rows


def remove(name: str) -> Path:
    """Delete a provisioned environment (an overlay's base is built again by the next bisect that needs it)."""
    directory = envs_dir() / name
    if not name or "/" in name or not (directory / STAMP).exists():
        raise EnvError(f"no provisioned environment named {name!r} (see diag env list)")
    shutil.rmtree(directory)
    return directory
