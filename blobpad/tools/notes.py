"""Helpers shared by the notepad profiles (seed001, seed002, seed004)."""

from __future__ import annotations

from typing import Any

from .spec import ToolContext


def note_result(result: Any) -> dict[str, Any]:
    return dict(result.to_dict() if hasattr(result, "to_dict") else result)


def budget_words(tb: ToolContext, space: str) -> str:
    """A space's budget as the notepad of ``tb`` enforces it: "4,000 characters", "about 2,000 tokens"."""
    budget = tb.notepad.budgets[space]
    if budget.limit is None:
        return "no budget"
    from ..notepad.budget import UNIT_WORDS

    return f"{'about ' if budget.unit == 'tokens' else ''}{budget.limit:,} {UNIT_WORDS[budget.unit][1]}"
