"""One render of the site as one object: the history it reads, the site's options, the templates, the
site as it was before, and, once the matrix is known, what every page shares. The render's steps take
it instead of threading these through each call; rendering reads no clock (``render``'s docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import jinja2

from diag.report import inputs
from diag.report.publish import Site

BUILDS_PER_PAGE = 25
DETAIL_BUILDS = 30


@dataclass(frozen=True)
class Options:
    """The site's options: where its run artifacts are linked from (``out_dir``), how many builds a
    matrix page shows and how many newest builds have their runs detailed, the name Datasette gives
    the DB, how many processes render, and the site the pages will be published in."""

    out_dir: Path
    builds_per_page: int = BUILDS_PER_PAGE
    detail_builds: int = DETAIL_BUILDS
    db_name: Optional[str] = None
    processes: Optional[int] = None
    site: Optional[Site] = None
    carry_artifacts: bool = False  # copy each detailed run's directory into the site and link it there


@dataclass
class Render:
    """One render: ``db`` (the history, read in one transaction), ``options``, the templates'
    ``env``, ``made`` (the pages the site held, with their inputs), ``resume`` (take the matrix up
    from the state kept beside the site), and what the pages share once it is known: ``memo`` (what
    a build's pages were made from, kept from night to night), ``common`` (what every page is given),
    ``nav`` (what the navigation is made from) and ``changes`` (the change points the pages show)."""

    db: Any
    options: Options
    env: jinja2.Environment
    made: inputs.Pages
    resume: bool
    memo: Optional[inputs.Memo] = None
    common: dict[str, Any] = field(default_factory=dict)
    nav: list[Any] = field(default_factory=list)
    changes: list[Any] = field(default_factory=list)  # the change points the pages show (night_changes)
    changes_window: int = 0  # over how many of the newest builds they were searched

    @property
    def quiet(self) -> dict[str, Any]:
        """What a page kept from night to night is given: ``common`` without the stamp of the newest data."""
        return {**self.common, "data_stamp": ""}

    def page(self, template: str, **values: Any) -> str:
        return self.env.get_template(template).render(**values)
