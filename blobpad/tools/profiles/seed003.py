"""Profile "seed003", seed 003's drop-in: named entries written, read, edited, listed and deleted by the model."""

from __future__ import annotations

from typing import Any

from ...errors import MAX_STR_BYTES, Conflict, NotFound
from ...index import Entry
from ..reading import check_pattern, grep_lines, iso, list_result, slice_result, timed_out_notice, unit_of
from ..spec import Param, Profile, ToolContext, ToolError, ToolSpec

_EDIT_LIMIT = 64 << 20            # largest entry edited in place, in bytes

_NAME_PARAM = Param("name", "string", "The entry name", required=True, min_length=1, max_length=MAX_STR_BYTES)


def _write_seed003(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    name, content = a["name"], a["content"]
    for _ in range(3):  # a name written meanwhile by another call: looked at again
        try:
            old: Entry | None = tb.store.find(name, session=tb.session)
        except NotFound:
            old = None
        if old is not None and not tb.in_scope(old):
            # names are the session's: the entry of another turn holding it is one this toolbox can neither
            # see nor replace (it said "no such entry" to a read and a delete of it)
            raise ToolError(f"scratchpad_write: the name {name[:200]!r} is taken by an entry of another turn "
                            f"of this session, which this toolbox cannot see or replace; choose another name")
        try:
            e = tb.store.put(content, session=tb.session, turn=tb.turn, name=name, tool="scratchpad_write",
                             ttl=tb.ttl, kind="text", exclusive=old is None)
        except Conflict:
            continue  # the name was taken since it was looked up
        return {"ok": True, "name": name, "scratchpad_id": e.id, "size_chars": e.length,
                "overwritten": old is not None}
    raise ToolError(f"scratchpad_write: the name {name[:200]!r} kept being written by other calls; try again")


def _read_seed003(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    entry = tb.named(a["name"])
    name = a["name"]
    if a["regex"] is not None:
        check_pattern(a["regex"], ignore_case=False, fixed=False,
                      literal_hint="escape special characters with a backslash to match them literally")
        res = tb.search(("grep", entry.id, a["regex"]),
                        lambda t: tb.store.grep(entry.id, a["regex"], max_matches=100, line_window=tb.line_chars + 1,
                                                timeout=t))
        lines, shown = grep_lines(tb, entry, res.matches, 0, budget, {"name": name}, read_on=False)  # no lines mode
        result: dict[str, Any] = {"ok": True, "name": name, "regex": a["regex"], "matches": shown,
                                  "content": "\n".join(lines), "truncated": res.truncated or shown < len(res)}
        if res.timed_out:
            result["timed_out"] = True
            result["notice"] = timed_out_notice(tb, entry, res.searched_lines, "the lines shown are the matches of",
                                                "or read the entry with offset and limit")
            if shown < len(res):
                result["notice"] += f" Output capped: {shown} of the {len(res)} matching lines found are shown."
        elif res.truncated and shown < len(res):
            result["notice"] = (f"Output capped: {shown} of the first {len(res)} matching lines shown; more lines "
                                "match. Narrow the regex to see the others.")
        elif res.truncated:
            result["notice"] = ("Only the first 100 matching lines are shown; more lines match. Narrow the regex "
                                "to see the others.")
        elif shown < len(res):
            result["notice"] = (f"Output capped: {shown} of {len(res)} matching lines shown. Narrow the regex to "
                                "see the others.")
        return result
    offset, limit = a["offset"], a["limit"]
    length = entry.length
    if offset > length:
        raise ToolError(f"scratchpad_read: offset {offset} is past the end; {name!r} has {length} {unit_of(entry)}")
    end = min(length, offset + limit)
    r = slice_result(tb, entry, offset, end, budget, mode="read", id_key="name", id_value=name,
                     next_args=lambda s, e: {"offset": s, "limit": e - s})
    out: dict[str, Any] = {"ok": True, "name": name, "offset": offset, f"total_{unit_of(entry)}": length}
    if entry.kind != "text":
        out["encoding"] = "base64"
    out["content"] = r["content"]
    out["remaining"] = length - r["end"]
    out["truncated"] = r["truncated"]
    if r["truncated"]:
        out["next"] = r["next"]
        out["notice"] = r["notice"]
    elif end < length:
        out["notice"] = f"{length - end} more {unit_of(entry)} after this; read them with offset={end}."
    return out


def _replace(tb: ToolContext, entry: Entry, name: str, content: str) -> Entry:
    """Put the new content of an edited entry under its name, only if nothing changed it
    since it was read: else a ToolError, and nothing is stored (no edit answered ok is
    lost to another call's, and an edit does not bring back an entry deleted meanwhile).
    The new entry keeps the old one's expiry.

    An unnamed entry (an offloaded observation read by its id) becomes a named one
    called by that id, written the way ids are (lower case, whatever case the model
    typed), so the model keeps reaching it by the id it was given; the old one goes in
    the same commit.
    """
    try:  # an unnamed entry is taken the place of in the same commit (Store.put's replaces)
        return tb.store.put(content, session=tb.session, turn=tb.turn, name=entry.name or entry.id,
                            tool="scratchpad_edit", kind="text", replaces=entry.id)
    except Conflict:
        raise ToolError(f"scratchpad_edit: {name!r} was written, edited or deleted by another call while this edit "
                        "ran; nothing was changed: read it again and retry") from None


def _edit_seed003(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    name = a["name"]
    content, old, new, replace_all = a["content"], a["old_string"], a["new_string"], a["replace_all"]
    if content is not None and (old is not None or new is not None):
        raise ToolError("scratchpad_edit: pass either content (full replacement) or old_string and new_string "
                        "(targeted replacement), not both")
    if content is None and (old is None or new is None):
        raise ToolError("scratchpad_edit: pass content for a full replacement, or both old_string and new_string "
                        "for a targeted replacement")
    entry = tb.named(name)
    if content is not None:
        e = _replace(tb, entry, name, content)
        return {"ok": True, "name": e.name, "scratchpad_id": e.id, "size_chars": e.length, "replacements": None}
    if entry.kind != "text":
        raise ToolError(f"scratchpad_edit: {name!r} is binary; only text entries can be edited")
    if entry.size_bytes > _EDIT_LIMIT:
        raise ToolError(f"scratchpad_edit: {name!r} is {entry.size_bytes} bytes; entries over {_EDIT_LIMIT} bytes "
                        "cannot be edited in place (write a new entry instead)")
    if old == "":
        raise ToolError("scratchpad_edit: old_string must not be empty")
    if old == new:
        raise ToolError("scratchpad_edit: old_string and new_string are the same; nothing to change")
    text = tb.store.get(entry.id)
    assert isinstance(text, str)
    count = text.count(old)
    if count == 0:
        raise ToolError(f"scratchpad_edit: old_string was not found in {name!r}; read the entry and copy the exact "
                        "text, including whitespace")
    if count > 1 and not replace_all:
        raise ToolError(f"scratchpad_edit: old_string occurs {count} times in {name!r}; add surrounding text to "
                        "make it unique, or pass replace_all=true")
    n = count if replace_all else 1
    size = entry.size_bytes + n * (len(new.encode("utf-8")) - len(old.encode("utf-8")))
    if size > _EDIT_LIMIT:  # checked before the text is built: n long replacements could make gigabytes
        raise ToolError(f"scratchpad_edit: replacing {n} occurrence{'s' if n != 1 else ''} would make {name!r} "
                        f"{size} bytes; entries edited in place are at most {_EDIT_LIMIT} bytes (write a new entry "
                        "instead)")
    updated = text.replace(old, new, n)
    e = _replace(tb, entry, name, updated)
    return {"ok": True, "name": e.name, "scratchpad_id": e.id, "size_chars": e.length,
            "replacements": n}


def _describe_seed003(e: Entry) -> dict[str, Any]:
    row: dict[str, Any] = {"name": e.name}
    if e.name is None:
        row["scratchpad_id"] = e.id
    row["size"] = e.length
    row["unit"] = unit_of(e)
    row["created_at"] = iso(e.created_at)
    return row


def _list_seed003(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return list_result(tb, budget, 0, _describe_seed003, next_tool_args=False)


def _delete_seed003(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    entry = tb.named(a["name"])
    tb.store.delete(entry.id)
    return {"ok": True, "name": a["name"], "deleted": True}


def _seed003_tools(tb: ToolContext) -> list[ToolSpec]:
    return [
        ToolSpec(
            "scratchpad_write",
            ("Store content in the scratchpad under a name, outside the conversation, to use later. If the name "
             "already exists, the content is overwritten. Entries last for the whole session."),
            (_NAME_PARAM, Param("content", "string", "The content to store", required=True)),
            _write_seed003, read_only=False, destructive=True,
        ),
        ToolSpec(
            "scratchpad_read",
            ("Read or search a scratchpad entry by name. Without regex: returns limit characters from offset "
             "(default: the first 30000). With regex: returns the matching lines (at most 100) as 'N:text'. "
             f"Results are capped at about {tb.max_result_chars} characters; a cut result says how to read on. "
             "Large tool outputs are saved here automatically under names like execute_command_1."),
            (
                _NAME_PARAM,
                Param("offset", "integer", "Character offset to start reading from (default: 0)", default=0),
                Param("limit", "integer", "Maximum characters to return (default: 30000)", default=30_000, minimum=1),
                Param("regex", "string", "Search the entry and return matching lines (max 100); RE2 syntax",
                      min_length=1, max_length=4096),
            ),
            _read_seed003,
        ),
        ToolSpec(
            "scratchpad_edit",
            ("Edit a scratchpad entry in place. Provide content for a full overwrite, or old_string/new_string for "
             "targeted replacement (old_string must occur exactly once unless replace_all is true)."),
            (
                _NAME_PARAM,
                Param("content", "string", "Full replacement (mutually exclusive with old/new)"),
                Param("old_string", "string", "String to find"),
                Param("new_string", "string", "Replacement string"),
                Param("replace_all", "boolean", "Replace all occurrences (default: false)", default=False),
            ),
            _edit_seed003, read_only=False, destructive=True,
        ),
        ToolSpec(
            "scratchpad_list",
            "List all scratchpad entries with their name, size, and creation time. No parameters.",
            (),
            _list_seed003,
        ),
        ToolSpec(
            "scratchpad_delete",
            "Delete a scratchpad entry by name.",
            (Param("name", "string", "The entry name to delete", required=True, min_length=1, max_length=MAX_STR_BYTES),),
            _delete_seed003, read_only=False, destructive=True,
        ),
    ]


PROFILE = Profile(
    name="seed003",
    description=(
        "seed 003 drop-in: scratchpad_write, scratchpad_read (offset, limit=30000, regex: at most 100 lines), "
        "scratchpad_edit, scratchpad_list, scratchpad_delete, by entry name; sees the session's entries"
    ),
    tools=_seed003_tools,
    max_result_chars=34_000,  # so that its default limit of 30,000 fits
    offload_policy="seed003",
    instructions=(
        "The scratchpad holds content by name for this session: scratchpad_write stores it, scratchpad_read "
        "reads it (offset and limit in characters) or searches it (regex: matching lines), scratchpad_edit "
        "changes it, scratchpad_list lists the entries, scratchpad_delete deletes one. A tool output over "
        "30,000 characters is saved under a name such as execute_command_1 and you see a preview."
    ),
)
