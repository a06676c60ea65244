"""`diag report` night after night: what a nightly publish job pays over a month, not one night.

A history of ``--runs`` synthetic runs is rendered once from scratch, then ``--nights`` nights are
added one at a time, each rendered into the same folder as the job does (`diag report` in a
subprocess, the pages made before kept). One night is not every night: a night that adds a page to
the matrix's archive, say, once every 25, may cost more than the others. Printed per diag: the CPU
seconds of the process tree per night (median, mean, range), the nights that cost over half a
render from scratch, and the render from scratch itself.

``--against DIR`` renders the same nights with the diag checked out in DIR (another commit) as well,
from its own copy of the history, alternating which goes first each night.

    python bench/report_nights.py                # 50,000 runs, 25 nights (an archive page's worth)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic  # after sys.path names bench/
from common import REPO, compiled  # as above
from report_scale import _render, _synthetic  # as above


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--nights", type=int, default=25)
    parser.add_argument("--against", type=Path, help="a checkout of diag at another commit (git worktree add)")
    args = parser.parse_args()
    codes: list[Optional[Path]] = [None] + ([args.against.resolve()] if args.against else [])
    scratch: dict[Optional[Path], float] = {}
    nights: dict[Optional[Path], list[float]] = {code: [] for code in codes}
    with tempfile.TemporaryDirectory(prefix="diag-report-nights-") as tmp:
        work = Path(tmp)
        paths = {code: work / f"history{index}.db" for index, code in enumerate(codes)}
        made = synthetic.whole_nightlies(args.runs)
        for code in codes:
            compiled(code or REPO)
            _synthetic(code, "write_history", paths[code], args.runs)
            scratch[code] = _render(paths[code], work / f"site-{paths[code].stem}", None, code)["cpu_s"]
        for night in range(args.nights):
            turn = codes[night % len(codes) :] + codes[: night % len(codes)]
            for code in turn:
                _synthetic(code, "add_nightly", paths[code], made)
            for code in turn:
                nights[code].append(_render(paths[code], work / f"site-{paths[code].stem}", None, code)["cpu_s"])
            made += len(synthetic.configs())
    print(f"{args.runs:,} synthetic runs, then {args.nights} nights: CPU seconds of the process tree")
    print("| diag | from scratch | a night: median (range) | a night: mean | nights over half a render from scratch |")
    print("|---|---|---|---|---|")
    for code in codes:
        each = nights[code]
        costly = sum(cpu > scratch[code] / 2 for cpu in each)
        print(
            f"| `{code.name if code else 'this checkout'}` | {scratch[code]:.2f} | {statistics.median(each):.2f} "
            f"({min(each):.2f}-{max(each):.2f}) | {statistics.mean(each):.2f} | {costly} of {len(each)} |"
        )


if __name__ == "__main__":
    main()
