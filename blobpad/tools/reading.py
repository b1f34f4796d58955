"""Reading helpers shared by the entry-reading profiles (blobpad, seed000, seed003):
slices of characters or bytes, grep's lines, listings, searches run once per call."""

from __future__ import annotations

import base64
import bisect
import datetime
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import HINT_FIXED, InvalidArgument, NotFound
from ..index import Entry
from ..reads import LineWindow, compile_pattern
from .spec import ToolContext, ToolError, result_size


def unit_of(entry: Entry) -> str:
    return "characters" if entry.kind == "text" else "bytes"


def slice_result(
    tb: ToolContext, entry: Entry, start: int, end: int, budget: int, *, mode: str, keep_end: bool = False,
    next_args: Callable[[int, int], dict[str, Any]] | None = None, id_key: str = "scratchpad_id",
    id_value: str | None = None,
) -> dict[str, Any]:
    """Characters (text) or bytes (binary, base64) ``start:end``, cut to ``budget``."""
    length = entry.length
    binary = entry.kind != "text"
    room = max(1, budget // 4 * 3) if binary else max(1, budget)
    a, b = start, end
    truncated = b - a > room
    if truncated:
        if keep_end:
            a = b - room
        else:
            b = a + room
    raw = tb.store.range(entry.id, a, b)
    content = base64.b64encode(raw).decode("ascii") if isinstance(raw, bytes) else raw
    result: dict[str, Any] = {"ok": True, id_key: id_value or entry.id, "mode": mode, "kind": entry.kind,
                              "start": a, "end": b, f"total_{unit_of(entry)}": length}
    if binary:
        result["encoding"] = "base64"
    result["content"] = content
    result["truncated"] = truncated
    if truncated:
        unit = unit_of(entry)
        if next_args is None:
            def next_args(s: int, e: int) -> dict[str, Any]:
                return {"mode": "range", "start": s, "end": e}
        rest = (start, a) if keep_end else (b, end)
        nxt = {id_key: id_value or entry.id, **next_args(*rest)}
        result["next"] = nxt
        result["notice"] = (f"Output capped: showing {unit} {a}-{b} of the {end - start} requested "
                            f"({start}-{end}). The other {rest[1] - rest[0]} {unit} ({rest[0]}-{rest[1]}): call "
                            f"again with {args_text(nxt)}.")
    return result


def args_text(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())


def check_pattern(pattern: str, *, ignore_case: bool, fixed: bool, literal_hint: str | None = None) -> None:
    """Refuse a pattern the search would refuse, in the tools' words (the error's ``tool``
    face), or with ``literal_hint`` where the profile's tool matches literal text its own
    way (seed003's regex has no fixed_strings)."""
    try:
        compile_pattern(pattern, ignore_case=ignore_case, fixed=fixed)
    except InvalidArgument as exc:
        if literal_hint is not None and exc.hint == HINT_FIXED:
            raise ToolError(f"{exc.message}; {literal_hint}") from None
        raise ToolError(exc.render("tool")) from None


def timed_out_notice(tb: ToolContext, entry: Entry, searched: int | None, what: str,
                     advice: str = "search a literal with fixed_strings=true, or read around a line with "
                                   "mode='lines'") -> str:
    """The notice of a search that ran out of time after line ``searched`` (or was cancelled:
    without a time budget, only a cancelled search stops early)."""
    done = searched or 0
    covered = f"{what} lines 1-{done} (the later lines were not searched)" if done else "no line was searched"
    if tb.search_timeout is None:
        return f"Stopped: the search was cancelled at line {done + 1} of {entry.lines}; {covered}."
    return (f"Timed out: the search stopped after {tb.search_timeout:g} s at line {done + 1} of {entry.lines}; "
            f"{covered}. This pattern is slow to match here: "
            f"simplify it (a .* before a class and a long repetition such as .{{30}} make RE2 slow), {advice}.")


def cap_window(w: LineWindow, cap: int, id_args: dict[str, Any]) -> str:
    """Line ``w.line`` from ``w.offset`` cut to ``cap`` characters (``w`` holds at least
    that many), with a notice saying how to read on."""
    rest = w.line_chars - w.offset
    if rest <= cap:
        return w.text
    nxt = args_text({**id_args, "mode": "lines", "start_line": w.line, "end_line": w.line, "column": w.offset + cap})
    return f"{w.text[:cap]} [... line {w.line} continues for {rest - cap} more characters; read on with {nxt}]"


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def read_range(tb: ToolContext, entry: Entry, a: dict[str, Any], budget: int, mode: str) -> dict[str, Any]:
    length = entry.length
    start, end = a["start"], a["end"]
    if start is None:
        raise ToolError(f"scratchpad_read: mode 'range' needs start (the first {unit_of(entry)[:-1]}, from 0)")
    if start > length:
        raise ToolError(f"scratchpad_read: start {start} is past the end; the entry has {length} {unit_of(entry)}")
    if end is None:
        end = length
    if end < start:
        raise ToolError(f"scratchpad_read: end ({end}) is before start ({start}); end is exclusive and must be >= start")
    return slice_result(tb, entry, start, min(end, length), budget, mode=mode)


def grep_lines(
    tb: ToolContext, entry: Entry, res_matches: list[Any], context: int, budget: int, id_args: dict[str, Any],
    separator: bool = True, read_on: bool = True, known: Iterable[int] = (),
) -> tuple[list[str], int]:
    """Format grep matches as ``N:text`` (context ``N-text``, groups split by ``--``).

    Returns the lines and how many matches fit in ``budget``.  The ``context`` lines
    before and after each match are read here, for the matches shown only, each cut to
    what can be shown (``Store.line_windows``): the search itself is asked for none, so
    a page of many matches with wide context never holds more than it shows.  A context
    never runs into another match: ``known`` holds the lines of the matches of the other
    pages the caller knows (those before this page, and those after it within
    ``context`` lines), which are never shown as context lines (``N-``), since they match.
    A first match whose context does not fit keeps the context lines nearest to it and
    says which lines it leaves out, with the arguments that read them.

    A line cut to the width says how to read on with ``mode="lines"`` and a column; a
    profile whose read tool has no such mode (``read_on=False``, seed 003) says only
    how much of the line is left.  The part of a matching line shown always holds its
    first match.
    """
    cap = min(tb.line_chars, max(80, budget - 400))
    match_lines = sorted({m.line for m in res_matches} | set(known))
    out: list[str] = []
    used = 0
    last_emitted = 0
    shown = 0

    def ctx_line(number: int, text: str) -> str:
        if len(text) > cap:
            if not read_on:
                return f"{number}-{text[:cap]} [... line {number} continues]"
            nxt = args_text({**id_args, "mode": "lines", "start_line": number, "end_line": number, "column": cap})
            return f"{number}-{text[:cap]} [... line {number} continues; read on with {nxt}]"
        return f"{number}-{text}"

    def around(first: int, last: int) -> list[tuple[int, str]]:
        last = min(last, entry.lines)
        if not context or first > last:
            return []
        try:
            return [(w.line, w.text) for w in tb.store.line_windows(entry.id, first, last, width=cap + 1)]
        except NotFound:  # deleted or expired since the search: the matches without their context
            return []

    def left_out(first: int, last: int) -> str:
        if not read_on:
            return f"[... context lines {first}-{last} not shown: the output is capped]"
        nxt = args_text({**id_args, "mode": "lines", "start_line": first, "end_line": last})
        return f"[... context lines {first}-{last} not shown: the output is capped; read them with {nxt}]"

    def match_line(m: Any) -> str:
        start = 0
        if m.spans and m.spans[0][1] > cap:  # the cut would hide the match: show the part around it
            start = max(0, min(m.spans[0][0] - cap // 4, len(m.text) - cap))
        text = m.text[start : start + cap]
        offset = m.offset + start
        prefix = f"[... {offset} characters ...]" if offset else ""
        after_chars = m.line_chars - offset - len(text)
        suffix = ""
        if after_chars > 0 and not read_on:
            suffix = f" [... line {m.line} continues for {after_chars} more characters]"
        elif after_chars > 0:
            nxt = args_text({**id_args, "mode": "lines", "start_line": m.line, "end_line": m.line,
                              "column": offset + len(text)})
            suffix = f" [... line {m.line} continues for {after_chars} more characters; read on with {nxt}]"
        return f"{m.line}:{prefix}{text}{suffix}"

    for m in res_matches:
        i = bisect.bisect_left(match_lines, m.line)
        previous = match_lines[i - 1] if i > 0 else 0  # contexts stop short of other matches
        following = match_lines[i + 1] if i + 1 < len(match_lines) else entry.lines + 1
        before = [(n, ctx_line(n, t)) for n, t in
                  around(max(1, m.line - context, last_emitted + 1, previous + 1), m.line - 1)]
        after = [(n, ctx_line(n, t)) for n, t in around(m.line + 1, min(m.line + context, following - 1))]
        first_line = before[0][0] if before else m.line
        end_line = after[-1][0] if after else m.line
        group = [line for _, line in before] + [match_line(m)] + [line for _, line in after]
        if separator and context and out and first_line > last_emitted + 1:
            group.insert(0, "--")
        size = sum(len(g) + 1 for g in group)
        if used + size > budget:
            if out:
                break
            group, end_line = _nearest_context(before, (m.line, match_line(m)), after, budget - used, left_out)
            size = sum(len(g) + 1 for g in group)
        out.extend(group)
        used += size
        last_emitted = max(last_emitted, end_line)
        shown += 1
    return out, shown


def _nearest_context(
    before: list[tuple[int, str]], numbered: tuple[int, str], after: list[tuple[int, str]], room: int,
    left_out: Callable[[int, int], str],
) -> tuple[list[str], int]:
    """The match with the context lines nearest to it that fit in ``room`` (taken in turn
    before and after it), and a line naming each run of context lines left out; and the
    last line number it shows."""
    number, match = numbered
    reserve = 2 * len(left_out(10**9, 10**9)) + 4  # the notes of what is left out
    used = len(match) + 1 + reserve
    kept_before, kept_after = 0, 0
    turn = 0
    while kept_before < len(before) or kept_after < len(after):
        take_before = kept_before < len(before) and (turn % 2 == 0 or kept_after >= len(after))
        line = before[len(before) - 1 - kept_before][1] if take_before else after[kept_after][1]
        if used + len(line) + 1 > room:
            break
        used += len(line) + 1
        if take_before:
            kept_before += 1
        else:
            kept_after += 1
        turn += 1
    group: list[str] = []
    if kept_before < len(before):
        group.append(left_out(before[0][0], before[len(before) - kept_before - 1][0]))
    group += [line for _, line in before[len(before) - kept_before:]] + [match] + [line for _, line in after[:kept_after]]
    if kept_after < len(after):
        group.append(left_out(after[kept_after][0], after[-1][0]))
    return group, after[kept_after - 1][0] if kept_after else number


def list_result(tb: ToolContext, budget: int, skip: int, describe: Callable[[Entry], dict[str, Any]],
                next_tool_args: bool = True) -> dict[str, Any]:
    entries = tb.entries()
    rows: list[dict[str, Any]] = []
    used = 0
    # a listing that cannot page (a profile whose list tool takes no arguments) keeps the newest entries
    # that fit, oldest first: the outputs an agent most likely wants are its latest ones
    for e in entries[skip:] if next_tool_args else reversed(entries[skip:]):
        row = describe(e)
        size = result_size(row) + 2
        if rows and used + size > budget:
            break
        rows.append(row)
        used += size
    if not next_tool_args:
        rows.reverse()
    result: dict[str, Any] = {"ok": True, "count": len(entries), "entries": rows}
    rest = len(entries) - skip - len(rows)
    if rest > 0:
        result["truncated"] = True
        if next_tool_args:
            result["next"] = {"skip": skip + len(rows)}
            result["notice"] = f"{rest} more entries not shown; call again with skip={skip + len(rows)}."
        else:
            result["notice"] = (f"{rest} older entries not shown (output capped: these are the newest); delete the "
                                "ones you no longer need.")
    else:
        result["truncated"] = False
    return result
