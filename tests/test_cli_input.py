"""Bad input: a one-line error, a non-zero exit, no traceback, and nothing written to the DB."""

from __future__ import annotations

import pytest

from conftest import TEST_CASES, diag


def assert_one_line_error(done, *fragments: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("args, fragments", [
    (["--case", "no_such_case"], ["unknown case 'no_such_case'", "append_last", "dynamic_slice"]),
    (["--case", "missing/variant.py"], ["case file not found"]),
    (["--case", str(TEST_CASES / "broken_import.py")], ["failed to import", "a_module_that_does_not_exist"]),
    (["--case", "append_last", "--batch-size", "-2"], ["--batch-size"]),
    (["--case", "append_last", "--new-tokens", "0"], ["--new-tokens"]),
    (["--case", "append_last", "--backend", "nonsense"], ["--backend"]),
    (["--case", "append_last", "--device", "tpu"], ["--device"]),
    (["--case", "append_last", "--torch", "2.x.y"], ["malformed torch spec '2.x.y'"]),
    (["--case", "append_last", "--torch", "/no/such/python"], ["no executable python"]),
])
def test_run_rejects_bad_input_before_writing(tmp_path, args, fragments):
    db = tmp_path / "x.db"
    done = diag("run", *args, "--db", str(db), cwd=tmp_path, check=False)
    assert_one_line_error(done, *fragments)
    runs = diag("runs", "--db", str(db), "--json", cwd=tmp_path, check=False)
    assert not db.exists() or runs.stdout.strip() == "[]"


def test_unwritable_db_path(tmp_path):
    done = diag("run", "--case", "append_last", "--db", str(tmp_path / "nope" / "x.db"), cwd=tmp_path, check=False)
    assert_one_line_error(done, "cannot write database")


@pytest.mark.parametrize("command", [["runs"], ["show", "1"], ["report"], ["check"], ["compare", "1", "2"],
                                     ["repro", "1"]])
def test_missing_db(tmp_path, command):
    done = diag(*command, "--db", str(tmp_path / "absent.db"), cwd=tmp_path, check=False)
    assert_one_line_error(done, "no database at")
    assert not (tmp_path / "absent.db").exists()


def test_unknown_run_id(tmp_path):
    diag("runs", "--db", str(tmp_path / "x.db"), cwd=tmp_path, check=False)
    from diag import store
    store.open_db(tmp_path / "x.db")
    done = diag("show", "42", "--db", str(tmp_path / "x.db"), cwd=tmp_path, check=False)
    assert_one_line_error(done, "no run #42")


def test_not_a_database(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("hello")
    done = diag("runs", "--db", str(junk), cwd=tmp_path, check=False)
    assert_one_line_error(done, "not a diag database")
    assert junk.read_text() == "hello"


@pytest.mark.parametrize("args, fragment", [
    (["env", "add", "not-a-spec"], "malformed torch spec"),
    (["env", "add", "current"], "nothing to provision"),
    (["bisect", "--case", "append_last", "--good", "current", "--bad", "2.14.1", "--candidates", "/dev/null"],
     "installable torch specs"),
    (["bisect", "--case", "nope", "--good", "2.13.0", "--bad", "2.14.1"], "unknown case"),
    (["check", "--alpha", "2"], "--alpha"),
    (["run", "--case", "append_last", "--jobs", "0"], "--jobs"),
    (["run", "--case", "append_last", "--timeout", "-5"], "--timeout"),
])
def test_more_bad_input_is_one_line(tmp_path, args, fragment):
    done = diag(*args, "--db", str(tmp_path / "x.db"), cwd=tmp_path, check=False) if args[0] not in ("env",) \
        else diag(*args, cwd=tmp_path, check=False)
    assert_one_line_error(done, fragment)
    assert not (tmp_path / "x.db").exists()
