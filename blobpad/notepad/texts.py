"""The notepad's texts: the seeds' exact wording, the responses of each change, and
the helpers that fill them in.

Seed 002's texts (:data:`NOTEPAD_HEADING`, :data:`EMPTY_NOTEPAD_HINT`,
:data:`PRE_COMPACTION_WARNING`, :data:`NOTEPAD_GUIDANCE`) and seed 004's
(:data:`SCRATCHPAD_HEADER`, :data:`SCRATCHPAD_FOOTER`, :func:`scratchpad_guidance`)
are kept verbatim; :func:`result_message` words the outcome of a change the way the
seed that owns the space does.
"""

from __future__ import annotations

from typing import Any

from .budget import UNIT_WORDS, Budget

__all__ = [
    "NOTEPAD_HEADING", "EMPTY_NOTEPAD_HINT", "PRE_COMPACTION_WARNING", "NOTEPAD_GUIDANCE",
    "SCRATCHPAD_HEADER", "SCRATCHPAD_FOOTER", "SCRATCHPAD_GUIDANCE", "scratchpad_guidance",
    "SETTERS", "SECTION_TITLES", "result_message", "spaces_block", "scratchpad_block", "notepad_section",
    "prepend_block",
]

#: Seed 002: the heading of the notepad's section of the system prompt.
NOTEPAD_HEADING = "## Session Notepad"
#: Seed 002: shown under the heading while the notepad is empty.
EMPTY_NOTEPAD_HINT = (
    "(empty — use write_notepad or update_notepad to save working notes, findings, and task progress; "
    "content here survives context compaction)"
)
#: Seed 002: the system message injected one turn before compaction (line breaks as in the seed).
PRE_COMPACTION_WARNING = (
    "[System] Context is approaching the token limit and will be compacted after your next response.\n"
    "Review your session notepad and update it with any working state, findings, or progress you\n"
    "need to preserve. Conversation details may be summarized during compaction, but the notepad\n"
    "is kept in full."
)
#: Seed 002: guidance for the agent's default system prompt.
NOTEPAD_GUIDANCE = (
    "For multi-step or complex tasks, use the session notepad to track your plan and record findings as you "
    "work. The notepad survives context compaction — conversation details may be summarized, but the notepad "
    "is preserved in full. Update it after significant findings or completed steps."
)
#: Seed 004: first line of the block prepended to the next user message.
SCRATCHPAD_HEADER = "[Session Scratchpad - your persistent working memory]"
#: Seed 004: last line of that block.
SCRATCHPAD_FOOTER = "[End Scratchpad]"


def scratchpad_guidance(budget: int = 2000, tool: str = "session_scratchpad") -> str:
    """Seed 004's system-prompt section, with the scratchpad's token budget.

    ``tool`` is the name the model calls: seed 004's ``session.scratchpad`` is
    registered as ``session_scratchpad`` by :class:`~blobpad.Toolbox` (OpenAI and
    Anthropic reject dots in tool names); a runtime that registers the dotted name
    itself passes ``tool="session.scratchpad"`` to get the seed's text verbatim.
    """
    return (
        "## Session Scratchpad\n"
        f"You have a persistent scratchpad tool ({tool}) that survives context compaction.\n"
        "Use it to save: multi-step plans, key findings, important decisions, accumulated state.\n"
        f"The scratchpad is prepended to each message you receive. Budget: ~{budget} tokens.\n"
        f'Call {tool} with mode "replace" to overwrite, or "append" to add incrementally.'
    )


#: Seed 004: the system-prompt section with the default budget of 2000 tokens, naming
#: the tool as the Toolbox registers it (``session_scratchpad``).
SCRATCHPAD_GUIDANCE = scratchpad_guidance(2000)

#: Seed 004's tool responses (``units`` is "tokens" or "characters", ``unit`` its singular).
SCRATCHPAD_UPDATED = "Scratchpad updated ({used} {units} / {budget} budget)"
SCRATCHPAD_TRUNCATED = "Scratchpad truncated to {budget} {units} (original: {original}). Consider summarizing."
SCRATCHPAD_APPEND_REJECTED = (
    "Append would exceed {budget} {unit} budget (current: {current}, append: {added}). "
    "Use mode 'replace' to rewrite, or reduce content."
)

#: The responses of every other space (seed 001's notes and plan, seed 002's notepad, custom spaces).
SPACE_UPDATED = "{space} updated ({used}/{budget} {units})"
SPACE_UPDATED_UNBUDGETED = "{space} updated ({used} {units})"
SPACE_TRUNCATED = (
    "{space} truncated to {budget} {units} (original: {original}); the end was cut off. "
    "Use {setter} with a tighter summary."
)
SPACE_REJECTED = (
    "{action} rejected: {space} would be {combined} {units}, over its {budget}-{unit} budget "
    "(current: {current}, {verb}: {added}); {space} unchanged. Use {setter} to overwrite it with a summary, "
    "or add less."
)

#: The action a model calls to overwrite each space (named in rejection texts).
SETTERS = {"notes": "set_notes", "plan": "set_plan", "notepad": "write_notepad", "scratchpad": "mode 'replace'"}
#: The section titles of seed 001's block.
SECTION_TITLES = {"notes": "Notes", "plan": "Plan", "refs": "Refs"}


def result_message(space: str, budget: Budget, kind: str, action: str, used: int, details: dict[str, Any]) -> str:
    """The text a change of ``space`` answers: ``kind`` is "updated", "truncated" or "rejected".

    ``used`` is the space's size after the change; ``details`` holds the counts the
    texts name (``original`` for a truncation; ``current``, ``added`` and ``combined``
    for a rejection).  The scratchpad, while it has a budget, answers with seed 004's
    texts; every other space with the generic ones, which name the action that
    overwrites it (:data:`SETTERS`).
    """
    unit, units = UNIT_WORDS[budget.unit]
    verb = "append" if "append" in action else "prepend" if action == "prepend" else "edit"
    values = dict(space=space, budget=budget.limit, unit=unit, units=units, used=used, action=action, verb=verb,
                  setter=SETTERS.get(space, f"write(space={space!r})"), **details)
    seed004 = space == "scratchpad" and budget.limit is not None
    if kind == "updated":
        if budget.limit is None:
            return SPACE_UPDATED_UNBUDGETED.format(**values)
        return (SCRATCHPAD_UPDATED if seed004 else SPACE_UPDATED).format(**values)
    if kind == "truncated":
        return (SCRATCHPAD_TRUNCATED if seed004 else SPACE_TRUNCATED).format(**values)
    assert kind == "rejected", kind
    return (SCRATCHPAD_APPEND_REJECTED if seed004 and action in ("append", "scratchpad") else SPACE_REJECTED).format(**values)


def spaces_block(values: list[tuple[str, str | list[str]]]) -> str:
    """Seed 001's block: a ``## Title`` section per non-empty space (a list as ``- item``
    lines) between the scratchpad's header and footer; "" when every space is empty."""
    sections: list[str] = []
    for name, value in values:
        title = SECTION_TITLES.get(name, name)
        if isinstance(value, list):
            if value:
                sections.append(f"## {title}\n" + "\n".join(f"- {r}" for r in value))
        elif value:
            sections.append(f"## {title}\n{value}")
    if not sections:
        return ""
    return "\n".join([SCRATCHPAD_HEADER, *sections, SCRATCHPAD_FOOTER])


def scratchpad_block(content: str) -> str:
    """Seed 004's block for the next user message, or "" when ``content`` is empty."""
    return f"{SCRATCHPAD_HEADER}\n{content}\n{SCRATCHPAD_FOOTER}" if content else ""


def notepad_section(content: str) -> str:
    """Seed 002's system-prompt section: the heading, then ``content`` or the empty-state hint."""
    return f"{NOTEPAD_HEADING}\n{content or EMPTY_NOTEPAD_HINT}"


def prepend_block(block: str, message: str) -> str:
    """``block``, a blank line, then ``message`` (just ``message`` when ``block`` is empty)."""
    return f"{block}\n\n{message}" if block else message
