"""A generation's decode steps under torch.profiler, their time attributed to ops (``diag race
--profile``; the orchestrator groups and compares them, diag/verdicts/why.py).

Each decode step runs inside a ``diag: decode step`` range, from the step's boundary to the next
(the compiled call, the loop's own work after it, diag's recording of the step); each ``emit``
inside a ``diag: emit`` range. Per step, every op's self time is summed by name; the step range's
own self time is the Python that ran outside any op, and an emit range counts whole, under its own
name, so that diag's recording of the logits never reads as the case's work. An attention op counts
whole too, under the name of the SDPA implementation that ran inside it.

On CUDA, one eager generation also asks torch, for each SDPA call, why it refused each fused kernel
that did not run (``refusals``): torch.backends.cuda's ``can_use_*_attention(params, debug=True)``
warns the first check that failed (a mask was given, the dtype, the head size, dropout).

Imports: standard library, torch.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict
from typing import Any, Callable, Optional

from diag.probe.cases import EMIT_RANGE as EMIT
from diag.probe.cases import PREFILL
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
        if value is not None:  # the newer name where torch has it (the older one warns it is deprecated)
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
        on_cpu: defaultdict[str, float] = defaultdict(float, {OUTSIDE: step.self_cpu_time_total})
        on_device: defaultdict[str, float] = defaultdict(float)
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
        if workload.current_step is not None and workload.current_step != PREFILL:
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
    if not workload.on_cuda:  # device time needs torch's own pairing of kernels with ops
        try:
            return attribute(nested(torch, prof.profiler.kineto_results.events()))
        except AttributeError:  # a torch whose raw events lack what nesting reads
            pass
    return attribute(prof.events())


# the utility ops torch's own event list leaves out (torch.autograd.profiler_util._filter_name)
_LEFT_OUT = {
    "[memory]",
    "[OutOfMemory]",
    "profiler::_record_function_enter",
    "profiler::_record_function_enter_new",
    "profiler::_record_function_exit",
    "aten::is_leaf",
    "aten::output_nr",
    "aten::_version",
}


class Op:
    """One CPU op or range of a profile, nested in the ranges that hold it: what ``attribute`` reads
    of torch's FunctionEvent (name, children, total and self time in microseconds), made from the
    profiler's raw events. Torch builds FunctionEvents in Python, one object at a time with what
    ``attribute`` never reads: 0.15-0.37 s for a 16-step generation of 40 linear layers, 20-100x the
    raw events' read, and most of ``race --profile``'s time (docs/BENCHMARKS.md)."""

    __slots__ = ("name", "start", "end", "cpu_children")

    def __init__(self, name: str, start: int, end: int) -> None:
        self.name, self.start, self.end = name, start, end
        self.cpu_children: list[Op] = []

    @property
    def cpu_time_total(self) -> float:
        return (self.end - self.start) / 1e3

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(child.cpu_time_total for child in self.cpu_children)


def _span_ns(event: Any) -> tuple[int, int]:
    """An event's start and end in whole ns since the epoch (a float would keep only a quarter of a
    microsecond of them): ``start_ns`` where torch has it, ``start_us`` before."""
    if hasattr(event, "start_ns"):
        start = int(event.start_ns())
        return start, start + int(event.duration_ns())
    start = int(event.start_us()) * 1000
    return start, start + int(event.duration_us()) * 1000


def nested(torch: Any, raw: Any) -> list[Op]:
    """The CPU ops of ``raw`` (a profile's kineto events), each under the innermost op or range of its
    thread whose span holds it whole, as torch nests its FunctionEvents: async events and the
    utility ops torch leaves out are left out here too."""
    cpu = torch._C._autograd.DeviceType.CPU
    by_thread: defaultdict[int, list[Op]] = defaultdict(list)
    for event in raw:
        if event.device_type() != cpu or event.is_async() or event.name() in _LEFT_OUT:
            continue
        by_thread[event.start_thread_id()].append(Op(event.name(), *_span_ns(event)))
    ops: list[Op] = []
    for events in by_thread.values():
        events.sort(key=lambda op: (op.start, -op.end))
        open_ops: list[Op] = []
        for op in events:
            while open_ops and (op.start >= open_ops[-1].end or op.end > open_ops[-1].end):
                open_ops.pop()
            if open_ops:
                open_ops[-1].cpu_children.append(op)
            open_ops.append(op)
        ops.extend(events)
    return ops


# the fused CUDA kernels torch can say it refused, by the names verdicts/why.py gives them, each with
# the function of torch.backends.cuda that asks it (torch >= 2.1; cuDNN's from 2.5)
REFUSABLE = (
    ("flash", "can_use_flash_attention"),
    ("memory-efficient", "can_use_efficient_attention"),
    ("cuDNN", "can_use_cudnn_attention"),
)
NO_REASON = "refused; torch gave no reason"
# what a refusal's warnings carry that is not its reason: the header torch prints before re-asking
# with debug on ("Flash attention kernel not used because:"), and where in torch's source it warned
_HEADER = re.compile(r"kernel not used because:?\s*$", re.IGNORECASE)
_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?\s*$")
REASON_CHARS = 300


def reason(messages: list[str]) -> Optional[str]:
    """torch's reason for refusing a kernel, from the warnings one ``can_use_*(debug=True)`` gave (or
    a log's lines around "No available kernel"): the first that is not a header, without the place
    in torch's source it names; None where there is none."""
    for message in messages:
        text = _TRIGGERED.sub("", message).strip()
        if text and not _HEADER.search(text):
            return " ".join(text.split())[:REASON_CHARS]
    return None


def refusal_checks(workload: Workload) -> list[tuple[str, Callable[..., bool]]]:
    """The kernels torch can give reasons for on this run's device, with the function that asks:
    the fused CUDA kernels; none off CUDA or on a torch without ``SDPAParams``."""
    backends = workload.torch.backends.cuda
    if not workload.on_cuda or not hasattr(backends, "SDPAParams"):
        return []
    return [(kernel, getattr(backends, name)) for kernel, name in REFUSABLE if hasattr(backends, name)]


SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _ask(params_type: Any, checks: list[tuple[str, Callable[..., bool]]], args: tuple, kwargs: dict) -> dict[str, str]:
    """One SDPA call's refused kernels, each with torch's reason."""
    bound = dict(zip(SDPA_ARGS, args), **kwargs)
    fields = [bound["query"], bound["key"], bound["value"], bound.get("attn_mask")]
    fields += [float(bound.get("dropout_p") or 0.0), bool(bound.get("is_causal") or False)]
    try:
        params = params_type(*fields, bool(bound.get("enable_gqa") or False))
    except TypeError:  # torch < 2.5: SDPAParams has no enable_gqa
        params = params_type(*fields)
    refused = {}
    for kernel, check in checks:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            usable = check(params, True)
        if not usable:
            refused[kernel] = reason([str(w.message) for w in said]) or NO_REASON
    return refused


def refusals(workload: Workload, generate: Callable[[], Any]) -> dict[str, dict[str, int]]:
    """Per fused kernel torch refused in a generation of ``generate`` (run eagerly, so that each SDPA
    call reaches Python): each reason it gave, with the number of calls it gave it for. Empty where
    torch gives no reasons (``refusal_checks``)."""
    checks = refusal_checks(workload)
    if not checks:
        return {}
    torch = workload.torch
    sdpa = torch.nn.functional.scaled_dot_product_attention
    params_type = torch.backends.cuda.SDPAParams
    found: dict[str, Counter[str]] = {}

    class Asking(torch.overrides.TorchFunctionMode):  # type: ignore[name-defined]
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
            kwargs = kwargs or {}
            if func is sdpa:
                try:
                    refused = _ask(params_type, checks, args, kwargs)
                except Exception:  # a call torch's checks cannot take (say, nested tensors): no reason, no harm
                    refused = {}
                for kernel, why in refused.items():
                    found.setdefault(kernel, Counter())[why] += 1
            return func(*args, **kwargs)

    with Asking():
        generate()
    return {kernel: dict(reasons) for kernel, reasons in found.items()}
