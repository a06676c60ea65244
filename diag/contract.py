"""The orchestrator's one door into the probe's vocabulary.

The probe runs in the target torch environment, the orchestrator in its own; only files and exit
statuses cross between them. What both sides must agree on is defined in the probe (it must run
without the orchestrator) and reaches the orchestrator through this module alone: the record
format and each kind's type, the statuses and finding kinds, the run's config and spec (and the count pass's time
limit), the default model's size, the lifeline's variable, the host's count of OOM kills (read
before and after a process), the case file header, the two pure functions the orchestrator
applies to what a dead pass left on stderr, the GB id a graph-break message names, and how a
message is normalised for its key.
``tests/test_boundary.py`` holds the list of these names and fails
on any other import of ``diag.probe`` from an orchestrator module.
"""

from typing import Optional

from diag.probe import record_types, records, statuses
from diag.probe.cases import CaseError, read_case_header
from diag.probe.keys import graph_break_id, normalise, stable_key
from diag.probe.parsers import ARG_MISMATCH, errors_in_stderr
from diag.probe.spec import COUNT_PASS_LIMIT, DTYPES, LIFELINE_VARIABLE, MODES, TINY_LLAMA, Config
from diag.probe.statuses import BY_NAME, ENVIRONMENT_ERRNOS, FINDING_KINDS, FINDING_TABLES, STATUSES, WORKS

__all__ = [
    "ARG_MISMATCH",
    "BY_NAME",
    "COUNT_PASS_LIMIT",
    "DTYPES",
    "ENVIRONMENT_ERRNOS",
    "FINDING_KINDS",
    "FINDING_TABLES",
    "LIFELINE_VARIABLE",
    "MODES",
    "STATUSES",
    "TINY_LLAMA",
    "WORKS",
    "CaseError",
    "Config",
    "errors_in_stderr",
    "graph_break_id",
    "oom_kills",
    "oom_kills_since",
    "read_case_header",
    "record_types",
    "records",
    "normalise",
    "stable_key",
    "statuses",
]


# the host's OOM kill counts, from the probe's supervisor when first asked for: it brings subprocess,
# ctypes and logging, which the commands that only read the store (`diag report`) never need
def oom_kills() -> Optional[int]:
    from diag.probe.supervise import oom_kills as count

    return count()


def oom_kills_since(before: Optional[int]) -> Optional[int]:
    from diag.probe.supervise import oom_kills_since as since

    return since(before)
