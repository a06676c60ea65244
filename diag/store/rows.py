"""A ``TypedDict`` per table of a migrated DB, as SQLite holds its rows, and the runs table as read
(``StoredRunColumns``): generated from the schema (``cog -r diag/store/rows.py``;
tests/test_typed_store.py fails where it is stale). diag/store/typed.py adds what a read adds to a row.
"""

from __future__ import annotations

from typing import Any, Optional, TypedDict


# [[[cog
# import cog
# from diag.store.typing_source import typed_source
# cog.out(typed_source())
# ]]]
class MigrationRow(TypedDict, total=False):
    """A row of migrations, as SQLite holds it."""

    name: str
    applied_at: Optional[str]


class TorchBuildRow(TypedDict, total=False):
    """A row of torch_builds, as SQLite holds it."""

    id: int
    build_key: Optional[str]
    version: Optional[str]
    git_version: Optional[str]
    nightly_date: Optional[str]
    variant: Optional[str]
    cuda_version: Optional[str]
    first_seen: Optional[str]
    wheel_url: Optional[str]
    wheel_origin: Optional[str]
    wheel_sha256: Optional[str]


class RunRow(TypedDict, total=False):
    """A row of runs, as SQLite holds it."""

    id: int
    uid: Optional[str]
    torch_build_id: Optional[int]
    case: Optional[str]
    config: Optional[str]
    backend: Optional[str]
    fullgraph: Optional[int]
    dynamic: Optional[str]
    mode: Optional[str]
    device: Optional[str]
    dtype: Optional[str]
    batch_size: Optional[int]
    prompt_length: Optional[int]
    new_tokens: Optional[int]
    model: Optional[str]
    status: Optional[str]
    error_type: Optional[str]
    error_message: Optional[str]
    error_location: Optional[str]
    traceback: Optional[str]
    graph_count: Optional[int]
    graph_break_count: Optional[int]
    recompile_count: Optional[int]
    hidden_error_count: Optional[int]
    compile_s: Optional[float]
    eager_ms_per_token: Optional[float]
    compiled_ms_per_token: Optional[float]
    peak_mem_eager_mb: Optional[float]
    peak_mem_compiled_mb: Optional[float]
    memory_kind: Optional[str]
    tokens_equal: Optional[int]
    max_abs_diff: Optional[float]
    first_differing_step: Optional[int]
    eager_margin: Optional[float]
    oracle_equal: Optional[int]
    capabilities: Optional[str]
    counters: Optional[str]
    timing_error: Optional[str]
    torch_version: Optional[str]
    transformers_version: Optional[str]
    depyf_version: Optional[str]
    python: Optional[str]
    platform: Optional[str]
    device_name: Optional[str]
    host: Optional[str]
    started_at: Optional[str]
    duration_s: Optional[float]
    tool_version: Optional[str]
    artifacts_dir: Optional[str]
    exit_code: Optional[int]
    signal: Optional[int]
    stderr_tail: Optional[str]
    error_key: Optional[str]
    case_path: Optional[str]
    compile_warm_s: Optional[float]
    invocation: Optional[str]
    case_source: Optional[str]
    extra: Optional[str]
    ops_captured: Optional[int]
    timing_noisy: Optional[int]
    timing_note: Optional[str]
    eager_ms_low: Optional[float]
    eager_ms_high: Optional[float]
    compiled_ms_low: Optional[float]
    compiled_ms_high: Optional[float]
    timing_pass_s: Optional[float]
    diagnosis_pass_s: Optional[float]
    orchestrator_s: Optional[float]
    logging_overhead_s: Optional[float]
    prefill_recompiles: Optional[int]
    decode_recompiles: Optional[int]
    decode_recompile_steps: Optional[int]
    guard_latency_us: Optional[float]
    second_call_recompiles: Optional[int]
    second_call_error: Optional[str]
    compile_cpu_s: Optional[float]
    compile_noisy: Optional[int]
    compile_note: Optional[str]
    compile_instructions: Optional[int]
    instructions_method: Optional[str]
    instructions_note: Optional[str]
    case_note: Optional[str]
    compiled_between_ms: Optional[float]
    compile_stall_s: Optional[float]
    environment: Optional[str]
    code_digest: Optional[str]
    code_note: Optional[str]


class GraphBreakRow(TypedDict, total=False):
    """A row of graph_breaks, as SQLite holds it."""

    id: int
    run_id: Optional[int]
    key: Optional[str]
    reason: Optional[str]
    gb_type: Optional[str]
    resumable: Optional[int]
    decode_step: Optional[int]
    count: Optional[int]
    location: Optional[str]
    extra: Optional[Any]
    last_decode_step: Optional[int]


class RecompileRow(TypedDict, total=False):
    """A row of recompiles, as SQLite holds it."""

    id: int
    run_id: Optional[int]
    key: Optional[str]
    reason: Optional[str]
    function: Optional[str]
    location: Optional[str]
    decode_step: Optional[int]
    guard_failures: Optional[int]
    extra: Optional[Any]
    guard_subject: Optional[str]
    guard_property: Optional[str]
    guard_expected: Optional[str]
    guard_actual: Optional[str]


class HiddenErrorRow(TypedDict, total=False):
    """A row of hidden_errors, as SQLite holds it."""

    id: int
    run_id: Optional[int]
    key: Optional[str]
    source: Optional[str]
    exc_type: Optional[str]
    message: Optional[str]
    logger: Optional[str]
    location: Optional[str]
    traceback: Optional[str]
    decode_step: Optional[int]
    count: Optional[int]
    extra: Optional[Any]
    last_decode_step: Optional[int]


class TimingRow(TypedDict, total=False):
    """A row of timings, as SQLite holds it."""

    id: int
    run_id: Optional[int]
    mode: Optional[str]
    metric: Optional[str]
    unit: Optional[str]
    samples: Optional[Any]
    summary: Optional[Any]


class FrameRow(TypedDict, total=False):
    """A row of frames, as SQLite holds it."""

    id: int
    run_id: Optional[int]
    compile_id: Optional[str]
    co_name: Optional[str]
    co_filename: Optional[str]
    co_firstlineno: Optional[int]
    cache_size: Optional[int]
    accumulated_cache_size: Optional[int]
    guard_count: Optional[int]
    shape_env_guard_count: Optional[int]
    graph_op_count: Optional[int]
    graph_node_count: Optional[int]
    graph_input_count: Optional[int]
    entire_frame_compile_time_s: Optional[float]
    backend_compile_time_s: Optional[float]
    inductor_compile_time_s: Optional[float]
    code_gen_time_s: Optional[float]
    fail_type: Optional[str]
    fail_reason: Optional[str]
    restart_reasons: Optional[str]
    structured_logging_overhead_s: Optional[float]
    metrics: Optional[str]


class FoldedRunRow(TypedDict, total=False):
    """A row of folded_runs, as SQLite holds it."""

    id: int
    torch_build_id: Optional[int]
    case: Optional[str]
    case_source: Optional[str]
    backend: Optional[str]
    fullgraph: Optional[int]
    dynamic: Optional[str]
    mode: Optional[str]
    device: Optional[str]
    dtype: Optional[str]
    batch_size: Optional[int]
    prompt_length: Optional[int]
    new_tokens: Optional[int]
    model: Optional[str]
    status: Optional[str]
    error_key: Optional[str]
    finding_keys: Optional[str]
    runs: Optional[int]
    first_started_at: Optional[str]
    last_started_at: Optional[str]


class RaceRow(TypedDict, total=False):
    """A row of races, as SQLite holds it."""

    id: int
    uid: Optional[str]
    torch_build_id: Optional[int]
    started_at: Optional[str]
    case: Optional[str]
    case_source: Optional[str]
    backend: Optional[str]
    fullgraph: Optional[int]
    dynamic: Optional[str]
    mode: Optional[str]
    device: Optional[str]
    dtype: Optional[str]
    batch_size: Optional[int]
    prompt_length: Optional[int]
    new_tokens: Optional[int]
    model: Optional[str]
    baseline: Optional[str]
    baseline_source: Optional[str]
    python: Optional[str]
    transformers_version: Optional[str]
    verdict: Optional[str]
    failed: Optional[str]
    error_type: Optional[str]
    error_message: Optional[str]
    error_location: Optional[str]
    samples: Optional[str]
    rounds: Optional[int]
    threads: Optional[int]
    cpus: Optional[int]
    ms_baseline: Optional[float]
    ms_case: Optional[float]
    ratio: Optional[float]
    low: Optional[float]
    high: Optional[float]
    load_1m: Optional[float]
    seconds: Optional[float]
    between_ms_baseline: Optional[float]
    between_ms_case: Optional[float]
    profile: Optional[str]


class BuildStampRow(TypedDict, total=False):
    """A row of build_stamps, as SQLite holds it."""

    torch_build_id: int
    stamp: int


class EnvironmentRow(TypedDict, total=False):
    """A row of environments, as SQLite holds it."""

    digest: str
    python: Optional[str]
    cuda_version: Optional[str]
    driver_version: Optional[str]
    packages: Optional[str]


class BisectRow(TypedDict, total=False):
    """A row of bisects, as SQLite holds it."""

    id: int
    started_at: Optional[str]
    row: Optional[str]
    signal: Optional[str]
    moved: Optional[str]
    last_good: Optional[str]
    first_bad: Optional[str]
    commit_range: Optional[str]
    reproduce: Optional[str]
    summary: Optional[str]


class StoredRunColumns(TypedDict, total=False):
    """A row of runs as read: JSON objects decoded (None where unreadable), joined to its build."""

    id: int
    uid: Optional[str]
    torch_build_id: int
    case: Optional[str]
    config: Optional[dict[str, Any]]
    backend: Optional[str]
    fullgraph: Optional[int]
    dynamic: Optional[str]
    mode: Optional[str]
    device: Optional[str]
    dtype: Optional[str]
    batch_size: Optional[int]
    prompt_length: Optional[int]
    new_tokens: Optional[int]
    model: Optional[str]
    status: Optional[str]
    error_type: Optional[str]
    error_message: Optional[str]
    error_location: Optional[str]
    traceback: Optional[str]
    graph_count: Optional[int]
    graph_break_count: Optional[int]
    recompile_count: Optional[int]
    hidden_error_count: Optional[int]
    compile_s: Optional[float]
    eager_ms_per_token: Optional[float]
    compiled_ms_per_token: Optional[float]
    peak_mem_eager_mb: Optional[float]
    peak_mem_compiled_mb: Optional[float]
    memory_kind: Optional[str]
    tokens_equal: Optional[int]
    max_abs_diff: Optional[float]
    first_differing_step: Optional[int]
    eager_margin: Optional[float]
    oracle_equal: Optional[int]
    capabilities: Optional[dict[str, Any]]
    counters: Optional[dict[str, Any]]
    timing_error: Optional[str]
    torch_version: Optional[str]
    transformers_version: Optional[str]
    depyf_version: Optional[str]
    python: Optional[str]
    platform: Optional[str]
    device_name: Optional[str]
    host: Optional[str]
    started_at: Optional[str]
    duration_s: Optional[float]
    tool_version: Optional[str]
    artifacts_dir: Optional[str]
    exit_code: Optional[int]
    signal: Optional[int]
    stderr_tail: Optional[str]
    error_key: Optional[str]
    case_path: Optional[str]
    compile_warm_s: Optional[float]
    invocation: Optional[str]
    case_source: Optional[str]
    extra: Optional[dict[str, Any]]
    ops_captured: Optional[int]
    timing_noisy: Optional[int]
    timing_note: Optional[str]
    eager_ms_low: Optional[float]
    eager_ms_high: Optional[float]
    compiled_ms_low: Optional[float]
    compiled_ms_high: Optional[float]
    timing_pass_s: Optional[float]
    diagnosis_pass_s: Optional[float]
    orchestrator_s: Optional[float]
    logging_overhead_s: Optional[float]
    prefill_recompiles: Optional[int]
    decode_recompiles: Optional[int]
    decode_recompile_steps: Optional[int]
    guard_latency_us: Optional[float]
    second_call_recompiles: Optional[int]
    second_call_error: Optional[str]
    compile_cpu_s: Optional[float]
    compile_noisy: Optional[int]
    compile_note: Optional[str]
    compile_instructions: Optional[int]
    instructions_method: Optional[str]
    instructions_note: Optional[str]
    case_note: Optional[str]
    compiled_between_ms: Optional[float]
    compile_stall_s: Optional[float]
    environment: Optional[str]
    code_digest: Optional[str]
    code_note: Optional[str]


# [[[end]]]
