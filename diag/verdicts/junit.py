"""The JUnit XML of ``diag check``: one test case per compared row, a failure per regression."""

from __future__ import annotations

from typing import Sequence
from xml.sax.saxutils import escape, quoteattr

from diag import row as rows
from diag.verdicts import causes as causes_of
from diag.verdicts import expect, regress
from diag.verdicts.coverage import left_out_text


def caveats(comparison: regress.RowComparison) -> list[str]:
    """A row's caveats, one line each: each latency a side's noisy runs left unjudged, and the runs
    each time left out (``coverage.LEFT_OUT`` says why)."""
    said = list(comparison.noisy)
    said += [f"{figure}: {left_out_text(figure, count)}" for figure, count in comparison.left_out.items()]
    return said


def junit_xml(
    comparisons: list[regress.RowComparison],
    found: list[regress.Regression],
    suite: str,
    unjudged: Sequence[regress.Regression] = (),
) -> str:
    """JUnit XML: one test case per compared row, a failure element per regression; a row whose only
    verdict is inconclusive is skipped, with why."""
    by_row: dict[rows.Row, list[regress.Regression]] = {}
    for regression in found:
        by_row.setdefault(regression.row, []).append(regression)
    skipped: dict[rows.Row, list[regress.Regression]] = {}
    for item in unjudged:
        if item.row not in by_row:
            skipped.setdefault(item.row, []).append(item)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name={quoteattr(suite)} tests="{len(comparisons)}" failures="{len(by_row)}" '
        f'skipped="{len(skipped)}">',
    ]
    for comparison in comparisons:
        name = quoteattr(rows.label(comparison.row))
        failures = by_row.get(comparison.row, [])
        said = caveats(comparison)
        if not failures and comparison.row not in skipped and not said:
            lines.append(f'  <testcase classname="diag.check" name={name}/>')
            continue
        lines.append(f'  <testcase classname="diag.check" name={name}>')
        if said:  # what the row's figures could not be trusted with: the runs a time left out, and why
            lines.append(f"    <system-out>{escape(chr(10).join(said))}</system-out>")
        for regression in failures:
            lines.append(
                f"    <failure type={quoteattr(regression.kind)} message={quoteattr(regression.message)}>"
                f"{escape(regression.message)}</failure>"
            )
        if not failures and comparison.row in skipped:
            message = "; ".join(item.message for item in skipped[comparison.row])
            lines.append(f"    <skipped message={quoteattr(message)}/>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"


def contract_suite(held: "expect.Held") -> str:
    """A testsuite of ``diag check --expect``: a test case per row of the build, a failure per count
    that moved, named by the count."""
    by_row: dict[str, list[expect.Moved]] = {}
    for item in held.moved:
        by_row.setdefault(item.row, []).append(item)
    checked = sorted(set(by_row) | set(held.checked))
    lines = [f'<testsuite name="diag expect" tests="{len(checked)}" failures="{len(by_row)}">']
    for label in checked:
        moved = by_row.get(label, [])
        if not moved:
            lines.append(f'  <testcase classname="diag.expect" name={quoteattr(label)}/>')
            continue
        lines.append(f'  <testcase classname="diag.expect" name={quoteattr(label)}>')
        for item in moved:
            message = f"{item.count}: {item.message}" if item.expected is None else item.message
            lines.append(
                f'    <failure type="count moved" message={quoteattr(message)}>{escape(held.update)}</failure>'
            )
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines)


def cause_suite(causes: "list[causes_of.Cause]") -> str:
    """A testsuite of the night's causes: a test case per cause, named by its kind, key and owner,
    failing with every row it hit."""
    lines = [f'<testsuite name="diag causes" tests="{len(causes)}" failures="{len(causes)}">']
    for cause in causes:
        message = f"{cause.hit()}; owner {cause.owner}" + (f" ({cause.tracker})" if cause.tracker else "")
        hit = "\n".join(f"{rows.label(r.row)}: {r.message}" for r in cause.regressions)
        lines.append(f'  <testcase classname="diag.cause" name={quoteattr(cause.headline)}>')
        lines.append(f"    <failure type={quoteattr(cause.kind)} message={quoteattr(message)}>{escape(hit)}</failure>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines)


def with_suites(xml: str, suites: list[str]) -> str:
    """``xml`` (one testsuite) and ``suites`` under one testsuites element; ``xml`` as it is without any."""
    if not suites:
        return xml
    head, _, body = xml.partition("\n")
    return f"{head}\n<testsuites>\n{body.rstrip()}\n" + "\n".join(suites) + "\n</testsuites>\n"
