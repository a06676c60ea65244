"""The timing pass: logging off, warmup, repeats; eager and compiled per-token latency.

Runs in its own process (forked before anything was compiled, see supervise.py),
never in the diagnosis pass's: DEBUG logging slows compilation and must not leak
into a stored timing.

Imports: standard library, torch, transformers.
"""

from __future__ import annotations

import gzip
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

from diag.probe import capture, records
from diag.probe.records import Writer
from diag.probe.session import Workload, error_location, exception_info


def peak_memory_mb(workload: Workload) -> tuple[float, str]:
    """CUDA max allocated where the run is on a GPU; else the process RSS high-water mark."""
    torch = workload.torch
    if workload.spec.config.device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20, "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    return (rss / 2**20 if sys.platform == "darwin" else rss / 2**10), "rss_high_water"


def reset_peak(workload: Workload) -> None:
    if workload.spec.config.device.startswith("cuda"):
        workload.torch.cuda.reset_peak_memory_stats()


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


def measure(workload: Workload, generate, repeats: int, warmup: int, min_seconds: float) -> dict[str, Any]:
    """Per-token samples (seconds per decode step) of at least ``repeats`` generations after ``warmup``,
    going on until the timed ones span ``min_seconds``; the host reference is timed after each."""
    totals, samples, host = [], [], []
    first_total = None

    def one():
        nonlocal first_total
        start = time.perf_counter()
        gen = generate()
        workload.synchronize()
        total = time.perf_counter() - start
        first_total = total if first_total is None else first_total
        return total, gen

    for _ in range(warmup):
        one()
    timed_since = time.perf_counter()
    while len(totals) < repeats or time.perf_counter() - timed_since < min_seconds:
        total, gen = one()
        totals.append(total)
        samples.extend(gen.step_seconds)
        host.append(host_reference())
    return {
        "first_total_s": first_total,
        "totals_s": totals,
        "step_samples_s": samples,
        "host_samples_s": host,
        "median_ms_per_token": statistics.median(samples) * 1e3 if samples else None,
    }


def _graph_cache_hits() -> Optional[int]:
    try:
        return capture.graph_cache_hits()
    except Exception:  # a torch without these counters: unknown, so the diagnosis lowers again
        return None


PROFILE_TRACE = "profile.trace.json.gz"
PROFILE_TOP = 15


def profile(workload: Workload, results: Writer, folder: Path) -> None:
    """One eager and one compiled generation (compiled and warm by now) under torch.profiler: a
    gzipped Chrome trace (opens in Perfetto or chrome://tracing) and the ops with the most self time."""
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
    results.write(records.PROFILE, trace=PROFILE_TRACE, top=top, seconds=time.perf_counter() - start)


def run(workload: Workload, results: Writer, folder: Optional[Path] = None) -> None:
    cfg = workload.spec.config
    reset_peak(workload)
    eager = measure(workload, workload.eager, cfg.repeats, cfg.warmup, cfg.timing_seconds)
    memory, memory_kind = peak_memory_mb(workload)
    results.write(records.TIMING, mode="eager", memory_kind=memory_kind, peak_memory_mb=memory, **eager)
    workload.torch._dynamo.reset()
    reset_peak(workload)
    notices = capture.CompileNotices()
    notices.install()
    try:
        compiled = measure(workload, workload.compiled, cfg.repeats, max(cfg.warmup, 1), cfg.timing_seconds)
    except Exception as exc:
        results.write(
            records.TIMING_ERROR,
            mode="compiled",
            error_location=error_location(exc, workload.case.path),
            **exception_info(exc),
        )
        return
    finally:
        notices.uninstall()
    hits = _graph_cache_hits()
    memory, memory_kind = peak_memory_mb(workload)
    steady = statistics.median(compiled["totals_s"]) if compiled["totals_s"] else 0.0
    # The first compiled generation pays for compilation (and any recompiles) once. It ran with
    # the caches this process was given (cold when the orchestrator passed an empty inductor cache);
    # after a dynamo reset, the same compile again finds them warm.
    compile_s = max(0.0, compiled["first_total_s"] - steady)
    workload.torch._dynamo.reset()
    start = time.perf_counter()
    workload.compiled()
    workload.synchronize()
    compile_warm_s = max(0.0, time.perf_counter() - start - steady)
    results.write(
        records.TIMING,
        mode="compiled",
        memory_kind=memory_kind,
        peak_memory_mb=memory,
        compile_s=compile_s,
        compile_warm_s=compile_warm_s,
        compile_notices=notices.noted(),
        graph_cache_hits=hits,
        **compiled,
    )
    if cfg.profile and folder is not None:
        try:
            profile(workload, results, folder)
        except Exception as exc:  # the profiler is a view on the run; its failure is noted, not the run's
            results.write(records.TIMING_ERROR, mode="profile", **exception_info(exc))
