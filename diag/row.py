"""The row: what makes two runs runs of the same thing, defined once.

A row is every field that changes what was run: the case and where it came from, the
compile options, the device and dtype, the sizes, the model. ``diag run`` stores these
columns, and ``check``, ``compare``, ``bisect``, the report and the Datasette views group
runs by exactly this tuple, so that none of them can put a batch-8 run in a batch-1 cell.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence, TypedDict, TypeVar

from diag.contract import BY_NAME, statuses

RunT = TypeVar("RunT", bound=Mapping[str, Any])  # a stored run, or any mapping of its columns

BUILTIN = "builtin"  # case_source of the cases shipped in diag/cases/; a user case file's is its path
SIZES = {"batch_size": "b", "prompt_length": "p", "new_tokens": "n"}


class Row(NamedTuple):
    case: str
    case_source: str
    backend: str
    fullgraph: int
    dynamic: str
    mode: str
    device: str
    dtype: str
    batch_size: int
    prompt_length: int
    new_tokens: int
    model: str


FIELDS: tuple[str, ...] = Row._fields


class RowColumns(TypedDict):
    """A row's fields as the runs and races tables hold them."""

    case: str
    case_source: str
    backend: str
    fullgraph: int
    dynamic: str
    mode: str
    device: str
    dtype: str
    batch_size: int
    prompt_length: int
    new_tokens: int
    model: str


def column_types() -> dict[str, type]:
    """The row's columns and the type SQLite stores each as."""
    whole = {"fullgraph", "batch_size", "prompt_length", "new_tokens"}
    return {name: int if name in whole else str for name in FIELDS}


def columns(config: Mapping[str, Any], case: str, case_source: str) -> RowColumns:
    """The row's columns of a run with probe ``config`` (as in the spec), as they are stored."""
    return {
        "case": case,
        "case_source": case_source,
        "backend": config["backend"],
        "fullgraph": int(config["fullgraph"]),
        "dynamic": {None: "auto", True: "true", False: "false"}[config.get("dynamic")],
        "mode": config.get("mode") or "default",
        "device": config["device"],
        "dtype": config["dtype"],
        "batch_size": config["batch_size"],
        "prompt_length": config["prompt_length"],
        "new_tokens": config["new_tokens"],
        "model": config.get("model") or "tiny-random",
    }


def of_config(config: Mapping[str, Any], case: str, case_source: str) -> Row:
    """The row a run of ``case`` with probe ``config`` will be stored in."""
    return Row(**columns(config, case, case_source))


def of(run: Mapping[str, Any]) -> Row:
    """The row of a stored run (runs stored before case sources were recorded count as built-in)."""
    row = Row._make(map(run.get, FIELDS))
    return row if row.case_source else row._replace(case_source=BUILTIN)


def flags(row: Row) -> list[str]:
    """The ``diag run``/``bisect`` options that select ``row``."""
    flags = ["--case", row.case if row.case_source == BUILTIN else row.case_source, "--backend", row.backend]
    flags.append("--fullgraph" if row.fullgraph else "--no-fullgraph")
    for name, value, default in (
        ("--dynamic", row.dynamic, "auto"),
        ("--mode", row.mode, "default"),
        ("--device", row.device, "cpu"),
        ("--dtype", row.dtype, "float32"),
        ("--model", row.model, "tiny-random"),
    ):
        if value is not None and value != default:  # a field a run did not record is its default
            flags += [name, str(value)]
    sizes = (("--batch-size", row.batch_size), ("--prompt-length", row.prompt_length), ("--new-tokens", row.new_tokens))
    return flags + [word for name, size in sizes if size is not None for word in (name, str(size))]


def config_label(fields: Mapping[str, Any], sizes: tuple[str, ...] = tuple(SIZES)) -> str:
    """``inductor fullgraph mode=reduce-overhead cpu float32 b1 p16 n16``: defaults (dynamic auto,
    mode default, the tiny random model) left out."""
    parts = [fields["backend"], "fullgraph" if fields["fullgraph"] else "no-fullgraph"]
    if fields.get("dynamic") not in (None, "auto"):
        parts.append(f"dynamic={fields['dynamic']}")
    if fields.get("mode") not in (None, "default"):
        parts.append(f"mode={fields['mode']}")
    parts += [fields["device"], fields["dtype"]]
    parts += [f"{SIZES[name]}{fields[name]}" for name in sizes if fields.get(name) is not None]
    if fields.get("model") not in (None, "tiny-random"):
        parts.append(f"model={fields['model']}")
    return " ".join(str(part) for part in parts)


def describe(fields: Mapping[str, Any], sizes: tuple[str, ...] = tuple(SIZES)) -> str:
    """The row but its case name: ``[./mine.py] aot_eager fullgraph cpu float32 b1``. The case's file
    is named when the case is not built in: a user case named like a built-in is another row."""
    source = fields.get("case_source")
    named = [] if source in (None, BUILTIN) else [f"[{source}]"]
    return " ".join([*named, config_label(fields, sizes)])


def label(row: Row) -> str:
    """The whole row for people: ``append_last [./mine.py] aot_eager fullgraph cpu float32 b1 p16 n16``."""
    return f"{row.case} {describe(row._asdict())}"


def differences(before: Row, after: Row) -> list[str]:
    """The fields two rows differ in, as ``field before -> after``: what a comparison across rows mixes."""
    return [f"{name} {old} -> {new}" for name, old, new in zip(FIELDS, before, after) if old != new]


def sort_key(row: Row) -> tuple:
    return tuple("" if value is None else str(value) for value in row)


def deciding_run(runs: Sequence[RunT]) -> RunT:
    """The run that decides a cell (a row on one build, or one side of a comparison): its worst run,
    so that a failure among repeats is never outvoted, but a broken case (``not_a_finding``) only
    where no run says anything of the compiler; ties go to the newest start, then the uid, so that
    the same runs decide the same way in whatever order they were stored (the id, the storage order,
    only where a run has neither, as hand-made records in tests)."""
    if len(runs) == 1:
        return runs[0]
    return max(
        runs,
        key=lambda run: (
            run.get("status") not in statuses.NOT_A_FINDING,  # a broken case never outvotes a finding
            BY_NAME[run["status"]].severity if run.get("status") in BY_NAME else 99,
            run.get("started_at") or "",
            run.get("uid") or "",
            run.get("id") or 0,
        ),
    )
