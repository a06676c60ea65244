"""One probe process per run: import torch once, then fork each pass from that process.

    python -m diag.probe run --spec spec.json --dir RUN_DIR --timeout S [--no-timing]

Importing torch and transformers costs more than a small compile, and a run has two
passes. This process imports them once (before any tensor exists, any thread starts or
CUDA is touched) and forks a child per pass, so each pass still starts from a process
that has compiled nothing, with its own stdout, stderr and results file, and its own
time limit. The timing pass runs first, on the inductor cache the orchestrator gave this
run (empty: a cold compile); the diagnosis pass follows, and finds the compiled kernels
there (see diagnose.run for what it still redoes).

For each pass an ``exit`` record (exit code, signal, timed out, seconds) goes to
RUN_DIR/passes.jsonl; the orchestrator reads nothing else from this process.
Where os.fork is missing (or DIAG_PROBE_NO_FORK is set), each pass is a fresh
interpreter instead.

Imports: standard library; torch, transformers and (see ``preload``) the backend's compiler, imported
before forking.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Optional

from diag.probe import compat, instructions, records
from diag.probe.capture import quiet_structured_trace
from diag.probe.record_types import Found
from diag.probe.spec import COUNT_PASS_LIMIT, LIFELINE_VARIABLE, Spec

POLL_S = 0.05


# The module a backend imports at its first compile (inductor: about 1 s on a 2020s core).
BACKEND_MODULES = {"inductor": "torch._inductor.compile_fx", "aot_eager": "torch._functorch.aot_autograd"}


def preload(backend: Optional[str] = None) -> None:
    """Import what both passes need, so that the children inherit it instead of importing it twice.

    transformers exports its model classes lazily: the Llama every pass builds costs about 1 s to
    import, paid in both passes unless imported here. ``backend``: also import that backend's
    compiler (see BACKEND_MODULES). That pays only where dynamo reaches the backend: on a fullgraph
    error neither pass would import it, so the caller names the backend only where the row's
    newest stored run reached it, or where the row has none yet. Inductor is imported with its
    compile-worker pool kept cold (``TORCH_WARM_POOL=0``): some torch releases start that pool when
    inductor's code cache is imported, and forked children must not share one.
    """
    import torch  # imported before forking, so that both passes inherit it
    import torch._dynamo  # imported before forking, so that both passes inherit it

    from diag.probe import diagnose, llama, timing  # noqa: F401 (imported before forking, so that both passes inherit it)

    for module in ("depyf", "transformers.models.llama.modeling_llama"):
        try:
            __import__(module)
        except ImportError:
            pass  # the passes say what is missing, where they need it
    try:
        # torch.compile looks its backend up in a registry that imports every backend module first
        # (about 400 modules with AOTAutograd's and export's: 0.3 s of each run's first compile)
        torch._dynamo.list_backends()
    except Exception:  # a torch without it: each pass imports what its torch has, as before
        pass
    if backend not in BACKEND_MODULES:
        return
    warm_pool = os.environ.get("TORCH_WARM_POOL")
    os.environ["TORCH_WARM_POOL"] = "0"
    try:
        __import__(BACKEND_MODULES[backend])
    except Exception:  # a torch without this module: each pass imports what its torch has, as before
        pass
    finally:
        if warm_pool is None:
            del os.environ["TORCH_WARM_POOL"]
        else:
            os.environ["TORCH_WARM_POOL"] = warm_pool


def backend_to_preload(spec_path: str) -> Optional[str]:
    """The backend whose compiler ``preload`` imports: the spec's, unless the row's newest stored run
    never reached it (``lowered_before`` false in the spec)."""
    try:
        spec = Spec.load(spec_path)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the passes report an unreadable spec themselves
    return None if spec.lowered_before is False else spec.config.backend


def watch_lifeline() -> None:
    """Die with the orchestrator: at EOF on the pipe it holds the other end of, kill this process group.

    The orchestrator may be killed with no chance to clean up (SIGKILL, an OOM kill); the kernel
    then closes its end of the pipe, and the passes and compile workers go with this probe.
    """
    fd = os.environ.pop(LIFELINE_VARIABLE, None)
    if not fd:
        return

    def watch() -> None:
        try:
            while os.read(int(fd), 1):
                pass
        except OSError:
            pass
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="diag-lifeline", daemon=True).start()


def _become_subreaper() -> None:
    """Linux: orphans of a pass (inductor compile workers) become this process's children to reap."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _children_of(pids: set[int]) -> set[int]:
    """Every descendant of ``pids`` that /proc shows (empty where there is no /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = set(pids)
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _reap_leftovers() -> None:
    """Kill and reap whatever a finished pass left behind (its workers, reparented here)."""
    leftovers = _children_of({os.getpid()})
    _kill(leftovers)
    for pid in leftovers:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _run_child(argv: list[str], run_dir: Path, name: str, quiet_trace: bool) -> None:
    """In the forked child: redirect output, run one pass, exit. Never returns."""
    code = 1
    try:
        for fd, suffix in ((1, "stdout"), (2, "stderr")):
            target = os.open(run_dir / f"{name}.{suffix}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        if quiet_trace:
            quiet_structured_trace()
        from diag.probe import passes

        code = passes.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            atexit._run_exitfuncs()  # what a normal exit runs: inductor shuts its worker pool down
        finally:
            os._exit(code)


def _start(argv: list[str], run_dir: Path, name: str, quiet_trace: bool, under: Optional[list[str]] = None) -> int:
    """The pass's process: forked from this one, else (no fork, or ``under`` a tool such as valgrind,
    which must start the interpreter itself) a fresh interpreter."""
    if under is None and hasattr(os, "fork") and not os.environ.get("DIAG_PROBE_NO_FORK"):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(argv, run_dir, name, quiet_trace)
        return pid
    env = dict(os.environ)
    if quiet_trace:
        env.pop("TORCH_TRACE", None)
    with open(run_dir / f"{name}.stdout.txt", "wb") as out, open(run_dir / f"{name}.stderr.txt", "wb") as err:
        process = subprocess.Popen(
            [*(under or []), sys.executable, "-m", "diag.probe", *argv],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    # Kept until waited on: a Popen collected while its process has already exited (valgrind refusing
    # its arguments at once) reaps it itself, and the pid's wait would find no child.
    _STARTED[process.pid] = process
    return process.pid


_STARTED: dict[int, subprocess.Popen] = {}


def _wait(pid: int, timeout_s: float) -> tuple[Optional[int], Optional[int], bool]:
    """(exit code, signal, timed out) of child ``pid``, killing it and its workers at the deadline."""
    deadline = time.monotonic() + timeout_s
    started = _STARTED.pop(pid, None)
    while True:
        if started is not None and started.poll() is not None:
            code = started.returncode
            return (None, -code, False) if code < 0 else (code, None, False)
        done, status = (0, 0) if started is not None else os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            _kill(_children_of({pid}) | {pid})
            if started is not None:
                started.wait()
            else:
                os.waitpid(pid, 0)
            return None, None, True
        time.sleep(POLL_S)
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status), False
    return os.WEXITSTATUS(status), None, False


def oom_kills() -> Optional[int]:
    """How many processes the kernel's OOM killer has ended since boot, on the whole host or in any
    memory cgroup (``oom_kill`` in /proc/vmstat, Linux ≥ 4.13); None where it is not said."""
    try:
        with open("/proc/vmstat", encoding="ascii") as vmstat:
            for line in vmstat:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def oom_kills_since(before: Optional[int]) -> Optional[int]:
    after = oom_kills()
    return None if before is None or after is None else after - before


def run_pass(
    name: str, argv: list[str], run_dir: Path, timeout_s: float, log: records.Writer, under: Optional[list[str]] = None
) -> dict:
    start = time.monotonic()
    oom_before = oom_kills()
    pid = _start(argv, run_dir, name, quiet_trace=name in ("time", "count"), under=under)
    code, sig, timed_out = _wait(pid, timeout_s)
    _reap_leftovers()
    for stream in ("stdout", "stderr"):
        cap_output(run_dir / f"{name}.{stream}.txt")
    record = dict(
        name=name,
        returncode=code,
        signal=sig,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        oom_kills=oom_kills_since(oom_before),
    )
    log.write(records.EXIT, **record)
    return record


OUTPUT_KEPT = 1 << 20  # of each pass's stdout and stderr: the first and the last MiB


def cap_output(path: Path, keep: int = OUTPUT_KEPT) -> None:
    """Keep the first and the last ``keep`` bytes of what a pass printed (a case may print without
    end); between them, one line says how much was dropped. What explains a crash is at the end."""
    try:
        size = path.stat().st_size
        if size <= 2 * keep:
            return
        with open(path, "r+b") as handle:
            handle.seek(size - keep)
            tail = handle.read(keep)
            handle.seek(keep)
            dropped = size - 2 * keep
            handle.write(
                f"\n[diag: {dropped} bytes of this output dropped here; the first and the last "
                f"{keep} bytes are kept]\n".encode()
            )
            handle.write(tail)
            handle.truncate()
    except OSError:
        pass  # the output stays whole: a larger run directory, nothing lost


def stop_with_the_group() -> None:
    """On SIGTERM or SIGHUP (a scheduler or a closed terminal stopping the probe, not through the
    orchestrator), kill this process group, as the orchestrator would: the passes and inductor's
    compile workers go with the probe, none is left running. A signal already ignored stays so."""

    def stop(signum: int, frame: object) -> None:
        os.killpg(os.getpgrp(), signal.SIGKILL)

    for each in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(each) == signal.SIG_DFL:
            signal.signal(each, stop)


def main(spec: str, run_dir: Path, timeout_s: float, timing: bool) -> int:
    watch_lifeline()
    stop_with_the_group()
    _become_subreaper()
    preload(backend_to_preload(spec))
    passes = []
    if timing:
        passes.append(("time", ["time", "--spec", spec, "--out", str(run_dir / "time.jsonl")]))
    passes.append(
        (
            "diagnose",
            [
                "diagnose",
                "--spec",
                spec,
                "--out",
                str(run_dir / "diagnose.jsonl"),
                "--artifacts",
                str(run_dir),
                *(["--after", str(run_dir / "time.jsonl")] if timing else []),
            ],
        )
    )
    with records.Writer(run_dir / "passes.jsonl") as log:
        for name, argv in passes:
            run_pass(name, argv, run_dir, timeout_s, log)
        if Spec.load(spec).config.count_instructions:
            count_pass(spec, run_dir, timeout_s, log)
    return 0


def count_pass(spec: str, run_dir: Path, timeout_s: float, log: records.Writer) -> None:
    """The count pass (instructions.py), by the first method the host offers: forked, for the CPU's
    counter; under valgrind, for callgrind, whose total this process reads once valgrind has written
    it. Where there is no method, or the diagnosis found nothing that compiles, one record says why."""
    out = run_dir / "count.jsonl"
    how, why = compat.instruction_method()
    skipped = instructions.skip_reason(run_dir / "diagnose.jsonl")
    if how is None or skipped is not None:
        with records.Writer(out) as results:
            results.write(records.INSTRUCTIONS, method=how, count=None, counts=[], note=skipped or why)
        return
    argv = ["count", "--spec", spec, "--out", str(out), "--method", how]
    if how == "perf":
        run_pass("count", argv, run_dir, timeout_s, log)
        return
    run_pass("count", argv, run_dir, timeout_s * COUNT_PASS_LIMIT, log, under=instructions.valgrind_argv(run_dir))
    total = instructions.callgrind_total(run_dir / instructions.CALLGRIND_FILE)
    found, _ = records.read(out)
    if Found(found).first(records.INSTRUCTIONS) is None:  # the pass failed before its count (valgrind
        # refused to start it, say): its own records, or its exit, say how; this one says by which method
        with records.Writer(out) as results:
            results.write(records.INSTRUCTIONS, method=how, count=None, counts=[], note=None)
        return
    with records.Writer(out) as results:
        note = None if total is not None else "valgrind wrote no total (it ended before the process did)"
        results.write(records.INSTRUCTIONS, method=how, count=total, counts=[] if total is None else [total], note=note)
