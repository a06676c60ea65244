"""dynamo's own counts, read beside its logs: the ``counters`` (every break and frame, where the
logs de-duplicate), the graph caches' hits, and on torch 2.0, which has no recompiles log, the
guard failures dynamo keeps per code object, reported as recompile records as they happen.

Imports: standard library and torch (at call time).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from diag.probe import compat

# torch 2.0 has no recompiles log: its guard failures are logged under this name (LogCapture._watch_guard_failures)
GUARD_FAILURES_LOGGER = "diag.guard_failures.__recompiles"


def counter_snapshot() -> dict[str, dict[str, int]]:
    """dynamo's counters as plain dicts (they count every break; the log de-duplicates)."""
    from torch._dynamo.utils import counters

    snapshot = {group: {str(k): int(v) for k, v in values.items()} for group, values in counters.items()}
    failures = compat.guard_failures()
    if failures:  # torch 2.0: its guard failures per function, what its recompiles are counted against
        snapshot["guard_failures"] = {
            f"{code.co_name} {code.co_filename}:{code.co_firstlineno}": len(reasons)
            for code, reasons in failures.items()
            if hasattr(code, "co_name") and reasons  # torch's reads make empty entries
        }
    return snapshot


def clear_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


def graph_cache_hits() -> int:
    """How many compiled graphs inductor's FX graph cache and AOTAutograd's cache served so far."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"].get("fxgraph_cache_hit", 0)) + int(
        counters["aot_autograd"].get("autograd_cache_hit", 0)
    )


def watch_guard_failures(report: Callable[[Any, object], None]) -> Optional[Callable[[], None]]:
    """Where torch keeps guard failures but has no recompiles log (2.0): ``report(code, reason)`` is
    called on each one as dynamo records it (the reason a cached compile no longer fit, so the frame
    is compiled again), in the decode step it happens in. Returns what stops the watch, or None where
    there is nothing to watch."""
    failures: Any = compat.guard_failures()  # dynamo's defaultdict(list), whose factory is swapped here
    if failures is None:
        return None
    failures.clear()
    watching = [True]

    class Reported(list):
        def append(self, reason: object) -> None:
            super().append(reason)
            if watching[0]:
                code = next((c for c, kept in failures.items() if kept is self), None)
                report(code, reason)

    own = failures.default_factory
    failures.default_factory = Reported

    def stop() -> None:
        watching[0] = False
        failures.default_factory = own

    return stop


def guard_failure_record(code: Any, reason: object) -> logging.LogRecord:
    """One guard failure of ``code`` as a record of GUARD_FAILURES_LOGGER worded as 2.1's recompiles
    log: the debug log holds it, and the recompile parser reads it live and in a replay."""
    where = f"{getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', 0)}"
    message = (
        f"Recompiling function {getattr(code, 'co_name', '?')} in {where}\n"
        f"    triggered by the following guard failure: {reason}"
    )
    return logging.LogRecord(GUARD_FAILURES_LOGGER, logging.DEBUG, __file__, 0, message, None, None)
