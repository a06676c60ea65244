"""A case that changes torch's logging does not make diag count zeros (real probes: slow by rule).

Third-party decode code may call ``torch._logging.set_logs`` to keep its output quiet, or set a
torch logger's level by hand. diag's capture turns itself on again (at once after set_logs; at
the next decode step after a level set by hand) and says so on the run, never silently.
"""

from __future__ import annotations

import json

import pytest
from conftest import TEST_CASES, diag, show

pytestmark = pytest.mark.slow


def test_a_case_that_turns_torch_logging_off_still_counts_what_the_builtin_counts(tmp_path):
    db = tmp_path / "l.db"
    diag(
        "run",
        "--case",
        "dynamic_slice",
        "--case",
        str(TEST_CASES / "silences_logging.py"),
        "--case",
        str(TEST_CASES / "quiets_a_logger.py"),
        "--case",
        str(TEST_CASES / "disables_logging.py"),
        "--case",
        str(TEST_CASES / "disables_torch_loggers.py"),
        "--backend",
        "eager",
        "--no-fullgraph",
        "--no-timing",
        "--new-tokens",
        "6",
        "--db",
        str(db),
        cwd=tmp_path,
    )
    listed = json.loads(diag("runs", "--db", str(db), "--json", cwd=tmp_path).stdout)
    runs = {r["case"]: show(db, r["id"], tmp_path) for r in listed}
    builtin, silenced, quieted = runs["dynamic_slice"], runs["silences_logging"], runs["quiets_a_logger"]
    counts = ("graph_break_count", "recompile_count", "hidden_error_count")
    # what the logs give is there to lose: breaks and recompiles (its break dynamo compiled up to is a
    # break, not a hidden error: torch gives no frame up)
    assert builtin["recompile_count"] > 0 and builtin["graph_break_count"] > 0
    # set_logs: the capture is back at once, nothing is lost, and the run says what the case did
    assert [silenced[c] for c in counts] == [builtin[c] for c in counts]
    note = silenced["capabilities"]["debug_logs"]
    assert note["available"] is True and "torch._logging.set_logs(" in note["detail"], note
    assert "recompiles=False" in note["detail"]
    # a level set by hand: back at the next decode step, and the run says records may be missing
    note = quieted["capabilities"]["debug_logs"]
    assert note["available"] is False and "torch._dynamo" in note["detail"] and "may be low" in note["detail"], note
    assert quieted["recompile_count"] == builtin["recompile_count"]
    # logging.disable, which silences every logger of the process: held back, nothing lost, said
    disabled = runs["disables_logging"]
    assert [disabled[c] for c in counts] == [builtin[c] for c in counts]
    note = disabled["capabilities"]["debug_logs"]
    assert note["available"] is True and "logging.disable(CRITICAL)" in note["detail"], note
    # loggers disabled and the process-wide level set by hand: caught at the next step, and said
    by_hand = runs["disables_torch_loggers"]
    note = by_hand["capabilities"]["debug_logs"]
    assert note["available"] is False and "logging.root.manager.disable" in note["detail"], note
    assert "may be low" in note["detail"] and by_hand["recompile_count"] > 0
    # the built-in case changed nothing: no note
    assert "debug_logs" not in builtin["capabilities"] or builtin["capabilities"]["debug_logs"]["available"]
