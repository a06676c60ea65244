"""The record format: one definition, strict writers, readers that keep what they do not know."""

from __future__ import annotations

import ast
import json

import pytest
from conftest import REPO, recorded, replay

from diag import store
from diag.probe import records, statuses


def test_a_writer_refuses_an_undeclared_field_or_kind(tmp_path):
    with records.Writer(tmp_path / "r.jsonl") as writer:
        writer.write(records.ORACLE, oracle_equal=True)
        with pytest.raises(records.RecordError, match="declares no field"):
            writer.write(records.ORACLE, eager_matches_generate=True)
        with pytest.raises(records.RecordError, match="unknown record kind"):
            writer.write("environment", torch_version="2.13.0")
    found, bad = records.read(tmp_path / "r.jsonl")
    assert found == [{"kind": "oracle", "v": records.FORMAT_VERSION, "oracle_equal": True}] and bad == 0


def test_torn_lines_and_foreign_records_are_counted_not_fatal(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(
        b'{"kind": "oracle", "v": 1, "oracle_equal": false}\n'
        b'{"kind": "oracle", "v": 1, "orac\n'  # a write torn by a crash
        b"\xff\xfe garbage\n"
        b'{"kind": "no_such_kind"}\n'
        b"[1, 2]\n"
    )
    found, bad = records.read(path)
    assert [r["oracle_equal"] for r in found] == [False] and bad == 4
    assert records.read(tmp_path / "absent.jsonl") == ([], 0)


def test_fields_a_newer_probe_adds_are_stored_not_dropped(tmp_path):
    run_dir = recorded("dynamic_slice-no-fullgraph", tmp_path / "runs")
    lines = []
    for line in (run_dir / "diagnose.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] in ("result", "graph_break"):
            record["new_signal"] = 7
        lines.append(json.dumps(record))
    (run_dir / "diagnose.jsonl").write_text("\n".join(lines) + "\n")
    run = store.get_run(store.open_db(tmp_path / "x.db"), replay([run_dir], tmp_path / "x.db")[0])
    assert run["extra"] == {"result": {"new_signal": 7}}
    assert run["graph_breaks"] and all(gb["extra"] == {"new_signal": 7} for gb in run["graph_breaks"])
    assert run["status"] == "graph_break"


def _string_kind_calls(tree: ast.AST) -> list[int]:
    """Lines that name a record kind with a string literal in a write/first/all/every call."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            head = node.args[0]
            if (
                node.func.attr in ("write", "first", "all", "every")
                and isinstance(head, ast.Constant)
                and head.value in records.KINDS
            ):
                found.append(node.lineno)
    return found


def test_record_kinds_are_named_only_through_the_record_module():
    offenders = {}
    for path in sorted((REPO / "diag").rglob("*.py")):
        if path.name == "records.py":
            continue
        lines = _string_kind_calls(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            offenders[str(path.relative_to(REPO))] = lines
    assert offenders == {}


def test_every_finding_field_is_a_column_of_its_table(tmp_path):
    db = store.open_db(tmp_path / "x.db")
    for kind in statuses.FINDING_KINDS:
        columns = set(db[kind.table].columns_dict)
        assert set(records.KINDS[kind.record].fields) | {"extra"} <= columns, kind.table
        assert kind.count_column in db["runs"].columns_dict
    run_columns = set(db["runs"].columns_dict)
    verdict = set(records.KINDS[records.RESULT].fields) - {"collector_errors", "log_records", "environment_error"}
    assert verdict <= run_columns
    assert {"oracle_equal", "tokens_equal", "eager_margin", "first_differing_step"} <= run_columns
