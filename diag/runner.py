"""Plan and execute a matrix of environment x case x config, one probe process per pass."""

from __future__ import annotations

import json
import socket
import tempfile
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Optional

from diag import __version__, trace
from diag.assemble import assemble, probe_failure, row_fields
from diag.catalog import CaseRef
from diag.config import artifacts_root
from diag.envs import TorchEnv
from diag.labels import WORKLOAD, config_label
from diag.probe.session import Config
from diag.spawn import ProcessTracker, run_probe
from diag.store import RunRecord

# After these diagnoses there is nothing to time; after the compile failures, only eager.
NOT_TIMEABLE = {"eager_error", "crash", "timeout"}
EAGER_ONLY = {"fullgraph_error", "compile_error"}


@dataclass(frozen=True)
class Job:
    env: TorchEnv
    case: CaseRef
    config: Config

    def label(self) -> str:
        fields = row_fields(asdict(self.config), self.case.name)
        label = f"{self.case.name} {config_label(fields, workload=tuple(WORKLOAD))}"
        return label if self.env.spec == "current" else f"{label} torch={self.env.spec}"


def plan(envs: list[TorchEnv], cases: list[CaseRef], configs: list[Config]) -> list[Job]:
    return [Job(env, case, config) for env in envs for case in cases for config in configs]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def execute(job: Job, db_path: Path, timeout_s: float, timing: bool,
            tracker: Optional[ProcessTracker] = None) -> RunRecord:
    """Run the diagnosis probe, then (unless the diagnosis says there is nothing to time) the timing probe."""
    uid = uuid.uuid4().hex
    run_dir = artifacts_root(db_path.resolve()) / uid
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"case": job.case.name, "case_path": job.case.path, "config": asdict(job.config)}
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    started_at = _now()
    env = job.env.probe_environ()

    diagnosis_path = run_dir / "diagnose.jsonl"
    diagnosis = run_probe(
        job.env.probe_command("diagnose", "--spec", str(spec_path), "--out", str(diagnosis_path),
                              "--artifacts", str(run_dir)),
        diagnosis_path, run_dir, {**env, "TORCH_TRACE": str(run_dir / "trace")}, timeout_s, "diagnose", tracker)
    frames, notes = trace.collect(run_dir)
    timing_outcome = None
    verdict = probe_failure(diagnosis) or diagnosis.first("result") or {}
    if timing and verdict.get("status") not in NOT_TIMEABLE:
        timing_path = run_dir / "time.jsonl"
        extra = ["--no-compiled"] if verdict.get("status") in EAGER_ONLY else []
        with tempfile.TemporaryDirectory(prefix="diag-inductor-cold-") as cold_cache:
            timing_outcome = run_probe(
                job.env.probe_command("time", "--spec", str(spec_path), "--out", str(timing_path), *extra),
                timing_path, run_dir, timing_environ(env, cold_cache), timeout_s, "time", tracker)
    meta = {"uid": uid, "started_at": started_at, "host": socket.gethostname(), "tool_version": __version__,
            "artifacts_dir": str(run_dir), "case_path": job.case.path}
    build = {} if diagnosis.first("environment") else job.env.build_info()
    return assemble(asdict(job.config), job.case.name, diagnosis, timing_outcome, meta, build, frames, notes)


# Debug output of any kind slows compilation; none may reach a stored timing.
DEBUG_VARIABLES = ("TORCH_LOGS", "TORCH_TRACE", "TORCH_COMPILE_DEBUG", "TORCHDYNAMO_VERBOSE",
                   "TORCHINDUCTOR_FORCE_DISABLE_CACHES")


def timing_environ(env: dict[str, str], inductor_cache: str) -> dict[str, str]:
    """The timing probe's environment: no debug switches, and an empty inductor cache (a cold compile)."""
    clean = {k: v for k, v in env.items() if k not in DEBUG_VARIABLES}
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
    pending: Iterator[Job] = iter(jobs)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        running: dict[Future, Job] = {}

        def submit_next() -> None:
            job: Optional[Job] = next(pending, None)
            if job is not None:
                on_start(job)
                running[pool.submit(execute, job, db_path, timeout_s, timing, tracker)] = job

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
