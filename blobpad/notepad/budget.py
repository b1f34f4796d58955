"""Budgets: the size limit of each notepad space, and the token estimate.

A space's :class:`Budget` counts characters, tokens (the notepad's counter,
:func:`estimate_tokens` unless one is given) or items (a list space such as
``refs``); :data:`DEFAULT_BUDGETS` are the spaces every notepad has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidArgument, describe

__all__ = ["MAX_CONTENT_BYTES", "Unit", "UNITS", "UNIT_WORDS", "Budget", "DEFAULT_BUDGETS", "estimate_tokens"]

#: The largest content one call accepts, and the largest a space may hold, in UTF-8 bytes.
MAX_CONTENT_BYTES = 1 << 20

Unit = Literal["chars", "tokens", "items"]
#: The units a budget counts in.
UNITS = ("chars", "tokens", "items")
#: Each unit's words in texts: (singular, plural).
UNIT_WORDS = {"chars": ("character", "characters"), "tokens": ("token", "tokens"), "items": ("ref", "refs")}


@dataclass(frozen=True)
class Budget:
    """The size limit of one space.

    Attributes:
        limit: the most the space may hold (1 to :data:`MAX_CONTENT_BYTES`), or None
            for no budget (text spaces only; :data:`MAX_CONTENT_BYTES` still applies).
        unit: "chars" (Unicode characters), "tokens" (the notepad's token counter) or
            "items" (a list space such as ``refs``).
    """

    limit: int | None
    unit: Unit = "chars"

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise InvalidArgument(f"a budget's unit must be one of {', '.join(UNITS)}, not {describe(self.unit)}")
        if self.limit is None:
            if self.unit == "items":
                raise InvalidArgument("a list space (unit 'items') needs a limit: pass Budget(50, 'items')")
            return
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or not 1 <= self.limit <= MAX_CONTENT_BYTES:
            raise InvalidArgument(
                f"a budget's limit must be an integer from 1 to {MAX_CONTENT_BYTES}, or None, not {describe(self.limit)}"
            )


#: Spaces every notepad has, with their default budgets.
DEFAULT_BUDGETS: dict[str, Budget] = {
    "notes": Budget(4000, "chars"),       # seed 001
    "plan": Budget(2000, "chars"),        # seed 001
    "refs": Budget(50, "items"),          # seed 001
    "notepad": Budget(None, "chars"),     # seed 002 (no budget)
    "scratchpad": Budget(2000, "tokens"),  # seed 004
}


def estimate_tokens(text: str) -> int:
    """A conservative token count: ``ceil(ASCII characters / 4) + non-ASCII characters``.

    One token per four ASCII characters is the usual rate of English prose and code;
    every non-ASCII character counts as a whole token, which is what BPE tokenizers
    spend at most on average on CJK text and more than they spend on accented Latin,
    Cyrillic or Greek.  The result is never below ``ceil(UTF-8 bytes / 4)`` (a
    non-ASCII character has at most 4 bytes), so non-English text is never
    under-counted relative to English.  Pass ``counter=`` to :class:`Notepad` for an
    exact tokenizer.
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    return (len(text) - ascii_chars) + -(-ascii_chars // 4)
