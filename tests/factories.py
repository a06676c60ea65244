"""What many tests make, made one way: the small workload's arguments and stored runs.

``small`` is the least a real probe can run in a second or two (eager backend, 3 new tokens, a prompt
of 6); ``run_record`` a storable run of the append-last row whose every field a test may override,
and ``stored`` the same saved into a DB, its id returned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Union

from diag import store
from diag.build import identity


def small(*, timing: bool = False, fullgraph: bool = True, new_tokens: int = 3, prompt_length: int = 6) -> list[str]:
    """``diag run`` arguments of the small workload (a case and a DB are the caller's)."""
    words = ["--backend", "eager", "--fullgraph" if fullgraph else "--no-fullgraph"]
    words += [] if timing else ["--no-timing"]
    return [*words, "--new-tokens", str(new_tokens), "--prompt-length", str(prompt_length)]


RUN = {
    "uid": "u1",
    "case": "append_last",
    "config": "{}",
    "backend": "eager",
    "fullgraph": 1,
    "dynamic": "auto",
    "mode": "default",
    "device": "cpu",
    "dtype": "float32",
    "batch_size": 1,
    "status": "pass",
}
BUILD = identity("2.13.0+cpu", "abc123", None)


def run_record(
    *,
    build: dict[str, Any] = BUILD,
    graph_breaks: Iterable[dict[str, Any]] = (),
    recompiles: Iterable[dict[str, Any]] = (),
    hidden_errors: Iterable[dict[str, Any]] = (),
    timings: Iterable[dict[str, Any]] = (),
    **fields: Any,
) -> store.RunRecord:
    """A storable run: ``RUN`` with ``fields`` over it, on ``build``, with the child rows given."""
    return store.RunRecord(
        build=build,
        run={**RUN, **fields},
        graph_breaks=list(graph_breaks),
        recompiles=list(recompiles),
        hidden_errors=list(hidden_errors),
        timings=list(timings),
    )


def stored(db: Union[str, Path, Any], record: store.RunRecord) -> int:
    """``record`` saved into ``db`` (a path, or an open DB); the run's id."""
    if isinstance(db, (str, Path)):
        opened = store.open_db(db)
        try:
            return store.save_run(opened, record)
        finally:
            opened.conn.close()
    return store.save_run(db, record)


def package_bisect(case: str, moved: list[str], db: Path, new_tokens: int = 3) -> list[str]:
    """``diag bisect`` arguments over real releases of one package (``moved``: ``--package NAME=A..B``
    or ``--transformers A..B``), torch 2.13.0 fixed, the small workload's eager backend and one run a
    release (--confirm 0: the confirmed ends over real builds are test_nightly_path's)."""
    fixed = ["--torch", "2.13.0", "--backend", "eager", "--new-tokens", str(new_tokens), "--confirm", "0"]
    return ["bisect", "--case", case, *moved, *fixed, "--db", str(db)]
