"""The diagnosis pass: eager reference, oracle check, then one compile with every collector on.

Imports: standard library, torch, transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from diag.probe import capture, compat, counters, keys, llama, parsers, records, statuses
from diag.probe.findings import counted_breaks_note, emit_findings, graph_breaks_from_counters
from diag.probe.record_types import CorrectnessRecord, Found, ResultRecord
from diag.probe.records import Writer
from diag.probe.session import Workload, error_location, exception_info

# Relative logit tolerance: a difference beyond this fraction of the largest
# eager logit, or a token flip where eager's top-2 margin exceeds it, is a mismatch.
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


def compare(eager, compiled, relative_tolerance: float) -> CorrectnessRecord:
    """Tokens and logits of the compiled run against eager, up to the first token that differs."""
    import torch

    eager_tokens, compiled_tokens = torch.cat(eager.tokens, 1), torch.cat(compiled.tokens, 1)
    eager_logits, compiled_logits = torch.stack(eager.logits, 1), torch.stack(compiled.logits, 1)
    scale = max(1.0, float(eager_logits.abs().max()))
    tolerance = relative_tolerance * scale
    differs = (eager_tokens != compiled_tokens).any(dim=0)
    first = int(differs.nonzero()[0]) if bool(differs.any()) else eager_tokens.shape[1]
    # Logits after the first differing token follow different prefixes: not comparable.
    compared = slice(0, first + 1) if first < eager_tokens.shape[1] else slice(None)
    max_abs_diff = float((eager_logits[:, compared] - compiled_logits[:, compared]).abs().max())
    result: CorrectnessRecord = {
        "tokens_equal": first == eager_tokens.shape[1],
        "max_abs_diff": max_abs_diff,
        "logit_tolerance": tolerance,
        "first_differing_step": None,
        "eager_margin": None,
    }
    if not result["tokens_equal"]:
        top2 = eager_logits[:, first].topk(2, dim=-1).values
        rows = eager_tokens[:, first] != compiled_tokens[:, first]
        margin = float((top2[:, 0] - top2[:, 1])[rows].min())
        result["first_differing_step"], result["eager_margin"] = first, margin
    # A flip where eager's top two nearly tie is reduction-order noise, not a compiler bug.
    result["within_tolerance"] = max_abs_diff <= tolerance and (
        result["tokens_equal"] or (result["eager_margin"] or 0.0) <= tolerance
    )
    return result


def classify(
    *,
    fullgraph: bool,
    error: Optional[BaseException],
    graph_count: Optional[int],
    graph_breaks: int,
    correctness: Optional[Mapping[str, Any]],
) -> str:
    """The one status of a compiled run that did not crash or time out (see DESIGN's vocabulary)."""
    if error is not None:
        if fullgraph and (compat.is_dynamo_tracing_error(error) or compat.is_recompile_limit_error(error)):
            return statuses.FULLGRAPH_ERROR
        return statuses.COMPILE_ERROR
    if graph_count == 0:
        return statuses.EAGER_FALLBACK
    if correctness is not None and not correctness["within_tolerance"]:
        return statuses.MISMATCH
    if graph_breaks > 0:
        return statuses.GRAPH_BREAK
    return statuses.PASS


def reuse_decision(
    timing_results: Optional[Path], allowed: bool, backend: str, caches_on: Optional[list[str]] = None
) -> tuple[bool, str]:
    """Whether this pass may take the timing pass's compiled graphs from inductor's and AOTAutograd's
    caches instead of lowering them again, and why.

    Dynamo always traces again, with every log on: graph breaks, recompiles, guards and the errors
    dynamo swallows are all seen. What a cache hit skips is the lowering, and with it what inductor
    and AOTAutograd log there. So the graphs are reused only where the timing pass lowered every
    graph itself (no cache served it) and torch showed nothing while it compiled: no record at
    WARNING or above, no record with an exception. An exception torch logs only at DEBUG inside a
    lowering that succeeded is then not seen; ``--no-reuse-compiled`` lowers again.
    """
    if backend != "inductor":
        return False, f"backend {backend}: no inductor lowering, nothing cached to reuse"
    if not allowed:
        return False, "--no-reuse-compiled: every graph lowered again with its logs"
    if caches_on is not None and "fx_graph_cache" not in caches_on:
        return False, "this torch keeps inductor's FX graph cache off: every graph lowered again with its logs"
    if timing_results is None:
        return False, "no timing pass ran before this one: every graph lowered with its logs"
    found = records.read(timing_results)[0]
    compiled = next((r for r in Found(found).all(records.TIMING) if r.get("mode") == "compiled"), None)
    if compiled is None:
        return False, "the timing pass did not finish a compiled generation: every graph lowered again with its logs"
    notices, hits = compiled.get("compile_notices"), compiled.get("graph_cache_hits")
    if notices is None or hits is None:
        return False, "the timing pass could not tell what torch logged or what its caches served"
    if hits:
        return (
            False,
            f"the timing pass's compile was served {hits} graph(s) from a cache, so it did not lower "
            f"them itself: every graph lowered again with its logs",
        )
    if notices:
        said = ", ".join(
            f"{n['level']} {n['logger']}" + (f" ({n['exception']})" if n.get("exception") else "")
            for n in notices
            if "logger" in n
        )
        return False, f"torch logged while the timing pass compiled ({said}): every graph lowered again with its logs"
    caches = " and ".join(
        {"fx_graph_cache": "inductor's FX graph cache", "enable_autograd_cache": "AOTAutograd's cache"}[name]
        for name in (caches_on or [])
    )
    return True, (
        f"the timing pass's compiled graphs were reused from {caches or 'the graph caches'} (it "
        "lowered every graph itself and torch logged no warning or exception meanwhile): dynamo traced "
        "again with every log on, but the lowering's DEBUG records are not in this log; "
        "--no-reuse-compiled lowers again"
    )


def run(workload: Workload, results: Writer, artifacts: Path, timing_results: Optional[Path] = None) -> None:
    """The diagnosis: eager and its reference (stop on a broken case), one compile with every
    collector on, then the findings and the one result record."""
    eager = eager_pass(workload, results)
    if eager is None:
        return
    capabilities, (collector, compiled, error) = instrumented_compile(workload, results, artifacts, timing_results)
    write_verdict(workload, results, capabilities, collector, eager, compiled, error)
    if compiled is not None and error is None:
        # after the verdict is written: what the second call does cannot change the first's record
        second_call(workload, artifacts, results)


def eager_pass(workload: Workload, results: Writer):
    """The case's eager generation, checked against its reference; None (with the result written)
    where the case itself is broken."""
    spec = workload.spec
    try:
        eager = workload.eager()
        reference = (
            None
            if eager.own
            else llama.reference_tokens(
                workload.model, workload.input_ids, workload.attention_mask, spec.config.new_tokens
            )
        )
    except Exception as exc:
        info = exception_info(exc)
        write_case_notes(workload, results)
        results.write(
            records.RESULT, status=statuses.EAGER_ERROR, error_location=error_location(exc, workload.case.path), **info
        )
        return None
    import torch

    write_case_notes(workload, results)
    if eager.own:
        # The case's own model or prompt: its eager pass is the reference. Agreement with
        # transformers' generate is recorded where the model has one, never required.
        reference, detail = own_reference(eager, spec.config.new_tokens)
        oracle_equal = None if reference is None else bool(torch.equal(torch.cat(eager.tokens, 1), reference.cpu()))
        results.write(records.ORACLE, oracle_equal=oracle_equal, required=False, detail=detail)
        return eager
    assert reference is not None  # the built-in model's reference is transformers' generate, always made
    oracle_equal = bool(torch.equal(torch.cat(eager.tokens, 1), reference.cpu()))
    results.write(records.ORACLE, oracle_equal=oracle_equal, required=True, detail="transformers generate")
    if not oracle_equal:
        results.write(
            records.RESULT,
            status=statuses.EAGER_ERROR,
            error_type="OracleMismatch",
            error_message=f"eager tokens of case {spec.case} differ from transformers generate: "
            f"case {torch.cat(eager.tokens, 1).tolist()}, "
            f"transformers {reference.cpu().tolist()}",
        )
        return None
    return eager


def write_case_notes(workload: Workload, results: Writer) -> None:
    for text in workload.notes:
        results.write(records.CASE_NOTE, text=text)


def instrumented_compile(workload: Workload, results: Writer, artifacts: Path, timing_results: Optional[Path]):
    """The compile with every collector on, after the notes on what is collected: the capabilities,
    and (collector, compiled generation, error)."""
    config = workload.spec.config
    reuse, why = reuse_decision(timing_results, config.reuse_compiled, config.backend, compat.graph_caches_on())
    if not reuse:
        compat.recompute_compiled_graphs()
    capabilities = compat.detect()
    results.write(
        records.CAPABILITIES,
        capabilities={name: {"available": ok, "detail": detail} for name, (ok, detail) in capabilities.items()},
    )
    results.write(records.COLLECTOR_NOTE, name="lowering_logs", available=not reuse, detail=why)
    use_depyf = capabilities["depyf"][0] and config.depyf
    if capabilities["depyf"][0] and not config.depyf:
        results.write(
            records.COLLECTOR_NOTE,
            name="depyf",
            available=False,
            detail="installed, not asked for (diag run --depyf dumps dynamo's transformed bytecode, decompiled)",
        )
    collector, compiled, error = compile_once(workload, artifacts, use_depyf)
    if use_depyf and error is not None and _raised_in_depyf(error):
        # depyf's hook broke the compile: that says nothing about torch. Compile again without it.
        results.write(
            records.COLLECTOR_NOTE,
            name="depyf",
            available=False,
            detail=f"depyf raised during the compile and was turned off: {type(error).__name__}: {error}",
        )
        collector, compiled, error = compile_once(workload, artifacts, False)
    if collector.interference:
        lost = [detail for kept, detail in collector.interference if not kept]
        results.write(
            records.COLLECTOR_NOTE,
            name="debug_logs",
            available=not lost,
            detail="; ".join((lost or [detail for _, detail in collector.interference])[:3]),
        )
    return capabilities, (collector, compiled, error)


def write_verdict(workload: Workload, results: Writer, capabilities, collector, eager, compiled, error) -> None:
    """The findings of the compile, its correctness against eager, and the one result record."""
    config = workload.spec.config
    counted = counters.counter_snapshot()
    fullgraph = bool(config.fullgraph)
    breaks_from_counters = [] if fullgraph else graph_breaks_from_counters(collector, counted)
    if breaks_from_counters:
        results.write(records.COLLECTOR_NOTE, **counted_breaks_note(capabilities["graph_breaks_log"][0]))
    raised = _error_fields(error, workload, collector, fullgraph) if error is not None else {}
    breaks = emit_findings(
        results, collector, breaks_from_counters, counted, failed_whole=fullgraph and error is not None, error=raised
    )
    stats = counted.get("stats", {})
    graph_count = stats.get("unique_graphs", 0) if capabilities["dynamo_counters"][0] else None
    ops_captured = stats.get("calls_captured", 0) if capabilities["dynamo_counters"][0] else None
    correctness = None
    if compiled is not None:
        correctness = compare(eager, compiled, TOLERANCE.get(config.dtype, 1e-4))
        results.write(records.CORRECTNESS, **correctness)
    graph_breaks = statuses.finding_total(breaks)
    status = classify(
        fullgraph=fullgraph, error=error, graph_count=graph_count, graph_breaks=graph_breaks, correctness=correctness
    )
    summary: ResultRecord = {
        "status": status,
        "graph_count": graph_count,
        "graph_break_count": graph_breaks,
        "ops_captured": ops_captured,
        "counters": counted,
        "log_records": collector.record_count,
        "collector_errors": collector.parser_errors,
        **raised,
    }
    metrics = compat.compilation_metrics()
    if metrics is not None:
        results.write(records.COMPILE_METRICS, frames=metrics)
    results.write(records.RESULT, **summary)


def _error_fields(error: BaseException, workload: Workload, collector, fullgraph: bool) -> ResultRecord:
    """The result's fields of the exception the compiled generation raised."""
    inner = compat.unwrap_backend_error(error)
    fields = exception_info(error)
    fields["error_type"] = type(inner).__name__
    fields["error_location"] = error_location(error, workload.case.path)
    fields["error_key"] = keys.stable_key(type(inner).__name__, str(inner), fields["error_location"])
    if fullgraph and parsers.limit_failure(type(inner).__name__):
        fields["error_message"] = _with_recompile_limit(fields.get("error_message") or "", collector)
    return fields


def _with_recompile_limit(message: str, collector) -> str:
    """A fullgraph failure at the recompile limit ("Hard failure due to fullgraph=True") with the
    limit and the function torch refused to compile again, which only its warning names."""
    limit = next((h for h in collector.of_kind("hidden_error") if h["source"] == parsers.RECOMPILE_LIMIT), None)
    return message if limit is None else f"{message}: {limit['message'].split(':')[0]}"


def own_reference(eager, new_tokens: int):
    """transformers' greedy ``generate`` on the case's own model and prompt, and what was compared;
    (None, why not) where the model has no ``generate`` or it fails."""
    model = eager.model
    if not callable(getattr(model, "generate", None)) or not hasattr(model, "generation_config"):
        return None, "own model without transformers' generate: the case's eager pass is the reference"
    try:
        return llama.reference_tokens(
            model, eager.input_ids, eager.attention_mask, new_tokens
        ), "transformers generate on the case's own model and prompt (recorded, not required)"
    except Exception as exc:  # the case's model is the user's: its generate may not take these arguments
        return None, f"transformers generate failed on the case's model ({type(exc).__name__}: {str(exc)[:200]})"


def compile_once(workload: Workload, artifacts: Path, use_depyf: bool):
    """One compiled generation with the log capture (and depyf's dump) installed."""
    import contextlib

    import torch

    collector = capture.LogCapture(artifacts / "torch_debug.log", lambda: workload.current_step)
    counters.clear_counters()
    torch._dynamo.reset()
    error: Optional[BaseException] = None
    compiled = None
    dump: contextlib.AbstractContextManager = contextlib.nullcontext()
    if use_depyf:
        import depyf

        dump = depyf.prepare_debug(str(artifacts / "depyf"))
    collector.install()
    workload.step_listeners.append(collector.keep)
    try:
        with dump:
            compiled = workload.compiled()
    except Exception as exc:
        error = exc
    finally:
        workload.step_listeners.remove(collector.keep)
        collector.uninstall()
    return collector, compiled, error


def second_call(workload: Workload, artifacts: Path, results: Writer) -> None:
    """One more compiled generation, right after the first, its recompiles counted apart: what
    recompiles here would recompile at every generate call of a served model (a guard on an object
    made anew per call, a counter, a Python value), however clean the first call looked."""
    collector = capture.LogCapture(artifacts / "torch_debug.second_call.log", lambda: workload.current_step)
    collector.install()
    # the structured trace holds the diagnosed call alone, as its frames and recompiles do (torch 2.3
    # and 2.4 would start a second trace file here, when logging is set up again)
    capture.quiet_structured_trace()
    workload.step_listeners.append(collector.keep)
    failed = None
    try:
        workload.compiled()
    except Exception as exc:  # the second call's own failure is recorded beside it, not as the run's
        failed = f"{type(exc).__name__}: {str(exc)[:500]}"
    finally:
        workload.step_listeners.remove(collector.keep)
        collector.uninstall()
    found = collector.of_kind("recompile")
    results.write(
        records.SECOND_CALL,
        recompiles=statuses.finding_total(found),
        reasons=[item["reason"][:300] for item in found[:5]],
        error=failed,
    )


def _raised_in_depyf(error: BaseException) -> bool:
    import traceback

    return any("/depyf/" in frame.filename for frame in traceback.extract_tb(error.__traceback__))
