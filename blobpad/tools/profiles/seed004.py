"""Profile "seed004", seed 004's drop-in (session.scratchpad extension): one budgeted scratchpad space."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..notes import budget_words, note_result
from ..spec import Param, Profile, ToolContext, ToolSpec

if TYPE_CHECKING:
    from ...notepad import Notepad

def _seed004(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    return note_result(tb.notepad.scratchpad(a["content"], mode=a["mode"]))


def _seed004_tools(tb: ToolContext) -> list[ToolSpec]:
    return [ToolSpec(
        "session_scratchpad",
        ("Persist important working state (plans, findings, decisions) that survives context compaction. Content "
         f"is prepended to each message you receive. Budget: {budget_words(tb, 'scratchpad')}. mode 'replace' "
         "overwrites the whole "
         "scratchpad (truncated with a warning if over budget); 'append' adds to it (rejected if it would exceed "
         "the budget: then rewrite it shorter with 'replace')."),
        (
            Param("content", "string", "The scratchpad content to save", required=True),
            Param("mode", "string", "replace: overwrite entire scratchpad. append: add to existing content.",
                  default="replace", enum=("replace", "append")),
        ),
        _seed004, read_only=False, destructive=True,
    )]


def _sections(pad: Notepad) -> list[str]:
    scratchpad = pad.read("scratchpad")
    return [f"## Scratchpad\n{scratchpad}" if scratchpad else ""]


def _context_block(pad: Notepad) -> str:
    return pad.scratchpad_block()


PROFILE = Profile(
    name="seed004",
    description=(
        "seed 004 drop-in (session.scratchpad extension): session_scratchpad(content, mode replace/append) "
        "with a 2000-token budget"
    ),
    tools=_seed004_tools,
    notepad=True,
    context_block=_context_block,
    notepad_sections=_sections,
    kept_words="scratchpad",
    instructions=(
        "Keep what must survive context compaction with session_scratchpad(content, mode): replace sets it, "
        "append adds to it, within a budget of 2,000 tokens. It is shown to you at the start of each message."
    ),
)
