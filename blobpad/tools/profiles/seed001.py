"""Profile "seed001", seed 001's drop-in (OpenClaw session scratchpad): notes, plan and refs in the notepad."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..notes import budget_words, note_result
from ..spec import Param, Profile, ToolContext, ToolError, ToolSpec

if TYPE_CHECKING:
    from ...notepad import Notepad

_SEED001_ACTIONS = ("set_notes", "append_notes", "set_plan", "refs.add", "refs.remove", "refs.set")


def _seed001(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    loaded = tb.notepad.load_legacy_notes()  # seed 001: the old single-key scratchpad becomes notes on first use
    result = _act(tb, a)
    if loaded is not None:
        result["notice"] = (f"Before this action, notes were loaded from the old single-key scratchpad "
                            f"({loaded.used:,} {loaded.unit})."
                            + (f" {loaded.warning}" if loaded.warning else ""))
    return result


def _act(tb: ToolContext, a: dict[str, Any]) -> dict[str, Any]:
    action = a["action"]
    pad = tb.notepad
    if action in ("set_notes", "append_notes", "set_plan"):
        if a["content"] is None:
            raise ToolError(f"session_scratchpad: action {action!r} needs content (a string)")
        return note_result(getattr(pad, action)(a["content"]))
    if action in ("refs.add", "refs.remove"):
        if a["ref"] is None:
            raise ToolError(f"session_scratchpad: action {action!r} needs ref (a non-empty string)")
        method = pad.refs_add if action == "refs.add" else pad.refs_remove
        return note_result(method(a["ref"]))
    if a["items"] is None:
        raise ToolError("session_scratchpad: action 'refs.set' needs items (an array of strings)")
    return note_result(pad.refs_set(a["items"]))


def _seed001_tools(tb: ToolContext) -> list[ToolSpec]:
    notes, plan = budget_words(tb, "notes"), budget_words(tb, "plan")
    refs = tb.notepad.budgets["refs"].limit
    return [ToolSpec(
        "session_scratchpad",
        ("Persistent working memory that survives context compaction, in three spaces, all prepended to every "
         f"message you receive (only non-empty ones): notes ({notes}: findings, decisions, constraints, "
         f"partial state), plan ({plan}: the current multi-step plan as a concise ordered list), refs "
         f"({refs} items: file paths, URLs, identifiers). Actions: set_notes(content) replaces notes; "
         f"append_notes(content) appends, rejected if notes would exceed {notes}; set_plan(content) "
         f"replaces the plan; refs.add(ref) adds one ref, dropping the oldest at {refs}; refs.remove(ref) removes "
         f"one by exact match; refs.set(items) replaces all refs (first {refs} kept). Over-budget "
         "set_notes/set_plan are truncated with a warning. Don't write full file contents, conversation history "
         "or speculative ideas."),
        (
            Param("action", "string", "set_notes, append_notes, set_plan, refs.add, refs.remove or refs.set.",
                  required=True, enum=_SEED001_ACTIONS),
            Param("content", "string", "For set_notes, append_notes and set_plan: the text."),
            Param("ref", "string", "For refs.add and refs.remove: one reference (path, URL, id).", min_length=1),
            Param("items", "array", "For refs.set: the new list of references (strings)."),
        ),
        _seed001, read_only=False, destructive=True,
    )]


def _sections(pad: Notepad) -> list[str]:
    """The notes, plan and refs under their headings (refs as ``- ref`` lines), "" for an empty one."""
    pad.load_legacy_notes()
    notes, plan, refs = pad.read("notes"), pad.read("plan"), pad.refs()
    return [f"## Notes\n{notes}" if notes else "", f"## Plan\n{plan}" if plan else "",
            "## Refs\n" + "\n".join(f"- {r}" for r in refs) if refs else ""]


def _context_block(pad: Notepad) -> str:
    pad.load_legacy_notes()
    return pad.render_spaces()


PROFILE = Profile(
    name="seed001",
    description=(
        "seed 001 drop-in (OpenClaw session scratchpad): session_scratchpad(action set_notes/append_notes/set_plan/"
        "refs.add/refs.remove/refs.set) over the notepad's notes, plan and refs spaces"
    ),
    tools=_seed001_tools,
    notepad=True,
    context_block=_context_block,
    notepad_sections=_sections,
    kept_words="notes, plan and refs",
    instructions=(
        "Keep what must survive context compaction with session_scratchpad: action set_notes or append_notes "
        "for your notes, set_plan for the plan, refs.add, refs.remove and refs.set for references. They are "
        "shown to you at the start of each message."
    ),
)
