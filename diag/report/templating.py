"""How the report's templates render: the Jinja environment (strict, autoescaped, compiled once per
template source), what every template may call, and ``neutral``, through which every printed value
goes."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Optional

import jinja2
from markupsafe import Markup, escape

from diag import __version__, guards
from diag.config import diag_home
from diag.contract import STATUSES
from diag.pages import case_href
from diag.report.model import FLAKY_FLIPS, row_label
from diag.text import place, safe, step_span
from diag.verdicts import why


def neutral(value: Any) -> Any:
    """What a template prints: text through ``text.safe`` (control and bidirectional characters
    shown as escapes and code points); Markup as is (its parts went through here when it was made)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return safe(value)
    return value


_DICT_ATTRIBUTES = frozenset(dir(dict))


class _Environment(jinja2.Environment):
    """``run.status`` of a dict looked up as the item at once. Jinja tries the attribute first,
    which for a dict is an AttributeError raised and caught at each of the hundreds of thousands of
    lookups of a render. A dict has no attributes but its class's, so for any other name the result
    is jinja's own; ``cap.items()`` and ``texts.get(key)`` are looked up as jinja does."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if obj.__class__ is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                pass
        return super().getattr(obj, attribute)


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """The templates compiled to Python once per template source (jinja checks each against its
    checksum), under DIAG_HOME: compiling them was a tenth of a render. Where that folder cannot be
    written, templates are compiled at each render, as without a cache."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _compiled_templates() -> Optional[jinja2.BytecodeCache]:
    folder = diag_home() / "report-templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _CompiledTemplates(str(folder))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The templates' environment: strict, autoescaped, every printed value through ``neutral``; one
    per process, which keeps each template it loaded (templates are package files: none changes)."""
    env = _Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        bytecode_cache=_compiled_templates(),
        autoescape=True,
        auto_reload=False,  # templates are package files: no stat of each one at every page
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=neutral,
    )
    env.globals.update(
        row_label=row_label,
        case_href=case_href,
        yesno=_yesno,
        fmt=_fmt,
        tool_version=__version__,
        statuses=STATUSES,
        # the badge colours every page's style sheet carries: made once, not in a loop per page
        status_css=Markup("".join(f".s-{escape(s.name)} {{ background: {escape(s.colour)}; }}\n" for s in STATUSES)),
        compare_url=compare_url,
        flaky_flips=FLAKY_FLIPS,
        grows=guards.grows_with_the_step,
        steps=step_span,
        place=place,
        refusal_lines=why.refusal_lines,
    )
    env.tests["startswith"] = lambda value, prefix: str(value).startswith(prefix)
    return env


def compare_url(commits: Optional[str]) -> Optional[str]:
    return f"https://github.com/pytorch/pytorch/compare/{commits}" if commits else None


def _yesno(value: Optional[int]) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _fmt(value: Optional[float], unit: str) -> str:
    return "-" if value is None else f"{value:.3f} {unit}"
