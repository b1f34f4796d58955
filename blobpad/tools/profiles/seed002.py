"""Profile "seed002", seed 002's drop-in (session notepad): read_notepad, write_notepad, update_notepad."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import describe
from ..notes import note_result
from ..spec import Param, Profile, ToolContext, ToolError, ToolSpec

if TYPE_CHECKING:
    from ...notepad import Notepad

def _read_notepad(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    content = tb.notepad_view()
    offset = a["offset"]
    if offset > len(content):
        raise ToolError(f"read_notepad: offset {offset} is past the end; the notepad has {len(content)} characters")
    shown = content[offset: offset + max(1, budget)]
    result: dict[str, Any] = {"ok": True, "content": shown}
    end = offset + len(shown)
    if end < len(content):
        result["truncated"] = True
        result["next"] = {"offset": end}
        result["notice"] = (f"The notepad has {len(content)} characters; shown {offset}-{end}. Read the rest with "
                            f"offset={end}, or rewrite it shorter with write_notepad.")
    return result


def _write_notepad(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return note_result(tb.notepad.write_notepad(a["content"]))


def _update_notepad(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    op = a["operation"]
    if op == "find_replace" and (a["find"] is None or a["replace"] is None):
        raise ToolError("update_notepad: operation 'find_replace' needs find (the exact text) and replace")
    if op != "find_replace" and a["content"] is None:
        raise ToolError(f"update_notepad: operation {op!r} needs content "
                        f"({'the text to remove' if op == 'delete' else 'the text to add'})")
    target = a["find"] if op == "find_replace" else a["content"] if op == "delete" else None
    if tb.combined_notepad and target and target not in tb.notepad.read("notepad") and target in tb.notepad_view():
        raise ToolError(f"update_notepad: {describe(target)} is in a section kept with session_scratchpad, not in the "
                        "notepad text; change that section with session_scratchpad")
    return note_result(tb.notepad.update_notepad(op, content=a["content"], find=a["find"], replace=a["replace"],
                                                 replace_all=a["replace_all"]))


def _shared_words(tb: ToolContext) -> str:
    """How seed002's tools describe the notepad they share in a combined profile ("" alone)."""
    if not tb.combined_notepad:
        return ""
    kept = next(r.kept_words for r in tb.profiles if r.kept_words)
    return (f" This notepad is the session's one notepad: read_notepad also shows the {kept} you keep with "
            "session_scratchpad (under their ## headings), which write_notepad and update_notepad leave as they "
            "are; change those with session_scratchpad.")


def _seed002_tools(tb: ToolContext) -> list[ToolSpec]:
    return [
        ToolSpec(
            "read_notepad",
            ("Read the session notepad: your freeform working notes, task tracking and findings, which survive "
             "context compaction. Returns {content}; an empty string if nothing was written yet." + _shared_words(tb)),
            (Param("offset", "integer", "Character to start from, only needed for a notepad too long for one "
                   "result (default 0).", default=0),),
            _read_notepad,
        ),
        ToolSpec(
            "write_notepad",
            ("Replace the whole session notepad (rewrite it from scratch, or clear it by writing an empty string). "
             "It is included in full in every context and survives compaction: keep your plan, findings and "
             "decisions there. For small changes use update_notepad." + _shared_words(tb)),
            (Param("content", "string", "The new notepad content (replaces everything)", required=True),),
            _write_notepad, read_only=False, destructive=True,
        ),
        ToolSpec(
            "update_notepad",
            ("Surgical edit of the session notepad: append or prepend text, find_replace an exact substring (e.g. "
             "mark a todo done), or delete text. Use append for incremental findings." + _shared_words(tb)),
            (
                Param("operation", "string", "The type of edit to perform", required=True,
                      enum=("find_replace", "append", "prepend", "delete")),
                Param("content", "string", "For append/prepend: text to add. For delete: text to remove."),
                Param("find", "string", "For find_replace: exact substring to find"),
                Param("replace", "string", "For find_replace: replacement text"),
                Param("replace_all", "boolean", "For find_replace: replace all occurrences. Default: false.",
                      default=False),
            ),
            _update_notepad, read_only=False, destructive=True,
        ),
    ]


def _context_block(pad: Notepad) -> str:
    return pad.context_section()


PROFILE = Profile(
    name="seed002",
    description=(
        "seed 002 drop-in (session notepad): read_notepad, write_notepad, update_notepad(find_replace/append/"
        "prepend/delete) over the session's notepad"
    ),
    tools=_seed002_tools,
    notepad=True,
    owns_notepad_text=True,
    context_block=_context_block,
    instructions=(
        "Keep a notepad that survives context compaction: read_notepad shows it, write_notepad replaces it, "
        "update_notepad changes part of it (find_replace, append, prepend, delete)."
    ),
)
