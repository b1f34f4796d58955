"""Seed 001's opt-in nudges: ``[Hint: ...]`` lines for the next user message.

:class:`Nudges` watches a :class:`~blobpad.notepad.Notepad` turn by turn and says
when the model should save its plan or findings (:data:`NUDGE_TEXTS`); a plan-like
list in the assistant's reply is one trigger.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import InvalidArgument, check_items, describe, typename
from .pad import Notepad

__all__ = ["NUDGE_TEXTS", "Nudges", "looks_like_plan"]

#: A line of a plan-like list: "1. ...", "2) ...", "- [ ] ...", "* [x] ...", "Step 3: ...".
_PLAN_LINE = re.compile(r"^[ \t]*(?:\d{1,3}[.)][ \t]+\S|[-*+][ \t]+\[[ xX]\][ \t]|step[ \t]+\d{1,3}\b)", re.I | re.M)


def looks_like_plan(text: str) -> bool:
    """Whether ``text`` (its first 100,000 characters) holds a plan: 3 or more numbered,
    task-list or "Step N" lines."""
    return len(_PLAN_LINE.findall(text[:100_000])) >= 3


#: The hints, as ``[Hint: ...]`` lines; ``{n}`` is the configured number of turns.
NUDGE_TEXTS = {
    "after_turns": (
        "[Hint: your session scratchpad is still empty after {n} turns. Save your plan (set_plan) and key "
        "findings (append_notes) with session_scratchpad so they survive context compaction.]"
    ),
    "on_plan_detected": (
        "[Hint: you just wrote a multi-step plan and your session scratchpad is empty. Save the plan with "
        "session_scratchpad action set_plan so it survives context compaction.]"
    ),
    "after_compaction": (
        "[Hint: the context was just compacted. Review your session scratchpad and save anything you still "
        "need that is not in it yet.]"
    ),
    "turns_since_last_use": (
        "[Hint: your session scratchpad has not been updated in {n} turns. Review it: update the plan's status "
        "and record new findings, or remove what no longer holds.]"
    ),
}


class Nudges:
    """Seed 001's auto-trigger nudges: ``[Hint: ...]`` lines for the next user message.

    Every trigger is off (0) by default, as in the seed; a positive value turns it on:

    * ``after_turns=N``: the notepad's seed 001 spaces (notes, plan, refs) are still
      empty after N turns (again every N turns while they stay empty);
    * ``on_plan_detected=1``: the assistant's reply holds a plan-like list (3 or more
      numbered, task-list or "Step N" lines) while those spaces are empty;
    * ``after_compaction=1``: the context was compacted (the runtime calls
      :meth:`compacted`);
    * ``turns_since_last_use=N``: they hold content that no change touched for N
      turns (again every N turns).

    Like the seed's, the trigger state (turn counts, flags) lives in this object and
    starts over with the process; the notepad itself persists.  Call :meth:`turn` once
    per turn with the assistant's reply, and prepend what it returns to the next user
    message (:meth:`steer` does both).
    """

    def __init__(
        self,
        notepad: Notepad,
        *,
        after_turns: int = 0,
        on_plan_detected: int = 0,
        after_compaction: int = 0,
        turns_since_last_use: int = 0,
        spaces: Iterable[str] = ("notes", "plan", "refs"),
    ) -> None:
        self.notepad = notepad
        self.config = {
            "after_turns": after_turns, "on_plan_detected": on_plan_detected,
            "after_compaction": after_compaction, "turns_since_last_use": turns_since_last_use,
        }
        for key, value in self.config.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
                raise InvalidArgument(f"{key} must be an integer from 0 (off) to 1000000, not {describe(value)}")
        # "plan" is one space, not four
        self.spaces = (spaces,) if isinstance(spaces, str) else tuple(check_items("spaces", spaces, str, "space names"))
        for space in self.spaces:
            notepad._budget(space)  # an unknown space is an InvalidArgument now, not at the first turn
        self._empty_turns = 0
        self._idle_turns = 0
        self._compacted = False
        self._seen: dict[str, int] | None = None

    def compacted(self) -> None:
        """Record that the context was just compacted (for ``after_compaction``)."""
        self._compacted = True

    def turn(self, assistant_output: str = "") -> list[str]:
        """Advance one turn; return the hints for the next user message (often none)."""
        if not isinstance(assistant_output, str):
            raise InvalidArgument(f"assistant_output must be a string, not {typename(assistant_output)}")
        cfg = self.config
        versions = {k: v for k, v in self.notepad.spaces().items() if k in self.spaces}
        changed = self._seen is not None and versions != self._seen
        self._seen = versions
        hints: list[str] = []
        if versions:
            self._empty_turns = 0
            self._idle_turns = 0 if changed else self._idle_turns + 1
            if cfg["turns_since_last_use"] and self._idle_turns >= cfg["turns_since_last_use"]:
                hints.append(NUDGE_TEXTS["turns_since_last_use"].format(n=cfg["turns_since_last_use"]))
                self._idle_turns = 0
        else:
            self._idle_turns = 0
            self._empty_turns += 1
            if cfg["after_turns"] and self._empty_turns >= cfg["after_turns"]:
                hints.append(NUDGE_TEXTS["after_turns"].format(n=cfg["after_turns"]))
                self._empty_turns = 0
            if cfg["on_plan_detected"] and looks_like_plan(assistant_output):
                hints.append(NUDGE_TEXTS["on_plan_detected"])
        if self._compacted:
            self._compacted = False
            if cfg["after_compaction"]:
                hints.append(NUDGE_TEXTS["after_compaction"])
        return hints

    def steer(self, assistant_output: str, next_message: str) -> str:
        """:meth:`turn`, then the hints prepended to ``next_message`` (one per line)."""
        if not isinstance(next_message, str):
            raise InvalidArgument(f"next_message must be a string, not {typename(next_message)}")
        hints = self.turn(assistant_output)
        return "\n".join([*hints, next_message]) if hints else next_message
