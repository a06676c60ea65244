"""The architecture table of docs/coverage.md, from a recorded run of every transformers architecture.

    python bench/architectures.py record --db arch.db   # diag run --case hf:all (about 25 min on 2 cores)
    python bench/architectures.py record --db arch.db --stored   # the runs already in arch.db
    python bench/architectures.py record --db arch55.db --with transformers==5.5.4 --torch 2.13.0
        # an older transformers in a provisioned environment: docs/architectures-transformers-5.5.4.json

writes docs/architectures.json (with --with, docs/architectures-<requirement>.json): the command,
the torch, transformers and Python the runs used, when, and per model type the status, the error
type and the run's uid. docs/coverage.md's tables are made from those files by cog (``table()``;
`cog -r docs/coverage.md`), and tests/test_docs.py fails when a page and its file disagree: a table
says what a recorded run found, never what someone typed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECORD = REPO / "docs" / "architectures.json"
COMMAND = ["diag", "run", "--case", "hf:all", "--backend", "eager", "--fullgraph", "--no-timing", "--new-tokens", "4"]
PREFIX = "hf:"


def record_path(requirements: list[str]) -> Path:
    """Where a record goes: docs/architectures.json for diag's own environment, else one file per
    set of requirements (transformers==5.5.4 -> architectures-transformers-5.5.4.json)."""
    if not requirements:
        return RECORD
    name = "-".join(r.replace("==", "-").replace("/", "-") for r in requirements)
    return RECORD.with_name(f"architectures-{name}.json")


def command(torch: str | None, requirements: list[str]) -> list[str]:
    extra = (["--torch", torch] if torch else []) + [arg for r in requirements for arg in ("--with", r)]
    return [*COMMAND, *extra]


def summarise(db_path: Path, said: list[str] | None = None) -> dict:
    """The newest run of each architecture in ``db_path`` (one torch build, one transformers)."""
    sys.path.insert(0, str(REPO))
    from diag import store

    db = store.open_db(db_path, readonly=True)
    runs = [r for r in db.query("SELECT * FROM run_summary ORDER BY id") if r["case"].startswith(PREFIX)]
    if not runs:
        raise SystemExit(f"{db_path} holds no hf: runs")
    newest = {r["case"][len(PREFIX) :]: r for r in runs}
    full = {r["id"]: r for r in db.query("SELECT id, uid, python, error_type FROM runs")}
    builds = {r["torch_version"] for r in newest.values()}
    versions = {r["transformers_version"] for r in newest.values()}
    if len(builds) > 1 or len(versions) > 1:
        raise SystemExit(f"one torch and one transformers per table: found {sorted(builds)}, {sorted(versions)}")
    pythons = {".".join((full[r["id"]]["python"] or "?").split(".")[:3]) for r in newest.values()}
    return {
        "command": " ".join(said or COMMAND),
        "torch": builds.pop(),
        "transformers": versions.pop(),
        "python": sorted(pythons),
        "recorded": min(r["started_at"] or "" for r in newest.values())[:10],
        "architectures": {
            name: {"status": r["status"], "error_type": full[r["id"]]["error_type"], "uid": full[r["id"]]["uid"]}
            for name, r in sorted(newest.items())
        },
    }


def table(record: dict | str | None = None) -> str:
    """The markdown table: how many architectures there are, how many compile, and which fail how
    (``record``: a record, or the name of its file in docs/; default docs/architectures.json)."""
    name = record if isinstance(record, str) else RECORD.name
    if not isinstance(record, dict):
        record = json.loads(RECORD.with_name(name).read_text())
    found = record["architectures"]
    by_status: dict[str, list[str]] = {}
    for name, entry in found.items():
        by_status.setdefault(entry["status"], []).append(name)
    lines = [
        f"`{record['command']} --jobs 2` on torch {record['torch']} with transformers {record['transformers']} "
        f"(Python {', '.join(record['python'])}), recorded {record['recorded']}, in "
        f"[{name}]({name}):",
        "",
        "| | architectures |",
        "|---|---|",
        f"| decoder-only causal-LM model types transformers {record['transformers']} lists | {len(found)} |",
        f"| compile fullgraph and match eager (`pass`) | {len(by_status.get('pass', []))} |",
    ]
    for status in sorted(s for s in by_status if s not in ("pass", "eager_error")):
        errors = Counter(found[name]["error_type"] for name in by_status[status] if found[name]["error_type"])
        said = f" ({', '.join(f'{e} {n}' for e, n in sorted(errors.items()))})" if errors else ""
        lines.append(f"| `{status}`{said} | {len(by_status[status])}: {', '.join(sorted(by_status[status]))} |")
    skipped = sorted(by_status.get("eager_error", []))
    named = ", ".join(f"{name} ({found[name]['error_type']})" for name in skipped)
    lines.append(f"| skipped: `eager_error`, they do not generate with a tiny config | {len(skipped)}: {named} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["record", "table"])
    parser.add_argument("--db", type=Path, default=Path("architectures.db"))
    parser.add_argument("--stored", action="store_true", help="summarise the runs already in --db")
    parser.add_argument("--torch", help="diag run's --torch (default: diag's own environment)")
    parser.add_argument("--with", dest="requirements", action="append", default=[], help="diag run's --with")
    args = parser.parse_args()
    path = record_path(args.requirements)
    if args.action == "table":
        print(table(path.name), end="")
        return
    said = command(args.torch, args.requirements)
    if not args.stored:
        subprocess.run([*said, "--jobs", "2", "--db", str(args.db)], check=True)
    path.write_text(json.dumps(summarise(args.db, said), indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
