"""Bad input: a one-line error, a non-zero exit, no traceback, and nothing written to the DB."""

from __future__ import annotations

import pytest
from conftest import TEST_CASES, diag_here


def assert_one_line_error(done, *fragments: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--case", "no_such_case"], ["unknown case 'no_such_case'", "append_last", "dynamic_slice"]),
        (["--case", "missing/variant.py"], ["case file not found"]),
        # the probe checks a case file in the target environment: slow by rule
        pytest.param(
            ["--case", str(TEST_CASES / "broken_import.py")],
            ["failed to import", "a_module_that_does_not_exist"],
            marks=pytest.mark.slow,
        ),
        (["--case", "append_last", "--batch-size", "-2"], ["--batch-size"]),
        (["--case", "append_last", "--new-tokens", "0"], ["--new-tokens"]),
        (["--case", "append_last", "--backend", "nonsense"], ["--backend"]),
        (["--case", "append_last", "--device", "tpu"], ["--device"]),
        (["--case", "append_last", "--torch", "2.x.y"], ["malformed torch spec '2.x.y'"]),
        (["--case", "append_last", "--torch", "/no/such/python"], ["no executable python"]),
        # a URL that names no wheel: what a spec can be, not "no executable python"
        (["--case", "append_last", "--torch", "file://x.txt"], ["malformed torch spec", "a release (2.13.0)"]),
        (["--case", "append_last", "--new-tokens", str(10**30)], ["--new-tokens", "1048576"]),
        (
            ["--case", "append_last", "--prompt-length", "2000", "--new-tokens", "100"],
            ["2100 positions; the model holds 2048"],
        ),
        (["--case", "append_last", "--batch-size", "99999"], ["--batch-size"]),
        (["--case", "append_last", "--seed", str(2**64)], ["--seed"]),
        (["--case", "append_last", "--sweep", "batch", "--sweep-values", "1,100000"], ["--sweep-values", "4096"]),
        (["--case", "append_last", "--mode", "bogus-mode"], ["--mode", "bogus-mode"]),
        (["--case", "append_last", "--device", "cuda:abc"], ["--device", "cuda:abc"]),
        # An index no machine has: "sees no CUDA device" here, "only N CUDA device(s) visible" on a GPU host.
        pytest.param(
            ["--case", "append_last", "--device", "cuda:4095"],
            ["--device cuda:4095", "CUDA device"],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_run_rejects_bad_input_before_writing(tmp_path, args, fragments):
    db = tmp_path / "x.db"
    done = diag_here("run", *args, "--db", str(db), cwd=tmp_path)
    assert_one_line_error(done, *fragments)
    runs = diag_here("runs", "--db", str(db), "--json", cwd=tmp_path)
    assert not db.exists() or runs.stdout.strip() == "[]"


def test_unwritable_db_path(tmp_path):
    done = diag_here("run", "--case", "append_last", "--db", str(tmp_path / "nope" / "x.db"), cwd=tmp_path)
    assert_one_line_error(done, "cannot write database")


@pytest.mark.parametrize(
    "command", [["runs"], ["show", "1"], ["report"], ["check"], ["compare", "1", "2"], ["repro", "1"]]
)
def test_missing_db(tmp_path, command):
    done = diag_here(*command, "--db", str(tmp_path / "absent.db"), cwd=tmp_path)
    assert_one_line_error(done, "no database at")
    assert not (tmp_path / "absent.db").exists()


def test_unknown_run_id(tmp_path):
    diag_here("runs", "--db", str(tmp_path / "x.db"), cwd=tmp_path)
    from diag import store

    store.open_db(tmp_path / "x.db")
    done = diag_here("show", "42", "--db", str(tmp_path / "x.db"), cwd=tmp_path)
    assert_one_line_error(done, "no run #42")


def test_not_a_database(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("hello")
    done = diag_here("runs", "--db", str(junk), cwd=tmp_path)
    assert_one_line_error(done, "not a diag database")
    assert junk.read_text() == "hello"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["env", "add", "not-a-spec"], "malformed torch spec"),
        (["env", "add", "current"], "nothing to provision"),
        (
            ["bisect", "--case", "append_last", "--good", "current", "--bad", "2.14.1", "--candidates", "empty.txt"],
            "a release or a dated nightly at each end",
        ),
        (["bisect", "--case", "nope", "--good", "2.13.0", "--bad", "2.14.1"], "unknown case"),
        (["check", "--alpha", "2"], "--alpha"),
        (["run", "--case", "append_last", "--jobs", "0"], "--jobs"),
        (["run", "--case", "append_last", "--timeout", "-5"], "--timeout"),
    ],
)
def test_more_bad_input_is_one_line(tmp_path, args, fragment):
    (tmp_path / "empty.txt").write_text("")
    done = (
        diag_here(*args, "--db", str(tmp_path / "x.db"), cwd=tmp_path)
        if args[0] not in ("env",)
        else diag_here(*args, cwd=tmp_path)
    )
    assert_one_line_error(done, fragment)
    assert not (tmp_path / "x.db").exists()


def test_model_folder_that_is_not_a_checkpoint(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = diag_here(
        "run", "--case", "append_last", "--model", str(empty), "--db", str(tmp_path / "x.db"), cwd=tmp_path
    )
    assert_one_line_error(done, "has no config.json")
    (empty / "config.json").write_text("{}")
    done = diag_here(
        "run", "--case", "append_last", "--model", str(empty), "--db", str(tmp_path / "x.db"), cwd=tmp_path
    )
    assert_one_line_error(done, "no weights")
    assert not (tmp_path / "x.db").exists()


def test_junit_into_a_missing_folder(tmp_path):
    from conftest import cli

    done = cli("check", "--db", str(tmp_path / "absent.db"), "--junit", str(tmp_path / "nodir" / "j.xml"))
    # refused where the option enters, before the DB is even looked for
    assert done.exit_code == 2 and "--junit" in done.output and "nodir does not exist" in done.output


def test_messages_when_there_is_nothing_to_show(recorded_db, tmp_path):
    from conftest import cli

    done = cli("runs", "--db", str(recorded_db), "--case", "no_such_case")
    assert done.exit_code == 0 and done.stdout == "" and "no runs of case no_such_case" in done.stderr
    single = tmp_path / "one.db"
    from conftest import RECORDED, recorded, replay

    replay([recorded("append_last-fullgraph", tmp_path / "runs")], single)
    done = cli("check", "--db", str(single))
    assert done.exit_code == 0 and "nothing to compare" in done.output and "no regressions" not in done.output
    assert RECORDED.is_dir()


def test_compare_of_runs_of_different_rows_says_so(recorded_db):
    from conftest import cli

    done = cli("compare", "1", "2", "--db", str(recorded_db))
    assert "different rows: fullgraph 1 -> 0" in done.output


def report_manifest() -> str:
    from diag.report import MANIFEST

    return MANIFEST


def test_report_refuses_to_overwrite_files_it_did_not_write(recorded_db, tmp_path):
    from conftest import cli

    out = tmp_path / "site"
    (out / "runs").mkdir(parents=True)
    (out / "index.html").write_text("my own page")
    (out / "runs" / "1.html").write_text("my own run page")
    done = cli("report", "--db", str(recorded_db), "--out", str(out))
    assert done.exit_code == 1 and "holds no diag report" in done.output
    assert (out / "index.html").read_text() == "my own page"
    assert sorted(p.name for p in out.rglob("*")) == ["1.html", "index.html", "runs"]
    # a folder diag wrote before, where someone has since put a page of their own at a report path
    (out / "index.html").unlink()
    (out / "runs" / "1.html").unlink()
    (out / report_manifest()).write_text("[]")
    (out / "index.html").write_text("my own page")
    done = cli("report", "--db", str(recorded_db), "--out", str(out))
    assert done.exit_code == 1 and "did not write" in done.output and "index.html" in done.output
    assert sorted(p.name for p in out.rglob("*")) == sorted([report_manifest(), "index.html", "runs"])


@pytest.mark.parametrize(
    "args, hint",
    [
        (["nosuch"], "(see 'diag --help')"),
        (["run", "--bogus"], "(see 'diag run --help')"),
        (["env", "add", "--bogus"], "(see 'diag env add --help')"),
    ],
)
def test_a_usage_error_points_at_the_help_of_the_command_that_was_typed(tmp_path, args, hint):
    done = diag_here(*args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().endswith(hint), done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "--limit", str(10**23)],
        ["show", str(10**23)],
        ["repro", str(10**23)],
        ["compare", str(10**23), "1"],
        ["prune", "--keep-builds", str(10**23)],
        ["run", "--case", "append_last", "--jobs", str(10**23)],
        ["run", "--case", "append_last", "--repeat", str(10**23)],
    ],
)
def test_ids_and_counts_beyond_what_sqlite_holds_are_one_line(copied_db, tmp_path, args):
    done = diag_here(*args, "--db", str(copied_db), cwd=tmp_path)
    assert_one_line_error(done)
    assert "OverflowError" not in done.stderr


def test_repro_into_a_missing_folder_is_one_line(copied_db, tmp_path):
    done = diag_here("repro", "1", "-o", "nodir/r.py", "--db", str(copied_db), cwd=tmp_path)
    assert_one_line_error(done, "'-o' / '--output'", "'nodir/r.py'", "nodir does not exist")


@pytest.mark.parametrize(
    "args, said",
    [
        (["run", "--case", "append_last", "--no-timing", "--repeats", "3"], "--repeats does nothing on diag run"),
        (["run", "--case", "append_last", "--no-timing", "--timing-seconds", "2"], "--timing-seconds does nothing"),
        (["run", "--case", "append_last", "--no-timing", "--no-reuse-compiled"], "--no-reuse-compiled does nothing"),
        (["race", "--case", "append_last", "--case", "dynamic_slice", "--depyf"], "--depyf does nothing on diag race"),
        (["race", "--case", "append_last", "--case", "dynamic_slice", "--count-instructions"], "--count-instructions"),
        (["bisect", "--case", "append_last", "--good", "2.1.0", "--bad", "2.2.0", "--profile"], "diag bisect"),
        (
            ["bisect", "--case", "append_last", "--good", "2.1.0", "--bad", "2.2.0", "--repeats", "9"],
            "the passes its signal needs",
        ),
        (["plan", "--part", "--case append_last --no-timing --repeats 3", "--shards", "1"], "--repeats does nothing"),
    ],
)
def test_an_option_the_command_cannot_honour_is_refused(tmp_path, args, said):
    """Accepted, each did nothing: a run without its timing pass times nothing, a race has no
    diagnosis or count pass, a bisect compares diagnoses. One line, nothing made."""
    done = diag_here(*args, "--db", "x.db", cwd=tmp_path) if args[0] != "plan" else diag_here(*args, cwd=tmp_path)
    assert_one_line_error(done, said)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["bisect", "--case", "append_last", "--good", "2.1.0", "--bad", "2.2.0", "--candidates", "bin.db"],
        ["check", "--allow", "bin.db"],
    ],
    ids=["candidates", "allow"],
)
def test_a_list_file_that_is_no_text_is_refused_where_it_enters(tmp_path, args):
    """A DB given where a file of one entry a line goes (found by the fuzz: a UnicodeDecodeError traceback)."""
    (tmp_path / "bin.db").write_bytes(b"SQLite format 3\x00\x10\x00\x02\x02\xdd\xff" * 8)
    done = diag_here(*args, "--db", "x.db", cwd=tmp_path)
    assert_one_line_error(done, "'bin.db' is not a text file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin.db"]


def test_a_repeat_past_any_real_use_is_refused_before_the_matrix_is_planned(tmp_path):
    """--repeat 10**14 (drawn by the fuzz): planning its cells alone never ended."""
    done = diag_here("run", "--case", "append_last", "--repeat", "99999999999999", "--db", "x.db", cwd=tmp_path)
    assert_one_line_error(done, "'--repeat'", "10000")
    assert list(tmp_path.iterdir()) == []
