"""A year of the nightly workflow's publish job, night by night, with its own commands.

Each night, every CPU leg writes its shard through ``diag.store`` the way ``diag run`` does
(40 runs a leg: 4 cases x fullgraph on/off x ``--repeat 5``, timing samples at the size a
``--timing-seconds 2`` run stores), and the publish job's steps run as the workflow runs them:
the gh-pages checkout (a local bare repository stands in for GitHub), ``diag merge``,
``diag prune --keep-builds 14``, ``diag report`` and the single orphan commit pushed over the
branch. ``diag report`` renders on the nights in ``report_nights`` only (a render of a year's
history takes seconds, and the published site's size depends on the newest builds alone).
``checkout_fails`` names nights whose checkout fails: the job stops there, and is re-run.

    python tests/pipeline_year.py --nights 365 --work DIR   (prints the sizes as it goes)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from diag import store
from diag.store import RunRecord, build_identity

CASES = ("append_last", "dynamic_slice", "hf_dynamic_cache", "hf_static_cache")
RELEASES = ("2.13.0+cpu", "2.14.1+cpu", "2.15.0+cpu")
STEP_SAMPLES, GENERATIONS = 800, 50  # per mode, as a --timing-seconds 2 run of 16 tokens stores
REASON = ("Encountered graph break when attempting to trace CALL: a call to a function\n\n"
          "Unsupported Tensor.item() call with capture_scalar_outputs=False\n" + "  Explanation: ... " * 60)
CAPABILITIES = json.dumps({f"collector_{i}": {"available": True, "detail": "x" * 90} for i in range(9)})


def _git(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "core.compression=1", "-c", "core.bigFileThreshold=1m", *args], cwd=cwd,
                          capture_output=True, text=True, check=True)


def leg_runs(night: int, leg: int, version: str, rng: random.Random) -> list[RunRecord]:
    build = build_identity(version, f"{rng.getrandbits(160):040x}" if ".dev" in version else f"{leg:040x}", None)
    found = []
    for case in CASES:
        for fullgraph in (1, 0):
            for repeat in range(5):
                breaks = case == "dynamic_slice" and not fullgraph
                timings = []
                for mode in ("eager", "compiled"):
                    base = 1e-3 * (1 + rng.random())
                    for metric, count in (("decode_step", STEP_SAMPLES), ("generation", GENERATIONS),
                                          ("host_reference", GENERATIONS)):
                        samples = [round(base * (1 + rng.random() * 0.1), 9) for _ in range(count)]
                        timings.append({"mode": mode, "metric": metric, "unit": "s", "samples": json.dumps(samples)})
                run = {"uid": f"n{night}-l{leg}-{case}-{fullgraph}-{repeat}", "case": case, "case_source": "builtin",
                       "backend": "inductor", "fullgraph": fullgraph, "dynamic": "auto", "mode": "default",
                       "device": "cpu", "dtype": "float32", "batch_size": 1, "prompt_length": 16,
                       "new_tokens": 16, "model": "tiny-random", "config": json.dumps({"case": case}),
                       "status": "graph_break" if breaks else "pass", "graph_break_count": 6 if breaks else 0,
                       "recompile_count": 0, "hidden_error_count": 0, "capabilities": CAPABILITIES,
                       "counters": json.dumps({"stats": {"unique_graphs": 9, "calls_captured": 139}}),
                       "compiled_ms_per_token": base * 1e3, "eager_ms_per_token": base * 1.5e3,
                       "python": "3.11.7", "transformers_version": "5.24.0", "invocation": f"n{night}-l{leg}",
                       "started_at": (dt.datetime(2027, 1, 1) + dt.timedelta(days=night)).isoformat()}
                graph_breaks = [{"key": "GB0124", "reason": REASON, "gb_type": "Unsupported Tensor.item() call",
                                 "location": "/w/cases/dynamic_slice.py:19", "resumable": 1, "decode_step": 0,
                                 "count": 6}] if breaks else []
                frames = [{"compile_id": f"{i}/0", "co_name": "decode_step", "guard_count": 70,
                           "graph_op_count": 13, "entire_frame_compile_time_s": 0.5} for i in range(9)]
                found.append(RunRecord(build=build, run=run, graph_breaks=graph_breaks, recompiles=[],
                                       hidden_errors=[], timings=timings, frames=frames))
    return found


@dataclass
class Year:
    work: Path
    invoke: Callable[..., int]  # runs one diag command line (the workflow's), returns its exit status
    report_nights: set[int] = field(default_factory=set)
    checkout_fails: set[int] = field(default_factory=set)
    log: Callable[[str], None] = lambda message: None
    stored: int = 0  # runs the legs wrote, all nights
    sizes: list[tuple[int, int, int]] = field(default_factory=list)  # night, history bytes, branch bytes

    def __post_init__(self) -> None:
        self.pages = self.work / "pages.git"
        self.site = self.work / "site"
        _git("init", "-q", "--bare", str(self.pages))
        seed = self.work / "seed"
        _git("init", "-q", "-b", "gh-pages", str(seed))
        _git("-c", "user.name=n", "-c", "user.email=n@x", "commit", "-q", "--allow-empty", "-m", "empty", cwd=seed)
        _git("push", "-q", str(self.pages), "gh-pages", cwd=seed)
        shutil.rmtree(seed)

    def legs(self, night: int) -> list[Path]:
        """The night's shards, written as each leg's diag run writes them."""
        rng = random.Random(night)
        date = dt.date(2027, 1, 1) + dt.timedelta(days=night)
        versions = [f"2.16.0.dev{date:%Y%m%d}+cpu", *RELEASES]
        shards = []
        for leg, version in enumerate(versions):
            path = self.work / "shards" / f"night{night}" / f"leg{leg}" / "shard.db"
            path.parent.mkdir(parents=True)
            db = store.open_db(path)
            store.save_runs(db, leg_runs(night, leg, version, rng))
            db.conn.close()
            self.stored += 40
            shards.append(path)
        return shards

    def checkout(self, night: int) -> bool:
        """actions/checkout of gh-pages into site/ (a fresh clone); False when it fails."""
        if self.site.exists():
            shutil.rmtree(self.site)
        source = str(self.pages) if night not in self.checkout_fails else str(self.work / "unreachable.git")
        try:
            _git("clone", "-q", "--depth", "1", "--branch", "gh-pages", source, str(self.site))
        except subprocess.CalledProcessError:
            return False
        return True

    def publish(self, night: int, shards: list[Path]) -> bool:
        """The publish job's steps, in the workflow's order; False where one fails (the job stops)."""
        if not self.checkout(night):
            self.log(f"night {night}: checkout failed; the job stops, nothing published")
            return False
        history = self.site / "history.db"
        for command in (["merge", str(history), *map(str, shards)],
                        ["prune", "--db", str(history), "--keep-builds", "14"]):
            if self.invoke(*command) != 0:
                return False
        if night in self.report_nights and self.invoke("report", "--db", str(history), "--out", str(self.site)) != 0:
            return False
        _git("checkout", "-q", "--orphan", f"night{night}", cwd=self.site)
        _git("add", "-A", cwd=self.site)
        _git("-c", "user.name=n", "-c", "user.email=n@x", "commit", "-q", "-m", f"night {night}", cwd=self.site)
        _git("push", "-q", "-f", "origin", f"night{night}:gh-pages", cwd=self.site)
        _git("gc", "-q", "--prune=now", cwd=self.pages)  # GitHub drops unreachable objects
        self.sizes.append((night, history.stat().st_size, _size(self.pages)))
        return True

    def night(self, night: int) -> None:
        shards = self.legs(night)
        if not self.publish(night, shards):
            self.checkout_fails.discard(night)  # the failed job is re-run
            assert self.publish(night, shards), f"night {night}: the re-run failed"
        shutil.rmtree(self.work / "shards" / f"night{night}")


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    def invoke(*command: str) -> int:
        return subprocess.run(["python", "-m", "diag", *command], capture_output=True, env=dict(os.environ)).returncode

    year = Year(args.work, invoke, report_nights={1, args.nights}, log=print)
    started = time.monotonic()
    for night in range(1, args.nights + 1):
        year.night(night)
        if night % 10 == 0 or night == args.nights:
            _, history, branch = year.sizes[-1]
            print(f"night {night}: history {history / 2**20:.1f} MB, branch {branch / 2**20:.1f} MB, "
                  f"{time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
