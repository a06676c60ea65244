"""Plan and execute a matrix of environment x case x config, one probe process per run."""

from __future__ import annotations

import json
import socket
import tempfile
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from diag import __version__, rundir, trace
from diag import row as rows
from diag.assemble import assemble
from diag.catalog import CaseRef
from diag.config import artifacts_root
from diag.envs import TorchEnv
from diag.probe import records
from diag.probe.session import Config
from diag.spawn import ProcessTracker, run_probe
from diag.store import RunRecord, now


@dataclass(frozen=True)
class Job:
    env: TorchEnv
    case: CaseRef
    config: Config

    def row(self) -> rows.Row:
        return rows.of_config(asdict(self.config), self.case.name, self.case.source)

    def label(self) -> str:
        label = rows.label(self.row())
        return label if self.env.spec == "current" else f"{label} torch={self.env.spec}"


def plan(envs: list[TorchEnv], cases: list[CaseRef], configs: list[Config], repeat: int = 1) -> list[Job]:
    """Every env x case x config, the whole matrix ``repeat`` times over (not each job ``repeat`` times
    in a row), so that the runs of one job are spread over the invocation's time."""
    return [Job(env, case, config) for _ in range(repeat) for env in envs for case in cases for config in configs]


def write_spec(job: Job, run_dir: Path, timing: bool, invocation: Optional[str]) -> Path:
    """spec.json: what the probe runs, and the run's identity (so that the directory alone makes the run)."""
    spec = {"case": job.case.name, "case_path": job.case.path, "case_source": job.case.source,
            "config": asdict(job.config), "timing": timing,
            "run": {"uid": run_dir.name, "started_at": now(), "host": socket.gethostname(),
                    "tool_version": __version__, "invocation": invocation}}
    path = run_dir / rundir.SPEC
    path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return path


def execute(job: Job, db_path: Path, timeout_s: float, timing: bool,
            tracker: Optional[ProcessTracker] = None, invocation: Optional[str] = None) -> RunRecord:
    """One probe process for the run (supervise.py): the timing pass, then the diagnosis pass."""
    run_dir = artifacts_root(db_path.resolve()) / uuid.uuid4().hex
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = write_spec(job, run_dir, timing, invocation)
    command = job.env.probe_command("run", "--spec", str(spec_path), "--dir", str(run_dir),
                                    "--timeout", str(timeout_s), *([] if timing else ["--no-timing"]))
    passes = 2 if timing else 1
    with tempfile.TemporaryDirectory(prefix="diag-inductor-cold-") as cold_cache:
        env = probe_environ(job.env.probe_environ(), run_dir, cold_cache if timing else None)
        # Each pass has its own limit inside the probe; this one only covers the imports around them.
        probe_exit = run_probe(command, run_dir, env, (passes + 1) * timeout_s, "run", tracker)
    with records.Writer(run_dir / rundir.PROBE_EXIT) as writer:
        writer.write(records.EXIT, **probe_exit)
    return record_of(run_dir, job.env.build)


def record_of(run_dir: Path, fallback_build: Callable[[], dict]) -> RunRecord:
    """The run a finished run directory holds: its trace read and rendered, then assembled."""
    frames, notes = trace.collect(run_dir)
    files = rundir.load(run_dir)
    build = {} if files.diagnosis.first(records.BUILD) else fallback_build()
    return assemble(files, build, frames, notes)


# Debug output of any kind slows compilation; none may reach a stored timing. The diagnosis pass
# sets up its own logging and gets TORCH_TRACE; the probe takes TORCH_TRACE away from the timing pass.
DEBUG_VARIABLES = ("TORCH_LOGS", "TORCH_TRACE", "TORCH_COMPILE_DEBUG", "TORCHDYNAMO_VERBOSE",
                   "TORCHINDUCTOR_FORCE_DISABLE_CACHES")


def probe_environ(env: dict[str, str], run_dir: Path, inductor_cache: Optional[str]) -> dict[str, str]:
    """The probe's environment: no debug switches but TORCH_TRACE into the run directory; with
    timing, an empty inductor cache (the timing pass compiles cold, the diagnosis pass after it)."""
    clean = {k: v for k, v in env.items() if k not in DEBUG_VARIABLES}
    clean["TORCH_TRACE"] = str(run_dir / "trace")
    if inductor_cache is not None:
        clean["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
    return clean


Done = Callable[[Job, RunRecord], None]


def run_matrix(jobs: list[Job], db_path: Path, timeout_s: float, timing: bool, workers: int,
               on_start: Callable[[Job], None], on_done: Done) -> None:
    """Execute ``jobs`` with up to ``workers`` probes at once; ``on_done`` runs in the calling thread.

    On Ctrl-C (or any exception) no new job starts, every probe in flight is
    killed, and the runs they belonged to are not reported.
    """
    tracker = ProcessTracker()
    invocation = uuid.uuid4().hex
    pending: Iterator[Job] = iter(jobs)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        running: dict[Future, Job] = {}

        def submit_next() -> None:
            job: Optional[Job] = next(pending, None)
            if job is not None:
                on_start(job)
                running[pool.submit(execute, job, db_path, timeout_s, timing, tracker, invocation)] = job

        try:
            for _ in range(max(1, workers)):
                submit_next()
            while running:
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in finished:
                    job = running.pop(future)
                    record = future.result()
                    if not tracker.stopped:
                        on_done(job, record)
                    submit_next()
        except BaseException:
            tracker.kill_all()
            for future in running:
                future.cancel()
            raise
