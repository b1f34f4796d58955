"""Session notepads: a session's plan and findings, kept outside the model's context.

The notepad lives in :mod:`blobpad.notepad.pad`; this package re-exports its public names.
"""

from .pad import (
    DEFAULT_BUDGETS,
    EMPTY_NOTEPAD_HINT,
    MAX_CONTENT_BYTES,
    NOTEPAD_GUIDANCE,
    NOTEPAD_HEADING,
    NUDGE_TEXTS,
    PRE_COMPACTION_WARNING,
    SCRATCHPAD_FOOTER,
    SCRATCHPAD_GUIDANCE,
    SCRATCHPAD_HEADER,
    Budget,
    Notepad,
    NoteResult,
    Nudges,
    Version,
    estimate_tokens,
    prepend_block,
    purge_expired,
    scratchpad_guidance,
)

__all__ = [
    "Notepad", "NoteResult", "Version", "Budget", "Nudges", "NUDGE_TEXTS", "DEFAULT_BUDGETS", "estimate_tokens",
    "prepend_block",
    "purge_expired", "scratchpad_guidance",
    "NOTEPAD_HEADING", "EMPTY_NOTEPAD_HINT", "PRE_COMPACTION_WARNING", "NOTEPAD_GUIDANCE",
    "SCRATCHPAD_HEADER", "SCRATCHPAD_FOOTER", "SCRATCHPAD_GUIDANCE", "MAX_CONTENT_BYTES",
]
