"""A year of the nightly workflow's publish job, night by night, with its own commands.

Each night, every CPU leg writes its shard through ``diag.store`` the way ``diag run`` does
(404 runs a leg: 4 cases x fullgraph on/off x ``--repeat 5``, timing samples at the size a
``--timing-seconds 2`` run stores, then ``hf:all``'s 182 architectures x fullgraph on/off,
untimed; each field at the size real runs store), and the publish job's steps run as the
workflow runs them: the gh-pages checkout (a local bare repository stands in for GitHub), the
workflow's own ``diag merge``, ``diag prune`` and ``diag report`` command lines (read from
nightly.yml) and the single orphan commit pushed over the branch. ``diag report`` renders on the
nights in ``report_nights`` only (a render of a long history takes a minute, and the branch holds
the last render alone). ``checkout_fails`` names nights whose checkout fails: the job stops
there, and is re-run.

    python bench/pipeline_year.py --nights 365 --work DIR   (prints the sizes as it goes)

tests/test_pipeline_year.py runs a short form of it (45 nights, an architecture breaking every
10), which still thins old nightlies and keeps every transition.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import multiprocessing
import os
import random
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from diag import store
from diag.build import identity as build_identity
from diag.store import RunRecord

CASES = ("append_last", "dynamic_slice", "hf_dynamic_cache", "hf_static_cache")
RELEASES = ("2.13.0+cpu", "2.14.1+cpu", "2.15.0+cpu")
STEP_SAMPLES, GENERATIONS = 800, 50  # per mode, as a --timing-seconds 2 run of 16 tokens stores
# `diag run --case hf:all`: every decoder-only architecture of transformers 5.24.0, fullgraph on and
# off, one run each; outcomes as README's "Architectures" counts them (138 pass, 6 fullgraph_error,
# 4 compile_error, 33 eager_error, 1 timeout)
ARCHITECTURES = 182
OUTCOMES = ["pass"] * 138 + ["fullgraph_error"] * 6 + ["compile_error"] * 4 + ["eager_error"] * 33 + ["timeout"]
REASON = (
    "Encountered graph break when attempting to trace CALL: a call to a function\n\n"
    "Unsupported Tensor.item() call with capture_scalar_outputs=False\n" + "  Explanation: ... " * 60
)
# field sizes as real runs store them (tests/fixtures/runs, assembled): a probe's capabilities, the
# spec's config, a run directory, a compile error's message and traceback, CI provenance
CAPABILITIES = json.dumps({f"collector_{i}": {"available": True, "detail": "x" * 70} for i in range(9)})
MESSAGE, TRACEBACK = "torch._dynamo.exc.Unsupported: " + "m" * 2100, '  File "x.py", line 1, in f\n' * 150


def _config(case: str, fullgraph: int) -> str:
    return json.dumps(
        {
            "backend": "inductor",
            "batch_size": 1,
            "depyf": False,
            "device": "cpu",
            "dtype": "float32",
            "dynamic": None,
            "fullgraph": bool(fullgraph),
            "mode": None,
            "model": None,
            "new_tokens": 16,
            "profile": False,
            "prompt_length": 16,
            "repeats": 5,
            "reuse_compiled": True,
            "seed": 0,
            "threads": 1,
            "timing_seconds": 2.0,
            "warmup": 1,
            "case": case,
        }
    )


def _outcome(night: int, version: str, architecture: int, fullgraph: int, period: int = 30) -> str:
    """An architecture's status: fixed on releases; on the nightly, one architecture every ``period``
    nights (a month) breaks for a few nights and is fixed again (transitions for the report, check and
    prune to keep)."""
    status = OUTCOMES[architecture % len(OUTCOMES)]
    if ".dev" in version and architecture == night // period and night % period < 4 and status == "pass":
        status = "fullgraph_error" if fullgraph else "compile_error"
    if not fullgraph and status == "fullgraph_error":
        status = "graph_break"
    return status


def _run(night: int, leg: int, case: str, fullgraph: int, status: str, uid: str, **fields) -> dict:
    failed = status not in ("pass", "graph_break")
    return {
        "uid": uid,
        "case": case,
        "case_source": "builtin",
        "backend": "inductor",
        "fullgraph": fullgraph,
        "dynamic": "auto",
        "mode": "default",
        "device": "cpu",
        "dtype": "float32",
        "batch_size": 1,
        "prompt_length": 16,
        "new_tokens": 16,
        "model": "tiny-random",
        "config": _config(case, fullgraph),
        "status": status,
        "graph_break_count": 2 if status == "graph_break" else 0,
        "recompile_count": 0,
        "hidden_error_count": 0,
        "capabilities": CAPABILITIES,
        "counters": json.dumps({"stats": {"unique_graphs": 9, "calls_captured": 139}}),
        "error_type": "Unsupported" if failed else None,
        "error_key": f"Unsupported:{case}" if failed else None,
        "error_message": MESSAGE if failed else None,
        "traceback": TRACEBACK if failed else None,
        "python": "3.11.7",
        "transformers_version": "5.24.0",
        "invocation": f"n{night}-l{leg}",
        "artifacts_dir": f"/home/runner/work/diag/diag/shard.runs/{uid}-20270101T000000-abcdef",
        "extra": json.dumps(
            {
                "ci": {
                    "server": "https://github.com",
                    "repository": "example/diag",
                    "run_id": str(9_000_000_000 + night),
                    "attempt": "1",
                    "artifact": f"shard-cpu-{leg}-{9_000_000_000 + night}-1",
                    "path": f"shard.runs/{uid}",
                }
            }
        ),
        "started_at": (dt.datetime(2027, 1, 1) + dt.timedelta(days=night, seconds=leg)).isoformat(),
        **fields,
    }


def _git(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    # stored uncompressed night to night (fast); the measured repack compresses as a server does
    return subprocess.run(
        ["git", "-c", "core.compression=0", "-c", "core.bigFileThreshold=1m", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )


def leg_runs(
    night: int, leg: int, version: str, rng: random.Random, period: int = 30, architectures: int = ARCHITECTURES
) -> list[RunRecord]:
    """One CPU leg's runs: the four cases (--repeat 5, timed), then hf:all (untimed)."""
    build = build_identity(version, f"{rng.getrandbits(160):040x}" if ".dev" in version else f"{leg:040x}", None)
    found = []
    frames = [
        {
            "compile_id": f"{i}/0",
            "co_name": "decode_step",
            "guard_count": 70,
            "graph_op_count": 13,
            "entire_frame_compile_time_s": 0.5,
        }
        for i in range(9)
    ]
    for case in CASES:
        for fullgraph in (1, 0):
            for repeat in range(5):
                breaks = case == "dynamic_slice" and not fullgraph
                timings = []
                for mode in ("eager", "compiled"):
                    base = 1e-3 * (1 + rng.random())
                    for metric, count in (
                        ("decode_step", STEP_SAMPLES),
                        ("generation", GENERATIONS),
                        ("host_reference", GENERATIONS),
                    ):
                        samples = [round(base * (1 + rng.random() * 0.1), 9) for _ in range(count)]
                        timings.append({"mode": mode, "metric": metric, "unit": "s", "samples": json.dumps(samples)})
                run = _run(
                    night,
                    leg,
                    case,
                    fullgraph,
                    "graph_break" if breaks else "pass",
                    f"n{night}-l{leg}-{case}-{fullgraph}-{repeat}",
                    compiled_ms_per_token=base * 1e3,
                    eager_ms_per_token=base * 1.5e3,
                )
                graph_breaks = (
                    [
                        {
                            "key": "GB0124",
                            "reason": REASON,
                            "gb_type": "Unsupported Tensor.item() call",
                            "location": "/w/cases/dynamic_slice.py:19",
                            "resumable": 1,
                            "decode_step": 0,
                            "count": 6,
                        }
                    ]
                    if breaks
                    else []
                )
                found.append(
                    RunRecord(
                        build=build,
                        run=run,
                        graph_breaks=graph_breaks,
                        recompiles=[],
                        hidden_errors=[],
                        timings=timings,
                        frames=frames,
                    )
                )
    for architecture in range(architectures):
        case = f"hf:arch{architecture:03d}"
        for fullgraph in (1, 0):
            status = _outcome(night, version, architecture, fullgraph, period)
            run = _run(
                night,
                leg,
                case,
                fullgraph,
                status,
                f"n{night}-l{leg}-{case}-{fullgraph}",
                backend="aot_eager",
                new_tokens=4,
            )
            graph_breaks = (
                [
                    {
                        "key": "GB0124",
                        "reason": REASON[:320],
                        "gb_type": "Unsupported Tensor.item() call",
                        "location": f"/t/models/arch{architecture}.py:88",
                        "resumable": 1,
                        "decode_step": 0,
                        "count": 2,
                    }
                ]
                if status == "graph_break"
                else []
            )
            found.append(
                RunRecord(
                    build=build,
                    run=run,
                    graph_breaks=graph_breaks,
                    recompiles=[],
                    hidden_errors=[],
                    timings=[],
                    frames=frames[:2] if status == "pass" else [],
                )
            )
    return found


def write_legs(work: Path, night: int, period: int = 30, architectures: int = ARCHITECTURES) -> tuple[list[Path], int]:
    """The night's shards, written as each leg's diag run writes them; and how many runs they hold."""
    rng = random.Random(night)
    date = dt.date(2027, 1, 1) + dt.timedelta(days=night)
    shards, count = [], 0
    for leg, version in enumerate([f"2.16.0.dev{date:%Y%m%d}+cpu", *RELEASES]):
        path = work / "shards" / f"night{night}" / f"leg{leg}" / "shard.db"
        path.parent.mkdir(parents=True)
        db = store.open_db(path)
        written = leg_runs(night, leg, version, rng, period, architectures)
        store.save_runs(db, written)
        db.conn.close()
        count += len(written)
        shards.append(path)
    return shards, count


@dataclass
class Year:
    work: Path
    invoke: Callable[..., int]  # runs one diag command line (the workflow's), returns its exit status
    report_nights: set[int] = field(default_factory=set)
    checkout_fails: set[int] = field(default_factory=set)
    log: Callable[[str], None] = lambda message: None
    measure_every: int = 7  # nights between measurements of the branch (a recompressing gc)
    break_every: int = 30  # nights between the architectures that break on the nightly (_outcome)
    architectures: int = ARCHITECTURES  # hf:arch000... in each leg, fullgraph on and off
    stored: int = 0  # runs the legs wrote, all nights
    sizes: list[tuple[int, int, int]] = field(default_factory=list)  # night, history bytes, branch bytes
    history_sizes: list[int] = field(default_factory=list)  # history bytes, every night published

    def __post_init__(self) -> None:
        self.pages = self.work / "pages.git"
        self.site = self.work / "site"
        _git("init", "-q", "--bare", str(self.pages))
        seed = self.work / "seed"
        _git("init", "-q", "-b", "gh-pages", str(seed))
        _git("-c", "user.name=n", "-c", "user.email=n@x", "commit", "-q", "--allow-empty", "-m", "empty", cwd=seed)
        _git("push", "-q", str(self.pages), "gh-pages", cwd=seed)
        shutil.rmtree(seed)
        # the next night's shards are written in another process while this night publishes
        self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        self._next: dict[int, concurrent.futures.Future] = {}

    def legs(self, night: int) -> list[Path]:
        """The night's shards (see write_legs)."""
        ahead = self._next.pop(night, None)
        shards, count = ahead.result() if ahead else write_legs(self.work, night, self.break_every, self.architectures)
        self._next[night + 1] = self._pool.submit(
            write_legs, self.work, night + 1, self.break_every, self.architectures
        )
        self.stored += count
        return shards

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)

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

    def publish(self, night: int, shards: list[Path], measure: bool = False) -> bool:
        """The publish job's steps, in the workflow's order; False where one fails (the job stops).

        ``measure``: afterwards, repack the branch as a server keeps it (unreachable objects gone,
        compressed) and record the sizes (also every ``measure_every`` nights)."""
        if not self.checkout(night):
            self.log(f"night {night}: checkout failed; the job stops, nothing published")
            return False
        history = self.site / "history.db"
        for command in publish_commands():
            if command[1] == "report" and night not in self.report_nights:
                continue
            words = [str(self.site) + word[4:] if word.startswith("site") else word for word in command[1:]]
            index = words.index("shards/*/shard.db") if "shards/*/shard.db" in words else None
            if index is not None:
                words[index : index + 1] = map(str, shards)
            if self.invoke(*words) != 0:
                return False
        _git("checkout", "-q", "--orphan", f"night{night}", cwd=self.site)
        _git("add", "-A", cwd=self.site)
        _git("-c", "user.name=n", "-c", "user.email=n@x", "commit", "-q", "-m", f"night {night}", cwd=self.site)
        _git("push", "-q", "-f", "origin", f"night{night}:gh-pages", cwd=self.site)
        self.history_sizes.append(history.stat().st_size)
        if measure or night % self.measure_every == 0:
            # GitHub drops unreachable objects and stores the rest compressed
            _git("-c", "pack.compression=1", "repack", "-q", "-a", "-d", "-F", cwd=self.pages)
            _git("prune", "--expire=now", cwd=self.pages)
            self.sizes.append((night, history.stat().st_size, _size(self.pages)))
        return True

    def night(self, night: int, measure: bool = False) -> None:
        shards = self.legs(night)
        if not self.publish(night, shards, measure):
            self.checkout_fails.discard(night)  # the failed job is re-run
            assert self.publish(night, shards, measure), f"night {night}: the re-run failed"
        shutil.rmtree(self.work / "shards" / f"night{night}")


def publish_commands() -> list[list[str]]:
    """The publish job's diag steps before it pushes (merge, prune, report), as nightly.yml has them."""
    import yaml

    workflow = yaml.safe_load(
        (Path(__file__).resolve().parent.parent / ".github" / "workflows" / "nightly.yml").read_text()
    )
    found = [shlex.split(step["run"]) for step in workflow["jobs"]["publish"]["steps"] if "run" in step]
    found = [words for words in found if words[0] == "diag" and words[1] in ("merge", "prune", "report")]
    assert [words[1] for words in found] == ["merge", "prune", "report"], found
    return found


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

    year = Year(args.work, invoke, report_nights={1, args.nights}, log=print, measure_every=10)
    started = time.monotonic()
    for night in range(1, args.nights + 1):
        year.night(night, measure=night == args.nights)
        if night % 10 == 0 or night == args.nights:
            _, history, branch = year.sizes[-1]
            print(
                f"night {night}: history {history / 2**20:.1f} MB, branch {branch / 2**20:.1f} MB, "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
    year.close()


if __name__ == "__main__":
    main()
