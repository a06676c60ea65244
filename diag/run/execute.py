"""Executing parts of a matrix: the one function that runs them into a DB, whoever asks (``diag run``,
its shards, ``diag backfill``). It provisions each part's torch specs, checks what the runs need
before any starts, runs them and stores each as it ends; what it says goes to ``log``, each stored
run to ``on_stored``. The commands read options, call ``execute`` and print.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from diag import envs, stopping, store
from diag.build import Spec
from diag.errors import DiagError
from diag.run import catalog, matrix, preflight, runner
from diag.run.matrix import Log, Part
from diag.store.typed import StoredRun


class ExecuteError(DiagError):
    """A run could not be stored, or the environment failed under it: what ran before is kept."""


class Interrupted(Exception):
    """A stop signal or Ctrl-C while the runs ran, said already; ``exit_code`` is the one to exit
    with (``stopping.of``). What was stored before it stays."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


@dataclass
class Executed:
    """What ``execute`` did: the runs it stored, in order, and whether a torch spec failed (its
    part's other specs still ran)."""

    recorded: list[StoredRun] = field(default_factory=list)
    failed: bool = False


def resolve_envs(specs: tuple[Spec, ...], options: envs.Options, log: Log) -> tuple[dict[Spec, envs.TorchEnv], bool]:
    """Environments for ``specs``, by spec; a spec that fails is said and skipped, the others still
    run (where it is the only one, its error is raised). True beside them where one failed."""
    if options.python is not None:
        # Every spec is checked against the interpreter before anything is installed.
        version = envs.python_version(envs.find_python(options.python))
        for spec in specs:
            envs.check_compile_support(spec, version)
    resolved, failed = {}, False
    for spec in specs:
        try:
            resolved[spec] = envs.resolve(spec, options, log=log)
        except envs.EnvError as exc:
            if len(specs) == 1:
                raise
            failed = True
            log(f"Error: {exc}")
    return resolved, failed


def _expand_hf_all(part: Part, environments: dict[Spec, envs.TorchEnv], log: Log) -> None:
    """hf:all, unsharded: every architecture of the environments' transformers."""
    part.case_values = tuple(value for value in part.case_values if value != catalog.HF_ALL)
    matrix.resolve_cases([part], log)
    assert part.refs is not None  # resolved just now
    names = {ref.name for ref in part.refs}
    part.refs += [
        catalog.hf_case(model_type)
        for model_type in matrix.hf_architectures(list(environments.values()), log)
        if catalog.hf_case(model_type).name not in names
    ]


def execute_part(
    part: Part, keys: Optional[set[str]], db_path: str, done: Executed, on_stored: Callable[[StoredRun], None], log: Log
) -> None:
    """Run the part's jobs (those of ``keys``, where sharded) into the DB at ``db_path``."""
    preflight.check_configs(part.configs)
    specs = part.torch_specs if part.refs is None else tuple(dict.fromkeys(s for _, s, _, _ in part.runs_of(keys)))
    if not specs:
        return
    environments, failed = resolve_envs(specs, part.env_options, log)
    done.failed |= failed
    if part.refs is None:
        _expand_hf_all(part, environments, log)
    assert part.refs is not None
    preflight.check_architectures(list(environments.values()), part.refs)
    for env in environments.values():
        preflight.check_environment(env, part.refs, part.configs)
    db = store.open_db(db_path, create=True)
    jobs = [
        runner.Job(environments[spec], case, config)
        for _, spec, case, config in part.runs_of(keys)
        if spec in environments
    ]
    heartbeat = runner.Heartbeat(log)

    def on_start(index: int, job: runner.Job) -> None:
        heartbeat.started(index, f"[{index}/{len(jobs)}] {job.label()}")
        log(f"[{index}/{len(jobs)}] running {job.label()}")

    def on_done(index: int, job: runner.Job, record: store.RunRecord) -> None:
        heartbeat.finished(index)
        try:
            run_id = store.save_run(db, record)
        except store.StoreError as exc:
            shutil.rmtree(record.run["artifacts_dir"] or "", ignore_errors=True)
            raise ExecuteError(f"cannot store run {index}: {exc}; {len(done.recorded)} runs stored before it") from exc
        row = store.get_run(db, run_id)
        assert row is not None  # stored just now, in this process
        done.recorded.append(row)
        on_stored(row)

    try:
        with heartbeat:
            runner.run_matrix(jobs, Path(db_path), part.timeout_s, part.timing, part.jobs, on_start, on_done)
    except KeyboardInterrupt as exc:
        stop = stopping.of(exc)
        log(f"interrupted{stop.by}: {len(done.recorded)} of {len(jobs)} runs recorded in {db_path}")
        raise Interrupted(stop.exit_code) from exc
    except runner.EnvironmentFault as exc:
        raise ExecuteError(f"{exc}; {len(done.recorded)} runs stored before it, nothing stored for it") from exc


def execute(
    parts: list[Part], keys: Optional[set[str]], db_path: str, on_stored: Callable[[StoredRun], None], log: Log
) -> Executed:
    """Run ``parts`` (the units of ``keys`` only, where sharded) into the DB at ``db_path``, after
    checking it can be written. A stop signal or Ctrl-C while runs run is said and raised as
    ``Interrupted``; what was stored before it stays."""
    preflight.check_database(db_path)
    done = Executed()
    for part in parts:
        execute_part(part, keys, db_path, done, on_stored, log)
    return done
