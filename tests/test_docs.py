"""Every command documents itself; the README's case API example is a working case."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tokenize

import click
import pytest
from click.testing import CliRunner
from conftest import REPO

from diag.cli import cli
from diag.probe.cases import read_case_header


def _commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


def test_every_command_has_help():
    for path, command in _commands(cli):
        assert command.help and len(command.help.strip()) > 20, path
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "Usage:" in result.output


def test_the_case_example_is_a_registrable_case(tmp_path):
    readme = (REPO / "docs" / "cases.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    example = next(b for b in blocks if "@case(" in b)
    path = tmp_path / "readme_case.py"
    path.write_text(example)
    name, description = read_case_header(str(path))
    assert name and description


def test_readme_names_the_test_command_ci_runs():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "python -m pytest" in readme and "python -m pytest" in ci


def test_the_status_table_is_the_status_table():
    from diag.probe.statuses import STATUSES

    readme = (REPO / "docs" / "data-model.md").read_text()
    section = readme[readme.index("## Statuses") :]
    rows = re.findall(r"^\| (\w+) \| (yes|no) \| (.+?) \|$", section, re.M)
    assert rows == [(s.name, "yes" if s.works else "no", s.meaning) for s in STATUSES]


def test_architecture_doc_names_files_that_exist():
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:diag|tests|cases)/[\w/.]+\.(?:py|j2|md))", doc))
    assert len(named) > 15
    assert [path for path in sorted(named) if not (REPO / path).exists()] == []


def test_architecture_doc_names_functions_that_exist():
    """Every dotted name of docs/ARCHITECTURE.md (`diag.run.matrix.plan`) is a module, or a name
    defined in one: a function renamed or moved leaves no stale pointer in the map of the code."""
    import importlib

    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    names = sorted(set(re.findall(r"`(diag\.[A-Za-z_][\w.]*)`", doc)))
    assert len(names) > 30
    missing = []
    for name in names:
        parts = name.split(".")
        found: object = None
        for cut in range(len(parts), 0, -1):
            try:
                found, rest = importlib.import_module(".".join(parts[:cut])), parts[cut:]
                break
            except ImportError:
                continue
        for attribute in rest:
            found = getattr(found, attribute, None)
        if found is None:
            missing.append(name)
    assert missing == []


def test_the_coverage_table_is_the_recorded_coverage():
    """docs/coverage.md's version table is made from tests/fixtures/versions/coverage.json, never by hand."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("versions", REPO / "tests" / "fixtures" / "versions.py")
    versions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(versions)
    readme = (REPO / "docs" / "coverage.md").read_text()
    start = readme.index("<!-- coverage table: python tests/fixtures/versions.py --table -->")
    end = readme.index("<!-- end coverage table -->")
    table = readme[start:end].split("\n", 1)[1]
    assert table == versions.summary_table()
    assert table.count("\n") >= 2 + 16


def test_every_noqa_says_why():
    """A lint rule switched off in one place carries its reason in the same comment."""
    bare = []
    for path in sorted(REPO.glob("**/*.py")):
        if ".venv" in path.parts or ".ci" in path.parts:
            continue
        with path.open("rb") as source:
            comments = [t for t in tokenize.tokenize(source.readline) if t.type == tokenize.COMMENT]
        for token in comments:
            if "noqa" in token.string and not re.search(r"# noqa: [A-Z0-9, ]+ \(.+\)$", token.string):
                bare.append(f"{path.relative_to(REPO)}:{token.start[0]}")
    assert bare == []


def test_the_readme_is_short():
    """Set-up, a tour and where to go next; reference material lives in docs/."""
    assert len((REPO / "README.md").read_bytes()) <= 10 * 1024


def test_the_cli_reference_is_generated_and_current():
    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "docs/cli.md"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, "docs/cli.md is stale: run cog -r docs/cli.md\n" + done.stdout + done.stderr
    assert "## diag run\n" in (REPO / "docs" / "cli.md").read_text()


def test_the_regression_kinds_are_listed_once_and_every_verdict_is_one_of_them():
    """docs/regressions.md's list of check's verdict kinds is written by cog from regress.KINDS, and a
    verdict of any other kind cannot be made."""
    from diag import row as rows
    from diag.verdicts import regress

    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "docs/regressions.md"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, "docs/regressions.md is stale: run cog -r docs/regressions.md\n" + done.stdout
    assert len(regress.KINDS) == 10
    row = rows.Row("c", "builtin", "eager", 1, "auto", "default", "cpu", "float32", 1, 16, 16, "tiny-random")
    with pytest.raises(ValueError, match="not one of regress.KINDS"):
        regress.Regression(row, "slower", "a kind no list names")


def test_every_column_of_the_schema_is_described_and_the_docs_list_them(tmp_path):
    """Each column of a DB migrated from blank has a description (its table's, the row's or a shared
    one), no description names a column that is not there, and docs/data-model.md lists them all."""
    from diag import store
    from diag.store.descriptions import DESCRIPTIONS, column_descriptions

    db = store.open_db(tmp_path / "blank.db")
    for table in db.table_names():
        columns = [column.name for column in db[table].columns]
        assert all(column_descriptions(table, columns).values()), (table, column_descriptions(table, columns))
        named = set(DESCRIPTIONS.get(table, ("", {}))[1])
        assert named <= set(columns), (table, named - set(columns))
    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "docs/data-model.md"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, "docs/data-model.md is stale: run cog -r docs/data-model.md\n" + done.stdout
    assert "| graph_break_count | INTEGER |" in (REPO / "docs" / "data-model.md").read_text()


def test_the_readme_tour_is_what_diag_printed_when_it_was_recorded():
    """README's console blocks are written by cog from docs/tour.json, which bench/tour.py records
    from a real run of the tour: a hand edit of either fails here (and tests/test_readme.py runs the
    tour again)."""
    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "README.md"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, "README.md is stale: run cog -r README.md\n" + done.stdout + done.stderr
    record = json.loads((REPO / "docs" / "tour.json").read_text())
    assert [step["argv"][0] for step in record["steps"]] == ["run", "show", "report"]
    assert all(len(line) <= 120 for line in record["steps"][0]["printed"].splitlines() if line.startswith("#"))


def test_the_architecture_table_is_the_recorded_runs():
    """docs/coverage.md's architecture table is written by cog from docs/architectures.json, which
    bench/architectures.py writes from a recorded hf:all run: a hand edit of either fails here."""
    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "docs/coverage.md"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, "docs/coverage.md is stale: run cog -r docs/coverage.md\n" + done.stdout + done.stderr
    record = json.loads((REPO / "docs" / "architectures.json").read_text())
    assert len(record["architectures"]) >= 100 and all(len(e["uid"]) >= 16 for e in record["architectures"].values())


def _named_commands() -> list[tuple[str, str]]:
    """(file, 'diag WORD ... --flag ...') for every diag command line in README.md and docs/ (code spans and blocks)."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        if path.name == "cli.md":
            continue
        text = path.read_text(encoding="utf-8")
        snippets = re.findall(r"```[a-z]*\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
        for snippet in snippets:
            for line in snippet.splitlines():
                if line.lstrip().startswith("#"):
                    continue  # a comment in a shell block
                for match in re.finditer(r"(?:^|[\s$;&(])diag ([a-z][\w-]*(?: [a-z][\w-]*)?)([^|;&)]*)", line):
                    found.append((path.name, "diag " + match.group(1) + match.group(2)))
    return found


def test_every_command_and_flag_the_docs_name_exists():
    named = _named_commands()
    assert len(named) > 30
    missing = []
    for where, line in named:
        words = line.split()[1:]
        command: click.Command = cli
        while isinstance(command, click.Group) and words and words[0] in command.commands:
            command = command.commands[words.pop(0)]
        if command is cli:
            missing.append(f"{where}: {line}")
            continue
        flags = {flag for param in command.params for flag in (*param.opts, *param.secondary_opts)} | {"-h", "--help"}
        for word in words:
            flag = word.split("=", 1)[0]
            if re.fullmatch(r"--?[a-z][\w-]*", flag) and flag not in flags:
                missing.append(f"{where}: {line}: {flag}")
    assert missing == []
