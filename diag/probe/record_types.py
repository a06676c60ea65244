"""Each record kind's shape as a ``TypedDict``, generated from ``records.KINDS``, and a reader that
hands each kind out as its own type: a misspelt or removed field is a type error where it is read.

The generated part is written by ``cog -r diag/probe/record_types.py`` and tests/test_typed_store.py
fails where it is stale. Every type is ``total=False``: an older probe may not have written a field
its kind now declares, and the reader keeps a record as it finds it. Standard library only, as
records.py: the probe imports it inside bare torch environments.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict, overload

from diag.probe.records import JSONObject


class RecordBase(TypedDict, total=False):
    kind: str
    v: int


# [[[cog
# import cog
# from diag.probe.records import KINDS
# plain = {"str": "str", "int": "int", "float": "float", "bool": "bool", "list": "list[Any]", "dict": "JSONObject"}
# def name(kind): return "".join(part.title() for part in kind.split("_")) + "Record"
# for kind in KINDS.values():
#     cog.outl(f"\n\nclass {name(kind.name)}(RecordBase, total=False):")
#     cog.outl(f'    """{kind.name}: {kind.doc[:80].rstrip()}{"..." if len(kind.doc) > 80 else ""}"""\n')
#     for field, declared in kind.fields.items():
#         held = plain[declared.rstrip("?")]
#         cog.outl(f"    {field}: {f'Optional[{held}]' if declared.endswith('?') else held}")
# cog.outl("\n\nclass ByKind:")
# cog.outl('    """Typed access to ``self.records`` by kind: the first of a kind, and all of it."""\n')
# cog.outl("    records: list[JSONObject]")
# for verb, wrap in (("first", "Optional[{}]"), ("all", "list[{}]")):
#     for kind in KINDS.values():
#         held = wrap.format(name(kind.name))
#         cog.outl(f"\n    @overload\n    def {verb}(self, kind: Literal[\"{kind.name}\"]) -> {held}: ...")
#     cog.outl(f"\n    def {verb}(self, kind: str) -> Any:")
#     cog.outl("        found = (r for r in self.records if r.get(\"kind\") == kind)")
#     cog.outl("        return next(found, None)" if verb == "first" else "        return list(found)")
# cog.outl("\n    def of(self, kind: str) -> list[JSONObject]:")
# cog.outl('        """Every record of a kind named at run time (a loop over kinds), as read."""')
# cog.outl("        return [r for r in self.records if r.get(\"kind\") == kind]")
# cog.out("\n\n")  # as ruff formats it: two blank lines before the end marker
# ]]]


class BuildRecord(RecordBase, total=False):
    """build: the torch build and interpreter a pass ran on"""

    torch_version: str
    git_version: Optional[str]
    cuda_version: Optional[str]
    python: str
    platform: str
    executable: str
    device_name: Optional[str]
    transformers_version: Optional[str]
    depyf_version: Optional[str]
    packages: Optional[JSONObject]
    driver_version: Optional[str]


class OracleRecord(RecordBase, total=False):
    """oracle: eager tokens against transformers' own greedy generate (required of diag's model..."""

    oracle_equal: Optional[bool]
    required: bool
    detail: str


class CapabilitiesRecord(RecordBase, total=False):
    """capabilities: which collectors this torch offers, each with why it is missing"""

    capabilities: JSONObject


class CollectorNoteRecord(RecordBase, total=False):
    """collector_note: a collector that changed its mind during the pass"""

    name: str
    available: bool
    detail: str


class GraphBreakRecord(RecordBase, total=False):
    """graph_break: one graph break (or a frame that fell back to eager), counted"""

    key: str
    reason: str
    gb_type: Optional[str]
    location: Optional[str]
    resumable: bool
    decode_step: Optional[int]
    last_decode_step: Optional[int]
    count: int


class RecompileRecord(RecordBase, total=False):
    """recompile: one recompile: the guard that failed and the decode step in flight"""

    key: str
    reason: str
    function: Optional[str]
    location: Optional[str]
    decode_step: Optional[int]
    guard_failures: int


class HiddenErrorRecord(RecordBase, total=False):
    """hidden_error: an exception or fallback torch logged instead of raising"""

    key: str
    source: str
    exc_type: str
    message: str
    logger: str
    location: Optional[str]
    traceback: Optional[str]
    decode_step: Optional[int]
    last_decode_step: Optional[int]
    count: int


class CaseNoteRecord(RecordBase, total=False):
    """case_note: what the case said about how it ran (Generation.note): a fallback it took and wh..."""

    text: str


class CorrectnessRecord(RecordBase, total=False):
    """correctness: compiled tokens and logits against eager"""

    tokens_equal: bool
    max_abs_diff: float
    logit_tolerance: float
    first_differing_step: Optional[int]
    eager_margin: Optional[float]
    within_tolerance: bool


class SecondCallRecord(RecordBase, total=False):
    """second_call: a second compiled generation right after the first (same prompt and sizes), as t..."""

    recompiles: int
    reasons: list[Any]
    error: Optional[str]


class ResultRecord(RecordBase, total=False):
    """result: the diagnosis pass's verdict: one status (see statuses.py) and its evidence"""

    status: str
    graph_count: Optional[int]
    graph_break_count: Optional[int]
    ops_captured: Optional[int]
    counters: Optional[JSONObject]
    log_records: Optional[int]
    collector_errors: Optional[list[Any]]
    error_type: Optional[str]
    error_message: Optional[str]
    traceback: Optional[str]
    error_location: Optional[str]
    error_key: Optional[str]
    environment_error: Optional[str]


class TimingRecord(RecordBase, total=False):
    """timing: per-token samples of one mode (eager or compiled) from the timing pass"""

    mode: str
    memory_kind: str
    peak_memory_mb: float
    first_total_s: Optional[float]
    totals_s: list[Any]
    step_samples_s: list[Any]
    host_samples_s: list[Any]
    median_ms_per_token: Optional[float]
    between_samples_s: Optional[list[Any]]
    median_between_ms: Optional[float]
    compile_s: Optional[float]
    compile_cpu_s: Optional[float]
    compile_stall_s: Optional[float]
    compile_warm_s: Optional[float]
    compile_notices: Optional[list[Any]]
    graph_cache_hits: Optional[int]
    order: Optional[str]
    threads: Optional[int]
    load_1m: Optional[float]
    cpus: Optional[int]


class ProfileRecord(RecordBase, total=False):
    """profile: an eager and a compiled generation under torch.profiler (diag run --profile): th..."""

    trace: str
    top: list[Any]
    attributed: Optional[list[Any]]
    refused: Optional[JSONObject]
    seconds: float


class InstructionsRecord(RecordBase, total=False):
    """instructions: the instructions the cold compile executed (diag run --count-instructions; probe..."""

    method: Optional[str]
    count: Optional[int]
    counts: list[Any]
    note: Optional[str]


class CompileMetricsRecord(RecordBase, total=False):
    """compile_metrics: every field of torch's per-frame compilation metrics after the pass's compiles (..."""

    frames: list[Any]


class TimingErrorRecord(RecordBase, total=False):
    """timing_error: why the timing pass could not time a mode"""

    mode: str
    error_type: str
    error_message: str
    traceback: Optional[str]
    environment_error: Optional[str]
    error_location: Optional[str]


class RaceRecord(RecordBase, total=False):
    """race: compiled variants timed side by side in one process (diag race): per variant, th..."""

    variants: list[Any]
    generation_median_s: JSONObject
    between_median_s: Optional[JSONObject]
    profiled: Optional[JSONObject]
    errors: JSONObject
    order: str
    threads: Optional[int]
    load_1m: Optional[float]
    cpus: Optional[int]
    seconds: float


class ExitRecord(RecordBase, total=False):
    """exit: how one process ended: a pass, or the probe process"""

    name: str
    returncode: Optional[int]
    signal: Optional[int]
    timed_out: bool
    duration_s: float
    oom_kills: Optional[int]
    launch: Optional[str]


class CaseCheckRecord(RecordBase, total=False):
    """case_check: whether a case file imports and registers one case in the target environment"""

    file: str
    ok: bool
    name: Optional[str]
    error: Optional[str]


class DeviceCheckRecord(RecordBase, total=False):
    """device_check: whether the target environment's torch can use a device"""

    device: str
    ok: bool
    error: Optional[str]


class ByKind:
    """Typed access to ``self.records`` by kind: the first of a kind, and all of it."""

    records: list[JSONObject]

    @overload
    def first(self, kind: Literal["build"]) -> Optional[BuildRecord]: ...

    @overload
    def first(self, kind: Literal["oracle"]) -> Optional[OracleRecord]: ...

    @overload
    def first(self, kind: Literal["capabilities"]) -> Optional[CapabilitiesRecord]: ...

    @overload
    def first(self, kind: Literal["collector_note"]) -> Optional[CollectorNoteRecord]: ...

    @overload
    def first(self, kind: Literal["graph_break"]) -> Optional[GraphBreakRecord]: ...

    @overload
    def first(self, kind: Literal["recompile"]) -> Optional[RecompileRecord]: ...

    @overload
    def first(self, kind: Literal["hidden_error"]) -> Optional[HiddenErrorRecord]: ...

    @overload
    def first(self, kind: Literal["case_note"]) -> Optional[CaseNoteRecord]: ...

    @overload
    def first(self, kind: Literal["correctness"]) -> Optional[CorrectnessRecord]: ...

    @overload
    def first(self, kind: Literal["second_call"]) -> Optional[SecondCallRecord]: ...

    @overload
    def first(self, kind: Literal["result"]) -> Optional[ResultRecord]: ...

    @overload
    def first(self, kind: Literal["timing"]) -> Optional[TimingRecord]: ...

    @overload
    def first(self, kind: Literal["profile"]) -> Optional[ProfileRecord]: ...

    @overload
    def first(self, kind: Literal["instructions"]) -> Optional[InstructionsRecord]: ...

    @overload
    def first(self, kind: Literal["compile_metrics"]) -> Optional[CompileMetricsRecord]: ...

    @overload
    def first(self, kind: Literal["timing_error"]) -> Optional[TimingErrorRecord]: ...

    @overload
    def first(self, kind: Literal["race"]) -> Optional[RaceRecord]: ...

    @overload
    def first(self, kind: Literal["exit"]) -> Optional[ExitRecord]: ...

    @overload
    def first(self, kind: Literal["case_check"]) -> Optional[CaseCheckRecord]: ...

    @overload
    def first(self, kind: Literal["device_check"]) -> Optional[DeviceCheckRecord]: ...

    def first(self, kind: str) -> Any:
        found = (r for r in self.records if r.get("kind") == kind)
        return next(found, None)

    @overload
    def all(self, kind: Literal["build"]) -> list[BuildRecord]: ...

    @overload
    def all(self, kind: Literal["oracle"]) -> list[OracleRecord]: ...

    @overload
    def all(self, kind: Literal["capabilities"]) -> list[CapabilitiesRecord]: ...

    @overload
    def all(self, kind: Literal["collector_note"]) -> list[CollectorNoteRecord]: ...

    @overload
    def all(self, kind: Literal["graph_break"]) -> list[GraphBreakRecord]: ...

    @overload
    def all(self, kind: Literal["recompile"]) -> list[RecompileRecord]: ...

    @overload
    def all(self, kind: Literal["hidden_error"]) -> list[HiddenErrorRecord]: ...

    @overload
    def all(self, kind: Literal["case_note"]) -> list[CaseNoteRecord]: ...

    @overload
    def all(self, kind: Literal["correctness"]) -> list[CorrectnessRecord]: ...

    @overload
    def all(self, kind: Literal["second_call"]) -> list[SecondCallRecord]: ...

    @overload
    def all(self, kind: Literal["result"]) -> list[ResultRecord]: ...

    @overload
    def all(self, kind: Literal["timing"]) -> list[TimingRecord]: ...

    @overload
    def all(self, kind: Literal["profile"]) -> list[ProfileRecord]: ...

    @overload
    def all(self, kind: Literal["instructions"]) -> list[InstructionsRecord]: ...

    @overload
    def all(self, kind: Literal["compile_metrics"]) -> list[CompileMetricsRecord]: ...

    @overload
    def all(self, kind: Literal["timing_error"]) -> list[TimingErrorRecord]: ...

    @overload
    def all(self, kind: Literal["race"]) -> list[RaceRecord]: ...

    @overload
    def all(self, kind: Literal["exit"]) -> list[ExitRecord]: ...

    @overload
    def all(self, kind: Literal["case_check"]) -> list[CaseCheckRecord]: ...

    @overload
    def all(self, kind: Literal["device_check"]) -> list[DeviceCheckRecord]: ...

    def all(self, kind: str) -> Any:
        found = (r for r in self.records if r.get("kind") == kind)
        return list(found)

    def of(self, kind: str) -> list[JSONObject]:
        """Every record of a kind named at run time (a loop over kinds), as read."""
        return [r for r in self.records if r.get("kind") == kind]


# [[[end]]]


class Found(ByKind):
    """A list of records (a results file as read), by kind."""

    def __init__(self, records: list[JSONObject]) -> None:
        self.records = records


class Capability(TypedDict):
    """What one collector could do on a torch build, and why (a capabilities record's value)."""

    available: Optional[bool]
    detail: str


class ForkRequest(TypedDict, total=False):
    """One run the orchestrator asks a probe parent to fork (probe/parent.py): what
    ``python -m diag.probe run`` takes, the environment and output files, and the request's id."""

    id: int
    spec: str
    dir: str
    timeout: float
    timing: bool
    env: dict[str, str]
    stdout: str
    stderr: str
