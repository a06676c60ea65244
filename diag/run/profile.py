"""What a profiled run keeps of its generations (``diag run --profile``), summarised where the run is
assembled: each op's time per decode token, the op groups a breakdown reads, and which SDPA kernels
ran. ``diag/verdicts/why.py`` sets two of these against each other."""

from __future__ import annotations

import re
import statistics
from typing import Any, Optional, TypedDict

from diag.contract import records

OUTSIDE = records.OUTSIDE_ANY_OP

# (group, pattern over the profiler's op names); the first that matches names the group
GROUPS: tuple[tuple[str, str], ...] = (
    ("diag's recording", "^" + re.escape(records.RECORDING_THE_STEP) + "$"),
    ("Python outside any op", "^" + re.escape(OUTSIDE) + "$"),
    ("attention", r"scaled_dot_product|attention|softmax|flash|fmha|sdpa"),
    ("matmuls", r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|mv|addmv|dot|_int_mm)$|gemm|cublas|cutlass|mkldnn_"),
    ("compiled kernels", r"CompiledFxGraph|^(cpp|triton)_|^graph_\d+_|inductor"),
    (
        "compiled-region overhead",
        r"Torch-Compiled Region|TorchDynamo|Pregraph bytecode|AOTDispatcher|CompiledFunction|Runtime Wrapper|"
        r"cudagraph|CUDAGraph",
    ),
    (
        "cache moves and copies",
        r"^aten::(copy_|index_copy_?|index_put_?|_index_put_impl_|slice_scatter|select_scatter|scatter_?|cat|"
        r"stack|roll|clone|contiguous|_to_copy|fill_|zero_|narrow_copy)$|Memcpy|Memset",
    ),
    (
        "views and allocation",
        r"^aten::(view|_unsafe_view|reshape|transpose|permute|expand|unsqueeze|squeeze|as_strided|slice|select|"
        r"t|detach|alias|empty|empty_like|empty_strided|resolve_conj|resolve_neg|result_type|to|split|chunk|"
        r"unbind|narrow|lift_fresh|view_as|_reshape_alias|expand_as|split_with_sizes)$|^detach_?$",
    ),
)
OTHER = "elementwise and other ops"

# which SDPA implementation an op name says ran
SDPA_KERNELS: tuple[tuple[str, str], ...] = (
    ("_scaled_dot_product_flash_attention_for_cpu", "CPU flash"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_flash_attention", "flash"),
    ("_scaled_dot_product_efficient_attention", "memory-efficient"),
    ("_efficient_attention", "memory-efficient"),
    ("_scaled_dot_product_cudnn_attention", "cuDNN"),
    ("_scaled_dot_product_fused_attention_overrideable", "overrideable (a backend's own)"),
    ("_scaled_dot_product_attention_math", "math"),
)


def group_of(op: str) -> str:
    for name, pattern in GROUPS:
        if re.search(pattern, op):
            return name
    return OTHER


def kernel_of(op: str) -> Optional[str]:
    """The SDPA implementation an op's name says ran, or None for an op that is not one."""
    for marker, kernel in SDPA_KERNELS:
        if marker in op:
            return kernel
    return None


def op_name(op: str) -> str:
    """An op's name with what differs between two compiles of one graph left out (inductor's hashes)."""
    if "CompiledFxGraph" in op:
        return "inductor's compiled graph (its fused kernels)"
    return re.sub(r"Torch-Compiled Region: \d+/\d+", "Torch-Compiled Region", op)


def steps(attributed: dict[str, Any], device: bool) -> list[dict[str, float]]:
    """One profiled generation's decode steps, each as ms by op: device time on a GPU, else CPU."""
    cpu_steps = attributed.get("cpu_us") or []
    found = []
    for index, raw in enumerate((attributed.get("device_us") if device else None) or cpu_steps):
        step: dict[str, float] = {}
        for op, us in raw.items():
            name = op_name(op)
            step[name] = step.get(name, 0.0) + us / 1e3
        if device and index < len(cpu_steps):  # the host's time outside ops still delays the next launch
            step[OUTSIDE] = cpu_steps[index].get(OUTSIDE, 0.0) / 1e3
        found.append(step)
    return found


def grouped(step: dict[str, float]) -> dict[str, float]:
    found: dict[str, float] = {}
    for op, ms in step.items():
        found[group_of(op)] = found.get(group_of(op), 0.0) + ms
    return found


def per_token(steps: list[dict[str, float]]) -> dict[str, float]:
    """A generation's figure per name: the median over its decode steps, so that a step the host
    stopped for a while (another process on the core) does not move it."""
    names = {name for step in steps for name in step}
    return {name: statistics.median(step.get(name, 0.0) for step in steps) for name in names} if steps else {}


def kernels(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """SDPA kernel -> calls per decode token, over a variant's profiled rounds (their median)."""
    names = {op for r in rounds for op in r.get("sdpa_calls") or {}}
    found: dict[str, float] = {}
    for op in names:
        kernel = kernel_of(op) or op
        calls = statistics.median((r.get("sdpa_calls") or {}).get(op, 0.0) for r in rounds)
        found[kernel] = found.get(kernel, 0.0) + calls
    return found


class ProfileSummary(TypedDict, total=False):
    """What a run keeps of diag run --profile, in its ``extra`` (``summary``, with the trace and top ops
    assemble adds): ms per token by op of each profiled generation, the SDPA kernels, the refusals."""

    trace: Optional[str]
    top: list[Any]
    seconds: Optional[float]
    ops_ms: list[dict[str, float]]
    kernels: dict[str, float]
    refused: dict[str, dict[str, int]]
    device_time: bool


def summary(
    attributed: list[dict[str, Any]], device: bool, refused: Optional[dict[str, dict[str, int]]] = None
) -> ProfileSummary:
    """What a run keeps of its profiled generations (diag run --profile): per generation, ms per token
    by op (the median over its decode steps), the SDPA kernels it ran, and the fused kernels torch
    refused with its reasons (CUDA)."""
    return ProfileSummary(
        ops_ms=[{op: round(ms, 5) for op, ms in per_token(steps(r, device)).items()} for r in attributed],
        kernels=kernels(attributed),
        refused=refused or {},
        device_time=device,
    )
