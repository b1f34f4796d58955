"""Profile "blobpad", the default: scratchpad_read (head, tail, range, lines, grep, count) and scratchpad_list."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidArgument
from ...index import Entry
from ...reads import line_number
from ..reading import (
    args_text,
    cap_window,
    check_pattern,
    grep_lines,
    iso,
    list_result,
    read_range,
    slice_result,
    timed_out_notice,
)
from ..spec import MAX_INT, Param, Profile, ToolContext, ToolError, ToolSpec

_LINES_PER_CALL = 200             # default number of lines of mode "lines"
_LINE_BATCH = 256                 # lines read from the store at a time
_MAX_SKIP = 10_000                # grep pages: the engine finds skip + max_matches matches each time (builds the page's)

def _read_blobpad(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    _check_mode_args(a)
    entry = tb.entry(a["scratchpad_id"])
    mode = a["mode"]
    length = entry.length
    if mode == "head":
        return slice_result(tb, entry, 0, min(a["n"], length), budget, mode=mode)
    if mode == "tail":
        return slice_result(tb, entry, max(0, length - a["n"]), length, budget, mode=mode, keep_end=True)
    if mode == "range":
        return read_range(tb, entry, a, budget, mode)
    if mode == "lines":
        return _lines(tb, entry, a, budget)
    if mode in ("grep", "count"):
        if a["pattern"] is None:
            raise ToolError(f"scratchpad_read: mode {mode!r} needs a pattern (RE2 regular expression, or literal text "
                            "with fixed_strings=true)")
        check_pattern(a["pattern"], ignore_case=a["ignore_case"], fixed=a["fixed_strings"])
        if mode == "count":
            n = tb.search(("count", entry.id, a["pattern"], a["ignore_case"], a["fixed_strings"]),
                          lambda t: tb.store.count(entry.id, a["pattern"], ignore_case=a["ignore_case"],
                                                   fixed=a["fixed_strings"], timeout=t))
            counted: dict[str, Any] = {"ok": True, "scratchpad_id": entry.id, "mode": "count",
                                       "pattern": a["pattern"], "count": int(n), "total_lines": entry.lines}
            if n.timed_out:
                counted["timed_out"] = True
                counted["searched_lines"] = n.searched_lines
                counted["notice"] = timed_out_notice(tb, entry, n.searched_lines, "count is the matching lines among")
            return counted
        return _grep(tb, entry, a, budget)
    raise ToolError(f"scratchpad_read: unknown mode {mode!r}")  # pragma: no cover - the enum check comes first


def _line_number(n: int, total: int) -> int:
    """A line number of mode lines, as :func:`blobpad.reads.line_number` maps it."""
    try:
        return line_number(n, total)
    except InvalidArgument as exc:
        raise ToolError(f"scratchpad_read: {exc}") from None


def _lines(tb: ToolContext, entry: Entry, a: dict[str, Any], budget: int) -> dict[str, Any]:
    total = entry.lines
    first = _line_number(a["start_line"], total)
    column = a["column"]
    last = _line_number(a["end_line"], total) if a["end_line"] is not None else first + _LINES_PER_CALL - 1
    if last < first:
        def where(name: str, n: int) -> str:
            return f"{name} {a[name]}" + (f" (line {n} of {total})" if a[name] < 0 else "")
        raise ToolError(f"scratchpad_read: {where('end_line', last)} is before {where('start_line', first)}; "
                        "both are inclusive")
    if total and first > total:
        raise ToolError(f"scratchpad_read: start_line {first} is past the end; the entry has {total} lines")
    stop = min(last, total)
    cap = min(tb.line_chars, max(80, budget - 300))
    id_args = {"scratchpad_id": entry.id}
    out: list[str] = []
    used = 0
    n = first
    truncated = False
    while n <= stop and not truncated:
        # windows of cap characters: a line of 1 GB costs what its window costs (Store.line_windows)
        if n == first and column:
            batch = tb.store.line_windows(entry.id, n, n, width=cap, column=column)
        else:
            batch = tb.store.line_windows(entry.id, n, min(stop, n + _LINE_BATCH - 1), width=cap)
        for w in batch:
            col = w.offset
            if col:
                if col > w.line_chars:
                    raise ToolError(f"scratchpad_read: column {col} is past the end of line {n} ({w.line_chars} "
                                    "characters)")
                shown = f"[... {col} characters ...]" + cap_window(w, cap, id_args)
            else:
                shown = cap_window(w, cap, id_args)
            piece = f"{n}\t{shown}"
            if out and used + len(piece) + 1 > budget:
                truncated = True
                break
            out.append(piece)
            used += len(piece) + 1
            n += 1
    result: dict[str, Any] = {"ok": True, "scratchpad_id": entry.id, "mode": "lines", "start_line": first,
                              "end_line": n - 1 if out else first - 1, "total_lines": total}
    if column:
        result["column"] = column
    result["content"] = "\n".join(out)
    result["truncated"] = truncated
    notices = []
    if truncated:
        nxt = {"scratchpad_id": entry.id, "mode": "lines", "start_line": n, "end_line": last}
        result["next"] = nxt
        notices.append(f"Output capped after line {n - 1}; lines {n}-{min(last, total)} not shown: call again "
                       f"with {args_text(nxt)}.")
    elif last > total and first <= total:
        notices.append(f"The entry ends at line {total}.")
    if entry.kind != "text":
        notices.append("Binary content: lines are decoded as UTF-8, invalid bytes shown as U+FFFD.")
    if notices:
        result["notice"] = " ".join(notices)
    return result


def _grep(tb: ToolContext, entry: Entry, a: dict[str, Any], budget: int) -> dict[str, Any]:
    skip, limit, context = a["skip"], a["max_matches"], a["context"]
    pattern, icase, fixed = a["pattern"], a["ignore_case"], a["fixed_strings"]
    # context lines are read by grep_lines; the matches up to `context` past the page are
    # asked for too, so that no context line of this page is one (it would read as not matching);
    # the skipped ones are passed over by their numbers alone (never built: text, spans)
    wanted = limit + context
    res = tb.search(("grep", entry.id, pattern, icase, fixed, skip, wanted),
                    lambda t: tb.store.grep(entry.id, pattern, ignore_case=icase, fixed=fixed, skip=skip,
                                            max_matches=wanted, line_window=tb.line_chars + 1, timeout=t))
    matches = res.matches[:limit]
    id_args = {"scratchpad_id": entry.id}
    known = res.skipped + [m.line for m in res.matches[limit:]]
    lines, shown = grep_lines(tb, entry, matches, context, budget, id_args, known=known)
    more = res.truncated or len(res.matches) > limit or shown < len(matches)
    total: int = len(res.skipped) + len(res.matches)
    counted = None
    if res.truncated:
        counted = tb.search(("count", entry.id, pattern, icase, fixed),
                            lambda t: tb.store.count(entry.id, pattern, ignore_case=icase, fixed=fixed, timeout=t))
        total = max(int(counted), total)  # a count that timed out counts fewer lines than grep saw
    result: dict[str, Any] = {"ok": True, "scratchpad_id": entry.id, "mode": "grep", "pattern": pattern,
                              "total_matches": total, "shown_matches": shown,
                              "first_match": skip + 1 if shown else None, "content": "\n".join(lines),
                              "truncated": more}
    nxt = {"scratchpad_id": entry.id, "mode": "grep", "pattern": pattern}
    if icase:
        nxt["ignore_case"] = True
    if fixed:
        nxt["fixed_strings"] = True
    if context:
        nxt["context"] = context
    if limit != 100:
        nxt["max_matches"] = limit
    nxt["skip"] = skip + shown
    if res.timed_out:  # the matches are those of the lines searched; a next call would stop there again
        result["timed_out"] = True
        result["searched_lines"] = res.searched_lines
        result["notice"] = timed_out_notice(tb, entry, res.searched_lines, "the matches found are all those of")
        if shown < len(res.matches):  # found, not shown (capped, or past max_matches)
            result["next"] = nxt
            result["notice"] += f" For the next ones found, call again with {args_text(nxt)}."
    elif more:
        why = "max_matches reached" if shown == len(matches) else "output capped"
        if nxt["skip"] <= _MAX_SKIP:
            result["next"] = nxt
            how = f"For the next ones call again with {args_text(nxt)}, or narrow the pattern."
        else:
            how = f"skip cannot go past {_MAX_SKIP}: narrow the pattern, or read around a line with mode='lines'."
        of = f"of {total}"
        if counted is not None and counted.timed_out:
            result["timed_out"] = True
            result["total_matches_at_least"] = True
            result["searched_lines"] = counted.searched_lines or 0  # how far the count of them all got
            stopped = ("was cancelled" if tb.search_timeout is None
                       else f"timed out after {tb.search_timeout:g} s")  # no budget: only a cancel stops it
            of = (f"of at least {total} (counting them all {stopped} at line "
                  f"{(counted.searched_lines or 0) + 1} of {entry.lines})")
        result["notice"] = f"Showing matches {skip + 1}-{skip + shown} {of} ({why}). {how}"
    elif skip and not shown:
        result["notice"] = f"No matches after the first {skip}; there are {total} in all."
    if entry.kind != "text":
        result["notice"] = (result.get("notice", "") + " Binary content: lines are decoded as UTF-8, "
                            "invalid bytes shown as U+FFFD.").strip()
    return result


def _describe_blobpad(e: Entry) -> dict[str, Any]:
    row: dict[str, Any] = {"scratchpad_id": e.id, "kind": e.kind, "size_bytes": e.size_bytes}
    if e.chars is not None:
        row["chars"] = e.chars
    row["lines"] = e.lines
    for key in ("name", "tool", "step"):
        value = getattr(e, key)
        if value is not None:
            row[key] = value
    row["created_at"] = iso(e.created_at)
    if e.expires_at is not None:
        row["expires_at"] = iso(e.expires_at)
    return row


def _list_blobpad(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return list_result(tb, budget, a["skip"], _describe_blobpad)


_ID_PARAM = Param("scratchpad_id", "string", "Id from the 'scratchpad_id' field of a previous observation "
                  "(16 hex characters).", required=True, min_length=1, max_length=64)
_PATTERN_DESC = ("For mode grep/count: the pattern, a regular expression in RE2 syntax (like Python re, without "
                 "look-around or backreferences), or literal text with fixed_strings=true.")


_READ_PARAMS: tuple[Param, ...] = (
    _ID_PARAM,
    Param("mode", "string", "What to read: head, tail, range, lines, grep or count (default head).",
          default="head", enum=("head", "tail", "range", "lines", "grep", "count")),
    Param("n", "integer", "For mode head/tail: number of characters (default 2000).", default=2000),
    Param("start", "integer", "For mode range: first character offset, from 0."),
    Param("end", "integer", "For mode range: end offset, exclusive (default: the end of the entry)."),
    Param("start_line", "integer", "For mode lines: first line, from 1 (default 1); negative numbers count from "
          "the end (-1 is the last line, -100 the hundredth from the end).", default=1, minimum=-MAX_INT),
    Param("end_line", "integer", f"For mode lines: last line, inclusive (default start_line+{_LINES_PER_CALL - 1}); "
          "negative numbers count from the end (-1 is the last line).", minimum=-MAX_INT),
    Param("column", "integer", "For mode lines: first character of start_line to show, to read on in a "
          "very long line (default 0).", default=0),
    Param("pattern", "string", _PATTERN_DESC, min_length=1, max_length=4096),
    Param("ignore_case", "boolean", "For mode grep/count: case-insensitive matching (default false).",
          default=False),
    Param("fixed_strings", "boolean", "For mode grep/count: pattern is literal text, not a regular "
          "expression (default false).", default=False),
    Param("context", "integer", "For mode grep: lines of context before and after each match (default 0, "
          "at most 100).", default=0, maximum=100),
    Param("max_matches", "integer", "For mode grep: most matching lines to return (default 100, at most "
          "1000).", default=100, minimum=1, maximum=1000),
    Param("skip", "integer", f"For mode grep: matches to skip, to page through many (default 0, at most "
          f"{_MAX_SKIP}).", default=0, maximum=_MAX_SKIP),
)

#: The arguments of the default scratchpad_read that each mode uses (the others must keep their defaults).
_MODE_ARGS: dict[str, frozenset[str]] = {
    "head": frozenset({"n"}),
    "tail": frozenset({"n"}),
    "range": frozenset({"start", "end"}),
    "lines": frozenset({"start_line", "end_line", "column"}),
    "grep": frozenset({"pattern", "ignore_case", "fixed_strings", "context", "max_matches", "skip"}),
    "count": frozenset({"pattern", "ignore_case", "fixed_strings"}),
}
_READ_DEFAULTS = {p.name: p.default for p in _READ_PARAMS if p.name not in ("scratchpad_id", "mode")}


def _check_mode_args(a: dict[str, Any]) -> None:
    """Refuse an argument the chosen mode does not use (say, start with mode lines): it
    would be ignored silently, and the model would read something else than it asked."""
    mode = a["mode"]
    for name, default in _READ_DEFAULTS.items():
        if name not in _MODE_ARGS[mode] and a[name] != default:
            users = [m for m, names in _MODE_ARGS.items() if name in names]
            takes = ", ".join(sorted(_MODE_ARGS[mode]))
            raise ToolError(
                f"scratchpad_read: {name} is not used by mode {mode!r} (it is for mode {' or '.join(users)}); "
                f"mode {mode!r} takes {takes}"
            )


def _blobpad_tools(tb: ToolContext) -> list[ToolSpec]:
    cap = tb.max_result_chars
    read = ToolSpec(
        "scratchpad_read",
        (
            "Read part of a large observation saved in the scratchpad. Observations too large for the conversation "
            "show only a summary and a scratchpad_id; use this tool to see more of them. Modes: "
            "head = first n characters; tail = last n characters; range = characters start to end (end exclusive); "
            "lines = numbered lines start_line to end_line, shown as 'N<TAB>text' (negative numbers count from "
            "the end: start_line=-100, end_line=-1 reads the last 100 lines); "
            "grep = lines matching pattern, shown as 'N:text' (context lines 'N-text', groups separated by '--'); "
            "count = number of lines matching pattern. "
            f"Each result is capped at about {cap} characters and lines longer than {tb.line_chars} characters are "
            "cut; whatever is cut is marked, with the exact arguments to read on (the result's 'next' field). "
            + (f"A grep or count that takes over {tb.search_timeout:g} s (a pattern RE2 matches slowly) stops and "
               "answers timed_out=true with what it found in the lines it searched. " if tb.search_timeout else "")
            + "Binary entries are read in bytes and returned base64-encoded. "
            "Pass only the arguments of the chosen mode. "
            "Start with grep or head to find what you need instead of reading everything."
        ),
        _READ_PARAMS,
        _read_blobpad,
        reader=True,
    )
    listing = ToolSpec(
        "scratchpad_list",
        (f"List the scratchpad entries you can read (this {tb.scope}'s offloaded observations): scratchpad_id, "
         "kind, size, lines, the tool and step that produced each, and when it expires. Use it when you lost an id."),
        (Param("skip", "integer", "Entries to skip, to page through a long list (default 0).", default=0),),
        _list_blobpad,
        reader=True,
    )
    return [read, listing]


PROFILE = Profile(
    name="blobpad",
    description=(
        "default: scratchpad_read (modes head, tail, range, lines, grep, count; numbered lines, long lines capped, "
        "every cut says how to read on) and scratchpad_list; sees the current turn's entries"
    ),
    tools=_blobpad_tools,
    scope="turn",
    instructions=(
        "Tool outputs or files that are too large are saved in the scratchpad and you see only a summary and a "
        "scratchpad_id. Read the parts you need with scratchpad_read: grep to find lines, lines to see numbered "
        "line windows, head/tail/range for characters; scratchpad_list lists the entries. Results are capped; a "
        "cut result has truncated=true and 'next' holds the arguments that read on."
    ),
)
