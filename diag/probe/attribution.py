"""A generation's decode steps under torch.profiler, their time attributed to ops (``diag race
--profile``; the orchestrator groups and compares them, diag/verdicts/why.py).

Each decode step runs inside a ``diag: decode step`` range, from the step's boundary to the next
(the compiled call, the loop's own work after it, diag's recording of the step); each ``emit``
inside a ``diag: emit`` range. Per step, every op's self time is summed by name; the step range's
own self time is the Python that ran outside any op, and an emit range counts whole, under its own
name, so that diag's recording of the logits never reads as the case's work. An attention op counts
whole too, under the name of the SDPA implementation that ran inside it.

Imports: standard library, torch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from diag.probe.cases import EMIT_RANGE as EMIT
from diag.probe.records import OUTSIDE_ANY_OP as OUTSIDE
from diag.probe.records import RECORDING_THE_STEP as RECORDING
from diag.probe.session import Workload

STEP = "diag: decode step"
# the SDPA entry points whose name says which implementation ran (the orchestrator names them)
SDPA_PREFIXES = ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")


def _device_us(event: Any, field: str) -> float:
    """An event's time on the device, ``self_`` or total: torch >= 2.4 names it ``device``, older
    ones ``cuda``; 0 where it has none."""
    for name in (f"{field}device_time_total", f"{field}cuda_time_total"):
        value = getattr(event, name, None)
        if value:
            return float(value)
    return 0.0


def _implementation(event: Any) -> str:
    """The name of the SDPA implementation under an attention op: its first descendant that names
    one (``SDPA_PREFIXES``), else the op's own name."""
    pending = list(event.cpu_children)
    while pending:
        child = pending.pop(0)
        if child.name.startswith(SDPA_PREFIXES):
            return str(child.name)
        pending.extend(child.cpu_children)
    return str(event.name)


def attribute(events: Any) -> dict[str, Any]:
    """Per decode step (the ``STEP`` ranges in ``events``, a profiler's FunctionEvents): each op's
    self time on the CPU (and the device, where there is one) in microseconds, and the SDPA calls
    a step makes by the implementation that ran them."""
    cpu: list[dict[str, float]] = []
    device: list[dict[str, float]] = []
    sdpa: Counter[str] = Counter()
    for step in events:
        if step.name != STEP:
            continue
        on_cpu: Counter[str] = Counter({OUTSIDE: step.self_cpu_time_total})
        on_device: Counter[str] = Counter()
        pending = list(step.cpu_children)
        while pending:
            event = pending.pop()
            if event.name == EMIT:
                on_cpu[RECORDING] += event.cpu_time_total
                on_device[RECORDING] += _device_us(event, "")
                continue
            if "scaled_dot_product" in event.name or event.name.startswith(SDPA_PREFIXES):
                # attention whole, under the implementation that ran (a math SDPA's matmuls and softmax
                # are attention's, not the matmuls' group)
                ran = _implementation(event)
                on_cpu[ran] += event.cpu_time_total
                on_device[ran] += _device_us(event, "")
                sdpa[ran] += 1
                continue
            on_cpu[event.name] += event.self_cpu_time_total
            on_device[event.name] += _device_us(event, "self_")
            pending.extend(event.cpu_children)
        cpu.append({name: round(us, 2) for name, us in on_cpu.items() if us})
        device.append({name: round(us, 2) for name, us in on_device.items() if us})
    per = max(len(cpu), 1)
    return {
        "steps": len(cpu),
        "cpu_us": cpu,
        "device_us": device if any(device) else [],
        "sdpa_calls": {name: count / per for name, count in sdpa.items()},
    }


def profiled(workload: Workload, generate: Callable[[], Any]) -> dict[str, Any]:
    """One generation of ``generate`` under torch.profiler, its decode steps attributed (``attribute``)."""
    torch = workload.torch
    from torch.profiler import ProfilerActivity, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if workload.on_cuda else [])
    open_ranges: list[Any] = []

    def close() -> None:
        while open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    def boundary() -> None:
        close()
        if workload.current_step is not None:
            opened = record_function(STEP)
            opened.__enter__()
            open_ranges.append(opened)

    workload.step_listeners.append(boundary)
    workload.mark = record_function
    try:
        with torch.profiler.profile(activities=activities) as prof:
            try:
                generate()
                workload.synchronize()
            finally:
                close()
    finally:
        workload.step_listeners.remove(boundary)
        workload.mark = None
    return attribute(prof.events())
