"""Plan and execute a matrix of environment x case x config, one probe process per run."""

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
from diag.assemble import assemble, row_fields
from diag.catalog import CaseRef
from diag.config import artifacts_root
from diag.envs import TorchEnv
from diag.labels import WORKLOAD, config_label
from diag.probe.session import Config
from diag.spawn import ProbeOutcome, ProcessTracker, read_results, run_probe, tail
from diag.store import RunRecord

@dataclass(frozen=True)
class Job:
    env: TorchEnv
    case: CaseRef
    config: Config

    def label(self) -> str:
        fields = row_fields(asdict(self.config), self.case.name)
        label = f"{self.case.name} {config_label(fields, workload=tuple(WORKLOAD))}"
        return label if self.env.spec == "current" else f"{label} torch={self.env.spec}"


def plan(envs: list[TorchEnv], cases: list[CaseRef], configs: list[Config], repeat: int = 1) -> list[Job]:
    """Every env x case x config, the whole matrix ``repeat`` times over (not each job ``repeat`` times
    in a row), so that the runs of one job are spread over the invocation's time."""
    return [Job(env, case, config) for _ in range(repeat) for env in envs for case in cases for config in configs]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def execute(job: Job, db_path: Path, timeout_s: float, timing: bool,
            tracker: Optional[ProcessTracker] = None, invocation: Optional[str] = None) -> RunRecord:
    """One probe process for the run (supervise.py): the timing pass, then the diagnosis pass."""
    uid = uuid.uuid4().hex
    run_dir = artifacts_root(db_path.resolve()) / uid
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"case": job.case.name, "case_path": job.case.path, "config": asdict(job.config)}
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    started_at = _now()
    command = job.env.probe_command("run", "--spec", str(spec_path), "--dir", str(run_dir),
                                    "--timeout", str(timeout_s), *([] if timing else ["--no-timing"]))
    passes = 2 if timing else 1
    with tempfile.TemporaryDirectory(prefix="diag-inductor-cold-") as cold_cache:
        env = probe_environ(job.env.probe_environ(), run_dir, cold_cache if timing else None)
        # Each pass has its own limit inside the probe; this one only covers the imports around them.
        supervisor = run_probe(command, run_dir / "passes.jsonl", run_dir, env, (passes + 1) * timeout_s,
                               "run", tracker)
    diagnosis = pass_outcome(supervisor, run_dir, "diagnose")
    timing_outcome = pass_outcome(supervisor, run_dir, "time") if timing else None
    frames, notes = trace.collect(run_dir)
    meta = {"uid": uid, "started_at": started_at, "host": socket.gethostname(), "tool_version": __version__,
            "artifacts_dir": str(run_dir), "case_path": job.case.path, "duration_s": supervisor.duration_s,
            "invocation": invocation}
    build = {} if diagnosis.first("environment") else job.env.build_info()
    return assemble(asdict(job.config), job.case.name, diagnosis, timing_outcome, meta, build, frames, notes)


def pass_outcome(supervisor: ProbeOutcome, run_dir: Path, name: str) -> Optional[ProbeOutcome]:
    """What one pass left: its exit as the probe recorded it, else (the probe itself died or
    hung before recording it) the probe's own exit; its results file and stderr either way."""
    exit_record = next((r for r in supervisor.all("pass") if r.get("name") == name), None)
    records, bad = read_results(run_dir / f"{name}.jsonl")
    stderr = tail(run_dir / f"{name}.stderr.txt")
    if exit_record is not None:
        return ProbeOutcome(exit_record["returncode"], exit_record["signal"], exit_record["timed_out"],
                            exit_record["duration_s"], stderr, records, bad)
    if name == "time" and not (run_dir / f"{name}.stderr.txt").exists():
        return None
    return ProbeOutcome(supervisor.returncode, supervisor.signal, supervisor.timed_out, supervisor.duration_s,
                        "\n".join(t for t in (supervisor.stderr_tail, stderr) if t), records, bad)


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
