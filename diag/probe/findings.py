"""What one compile found, as records: graph breaks (logged, counted, or a frame that fell back),
recompiles and hidden errors, counted once each and checked against dynamo's own counters.

Imports: standard library and the probe's own modules (no torch): the orchestrator's tests replay
each torch version's logs through these functions.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping, Optional

from diag.probe import capture, keys, parsers, records, statuses
from diag.probe.records import Writer


def group(items: list[dict], by: tuple[str, ...], count_field: str = "count") -> list[dict]:
    """Items with equal ``by`` fields merged into one, counted, keeping the first occurrence and the
    span of decode steps its events happened at (``decode_step`` the earliest, ``last_decode_step``
    the latest, the prefill (records.PREFILL) before step 0: a break at the prefill and again at a
    decode step says so)."""
    grouped: "OrderedDict[tuple, dict]" = OrderedDict()
    for item in items:
        ident = tuple(item.get(field) for field in by)
        if ident in grouped:
            kept = grouped[ident]
            kept[count_field] += 1
            spanned(kept, [item.get("decode_step")])
        else:
            grouped[ident] = {**item, count_field: 1, "last_decode_step": item.get("decode_step")}
    return list(grouped.values())


def spanned(item: dict, steps: list[Optional[int]]) -> dict:
    """``item``'s span of decode steps widened to hold ``steps`` (None: a step not known, left out)."""
    known = [s for s in (item.get("decode_step"), item.get("last_decode_step"), *steps) if s is not None]
    if known:
        item["decode_step"], item["last_decode_step"] = min(known), max(known)
    return item


def graph_breaks_from_counters(collector: capture.LogCapture, counters: dict) -> list[dict]:
    """Graph breaks from dynamo's counters, for a torch whose graph_breaks log does not report them (2.1).

    torch counts a break it resumes from under "graph_break" and one it cannot resume from under
    "unimplemented"; both are used only when the log gave no graph-break record at all.
    """
    if collector.of_kind("graph_break"):
        return []
    found = graph_breaks_from_messages(counters.get("graph_break", {}), resumable=True) + graph_breaks_from_messages(
        counters.get("unimplemented", {}), resumable=False
    )
    return placed_at_sites(found, collector.of_kind("break_site"))


def placed_at_sites(breaks: list[dict], sites: list[dict]) -> list[dict]:
    """Counted breaks with no location placed where torch 2.0 said a graph ended at them.

    A site whose reason is a break's message places that break. A site whose reason names only the
    instruction (``step_unsupported``, ``generic_jump``, ``store_attr``: the break was raised there)
    carries the message of the ``... triggered compile`` record before it (LogCapture), so it is
    named too; one without such a record places the next counted break no named site placed, in
    the order both were seen. A break placed by name spans the decode steps of all its sites."""
    named: dict[str, list[dict]] = {}
    for site in sites:
        named.setdefault(site["reason"], []).append(site)
    unnamed = [site for site in sites if site["reason"] not in {b["reason"] for b in breaks}]
    placed_rows: list[dict] = []
    for item in breaks:
        own = named.get(item["reason"], [])
        if item.get("location") or own:
            placed_rows += [item] if item.get("location") else at_sites(item, own)
            continue
        placed = unnamed.pop(0) if unnamed else None
        if placed is not None:
            item["location"] = placed["location"]
            spanned(item, [placed["decode_step"]])
        placed_rows.append(item)
    return placed_rows


def at_sites(item: dict, sites: list[dict]) -> list[dict]:
    """A counted break with no place of its own, placed at the sites torch said a graph ended for it.

    Where the sites account for every event torch counted, a row per place each counting its own
    sites, over the steps they were logged at (the prefill included); else one row at the first
    site, over the steps of all of them (torch logged fewer ends than it counted)."""
    by_place: "OrderedDict[Optional[str], list[dict]]" = OrderedDict()
    for site in sites:
        by_place.setdefault(site["location"], []).append(site)
    if len(sites) != (item.get("count") or 1) or None in by_place:
        return [spanned({**item, "location": sites[0]["location"]}, [site["decode_step"] for site in sites])]
    return [
        spanned(
            {**item, "location": place, "count": len(here), "decode_step": None, "last_decode_step": None},
            [site["decode_step"] for site in here],
        )
        for place, here in by_place.items()
    ]


def counted_breaks_note(has_log: bool) -> dict[str, Any]:
    """What a run says when its graph breaks came from dynamo's counters, not from the log.

    Where the build has a graph-break log, the log is not missing: the breaks are ones torch only
    counts (a frame it gives up on is skipped whole, with no graph-break record), and saying the log
    is unavailable would be false for that build."""
    if has_log:
        return {
            "name": "counted_breaks",
            "available": True,
            "detail": "graph breaks that torch counted without a graph-break log record (a frame skipped "
            "whole): counted from dynamo's counters, located where a frame fallback names the line",
        }
    return {
        "name": "graph_breaks_log",
        "available": False,
        "detail": "the graph_breaks log held no graph breaks while dynamo's counters did; "
        "graph breaks counted from the counters (no decode step, location from the message)",
    }


def graph_breaks_from_messages(counted: dict[str, int], resumable: bool) -> list[dict]:
    found = []
    for message, count in counted.items():
        location = parsers.innermost_user_frame(message)
        gb_type = parsers.gb_type(message)
        found.append(
            {
                "key": keys.stable_key("Unsupported", message, location, gb_type),
                "reason": message,
                "gb_type": gb_type,
                "location": location,
                "resumable": resumable,
                "decode_step": None,
                "count": count,
            }
        )
    return found


def fallback_breaks(hidden: list[dict], breaks: list[dict]) -> list[dict]:
    """A graph break for each frame that fell back to eager where no graph break was logged.

    A frame (or its remainder) that runs eagerly did not compile whole: for the user that is a
    graph break, whether torch logged it as one or only as a swallowed WON'T CONVERT. Counting it
    here, as a graph-break record, keeps one count for the status and for what is stored.
    """
    logged = {item.get("location") for item in breaks}
    found = []
    for item in hidden:
        if item["source"] != "frame_fallback" or item.get("location") in logged:
            continue
        counted = _counted_as(item, breaks)
        if counted is not None:
            # torch counted this fallback (the break taken from its counters): one event, one row,
            # placed where the fallback's record names the line
            counted["location"] = counted.get("location") or item.get("location")
            if counted.get("decode_step") is None:
                counted["decode_step"] = item.get("decode_step")
            continue
        found.append(
            {
                "key": item["key"],
                "reason": f"the frame fell back to eager: {item['exc_type']}: {item['message']}",
                "gb_type": "frame fallback",
                "location": item.get("location"),
                "resumable": False,
                "decode_step": item.get("decode_step"),
                "count": item.get("count") or 1,
            }
        )
    return found


def _in_torch(location: Optional[str]) -> bool:
    return location is not None and bool(location) and parsers.is_torch_file(location.rsplit(":", 1)[0])


def located_as_before(items: list[dict]) -> list[dict]:
    """Breaks placed in torch's own file moved to the user's line of the same break seen before.

    torch logs a break again with "user stack suppressed due to duplicate graph break" and only its
    innermost frame, which is torch's own where the user called into torch (a custom op's
    ``__call__`` in custom_ops.py): the user's line is the one the first record of that break (same
    key, same reason up to the traceback) named, where there is exactly one such line."""

    def same(item: dict) -> tuple:
        return item["key"], item["reason"].split("User code traceback:")[0].strip()

    seen: dict[tuple, set] = {}
    for item in items:
        if item.get("location") and not _in_torch(item["location"]):
            seen.setdefault(same(item), set()).add(item["location"])
    for item in items:
        lines = seen.get(same(item), set())
        if _in_torch(item.get("location")) and len(lines) == 1:
            item["location"] = next(iter(lines))
    return items


def one_fallback_each(hidden: list[dict]) -> list[dict]:
    """Hidden errors with a frame fallback torch reported twice made one.

    torch ≥ 2.7 reports a break it cannot resume from on the graph-break log ("Failed to handle graph
    break gracefully. Skipping the function ...") and the same event again from convert_frame, whose
    traceback places it at the skipped frame's line. The graph-break record names the user's line
    of the break; it is kept, and the echo (same key, same first message line, same decode step,
    another logger) is dropped, pair by pair.
    """
    echoes = [
        item
        for item in hidden
        if item["source"] == "frame_fallback" and not (item.get("logger") or "").endswith("__graph_breaks")
    ]
    dropped: set[int] = set()
    for item in hidden:
        if item["source"] != "frame_fallback" or not (item.get("logger") or "").endswith("__graph_breaks"):
            continue
        for echo in echoes:
            same = (echo["key"], _first_line(echo["message"]), echo.get("decode_step")) == (
                item["key"],
                _first_line(item["message"]),
                item.get("decode_step"),
            )
            if same and id(echo) not in dropped:
                dropped.add(id(echo))
                item["count"] = max(item.get("count") or 1, echo.get("count") or 1)
                break
    return [item for item in hidden if id(item) not in dropped]


def one_per_event(hidden: list[dict]) -> list[dict]:
    """An error torch swallowed and the frame it gave up on for it made one: convert_frame's fallback
    record names the frame (its code, at the frame's first line) and the exception it stopped on, which
    names the error (a TorchRuntimeError's "got TypeError('...')"), while the error's own record
    sits where the user's code raised it. Joined by what the fallback says, not by line: same decode
    step, the error's type and first line within the fallback's text, each record joined once. The
    row kept is the error's, at the line that raised it, counted as the frame given up."""
    used: set[int] = set()
    dropped: set[int] = set()
    for index, fallback in enumerate(hidden):
        if fallback["source"] != "frame_fallback":
            continue
        said = f"{fallback.get('exc_type')}: {fallback.get('message') or ''}\n{fallback.get('traceback') or ''}"
        for earlier in hidden[:index]:
            first = _first_line(earlier.get("message"))
            kind = earlier.get("exc_type")
            # the error's own line, or the repr torch's message quotes it by ("got TypeError('...')")
            named = bool(first) and (f"{kind}: {first}" in said or f"{kind}({first!r})" in said)
            if (
                id(earlier) in used
                or earlier["source"] != "swallowed_exception"
                or earlier.get("decode_step") != fallback.get("decode_step")
                or not named
            ):
                continue
            used.add(id(earlier))
            dropped.add(id(fallback))
            earlier.update(source="frame_fallback", count=max(earlier.get("count") or 1, fallback.get("count") or 1))
            earlier["location"] = earlier.get("location") or fallback.get("location")
            break
    return [item for item in hidden if id(item) not in dropped]


def _first_line(text: Optional[str]) -> str:
    return ((text or "").strip().splitlines() or [""])[0].strip()


def _counted_as(fallback: dict, breaks: list[dict]) -> Optional[dict]:
    """The break taken from dynamo's counters (no location of its own) that is ``fallback``'s event:
    its message is the fallback's."""
    message = _first_line(fallback.get("message"))
    for item in breaks:
        if item.get("location") is None and message and _first_line(item.get("reason")) == message:
            return item
    return None


def _says(item: dict, message: str) -> bool:
    """Whether a break's record is the event torch counted under ``message``."""
    reason = item.get("reason") or ""
    first = _first_line(reason)
    return bool(message) and (message in reason or (bool(first) and first in message))


FELL_BACK_ON_A_BREAK = "the frame fell back to eager: Unsupported:"


def as_torch_counted(breaks: list[dict], counters: dict, sites: Optional[list[dict]] = None) -> list[dict]:
    """The breaks, a row per message dynamo counted, where what the log gave does not add up to
    dynamo's counters: ``graph_break`` (a break it resumed from, each time it was hit) and
    ``unimplemented`` (an Unsupported it could not turn into a resumed break: the frame, or the
    rest of it, ran eagerly).

    Torch logs do not count: 2.1 to 2.4 log a break once per place however often it is hit, some
    log a break without its words ("Graph break: from user code at:"), and a frame skipped whole is
    logged again as a fallback ("Graph break: skip:", WON'T CONVERT). Each counted message takes the
    location, key and decode step of the first record that says it (one handled the same way, with a
    location, first); a message no record says is a row of its own. A frame that fell back on an
    exception that is no break (torch counts it nowhere) stays a row. A message no record places
    is placed where the DEBUG log says a graph ended for it (``sites``, parse_break_site).
    """
    resumed, cut = counters.get("graph_break") or {}, counters.get("unimplemented") or {}
    wanted = sum(resumed.values()) + sum(cut.values())
    if not wanted or statuses.finding_total(breaks) == wanted:
        return breaks
    result: list[dict] = []
    used: set[int] = set()
    for counted, resumable in ((resumed, True), (cut, False)):
        for message, count in counted.items():
            text = message.strip()
            matched = [i for i, item in enumerate(breaks) if _says(item, text)]
            matched.sort(key=lambda i: (bool(breaks[i]["resumable"]) != resumable, breaks[i].get("location") is None))
            used.update(matched)
            row = dict(breaks[matched[0]]) if matched else graph_breaks_from_messages({message: count}, resumable)[0]
            row.update(count=count, resumable=resumable)
            own = [] if row.get("location") else [x for x in sites or [] if _says(x, text)]
            result += at_sites(row, own) if own else [row]
    return result + [
        item
        for i, item in enumerate(breaks)
        if i not in used
        and item.get("gb_type") == "frame fallback"
        and not item["reason"].startswith(FELL_BACK_ON_A_BREAK)
    ]


def raised_site(error: Optional[Mapping[str, Any]]) -> list[dict]:
    """Where a compile that raised "arg mismatch inlining" (torch 2.0/2.1 with fullgraph) was: the
    call whose binding failed, a site as parse_break_site's (any decode step)."""
    if not error or not (error.get("error_message") or "").startswith(parsers.ARG_MISMATCH):
        return []
    location = error.get("error_location")
    return [{"reason": parsers.ARG_MISMATCH, "location": location, "decode_step": None}] if location else []


def emit_findings(
    results: Writer,
    collector: capture.LogCapture,
    extra_breaks: list[dict],
    counters: Optional[dict] = None,
    failed_whole: bool = False,
    error: Optional[Mapping[str, Any]] = None,
) -> list[dict]:
    """Write the findings of one compile; returns the graph-break records written (the one count).

    ``failed_whole``: a fullgraph compile that raised has no graph breaks, whatever torch logged
    on the way; its error is the finding (the count no longer depends on the error's type).
    ``error``: the run's error fields (error_message, error_location), where it raised.
    """
    # one row per break and per way torch handled it: a break it resumed from and the same break
    # where it could not (the rest of the frame ran eagerly) are two rows, as torch counts them
    breaks = group(located_as_before(collector.of_kind("graph_break")), ("key", "location", "resumable")) + extra_breaks
    hidden = group(collector.of_kind("hidden_error"), ("key", "location"))  # where frames fell back
    breaks = (
        []
        if failed_whole
        else as_torch_counted(breaks + fallback_breaks(hidden, breaks), counters or {}, collector.of_kind("break_site"))
    )
    for item in breaks:
        results.write(records.GRAPH_BREAK, **item)
    for item in collector.of_kind("recompile"):
        results.write(records.RECOMPILE, **item)
    # an inline error the log did not place (LogCapture) is the raised one's where the compile raised it
    for item in hidden_errors(collector.of_kind("hidden_error"), failed_whole, raised_site(error), error):
        results.write(records.HIDDEN_ERROR, **item)
    return breaks


def _is_raised(item: dict, raised: Mapping[str, Any]) -> bool:
    """Whether a hidden error's record is the error a fullgraph compile raised: the recompile limit's
    warning behind a limit failure (or behind a run whose error torch did not name), or a record of
    the raised error's type and first line."""
    kind = raised.get("error_type") or ""
    if item["source"] == parsers.RECOMPILE_LIMIT:
        return parsers.limit_failure(kind) or not kind
    message = _first_line(raised.get("error_message"))
    return bool(kind) and item.get("exc_type") == kind and bool(message) and _first_line(item["message"]) == message


def hidden_errors(
    found: list[dict],
    failed_whole: bool = False,
    sites: Optional[list[dict]] = None,
    raised: Optional[Mapping[str, Any]] = None,
) -> list[dict]:
    """The hidden errors of one compile: one per event torch swallowed, whichever of its logs named
    it and however often, then a row per key and location counting the events.

    An event is a frame torch gave up on (one per frame and decode step) or an error it swallowed
    without giving up a frame. On a fullgraph compile that raised, the error it raised (``raised``, the
    run's error fields) is the run's, not one torch swallowed; what torch swallowed before it stays."""
    events = placed_inline_errors([dict(item) for item in found], sites or [])
    events = one_per_frame(one_per_event(one_fallback_each(events)))
    if failed_whole:  # the raised error is the run's, never also a hidden one (docs/data-model.md)
        events = [item for item in events if not _is_raised(item, raised or {})]
    return group([{k: v for k, v in item.items() if k != "count"} for item in events], ("key", "location"))


GAVE_UP = ("frame_fallback", parsers.RECOMPILE_LIMIT)


def placed_inline_errors(hidden: list[dict], sites: list[dict]) -> list[dict]:
    """An error torch 2.0/2.1 swallowed while binding an inlined call's arguments placed at the call:
    its warning names only the inlined function's file, and the graph dynamo then ended "due to
    arg mismatch inlining" names the user's line that made the call (parse_break_site), in the same
    decode step; each such site places one error, in the order both were logged."""
    unused = [site for site in sites if site["reason"] == parsers.ARG_MISMATCH]
    for item in hidden:
        if item.get("location") or parsers.ARG_MISMATCH not in (item.get("message") or ""):
            continue
        site = next((s for s in unused if s.get("decode_step") in (item.get("decode_step"), None)), None)
        if site is not None:
            unused.remove(site)
            item["location"] = site["location"]
    return hidden


def one_per_frame(hidden: list[dict]) -> list[dict]:
    """Records of one given-up frame made one: torch names the frame it gives up on from several
    loggers at once (the backend's exception on the graph-break log, convert_frame's WON'T CONVERT
    with torch's own wrapper of it, the recompile-limit warning beside the fallback it causes), each
    at the frame's line in the same decode step. The one kept says most: the recompile limit, else
    the exception torch wrapped (DataDependentOutputException, not "Backend compiler exception").
    Two records of one logger at one place are two frames: a helper's break that makes torch skip
    each of its two callers whole is logged at the helper's line once per caller."""

    def rank(item: dict) -> int:
        return 0 if item["source"] == parsers.RECOMPILE_LIMIT else 1 if item.get("exc_type") != "Unsupported" else 2

    # per place and decode step, the events so far: each the (logger, source) pairs that named it,
    # and the record kept of it. One logger says one frame once: a second record from the same logger
    # and source at the same place is another frame (two callers of one helper, each skipped whole)
    events: "OrderedDict[Any, list[tuple[set, dict]]]" = OrderedDict()
    for index, item in enumerate(hidden):
        place = item.get("location")
        at = ("frame", place, item.get("decode_step")) if item["source"] in GAVE_UP and place else index
        said_by = (item.get("logger"), item["source"])
        here = events.setdefault(at, [])
        event = next((e for e in here if said_by not in e[0]), None)
        if event is None:
            here.append(({said_by}, item))
            continue
        event[0].add(said_by)
        if rank(item) < rank(event[1]):
            here[here.index(event)] = (event[0], item)
    return [item for here in events.values() for _, item in here]
