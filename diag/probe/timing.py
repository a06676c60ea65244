"""The timing pass: logging off, warmup, repeats; eager and compiled per-token latency.

Runs in its own process (forked before anything was compiled, see supervise.py),
never in the diagnosis pass's: DEBUG logging slows compilation and must not leak
into a stored timing.

Imports: standard library, torch, transformers.
"""

from __future__ import annotations

import ctypes
import gc
import gzip
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from diag.probe import attribution, compat, counters, records
from diag.probe.notices import CompileNotices
from diag.probe.record_types import TimingRecord
from diag.probe.records import Writer
from diag.probe.session import Workload, error_location, exception_info


def _status_kib(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water() -> bool:
    """Reset this process's resident high-water mark to its current RSS (Linux 4.0+); False where
    the kernel does not offer it."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _trim() -> None:
    """Hand freed heap back to the kernel (glibc), so that a mode's rise starts from what is live."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_memory(workload: Workload, generate) -> tuple[float, str]:
    """Peak memory of one generation of ``generate``, measured the same way for eager and compiled.

    CUDA: torch's peak of allocated memory after a reset (``cuda_max_allocated``). CPU: the rise of
    the resident high-water mark over the resident memory just before the generation, after freed
    heap is trimmed and the mark is reset (``rss_rise``); where the kernel cannot reset the mark,
    the process's high-water mark so far (``rss_high_water``), which the two modes cannot compare.
    """
    torch = workload.torch
    if workload.spec.config.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        generate()
        workload.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20, "cuda_max_allocated"
    _trim()
    start = _status_kib("VmRSS")
    if start is not None and _reset_high_water():
        generate()
        peak = _status_kib("VmHWM")
        if peak is not None:
            return max(0, peak - start) / 2**10, "rss_rise"
    else:
        generate()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    return (rss / 2**20 if sys.platform == "darwin" else rss / 2**10), "rss_high_water"


HOST_REFERENCE_LOOPS = 10_000


def host_reference() -> float:
    """Seconds this host takes for a fixed piece of pure-Python work (about 1 ms on a 2020s core).

    Timed right after each generation, it tells how fast the host ran at that moment: shared
    and virtual machines change speed in stretches of seconds, and a comparison of two runs
    that ignores this reads the host's change as torch's. Pure Python, so that a change in
    torch cannot move the yardstick. ``diag check`` divides by it on CPU runs (see regress.py).
    """
    start = time.perf_counter()
    total = 0
    for i in range(HOST_REFERENCE_LOOPS):
        total += i * i
    return time.perf_counter() - start


def _pressure_files() -> list[str]:
    """Where the kernel says how long tasks waited for a CPU (PSI, Linux >= 4.20): this process's
    cgroup's first (cgroup v2), then the whole machine's."""
    found = []
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("0::"):
                    found.append(f"/sys/fs/cgroup{line[3:].strip().rstrip('/')}/cpu.pressure")
    except OSError:
        pass
    return [*found, "/proc/pressure/cpu"]


def cpu_stall_s() -> Optional[float]:
    """Seconds, since boot, in which some task waited for a CPU it was ready to run on (PSI's ``some``
    total): the difference over a compile says whether it shared the cores. None without PSI."""
    for path in _pressure_files():
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("some "):
                        return int(line.rsplit("total=", 1)[1]) / 1e6
        except (OSError, ValueError, IndexError):
            continue
    return None


def tree_cpu_s() -> Optional[float]:
    """CPU seconds this process and its descendants have used (user + system): each live one's own and
    its reaped children's, from /proc, so that inductor's compile workers and compiler processes count
    with the probe. None where /proc is not there (not Linux)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parents: dict[int, int] = {}
        used: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:  # it ended meanwhile
                continue
            pid = int(entry.name)
            parents[pid] = int(fields[1])
            used[pid] = sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    except (OSError, ValueError, IndexError):
        return None
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(used.get(pid, 0) for pid in tree) / tick


def _timed(workload: Workload, generate) -> tuple[float, Any]:
    start = time.perf_counter()
    gen = generate()
    workload.synchronize()
    return time.perf_counter() - start, gen


def interleaved(
    workload: Workload,
    modes: dict[str, Callable[[], Any]],
    repeats: int,
    min_seconds: float,
    each: Callable[[str, float, Any], None],
) -> None:
    """Timed generations of every mode, interleaved in one process: rounds of one generation per
    mode, the order reversed every other round (ABBA), so that a change of the host's speed lands on
    every mode alike. At least ``repeats`` rounds, going on until the rounds span ``min_seconds``
    per mode; ``each(mode, seconds, generation)`` after each generation."""
    names = list(modes)
    since = time.perf_counter()
    rounds = 0
    while rounds < repeats or time.perf_counter() - since < min_seconds * len(names):
        for mode in names if rounds % 2 == 0 else names[::-1]:
            total, gen = _timed(workload, modes[mode])
            each(mode, total, gen)
        rounds += 1


def sample(
    workload: Workload, modes: dict[str, Callable[[], Any]], repeats: int, min_seconds: float
) -> dict[str, TimingRecord]:
    """Each mode's generation totals and decode steps from :func:`interleaved` rounds; the host
    reference is timed after each generation."""
    found: dict[str, dict[str, list[float]]] = {
        mode: {"totals_s": [], "step_samples_s": [], "host_samples_s": [], "between_samples_s": []} for mode in modes
    }

    def each(mode: str, total: float, gen: Any) -> None:
        into = found[mode]
        into["totals_s"].append(total)
        into["step_samples_s"].extend(gen.step_seconds)
        into["between_samples_s"].extend(gen.between_seconds)
        into["host_samples_s"].append(host_reference())

    interleaved(workload, modes, repeats, min_seconds, each)
    return {mode: _sampled(into) for mode, into in found.items()}


def _sampled(into: dict[str, list[float]]) -> TimingRecord:
    steps, between = into["step_samples_s"], into["between_samples_s"]
    return {
        "totals_s": into["totals_s"],
        "step_samples_s": steps,
        "host_samples_s": into["host_samples_s"],
        "between_samples_s": between,
        "median_ms_per_token": statistics.median(steps) * 1e3 if steps else None,
        "median_between_ms": statistics.median(between) * 1e3 if between else None,
    }


def host() -> TimingRecord:
    """What the timing pass shared its machine with: the 1-minute load average and the CPUs it could use."""
    try:
        load: Optional[float] = os.getloadavg()[0]
    except OSError:
        load = None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"load_1m": load, "cpus": cpus}


def _graph_cache_hits() -> Optional[int]:
    try:
        return counters.graph_cache_hits()
    except Exception:  # a torch without these counters: unknown, so the diagnosis lowers again
        return None


PROFILE_TRACE = "profile.trace.json.gz"
PROFILE_TOP = 15
PROFILED_GENERATIONS = 5  # compiled generations attributed by op (probe/attribution.py) for compare --profile


def profile(workload: Workload, results: Writer, folder: Path) -> None:
    """One eager and one compiled generation (compiled and warm by now) under torch.profiler: a
    gzipped Chrome trace (opens in Perfetto or chrome://tracing) and the ops with the most self time;
    then ``PROFILED_GENERATIONS`` compiled generations, each attributed by op per decode step; then, on
    CUDA, one eager generation asking torch why it refused each fused SDPA kernel that did not run."""
    torch = workload.torch
    from torch.profiler import ProfilerActivity, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if workload.on_cuda else [])
    start = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        with record_function("diag: eager generation"):
            workload.eager()
        with record_function("diag: compiled generation"):
            workload.compiled()
        workload.synchronize()
    raw = folder / "profile.trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as source, gzip.open(folder / PROFILE_TRACE, "wb", compresslevel=6) as target:
        shutil.copyfileobj(source, target)
    raw.unlink()
    events = [e for e in prof.key_averages() if not e.key.startswith("diag: ")]
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    top = [
        {
            "op": e.key,
            "calls": e.count,
            "self_cpu_us": round(e.self_cpu_time_total, 1),
            "self_device_us": round(getattr(e, "self_device_time_total", 0.0) or 0.0, 1),
        }
        for e in events[:PROFILE_TOP]
    ]
    attributed = [attribution.profiled(workload, workload.compiled) for _ in range(PROFILED_GENERATIONS)]
    refused = attribution.refusals(workload, workload.eager)
    results.write(
        records.PROFILE,
        trace=PROFILE_TRACE,
        top=top,
        attributed=attributed,
        refused=refused,
        seconds=time.perf_counter() - start,
    )


def _write_eager(
    results: Writer, memory: tuple[float, str], first: Optional[float], sampled: TimingRecord, shared: TimingRecord
) -> None:
    fields: TimingRecord = {
        "mode": "eager",
        "memory_kind": memory[1],
        "peak_memory_mb": memory[0],
        "first_total_s": first,
        **sampled,
        **shared,
    }
    results.write(records.TIMING, **fields)


def run(workload: Workload, results: Writer, folder: Optional[Path] = None) -> None:
    """Warm-up, then each mode's peak memory, then eager and compiled generations interleaved."""
    cfg = workload.spec.config
    shared: TimingRecord = {"order": "interleaved", "threads": workload.torch.get_num_threads()}
    eager_first = None
    for _ in range(max(cfg.warmup, 1)):
        total, _ = _timed(workload, workload.eager)
        eager_first = eager_first if eager_first is not None else total
    eager_memory = peak_memory(workload, workload.eager)
    workload.torch._dynamo.reset()
    notices = CompileNotices()
    notices.install()
    try:
        (compiled_first, first_cpu, stalled), compiled_memory, sampled = _compiled_and_sampled(workload)
    except Exception as exc:
        results.write(
            records.TIMING_ERROR,
            mode="compiled",
            error_location=error_location(exc, workload.case.path),
            **exception_info(exc),
        )
        eager = sample(workload, {"eager": workload.eager}, cfg.repeats, cfg.timing_seconds)["eager"]
        _write_eager(results, eager_memory, eager_first, eager, {**shared, **host()})
        return
    finally:
        notices.uninstall()
    metrics = compat.compilation_metrics()  # the cold compile's frames, before the reset below
    machine = host()
    _write_eager(results, eager_memory, eager_first, sampled["eager"], {**shared, **machine})
    hits = _graph_cache_hits()
    compiled = sampled["compiled"]
    steady = statistics.median(compiled["totals_s"]) if compiled["totals_s"] else 0.0
    memory, kind = compiled_memory
    fields: TimingRecord = {
        "mode": "compiled",
        "memory_kind": kind,
        "peak_memory_mb": memory,
        "first_total_s": compiled_first,
        "compile_s": max(0.0, compiled_first - steady),
        # the CPU the compile used, past a steady generation's (on a CPU device its wall time is its CPU)
        "compile_cpu_s": None if first_cpu is None else max(0.0, first_cpu - steady),
        # the seconds of it in which some task waited for a CPU (PSI): the compile shared the cores
        "compile_stall_s": stalled,
        "compile_warm_s": _warm_compile_s(workload, steady),
        "compile_notices": notices.noted(),
        "graph_cache_hits": hits,
        **compiled,
        **shared,
        **machine,
    }
    results.write(records.TIMING, **fields)
    if metrics is not None:
        results.write(records.COMPILE_METRICS, frames=metrics)
    if cfg.profile and folder is not None:
        try:
            profile(workload, results, folder)
        except Exception as exc:  # the profiler is a view on the run; its failure is noted, not the run's
            results.write(records.TIMING_ERROR, mode="profile", **exception_info(exc))


def _compiled_and_sampled(workload: Workload):
    """The first compiled generation (it pays for compilation, and any recompiles, once), the compiled
    mode's peak memory, and both modes sampled interleaved."""
    cfg = workload.spec.config
    # The first compiled generation runs with the caches this process was given (cold when the
    # orchestrator passed an empty inductor cache); after a dynamo reset, the same compile again
    # finds them warm (_warm_compile_s).
    compiled_first = first_cpu = stalled = None
    for _ in range(max(cfg.warmup, 1)):
        before, stall_before = tree_cpu_s(), cpu_stall_s()
        total, _ = _timed(workload, workload.compiled)
        after, stall_after = (tree_cpu_s(), cpu_stall_s()) if compiled_first is None else (None, None)
        if compiled_first is None:
            compiled_first, first_cpu = total, (after - before if before is not None and after is not None else None)
            stalled = stall_after - stall_before if stall_before is not None and stall_after is not None else None
    compiled_memory = peak_memory(workload, workload.compiled)
    sampled = sample(
        workload, {"eager": workload.eager, "compiled": workload.compiled}, cfg.repeats, cfg.timing_seconds
    )
    return (compiled_first, first_cpu, stalled), compiled_memory, sampled


def _warm_compile_s(workload: Workload, steady: float) -> float:
    """The compile again after a dynamo reset, with the caches the cold one filled: its time past a
    steady generation."""
    workload.torch._dynamo.reset()
    start = time.perf_counter()
    workload.compiled()
    workload.synchronize()
    return max(0.0, time.perf_counter() - start - steady)
