"""What the running torch offers, decided by feature detection, one function per capability.

Each function returns ``(available, detail)``: where a capability is missing the
detail says why, and that sentence is stored on the run so that a missing
signal never reads as a zero.

Imports: standard library and torch.
"""

from __future__ import annotations

import collections
import inspect
import logging
import shutil
from typing import Any, Iterator, Optional

Capability = tuple[bool, str]


def set_logs_keywords() -> set[str]:
    """The keywords ``torch._logging.set_logs`` accepts on this torch (they differ per version)."""
    try:
        import torch._logging
    except ImportError:
        return set()
    set_logs = getattr(torch._logging, "set_logs", None)
    if set_logs is None:
        return set()
    return set(inspect.signature(set_logs).parameters)


def debug_logs() -> Capability:
    keywords = set_logs_keywords()
    if {"dynamo", "aot", "inductor"} <= keywords:
        return True, "dynamo/aot/inductor DEBUG logs via torch._logging.set_logs"
    return False, "torch._logging.set_logs with dynamo/aot/inductor is not available on this torch"


# dynamo's artifacts that log once per bytecode instruction, source line or call it traces: on by
# default under a DEBUG dynamo log, read by no parser, and most of a large model's log (a hybrid
# state-space decode step: 1.6 million of 1.7 million records, 320 MB, and most of the pass's CPU).
PER_INSTRUCTION_TRACES = ("trace_bytecode", "trace_source", "trace_call")
# dynamo's side_effects artifact (torch >= 2.8) prints the whole Python stack of each variable a traced
# call mutated, walked anew for every record: a fifth of a tiny transformers model's log (74 records,
# 2,799 of 13,936 lines, most of them the probe's own frames) and 7.6% of the CPU of a fullgraph and a
# graph-broken run of six architectures (72.1 against 78.0 CPU-s, two rounds), read by no parser.
QUIET_ARTIFACTS = (*PER_INSTRUCTION_TRACES, "side_effects")


def quiet_artifacts() -> None:
    """Raise the loggers of QUIET_ARTIFACTS above DEBUG (torch's set_logs puts them back to NOTSET, so
    this follows every set_logs): dynamo checks the level before it formats a record or walks a stack."""
    for logger in list(logging.root.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and getattr(logger, "artifact_name", None) in QUIET_ARTIFACTS:
            logger.setLevel(logging.INFO)


def graph_breaks_log() -> Capability:
    if "graph_breaks" in set_logs_keywords():
        return True, "graph_breaks log artifact"
    return False, "the graph_breaks log artifact is not available on this torch"


def recompiles_log() -> Capability:
    if "recompiles" in set_logs_keywords():
        return True, "recompiles log artifact"
    if guard_failures() is not None:
        return True, "dynamo's guard_failures (this torch has no recompiles log): each one logged as a recompile"
    return False, "neither the recompiles log artifact nor dynamo's guard_failures is on this torch: recompiles unknown"


def guard_failures() -> Optional[dict]:
    """torch 2.0's record of each code object's guard failures (``torch._dynamo.utils.guard_failures``),
    where it has no recompiles log; None where it has one, or neither."""
    if "recompiles" in set_logs_keywords():
        return None
    try:
        from torch._dynamo import utils
    except ImportError:
        return None
    found = getattr(utils, "guard_failures", None)
    return found if isinstance(found, collections.defaultdict) else None


def dynamo_counters() -> Capability:
    try:
        from torch._dynamo.utils import counters  # noqa: F401 (importable is the capability)
    except ImportError as exc:
        return False, f"torch._dynamo.utils.counters is not importable: {exc}"
    return True, "torch._dynamo.utils.counters"


def structured_trace() -> Capability:
    """TORCH_TRACE (torch >= 2.3): torch._logging._internal grew a trace_log and its handler."""
    import os

    try:
        from torch._logging import _internal
    except ImportError:
        return False, "structured trace: torch._logging._internal is not available on this torch"
    if not hasattr(_internal, "trace_log"):
        return False, "structured trace: not available on this torch (needs >= 2.3)"
    if not os.environ.get("TORCH_TRACE"):
        return False, "structured trace: TORCH_TRACE was not set for this probe"
    return True, f"TORCH_TRACE log in {os.environ['TORCH_TRACE']}"


def depyf_hook() -> Capability:
    """depyf needs dynamo's bytecode hook (torch >= 2.2) and the depyf package."""
    try:
        import torch._dynamo.convert_frame as convert_frame
    except ImportError as exc:
        return False, f"depyf: torch._dynamo.convert_frame is not importable: {exc}"
    if not hasattr(convert_frame, "register_bytecode_hook"):
        return False, "depyf: dynamo has no register_bytecode_hook on this torch (needs >= 2.2)"
    try:
        import depyf  # noqa: F401 (importable is the capability)
    except ImportError:
        return False, "depyf: the depyf package is not installed in this environment"
    return True, "depyf dump of transformed bytecode and compiled graphs"


def detect() -> dict[str, Capability]:
    """Every capability the probe knows, detected on the running torch."""
    return {
        "debug_logs": debug_logs(),
        "graph_breaks_log": graph_breaks_log(),
        "recompiles_log": recompiles_log(),
        "dynamo_counters": dynamo_counters(),
        "structured_trace": structured_trace(),
        "depyf": depyf_hook(),
        "instruction_count": instruction_count(),
    }


def instruction_count() -> Capability:
    """How ``--count-instructions`` would count the compile here (``instruction_method``)."""
    how, detail = instruction_method()
    return how is not None, detail


def log_keywords(wanted: dict[str, Any]) -> dict[str, Any]:
    """``wanted`` reduced to the set_logs keywords this torch accepts."""
    accepted = set_logs_keywords()
    return {key: value for key, value in wanted.items() if key in accepted}


def unwrap_backend_error(exc: BaseException) -> BaseException:
    """The exception a backend raised, out of dynamo's BackendCompilerFailed wrapper."""
    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, BaseException):
        return inner
    return exc


def is_dynamo_tracing_error(exc: BaseException) -> bool:
    """True for errors raised while dynamo traced user code, before any backend ran.

    Matched by class name along the MRO: these classes moved between modules
    across torch releases, but kept their names.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "BackendCompilerFailed" in names:
        return False
    return bool(
        names
        & {
            "Unsupported",
            "UserError",
            "UncapturedHigherOrderOpError",
            "TorchRuntimeError",
            "GuardOnDataDependentSymNode",
            "DataDependentOutputException",
        }
    )


def is_recompile_limit_error(exc: BaseException) -> bool:
    """dynamo refused to compile again (FailOnRecompileLimitHit, 2.6+; under fullgraph it raises)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"FailOnRecompileLimitHit", "FailOnCacheLimitHit", "RecompileLimitExceeded"})


# Caches that would hand the diagnosis a finished graph: inductor's FX graph cache (2.2+) and
# AOTAutograd's cache (2.5+). Without them dynamo, AOT and inductor's lowering all run and log;
# compiled kernels may still come from the kernel cache, which holds no diagnostics.
GRAPH_CACHES = (("torch._inductor.config", "fx_graph_cache"), ("torch._functorch.config", "enable_autograd_cache"))


def _graph_cache_flags() -> Iterator[tuple[Any, str]]:
    """(config module, flag) of each graph cache whose config module this torch has."""
    import importlib

    for module_name, flag in GRAPH_CACHES:
        try:
            yield importlib.import_module(module_name), flag
        except ImportError:
            continue


def graph_caches_on() -> list[str]:
    """The graph caches this torch has and keeps on (inductor's FX graph cache, AOTAutograd's cache)."""
    return [flag for module, flag in _graph_cache_flags() if getattr(module, flag, None) is True]


def recompute_compiled_graphs() -> None:
    """Turn the graph caches off where this torch has them."""
    for module, flag in _graph_cache_flags():
        if isinstance(getattr(module, flag, None), bool):
            setattr(module, flag, False)


def compilation_metrics() -> list[dict[str, Any]] | None:
    """Every field of torch's per-frame CompilationMetrics recorded in this process so far (a
    dataclass of about 100 fields on recent builds, guard latency among them), as JSON values;
    None where this torch keeps no such list (before 2.3)."""
    import dataclasses
    import json

    try:
        from torch._dynamo import utils

        getter = getattr(utils, "get_compilation_metrics", None)
        found = list(getter()) if getter is not None else None
    except Exception:  # a private API: its absence or change is "not available", never a failed pass
        return None
    if found is None:
        return None
    frames = []
    for metrics in found:
        try:
            is_instance = dataclasses.is_dataclass(metrics) and not isinstance(metrics, type)
            fields = dataclasses.asdict(metrics) if is_instance else dict(vars(metrics))
            frames.append(json.loads(json.dumps(fields, default=str)))
        except Exception:  # a field this torch fills with something JSON cannot hold: that frame is left out
            continue
    return frames


def instruction_counter() -> tuple[bool, str]:
    """Whether the CPU's instruction counter can be read here, and what says so."""
    try:
        import torch

        counter = torch._C._instruction_counter
    except (ImportError, AttributeError):
        return False, "this torch has no torch._C._instruction_counter (torch < 2.5)"
    try:
        handle = counter.start()
    except Exception as exc:  # a torch that raises where it cannot open the event
        return False, f"the instruction counter cannot start: {exc}"
    if handle < 0:
        return False, "the host gives no hardware instruction counter (perf_event_open refused; a VM or a container)"
    counter.end(handle)
    return True, "the CPU's counter through perf events"


def callgrind() -> tuple[bool, str]:
    """Whether this torch can toggle callgrind's collection and valgrind is installed."""
    try:
        import torch

        supported = torch._C._valgrind_supported_platform()
    except (ImportError, AttributeError):
        return False, "this torch has no torch._C._valgrind_toggle"
    if not supported:
        return False, "this torch was built without valgrind's client requests"
    found = shutil.which("valgrind")
    if found is None:
        return False, "valgrind is not installed (Debian and Ubuntu: apt-get install valgrind)"
    return True, f"callgrind ({found}), collection toggled around the compile"


def instruction_method() -> tuple[Optional[str], str]:
    """The method the count pass (probe/instructions.py) uses on this host: the CPU's counter, else
    callgrind; None where neither works, and why each does not."""
    reasons = []
    for name, probe in (("perf", instruction_counter), ("callgrind", callgrind)):
        ok, detail = probe()
        if ok:
            return name, detail
        reasons.append(f"{name}: {detail}")
    return None, "; ".join(reasons)
