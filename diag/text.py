"""The terminal text of every command: one-line summaries and the full record of a run, comparisons,
the gate's verdict and a bisect's answer. Commands print what these return."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping, Optional

from diag import guards
from diag import row as rows
from diag.contract import BY_NAME, FINDING_KINDS
from diag.noise import HALF_WIDTH, NOT_COMPARED
from diag.run import trace
from diag.store.typed import GraphBreakRow, StoredRun, column
from diag.verdicts import why

if TYPE_CHECKING:
    from diag.verdicts.gate import Outcome
    from diag.verdicts.regress import RowComparison
    from diag.verdicts.timing_change import TimingChange

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


def _num(value: Optional[float], fmt: str, unit: str) -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def config_text(run: StoredRun) -> str:
    """The run's case source (when not built in) and config, batch size the only size shown."""
    return safe(rows.describe(run, sizes=("batch_size",)))


def summary_line(run: StoredRun) -> str:
    """case, config, status, breaks, recompiles, hidden errors, compile s, eager/compiled ms per token."""
    return (
        f"#{run['id']:<5} {safe(run['case']):<18} {config_text(run):<40} {safe(run['status']):<15} "
        f"breaks {_num(run.get('graph_break_count'), 'd', ''):>3}  "
        f"recompiles {_num(run.get('recompile_count'), 'd', ''):>3}  "
        f"hidden {_num(run.get('hidden_error_count'), 'd', ''):>3}  "
        f"compile {_num(run.get('compile_s'), '.2f', 's'):>7}  "
        f"eager {_num(run.get('eager_ms_per_token'), '.2f', ''):>7} / compiled "
        f"{_num(run.get('compiled_ms_per_token'), '.2f', ''):>7} ms/token"
        + (f"  {safe(run['timing_note'])}, {NOT_COMPARED}" if run.get("timing_noisy") else "")
        + (f"  {safe(run['compile_note'])}, {NOT_COMPARED}" if run.get("compile_noisy") else "")
        + (f"  {_instructions(count)} instr" if (count := run.get("compile_instructions")) else "")
    )


def _instructions(count: int) -> str:
    """``1.234G``: an instruction count in three figures."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.3f}{unit}"
    return str(count)


def _latency(run: StoredRun, mode: str) -> str:
    """``0.471 ms/token (95% 0.468-0.474)``, the interval where the run has one."""
    text = _num(column(run, f"{mode}_ms_per_token"), ".3f", " ms/token")
    low, high = column(run, f"{mode}_ms_low"), column(run, f"{mode}_ms_high")
    return text + (f" (95% {low:.3f}-{high:.3f})" if low is not None and high is not None else "")


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
        if run.get(field) is not None:
            lines.append(f"  {field}: {safe(run[field])}")
    return lines


def _counts(run: StoredRun) -> list[str]:
    """Graphs, breaks, recompiles (prefill and decode apart) and hidden errors."""
    lines: list[str] = []
    lines += _section("counts")
    for field in ("graph_count", "ops_captured", "graph_break_count", "recompile_count", "hidden_error_count"):
        lines.append(f"  {field}: {_num(column(run, field), 'd', '')}")
    if run.get("decode_recompiles") is not None:
        decode_steps = max(0, (run.get("new_tokens") or 1) - 1)
        lines.append(
            f"  of the recompiles: prefill {run['prefill_recompiles']}, decode {run['decode_recompiles']} "
            f"on {run['decode_recompile_steps']} of {decode_steps} decode steps"
        )
    if run.get("second_call_recompiles") is not None:
        error = f", and it failed: {safe(run['second_call_error'])}" if run.get("second_call_error") else ""
        lines.append(f"  a second generate call right after: {run['second_call_recompiles']} recompiles{error}")
    return lines


def _correctness(run: StoredRun) -> list[str]:
    """Compiled against eager, and eager against the reference."""
    lines: list[str] = []
    lines += _section("correctness (compiled vs eager)")
    for field in ("oracle_equal", "tokens_equal", "max_abs_diff", "first_differing_step", "eager_margin"):
        lines.append(f"  {field}: {safe(run.get(field))}")
    return lines


def _timings(run: StoredRun) -> list[str]:
    """Compile time, latency, memory, what the passes cost."""
    lines: list[str] = []
    lines += _section("timings")
    lines.append(
        f"  compile: {_num(run.get('compile_s'), '.3f', ' s')} cold"
        + (f" ({run['compile_cpu_s']:.3f} s CPU)" if run.get("compile_cpu_s") is not None else "")
        + (f" (a task waited for a CPU {run['compile_stall_s']:.1f} s of it)" if run.get("compile_stall_s") else "")
        + f", {_num(run.get('compile_warm_s'), '.3f', ' s')} warm; guard check per decode call "
        f"{_num(run.get('guard_latency_us'), '.0f', ' us')}"
    )
    if run.get("compile_noisy"):
        lines.append(f"  {safe(run['compile_note'])}: no compile-time verdict is drawn from this run")
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
    if run.get("timing_noisy"):
        lines.append(f"  {safe(run['timing_note'])}: no latency verdict is drawn from this run")
    elif run.get("timing_noisy") == 0:
        lines.append(f"  timing steady: each median's interval within +-{HALF_WIDTH:.0%}, steps in one cluster")
    lines.append(
        f"  peak memory ({safe(run.get('memory_kind'))}): eager {_num(run.get('peak_mem_eager_mb'), '.1f', ' MB')}"
        f", compiled {_num(run.get('peak_mem_compiled_mb'), '.1f', ' MB')}"
    )
    lines.append(
        f"  what it cost: timing pass {_num(run.get('timing_pass_s'), '.1f', ' s')}, diagnosis pass "
        f"{_num(run.get('diagnosis_pass_s'), '.1f', ' s')}, orchestrator {_num(run.get('orchestrator_s'), '.2f', ' s')}"
        f", torch's structured logging {_num(run.get('logging_overhead_s'), '.3f', ' s')}"
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
    lines += _section(f"graph breaks ({_num(run.get('graph_break_count'), 'd', '')})")
    for gb in run["graph_breaks"]:
        lines.append(
            f"  [{safe(gb['key'])}] x{gb['count']} at {safe(gb['location'] or '?')}{_resumed(gb)}{_steps(gb)}  "
            f"{safe(_first_line(gb['gb_type'] or gb['reason']))}"
        )
    lines += _section(f"recompiles ({_num(run.get('recompile_count'), 'd', '')})")
    growing = guards.grows_with_the_step(run["recompiles"])
    for rc in run["recompiles"]:
        lines.append(f"  step {rc['decode_step']}: {safe(rc['function'])} — {safe(_first_line(rc['reason']))}")
        if rc.get("guard_subject"):
            got = f" -> {safe(rc['guard_actual'])}" if rc.get("guard_actual") is not None else ""
            grows = "  (grows with the decode step)" if (rc["guard_subject"], rc["guard_property"]) in growing else ""
            lines.append(
                f"    changed: {safe(rc['guard_subject'])} {safe(rc['guard_property'])}: "
                f"expected {safe(rc['guard_expected'])}{got}{grows}"
            )
    lines += _section(f"hidden errors ({_num(run.get('hidden_error_count'), 'd', '')})")
    for he in run["hidden_errors"]:
        lines.append(
            f"  [{safe(he['source'])}] {safe(he['exc_type'])}: {safe(_first_line(he['message']))} "
            f"(at {safe(he.get('location') or '?')}{_steps(he)}, logger {safe(he['logger'])}, x{he['count']})"
        )
    return lines


def _steps(row: Mapping[str, Any]) -> str:
    """`` step 0`` or `` steps 0-3``: the decode steps a grouped finding happened at (0: the prefill)."""
    first, last = row.get("decode_step"), row.get("last_decode_step")
    if first is None:
        return ""
    return f" step {first}" if last is None or last == first else f" steps {first}-{last}"


def _frames_and_more(run: StoredRun) -> list[str]:
    """The compiled frames, the capabilities, the probe's stderr tail, the run directory."""
    lines: list[str] = []
    count, why = trace.frame_count(run)
    lines += _section(f"compiled frames ({count})" if count is not None else f"compiled frames: unknown ({safe(why)})")
    for frame in run.get("frames", []):
        fail = f"  FAIL {safe(frame['fail_type'])}" if frame.get("fail_type") else ""
        lines.append(
            f"  {safe(frame['compile_id'])} {safe(frame['co_name'])}: cache {frame['cache_size']}, "
            f"guards {frame['guard_count']}, ops {frame['graph_op_count']}, inputs {frame['graph_input_count']}, "
            f"{_num(frame.get('entire_frame_compile_time_s'), '.3f', ' s')}{fail}"
        )
    lines += _section("capabilities")
    for name, cap in (run.get("capabilities") or {}).items():
        lines.append(f"  {name}: {'yes' if cap['available'] else 'NO'} — {safe(cap['detail'])}")
    if tail := run.get("stderr_tail"):
        lines += _section("probe stderr (tail)")
        lines += ["  " + safe(line) for line in tail.splitlines()[-20:]]
    lines += _section("artifacts")
    lines.append(f"  {safe(run.get('artifacts_dir'))}")
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


def timing_change(change: TimingChange) -> str:
    if change.ratio is None:
        return f"{change.metric} -"
    p = "n/a" if change.p_value is None else f"{change.p_value:.2g}"
    basis = "host-adjusted, " if change.basis == "host-adjusted" else ""
    pooled = (change.runs_before, change.runs_after) != (1, 1)
    runs = f"runs {change.runs_before} -> {change.runs_after}, " if pooled else ""
    return f"{change.metric} x{change.ratio:.3f} ({basis}{runs}p={p})"


def comparison_lines(comparison: RowComparison) -> list[str]:
    """One row of ``diag compare``: the status change, keys added and removed, the timing ratios."""
    before, after = comparison.before, comparison.after
    status = f"{before['status'] if before else 'absent'} -> {after['status'] if after else 'absent'}"
    lines = [f"{safe(rows.label(comparison.row))}: {status}"]
    if comparison.error_change:
        was, now = comparison.error_change
        lines.append(f"    error: {safe(was or '-')} -> {safe(now or '-')}")
    if comparison.note_change:
        was, now = comparison.note_change
        lines.append(f"    the case says: {safe(was or '-')} -> {safe(now or '-')}")
    if comparison.kernel_change:
        was, now = comparison.kernel_change
        lines.append(f"    attention kernels: {safe(was)} -> {safe(now)}")
    for kind in FINDING_KINDS:
        for sign, keys in (("+", comparison.added), ("-", comparison.removed)):
            for key in keys.get(kind.table, []):
                said = comparison.key_text(kind.table, key)
                lines.append(f"    {sign} {kind.label} {safe(key)}" + (f": {safe(said)}" if said else ""))
    if comparison.timings:
        lines.append("    " + "; ".join(timing_change(t) for t in comparison.timings))
    if comparison.note:
        lines.append(f"    {safe(comparison.note)}")
    lines += [f"    {safe(said)}" for said in comparison.noisy]
    return lines


def judged_lines(comparisons: list[RowComparison], alpha: Optional[float] = None) -> list[str]:
    """A line per figure: how many rows with runs on both sides were judged on it, and why not the rest."""
    from diag.verdicts.coverage import coverage
    from diag.verdicts.regress import Thresholds

    level = Thresholds().alpha if alpha is None else alpha
    return [f"judged: {safe(found.line())}" for found in coverage(comparisons, level)]


def check_lines(outcome: Outcome, alpha: Optional[float] = None) -> list[str]:
    """``diag check``'s verdict: what was compared, each regression, what could not be judged, and
    per figure how many rows were judged and why the others were not (at the gate's ``alpha``)."""
    compared = [c for c in outcome.comparisons if c.before is not None and c.after is not None]
    lines = [
        f"checked: {outcome.description}; {len(outcome.comparisons)} rows, {len(compared)} with runs on both sides"
    ]
    lines += [f"REGRESSION {safe(rows.label(r.row))}: {safe(r.message)}" for r in outcome.regressions]
    lines += [f"INCONCLUSIVE {safe(rows.label(r.row))}: {safe(r.message)}" for r in outcome.inconclusive]
    lines += [f"HOST CHANGED {safe(rows.label(r.row))}: {safe(r.message)}" for r in outcome.host_changed]
    lines += [f"NOT COMPARED {safe(rows.label(c.row))}: {safe(c.note)}" for c in outcome.comparisons if c.note]
    lines += [f"NOT COMPARED {safe(rows.label(c.row))}: {safe(said)}" for c in outcome.comparisons for said in c.noisy]
    lines += judged_lines(outcome.comparisons, alpha)
    if not compared:
        lines.append(
            "nothing to compare: no row has runs on both sides (run the matrix again, or on another build, then check)"
        )
    elif not outcome.regressions:
        lines.append("no regressions" + (" (some slowdowns could not be judged)" if outcome.inconclusive else ""))
    return lines


def _build_line(build: dict[str, Any]) -> str:
    date = f", nightly {build['nightly_date']}" if build["nightly_date"] else ""
    return f"{build['version']}{date}, git {build['git_version']} (run #{build['run']}: {build['status']})"


def _release_line(end: dict[str, Any]) -> str:
    return (
        f"transformers {safe(end['transformers'])} on torch {safe(end['version'])} (run #{end['run']}: {end['status']})"
    )


def bisect_lines(summary: dict[str, Any]) -> list[str]:
    """``diag bisect``'s answer: which side it moved, the last good and first bad build (or transformers
    release), the changes between, what was skipped."""
    line = _release_line if summary.get("moved") == "transformers" else _build_line
    lines = [
        f"moved:     {summary.get('moved', 'torch')}"
        + (f" (torch {safe(summary['torch'])} fixed)" if summary.get("torch") else "")
    ]
    lines += [f"last good: {line(summary['last_good'])}", f"first bad: {line(summary['first_bad'])}"]
    if summary["commit_range"]:
        lines.append(f"commits:   git log {summary['commit_range']}   ({summary['compare_url']})")
    lines += [f"skipped:   {spec}: {safe(reason)}" for spec, reason in summary["skipped"].items()]
    missing = summary["missing_dates"]
    if missing:
        more = " ..." if len(missing) > 10 else ""
        lines.append(f"no build:  {len(missing)} dates in range had no nightly ({', '.join(missing[:10])}{more})")
    return lines


def variant_lines(build: str, case_a: str, case_b: str, points: list) -> list[str]:
    """``diag compare --case A --case B``: per point and mode, each side's latency, B/A, its interval, the verdict."""
    a, b = safe(case_a), safe(case_b)
    lines = [f"compared: {b} against {a} on torch {safe(build)} (ratio: {b} / {a})"]
    if not points:
        lines.append("nothing to compare: no row of one case has a timed twin in the other (same config, same sizes)")
    shown = None
    for point in points:
        if point.point != shown:
            lines.append(f"  {safe(point.point)}")
            shown = point.point
        sides = f"{_num(point.ms_a, '.3f', '')} -> {_num(point.ms_b, '.3f', '')} ms/token"
        ratio = "" if point.ratio is None else f"  x{point.ratio:.3f}"
        interval = "" if point.low is None else f" (95% {point.low:.3f}-{point.high:.3f})"
        runs = f"runs {point.runs_a} / {point.runs_b}" + (f", {point.basis}" if point.basis else "")
        lines.append(f"    {point.mode:<8} {sides}{ratio}{interval}  {point.verdict}  [{runs}]")
    return lines
