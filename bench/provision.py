"""What a provisioned environment and a package bisect's release cost, side by side in one run.

    python bench/provision.py [--torch 2.13.0] [--rounds 2] [--package packaging==22.0]

Alternates, per round, a whole environment built as pip would leave it on its own (pip compiling each
module as it installs, on one core: ``pip``) and as diag builds it (installs with --no-compile, then
``compileall`` on every core: ``diag``), each into an empty DIAG_HOME. Then the package's overlay
over a base less that package (the base built once, outside the timing). Prints the median and range
of each, and their ratio per round: on a shared machine one figure is not a result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from diag import envs  # noqa: E402 (imported once the checkout is on the path)
from diag.envs import installing  # noqa: E402 (imported once the checkout is on the path)


def _as_pip_leaves_it(request, python):
    """The installer's command without --no-compile: pip compiles every module as it installs it."""
    return [word for word in _INSTALLER(request, python) if word != "--no-compile"]


_INSTALLER = installing.installer_command


def build(torch: str, way: str, home: Path) -> float:
    """Seconds to provision torch (and transformers) into ``home``, the ``way`` given."""
    os.environ["DIAG_HOME"] = str(home)
    request = envs.Options().request(envs.parse_spec(torch))
    started = time.perf_counter()
    if way == "pip":
        with (
            mock.patch.object(installing, "installer_command", _as_pip_leaves_it),
            mock.patch.object(installing, "byte_compile", lambda python: None),
        ):
            envs.provision(request)
    else:
        envs.provision(request)
    return time.perf_counter() - started


def overlay(torch: str, package: str, home: Path) -> tuple[float, float]:
    """Seconds for the base less the package (once), then for the package's overlay over it."""
    os.environ["DIAG_HOME"] = str(home)
    name, _, version = package.partition("==")
    request = envs.Options().request(envs.parse_spec(torch))
    started = time.perf_counter()
    installing.provision(envs.Request(**{**request.__dict__, "without": name}))
    based = time.perf_counter()
    envs.overlay(request, name, version)
    return based - started, time.perf_counter() - based


def _said(values: list[float]) -> str:
    return f"median {statistics.median(values):.1f} s (range {min(values):.1f}-{max(values):.1f}, n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default="2.13.0")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--package", default="packaging==22.0")
    args = parser.parse_args()
    took: dict[str, list[float]] = {"pip": [], "diag": []}
    with tempfile.TemporaryDirectory(prefix="diag-bench-provision-") as scratch:
        for round_ in range(args.rounds):
            order = ("pip", "diag") if round_ % 2 == 0 else ("diag", "pip")
            for way in order:
                took[way].append(build(args.torch, way, Path(scratch) / f"{way}-{round_}"))
                print(f"round {round_ + 1}: {way} {took[way][-1]:.1f} s", file=sys.stderr)
        base, over = overlay(args.torch, args.package, Path(scratch) / "overlay")
    ratios = [d / p for p, d in zip(took["pip"], took["diag"])]
    print(f"torch {args.torch} with transformers, a whole environment:")
    print(f"  pip compiling as it installs: {_said(took['pip'])}")
    print(f"  --no-compile, then compileall on {os.cpu_count()} cores: {_said(took['diag'])}")
    print(f"  ratio diag/pip per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"{args.package} as an overlay: {over:.1f} s (its base less the package, once: {base:.1f} s)")


if __name__ == "__main__":
    main()
