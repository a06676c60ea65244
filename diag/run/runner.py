"""Execute the runs of a matrix (planned in diag/run/matrix.py): one probe process per run, each
into its run directory, assembled into a storable run. In a matrix, a run is forked from its
environment's long-lived probe parent where one can be kept (parents.py)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, cast

from diag import __version__
from diag import row as rows
from diag.config import artifacts_root
from diag.contract import COUNT_PASS_LIMIT, ENVIRONMENT_ERRNOS, Config, record_types, records, statuses
from diag.envs import TorchEnv
from diag.errors import DiagError
from diag.run import parents, rundir, trace
from diag.run.assemble import assemble
from diag.run.catalog import CaseRef
from diag.run.spawn import ProcessTracker, run_probe
from diag.store import RunRecord, newest_status, now


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


def ci_provenance(env: dict[str, str], run_dir: Path) -> Optional[dict[str, Optional[str]]]:
    """Where a CI job keeps this run's directory once the machine is gone: the GitHub Actions run, the
    artifact the job uploads its run directories in (``DIAG_ARTIFACT``, set by the workflow) and the
    directory's path inside it. A published run page links there (see report.ci_link)."""
    if env.get("GITHUB_ACTIONS") != "true" or not env.get("GITHUB_RUN_ID"):
        return None
    return {
        "server": env.get("GITHUB_SERVER_URL") or "https://github.com",
        "repository": env.get("GITHUB_REPOSITORY"),
        "run_id": env["GITHUB_RUN_ID"],
        "run_attempt": env.get("GITHUB_RUN_ATTEMPT"),
        "artifact": env.get("DIAG_ARTIFACT"),
        "path": f"{run_dir.parent.name}/{run_dir.name}",
    }


def lowered_before(db_path: Optional[Path], job: Job) -> Optional[bool]:
    """Whether the newest stored run of the job's row reached the backend's compiler (None: no such
    run). A hint for the probe's imports only (supervise.preload): nothing of the run depends on it."""
    status = newest_status(db_path, job.row()) if db_path is not None else None
    return None if status is None else status not in statuses.NEVER_LOWERED


def write_spec(
    job: Job, run_dir: Path, timing: bool, invocation: Optional[str], db_path: Optional[Path] = None
) -> Path:
    """spec.json: what the probe runs, and the run's identity (so that the directory alone makes the run)."""
    spec = {
        "case": job.case.name,
        "case_path": job.case.path,
        "case_source": job.case.source,
        "config": asdict(job.config),
        "timing": timing,
        "wheel": (job.env.known_build or {}).get("wheel"),
        "lowered_before": lowered_before(db_path, job),
        "run": {
            "uid": run_dir.name,
            "started_at": now(),
            "host": socket.gethostname(),
            "tool_version": __version__,
            "invocation": invocation,
        },
    }
    ci = ci_provenance(dict(os.environ), run_dir)
    if ci is not None:
        spec["ci"] = ci
    path = run_dir / rundir.SPEC
    path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return path


def execute(
    job: Job,
    db_path: Path,
    timeout_s: float,
    timing: bool,
    tracker: Optional[ProcessTracker] = None,
    invocation: Optional[str] = None,
    pool: Optional[parents.Parents] = None,
) -> RunRecord:
    """One probe process for the run (supervise.py): the timing pass, then the diagnosis pass;
    forked from its environment's parent in ``pool`` where there is one.

    EnvironmentFault, with the run directory removed, when the machine fails the run (a full disk).
    """
    run_dir = artifacts_root(db_path.resolve()) / uuid.uuid4().hex
    try:
        return _execute(job, run_dir, timeout_s, timing, tracker, invocation, db_path, pool)
    except OSError as exc:
        if exc.errno not in ENVIRONMENT_ERRNOS:
            raise
        shutil.rmtree(run_dir, ignore_errors=True)
        raise EnvironmentFault(f"{job.label()}: {os.strerror(exc.errno)} ({exc.filename or run_dir})") from exc


def _execute(
    job: Job,
    run_dir: Path,
    timeout_s: float,
    timing: bool,
    tracker: Optional[ProcessTracker],
    invocation: Optional[str],
    db_path: Optional[Path] = None,
    pool: Optional[parents.Parents] = None,
) -> RunRecord:
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = write_spec(job, run_dir, timing, invocation, db_path)
    probe_args: record_types.ForkRequest = {
        "spec": str(spec_path),
        "dir": str(run_dir),
        "timeout": timeout_s,
        "timing": timing,
    }
    command = job.env.probe_command(
        "run",
        "--spec",
        str(spec_path),
        "--dir",
        str(run_dir),
        "--timeout",
        str(timeout_s),
        *([] if timing else ["--no-timing"]),
    )
    passes = 2 if timing else 1
    if job.config.count_instructions:  # the count pass; under callgrind it may take a multiple of a pass's limit
        passes += COUNT_PASS_LIMIT
    with tempfile.TemporaryDirectory(prefix="diag-inductor-cold-") as cold_cache:
        env = probe_environ(job.env.probe_environ(), run_dir, cold_cache if timing else None)
        # Each pass has its own limit inside the probe; this one only covers the imports around them.
        limit_s = (passes + 1) * timeout_s
        try:
            parent, launch = pool.lease(job.env.probe_command(), env) if pool else (None, parents.ALONE)
            probe_exit: Optional[record_types.ExitRecord] = None
            if parent is not None:
                try:
                    probe_exit = parents.run_forked(
                        parent, probe_args, run_dir, env, limit_s, rundir.PROBE_OUTPUT, tracker
                    )
                except parents.ParentGone as exc:
                    launch = f"{parents.ALONE} ({exc})"
            if probe_exit is None:
                probe_exit = run_probe(command, run_dir, env, limit_s, rundir.PROBE_OUTPUT, tracker)
        finally:
            if pool is not None:
                pool.done(job.env.probe_command(), env)
    if tracker is not None and tracker.stopped:
        # The matrix was stopped (Ctrl-C, a failed save) and killed this probe: no run, no directory.
        shutil.rmtree(run_dir, ignore_errors=True)
        raise Cancelled(job.label())
    with records.Writer(run_dir / rundir.PROBE_EXIT) as writer:
        writer.write(records.EXIT, **probe_exit, launch=launch)
    return record_of(run_dir, job.env.build)


def record_of(run_dir: Path, fallback_build: Callable[[], dict]) -> RunRecord:
    """The run a finished run directory holds: refused if the machine failed it, else its trace read
    and rendered, then assembled."""
    started = time.perf_counter()
    files = rundir.load(run_dir)
    fault = environment_fault(files)
    if fault is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise EnvironmentFault(fault)
    result = files.diagnosis.first(records.RESULT)
    compiled = result is not None and result.get("status") not in statuses.NEVER_COMPILED
    built = files.diagnosis.first(records.BUILD)
    frames, notes = trace.collect(run_dir, compiled, python=(built or {}).get("executable"))
    launch = files.probe_exit.get("launch")
    if launch:
        notes["probe_process"] = {"available": launch.startswith(parents.FORKED), "detail": launch}
    # the probe's own build record where it wrote one; else what describing the environment gives
    build = record_types.BuildRecord() if built else cast(record_types.BuildRecord, fallback_build())
    record = assemble(files, build, frames, notes)
    record.run.update(trace.code_of(run_dir / "trace", compiled))
    record.run["orchestrator_s"] = time.perf_counter() - started
    return record


# Debug output of any kind slows compilation; none may reach a stored timing. The diagnosis pass
# sets up its own logging and gets TORCH_TRACE; the probe takes TORCH_TRACE away from the timing pass.
DEBUG_VARIABLES = (
    "TORCH_LOGS",
    "TORCH_TRACE",
    "TORCH_COMPILE_DEBUG",
    "TORCHDYNAMO_VERBOSE",
    "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
)


def probe_environ(env: dict[str, str], run_dir: Path, inductor_cache: Optional[str]) -> dict[str, str]:
    """The probe's environment: no debug switches but TORCH_TRACE into the run directory; with
    timing, an empty inductor cache and temporary folder (the timing pass compiles cold, the
    diagnosis pass after it)."""
    clean = {k: v for k, v in env.items() if k not in DEBUG_VARIABLES}
    clean["TORCH_TRACE"] = str(run_dir / "trace")
    if inductor_cache is not None:
        # Every cache inductor keeps, its precompiled headers in its default folder under $TMPDIR
        # included, in the run's own folder: the cold compile is cold for every run, not only the
        # machine's first (append_last on inductor paid 5 CPU-s more than the rest when it was shared).
        clean["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
        clean["TMPDIR"] = inductor_cache
    return clean


class Cancelled(Exception):
    """The run's probe was killed because the matrix stopped; nothing of it is kept."""


class EnvironmentFault(DiagError):
    """A run failed because of the machine (a full disk), not torch: nothing of it may be stored."""


def environment_fault(files: rundir.RunFiles) -> Optional[str]:
    """Why a pass failed on the machine's account (OSError ENOSPC, EROFS, ... in its exception), or None."""
    for outcome in (files.diagnosis, files.timing):
        if outcome is None:
            continue
        for kind in (records.RESULT, records.TIMING_ERROR):
            found = outcome.first(kind)
            if found and found.get("environment_error"):
                return f"{files.spec['case']}: {found['environment_error']}"
    return None


Started = Callable[[int, Job], None]
Done = Callable[[int, Job, RunRecord], None]


def run_matrix(
    jobs: list[Job], db_path: Path, timeout_s: float, timing: bool, workers: int, on_start: Started, on_done: Done
) -> None:
    """Execute ``jobs`` with up to ``workers`` probes at once; ``on_done`` runs in the calling thread.
    Both callbacks get the job's 1-based index in ``jobs``.

    On Ctrl-C (or any exception, an EnvironmentFault included) no new job starts, every probe
    in flight is killed, and the runs they belonged to are not reported.
    """
    tracker = ProcessTracker()
    invocation = uuid.uuid4().hex
    planned = [(job.env.probe_command(), _environ_of(job), job.config.backend) for job in jobs]
    pool = parents.Parents(planned, serves=str(artifacts_root(db_path.resolve())))
    pending: Iterator[tuple[int, Job]] = iter(enumerate(jobs, 1))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as workers_pool:
        running: dict[Future, tuple[int, Job]] = {}

        def submit_next() -> None:
            item = next(pending, None)
            if item is not None:
                on_start(*item)
                future = workers_pool.submit(execute, item[1], db_path, timeout_s, timing, tracker, invocation, pool)
                running[future] = item

        try:
            for _ in range(max(1, workers)):
                submit_next()
            while running:
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in finished:
                    index, job = running.pop(future)
                    record = future.result()
                    if not tracker.stopped:
                        on_done(index, job, record)
                    submit_next()
        except BaseException:
            tracker.kill_all()
            for future in running:
                future.cancel()
            raise
        finally:
            pool.close()


def _environ_of(job: Job) -> dict[str, str]:
    """The environment a job's probe gets, less what differs per run (parents.PER_RUN_VARIABLES)."""
    return probe_environ(job.env.probe_environ(), Path(), None)


# seconds between two heartbeats (default 30), for CI logs that want them sooner
HEARTBEAT_VARIABLE = "DIAG_HEARTBEAT_S"


class Heartbeat:
    """Says every ``interval_s`` which runs are still going, and for how long: a cold inductor
    compile can take minutes, and a line per run is then all there is to see. The interval is
    ``DIAG_HEARTBEAT_S`` where set (a CI job that ends a silent step after some minutes)."""

    def __init__(self, say: Callable[[str], None], interval_s: Optional[float] = None) -> None:
        if interval_s is None:
            try:
                interval_s = max(0.1, float(os.environ.get(HEARTBEAT_VARIABLE) or 30.0))
            except ValueError:
                interval_s = 30.0
        self._say, self._interval_s = say, interval_s
        self._running: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="diag-heartbeat", daemon=True)

    def started(self, index: int, label: str) -> None:
        with self._lock:
            self._running[index] = (label, time.monotonic())

    def finished(self, index: int) -> None:
        with self._lock:
            self._running.pop(index, None)

    def _beat(self) -> None:
        while not self._stop.wait(self._interval_s):
            with self._lock:
                lines = [
                    f"{label}: still running, {time.monotonic() - since:.0f} s"
                    for label, since in self._running.values()
                ]
            for line in lines:
                self._say(line)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
