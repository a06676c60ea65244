"""``diag backfill``: which nightlies of a date range to run, one every so many days.

The builds come from what can be found without installing anything: the nightly index's listing
(about two months), wheel folders, the builds the history names, and, where an end names its
series (``2.1.0.dev20230601``), each date's wheel at its direct URL (older nightlies). Each window of
``every`` days gets its earliest build; builds the history already has are skipped.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from diag import envs
from diag.bisect import at_direct_url, index_versions
from diag.build import Version, nightly_date, version_key
from diag.envs import wheels
from diag.errors import DiagError


class BackfillError(DiagError, ValueError):
    pass


@dataclass
class End:
    day: datetime.date
    series: Optional[str]  # "2.1.0" where the end is a dated nightly


def parse_end(text: str) -> End:
    """A dated nightly (``2.1.0.dev20230601``) or a date (``2023-06-01``, ``20230601``)."""
    version = Version.lenient(text)
    if version is not None and version.nightly_date:
        return End(datetime.date.fromisoformat(version.nightly_date), ".".join(map(str, version.release)))
    found = re.fullmatch(r"(\d{4})-?(\d{2})-?(\d{2})", text.strip())
    try:
        if found:
            return End(datetime.date(*(int(group) for group in found.groups())), None)
    except ValueError:
        pass
    raise BackfillError(f"{text!r}: expected a date (2023-06-01) or a dated nightly (2.1.0.dev20230601)")


MAX_EVERY_DAYS = 36_525  # a century: every window past it holds one build at most anyway


def parse_every(text: str) -> int:
    found = re.fullmatch(r"\s*(\d+)\s*([dw])\s*", text)
    if not found or int(found.group(1)) == 0:
        raise BackfillError(f"{text!r}: expected days or weeks, such as 1d, 7d or 2w")
    days = int(found.group(1)) * (7 if found.group(2) == "w" else 1)
    if days > MAX_EVERY_DAYS:
        raise BackfillError(f"{text!r}: at most {MAX_EVERY_DAYS} days (a century)")
    return days


@dataclass
class Found:
    builds: list[str] = field(default_factory=list)  # the dated nightlies to run, oldest first
    sources: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # in the history already
    empty_windows: list[str] = field(default_factory=list)  # first day of each window with no build
    notes: list[str] = field(default_factory=list)


def _day(version: str) -> Optional[datetime.date]:
    dated = nightly_date(version)
    return datetime.date.fromisoformat(dated) if dated else None


def select(
    first: End, last: End, every: int, request: envs.Request, folders: Iterable[Path], stored: Iterable[str]
) -> Found:
    if first.day > last.day:
        raise BackfillError(f"--from {first.day} comes after --to {last.day}")
    today = datetime.datetime.now(datetime.timezone.utc).date()
    if first.day > today:
        raise BackfillError(f"--from {first.day} is after today ({today}): no nightly of it exists yet")
    found = Found()
    if last.day > today:
        # the days after today cannot have a nightly: looking each up would only cost requests
        found.notes.append(f"--to {last.day} is after today: the last window ends today, {today}")
        last = End(today, last.series)
    known: dict[str, list[str]] = {}
    try:
        for version in index_versions(request.index):
            known.setdefault(version, []).append("index")
    except envs.EnvError as exc:
        found.notes.append(f"the index could not be listed ({exc}); using wheel folders, the history and direct URLs")
    for wheel in wheels.local_wheels(folders, "folder"):
        known.setdefault(wheel.base_version, []).append("folder")
    stored_base = set()
    for version in stored:
        parsed = Version.lenient(version)
        if parsed is not None:
            stored_base.add(parsed.base)
            known.setdefault(parsed.base, []).append("history")
    by_day: dict[datetime.date, list[str]] = {}
    for version in known:
        day = _day(version)
        if day is not None and first.day <= day <= last.day:
            by_day.setdefault(day, []).append(version)
    series = sorted({end.series for end in (first, last) if end.series}, key=version_key)
    tags = wheels.supported_tags(request.python) if series else []
    start = first.day
    while start <= last.day:
        window = [start + datetime.timedelta(days=offset) for offset in range(every)]
        window = [day for day in window if day <= last.day]
        chosen = _earliest(window, by_day, series, request, tags, known)
        if chosen is None:
            found.empty_windows.append(start.isoformat())
        elif chosen in stored_base:
            found.skipped.append(chosen)
        else:
            found.builds.append(chosen)
        start += datetime.timedelta(days=every)
    found.sources = {build: known[build] for build in found.builds + found.skipped}
    return found


def _earliest(
    window: list[datetime.date],
    by_day: dict[datetime.date, list[str]],
    series: list[str],
    request: envs.Request,
    tags: list[str],
    known: dict[str, list[str]],
) -> Optional[str]:
    """The window's earliest build: one already known, else one at its direct URL."""
    for day in window:
        if day in by_day:
            return sorted(by_day[day], key=version_key)[-1]
        served = at_direct_url(series, day.strftime("%Y%m%d"), request, tags)
        if served is not None:
            known.setdefault(served, []).append("direct URL")
            return served
    return None
