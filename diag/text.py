"""The terminal text of every command: one-line summaries and the full record of a run, comparisons,
the gate's verdict and a bisect's answer. Commands print what these return."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from diag import figure, guards
from diag import row as rows
from diag.contract import ARG_MISMATCH, BY_NAME
from diag.noise import HALF_WIDTH, NOT_COMPARED, SPREAD
from diag.run import trace
from diag.store.typed import GraphBreakRow, StoredRun, column
from diag.verdicts import why

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Characters that reorder the text around them (right-to-left overrides, embeddings, isolates and
# marks): in a stored case name they would reverse a whole line of a terminal or a page's nav bar.
BIDI = {code: f"<U+{code:04X}>" for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def safe(value: Any) -> str:
    """Text that cannot drive a terminal or reorder a page: control characters (ANSI escapes, NUL)
    shown as escapes, bidirectional controls as their code points."""
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable():  # nothing to show as an escape (most text, quickly)
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text).translate(BIDI)


def number(value: Optional[float], fmt: str, unit: str) -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def config_text(run: StoredRun) -> str:
    """The run's case source (when not built in) and config, batch size the only size shown."""
    return safe(rows.describe(run, sizes=("batch_size",)))


# The run line's columns (``summary_line``), printed once above the lines of a listing
RUN_HEADER = f"{'run':<7}{'case':<16}{'config':<26}{'status':<16}{'b r h':<12}{'compile':<8}{'eager/comp ms':<14}timing"
_SHORT = (("no-fullgraph", "no-fg"), ("fullgraph", "fg"), ("bfloat16", "bf16"), ("float16", "f16"), ("float32", "f32"))


def _fit(text: str, width: int) -> str:
    """``text`` in a column of ``width``: cut with an ellipsis where longer, a space kept after it."""
    return text if len(text) < width else text[: width - 2] + "…"


def _sig(value: Optional[float]) -> str:
    """A measured figure in the three significant digits a timing carries: 0.704, 7.73, 58.2, 1234."""
    if value is None:
        return "-"
    size = abs(value)
    decimals = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 else None
    return f"{value:#.3g}" if decimals is None else f"{value:.{decimals}f}"


def _short_config(run: StoredRun) -> str:
    """The config in the run line's words: ``aot_eager no-fg cpu f32 b1`` (where the case file came
    from is in --verbose and show)."""
    said = rows.config_label(run, ("batch_size",))
    for long, short in _SHORT:
        said = said.replace(long, short)
    return safe(said)


def _seconds(value: Optional[float]) -> str:
    """A small cost in seconds: ``under 0.01 s`` where rounding would print 0.00."""
    return "-" if value is None else "under 0.01 s" if value < 0.01 else f"{_sig(value)} s"


def trust(run: Mapping[str, Any]) -> str:
    """How far a run's timings can be trusted, in a word or two: steady, noisy (its latency), compile
    waited (for a CPU), both, unjudged (a latency measured with no verdict), or - where it was not
    timed. A compile not judged (on a GPU, or without its CPU time) is said in show and --json."""
    said = (["noisy"] if figure.timing_noisy(run) else []) + (["compile waited"] if figure.compile_waited(run) else [])
    if said:
        return "; ".join(said)
    latency = {figure.latency(run, mode).trust for mode in figure.LATENCY_MODES} - {figure.UNMEASURED}
    return "-" if not latency else figure.STEADY if latency == {figure.STEADY} else figure.UNJUDGED


def summary_line(run: StoredRun, verbose: bool = False) -> str:
    """A run in 120 columns (``RUN_HEADER``'s): case, config, status, graph breaks, recompiles and hidden
    errors, compile seconds, eager and compiled ms per token, and how far to trust them; ``verbose``:
    every figure unrounded with the whole reason a timing is not compared, as before the columns."""
    if not verbose:
        found = (run.get("graph_break_count"), run.get("recompile_count"), run.get("hidden_error_count"))
        counts = "-" if all(c is None for c in found) else "{}b {}r {}h".format(*(number(c, "d", "") for c in found))
        timed = (run.get("eager_ms_per_token"), run.get("compiled_ms_per_token"))
        latency = "-" if timed == (None, None) else f"{_sig(timed[0])}/{_sig(timed[1])}"
        compile_s = run.get("compile_s")
        return (
            f"{'#' + str(run['id']):<7}{_fit(safe(run['case']), 16):<16}{_fit(_short_config(run), 26):<26}"
            f"{safe(run['status']):<16}{_fit(counts, 12):<12}{_sig(compile_s) + ('' if compile_s is None else 's'):<8}"
            f"{_fit(latency, 14):<14}{trust(run)}"
        )
    return (
        f"#{run['id']:<5} {safe(run['case']):<18} {config_text(run):<40} {safe(run['status']):<15} "
        f"breaks {number(run.get('graph_break_count'), 'd', ''):>3}  "
        f"recompiles {number(run.get('recompile_count'), 'd', ''):>3}  "
        f"hidden {number(run.get('hidden_error_count'), 'd', ''):>3}  "
        f"compile {number(run.get('compile_s'), '.2f', 's'):>7}  "
        f"eager {number(run.get('eager_ms_per_token'), '.2f', ''):>7} / compiled "
        f"{number(run.get('compiled_ms_per_token'), '.2f', ''):>7} ms/token"
        + "".join(f"  {safe(why)}, {NOT_COMPARED}" for why in _caveats(run))
        + (f"  {_instructions(count)} instr" if (count := run.get("compile_instructions")) else "")
    )


def _caveats(run: Mapping[str, Any]) -> list[str]:
    """Why the run's latency, and its compile time, are not compared: each reason once."""
    flagged = [f.why for f in figure.of_run(run).values() if f.flagged and f.why]
    return list(dict.fromkeys(flagged))


def _instructions(count: int) -> str:
    """``1.234G``: an instruction count in three figures."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.3f}{unit}"
    return str(count)


def _latency(run: StoredRun, mode: str) -> str:
    """``0.471 ms/token (95% 0.468-0.474, 24 samples)``, the interval and steps where the run has them."""
    found = figure.latency(run, mode)
    said = found.interval()
    return number(found.value, ".3f", " ms/token") + (f" ({said})" if said and found.value is not None else "")


def _section(title: str) -> list[str]:
    return ["", title, "-" * len(title)]


def show(run: StoredRun) -> str:
    """Everything recorded for one run, for ``diag show``."""
    parts = (_heading, _build, _counts, _correctness, _timings, _findings, _frames_and_more)
    return "\n".join(line for part in parts for line in part(run))


def _heading(run: StoredRun) -> list[str]:
    """The run, its status and error, the config fields a row does not show."""
    status = BY_NAME.get(run["status"] or "")
    lines = [
        f"run #{run['id']}  {safe(run['case'])}  {config_text(run)}",
        f"status: {safe(run['status'])}" + (f" ({status.meaning})" if status else ""),
    ]
    if run.get("error_type"):
        lines.append(f"error: {safe(run['error_type'])}: {safe(_first_line(run.get('error_message')))}")
        if run.get("error_location"):
            lines.append(f"at: {safe(run['error_location'])}")
    if run.get("case_note"):
        lines.append(f"the case says: {safe(run['case_note'])}")
    config = run.get("config") or {}
    if config:
        said = [f"{name} {config[name]}" for name in ("seed", "threads", "repeats", "timing_seconds") if name in config]
        lines.append("config: " + ", ".join(said))
    return lines


def _build(run: StoredRun) -> list[str]:
    """The build and the environment the run had."""
    lines: list[str] = []
    lines += _section("build")
    for field in (
        "torch_version",
        "build_git_version",
        "build_nightly_date",
        "build_variant",
        "build_wheel_url",
        "build_wheel_origin",
        "build_wheel_sha256",
        "transformers_version",
        "depyf_version",
        "python",
        "platform",
        "device_name",
        "host",
        "started_at",
        "duration_s",
        "tool_version",
    ):
        value = run.get(field)
        if value is not None:
            lines.append(f"  {field}: {_sig(value) + ' s' if isinstance(value, float) else safe(value)}")
    return lines


def _counts(run: StoredRun) -> list[str]:
    """Graphs, breaks, recompiles (prefill and decode apart) and hidden errors."""
    lines: list[str] = []
    lines += _section("counts")
    for field in ("graph_count", "ops_captured", "graph_break_count", "recompile_count", "hidden_error_count"):
        lines.append(f"  {field}: {number(column(run, field), 'd', '')}")
    if run.get("decode_recompiles") is not None:
        decode_steps = max(0, (run.get("new_tokens") or 1) - 1)
        lines.append(
            f"  of the recompiles: prefill {run['prefill_recompiles']}, decode {run['decode_recompiles']} "
            f"on {run['decode_recompile_steps']} of {decode_steps} decode steps"
        )
    if run.get("second_call_recompiles") is not None:
        error = f", and it failed: {safe(run['second_call_error'])}" if run.get("second_call_error") else ""
        lines.append(f"  a second generate call right after: {run['second_call_recompiles']} recompiles{error}")
    if run.get("code_digest") or run.get("code_note"):
        lines.append(
            f"  compiled code: {safe(run.get('code_digest') or 'not known')} ({safe(run.get('code_note') or '')})"
        )
    return lines


def _correctness(run: StoredRun) -> list[str]:
    """Compiled against eager, and eager against the reference."""
    lines: list[str] = []
    lines += _section("correctness (compiled vs eager)")
    for field in ("oracle_equal", "tokens_equal", "max_abs_diff", "first_differing_step", "eager_margin"):
        value = run.get(field)
        lines.append(f"  {field}: {_sig(value) if isinstance(value, float) else '-' if value is None else safe(value)}")
    return lines


def _timings(run: StoredRun) -> list[str]:
    """Compile time, latency, memory, what the passes cost."""
    lines: list[str] = []
    lines += _section("timings")
    lines.append(
        f"  compile: {number(run.get('compile_s'), '.3f', ' s')} cold"
        + (f" ({run['compile_cpu_s']:.3f} s CPU)" if run.get("compile_cpu_s") is not None else "")
        + (
            f" (for {run['compile_stall_s']:.1f} s of it some task of the machine waited for a CPU: counted for"
            " every task, so it may add up to more than the compile's own time)"
            if run.get("compile_stall_s")
            else ""
        )
        + f", {number(run.get('compile_warm_s'), '.3f', ' s')} warm; guard check per decode call "
        f"{number(run.get('guard_latency_us'), '.0f', ' us')}"
    )
    compiled = figure.compile_time(run)
    if compiled.flagged:
        lines.append(f"  {safe(compiled.why)}: no compile-time verdict is drawn from this run")
    elif compiled.trust == figure.UNJUDGED:
        lines.append(f"  compile time unjudged: {safe(compiled.why)}")
    if run.get("compile_instructions") is not None:
        lines.append(
            f"  compile instructions: {run['compile_instructions']:,} ({safe(run.get('instructions_method'))})"
        )
    elif run.get("instructions_note"):
        lines.append(f"  compile instructions: none counted ({safe(run['instructions_note'])})")
    lines.append(f"  eager: {_latency(run, 'eager')}   compiled: {_latency(run, 'compiled')}")
    if (between := run.get("compiled_between_ms")) is not None:
        lines.append(
            f"  between steps (compiled, outside the compiled calls): {between:.3f} ms a step"
            + _share(between, run.get("compiled_ms_per_token"))
        )
    timed = figure.latency(run, "compiled")
    timed = timed if timed.value is not None else figure.latency(run, "eager")
    if timed.flagged:
        lines.append(f"  {safe(timed.why)}: no latency verdict is drawn from this run")
    elif timed.trust == figure.STEADY:
        lines.append(
            f"  timing steady: each median's interval within +-{HALF_WIDTH:.0%}, steps in one cluster, "
            f"steps and host reference spread at most {SPREAD:.0f}x"
        )
    elif timed.trust == figure.UNJUDGED:
        lines.append(f"  timing unjudged: {safe(timed.why)}")
    lines.append(
        f"  peak memory ({safe(run.get('memory_kind'))}): eager {number(run.get('peak_mem_eager_mb'), '.1f', ' MB')}"
        f", compiled {number(run.get('peak_mem_compiled_mb'), '.1f', ' MB')}"
    )
    lines.append(
        f"  what it cost: timing pass {number(run.get('timing_pass_s'), '.1f', ' s')}, diagnosis pass "
        f"{number(run.get('diagnosis_pass_s'), '.1f', ' s')}, "
        f"orchestrator {_seconds(run.get('orchestrator_s'))}"
        f", torch's structured logging {_seconds(run.get('logging_overhead_s'))}"
    )
    if run.get("timing_error"):
        lines.append(f"  timing error: {safe(_first_line(run['timing_error']))}")
    return lines + _profile(run)


def _profile(run: StoredRun) -> list[str]:
    """Where a profiled run's compiled decode step went, by op group, its attention kernels, and the
    fused kernels torch refused with its reasons."""
    groups = why.groups_of_run(run)
    if not groups:
        return []
    profile = why.profile_of(run)
    unit = "device" if profile.get("device_time") else "CPU"
    lines = [
        f"  compiled step by op group ({unit} ms per token, median of {len(profile['ops_ms'])} profiled generations):"
    ]
    lines.append("    " + "; ".join(f"{safe(name)} {ms:.3f}" for name, ms in groups))
    lines.append(f"    attention kernels: {safe(why.kernel_text(profile.get('kernels') or {}))}")
    lines += [f"    {safe(line)}" for line in why.refusal_lines(profile.get("refused") or {})]
    return lines


def _share(part: float, whole: Optional[float]) -> str:
    return f" ({part / whole:.0%} of the step)" if whole else ""


def _findings(run: StoredRun) -> list[str]:
    """Every graph break, recompile and hidden error, with its key."""
    lines: list[str] = []
    lines += _section(f"graph breaks ({number(run.get('graph_break_count'), 'd', '')})")
    lines += [] if run["graph_breaks"] else ["  none"]
    for gb in run["graph_breaks"]:
        lines.append(
            f"  [{safe(gb['key'])}] x{gb['count']} at {safe(place(gb))}{_resumed(gb)}{_steps(gb)}  "
            f"{safe(_first_line(gb['gb_type'] or gb['reason']))}"
        )
    lines += _section(f"recompiles ({number(run.get('recompile_count'), 'd', '')})")
    growing = guards.grows_with_the_step(run["recompiles"])
    lines += [] if run["recompiles"] else ["  none"]
    for rc in run["recompiles"]:
        at = step_span(rc["decode_step"]) or "step unknown"
        lines.append(f"  {at}: {safe(rc['function'])} — {safe(_first_line(rc['reason']))}")
        if rc.get("guard_subject"):
            got = f" -> {safe(rc['guard_actual'])}" if rc.get("guard_actual") is not None else ""
            grows = "  (grows with the decode step)" if (rc["guard_subject"], rc["guard_property"]) in growing else ""
            lines.append(
                f"    changed: {safe(rc['guard_subject'])} {safe(rc['guard_property'])}: "
                f"expected {safe(rc['guard_expected'])}{got}{grows}"
            )
    lines += _section(f"hidden errors ({number(run.get('hidden_error_count'), 'd', '')})")
    lines += [] if run["hidden_errors"] else ["  none"]
    for he in run["hidden_errors"]:
        lines.append(
            f"  [{safe(he['source'])}] {safe(he['exc_type'])}: {safe(_first_line(he['message']))} "
            f"(at {safe(place(he))}{_steps(he)}, logger {safe(he['logger'])}, x{he['count']})"
        )
    return lines


def _steps(row: Mapping[str, Any]) -> str:
    said = step_span(row.get("decode_step"), row.get("last_decode_step"))
    return f" {said}" if said else ""


def step_span(first: Optional[int], last: Optional[int] = None) -> str:
    """The steps a finding happened at: ``prefill``, ``step 2``, ``steps 0-3``, ``prefill and steps 0-3``;
    empty where the step is not known. A step below 0 is the prefill (the probe's records.PREFILL)."""
    if first is None:
        return ""
    last = first if last is None else last
    if last < 0:
        return "prefill"
    decode = f"step {last}" if max(first, 0) == last else f"steps {max(first, 0)}-{last}"
    return f"prefill and {decode}" if first < 0 else decode


def place(row: Mapping[str, Any]) -> str:
    """Where a finding happened, or that diag could not say, and why: never another row's place."""
    if row.get("location"):
        return str(row["location"])
    if ARG_MISMATCH in (row.get("message") or row.get("reason") or ""):
        return "unknown (torch named only the inlined function's file, and no traced line or graph end named the call)"
    return "unknown (torch's records named no line)"


def _frames_and_more(run: StoredRun) -> list[str]:
    """The compiled frames, the capabilities, the probe's stderr tail, the run directory."""
    lines: list[str] = []
    count, why = trace.frame_count(run)
    lines += _section(f"compiled frames ({count})" if count is not None else f"compiled frames: unknown ({safe(why)})")
    lines += [] if run.get("frames") else ["  none"] if count is not None else ["  not counted"]
    for frame in run.get("frames", []):
        fail = f"  FAIL {safe(frame['fail_type'])}" if frame.get("fail_type") else ""
        lines.append(
            f"  {safe(frame['compile_id'])} {safe(frame['co_name'])}: cache {frame['cache_size']}, "
            f"guards {frame['guard_count']}, ops {frame['graph_op_count']}, inputs {frame['graph_input_count']}, "
            f"{number(frame.get('entire_frame_compile_time_s'), '.3f', ' s')}{fail}"
        )
    lines += _section("capabilities")
    lines += [] if run.get("capabilities") else ["  none recorded"]
    for name, cap in (run.get("capabilities") or {}).items():
        lines.append(f"  {name}: {'yes' if cap['available'] else 'NO'} — {safe(cap['detail'])}")
    if tail := run.get("stderr_tail"):
        lines += _section("probe stderr (tail)")
        lines += ["  " + safe(line) for line in tail.splitlines()[-20:]]
    lines += _section("artifacts")
    lines.append(f"  {safe(run.get('artifacts_dir') or 'no run directory recorded')}")
    return lines


def statuses_table() -> str:
    """The status vocabulary, one status a line, for ``diag statuses``."""
    width = max(len(name) for name in BY_NAME)
    return "\n".join(
        f"{status.name:<{width}}  {'works' if status.works else 'fails'}  {status.meaning}"
        for status in BY_NAME.values()
    )


def _resumed(gb: GraphBreakRow) -> str:
    """How torch went on after a break: resumed in a new graph, or ran the rest of the frame eagerly."""
    resumable = gb.get("resumable")
    return "" if resumable is None else {1: " (resumed)", 0: " (not resumed: rest of frame eager)"}.get(resumable, "")


def _first_line(text: Optional[str]) -> str:
    if not text:
        return ""
    return next((line for line in text.splitlines() if line.strip()), "")[:300]
