"""Session notepads: a session's plan and findings, kept outside the model's context.

A :class:`Notepad` (``store.notepad(session)``) is one session's working memory in
the store: named *spaces* (``notes``, ``plan``, ``refs``, ``notepad``,
``scratchpad`` and any added with ``budgets=``), each with a :class:`Budget`.
Every change is one write transaction and a new version, so two processes writing
the same notepad never lose an update, and any version can be read or reverted to.
A replacement over budget is truncated with a warning; an incremental change over
budget is rejected (a :class:`NoteResult` with ``ok`` False), never an exception.
Each seed's tool names are thin aliases (``set_plan``, ``write_notepad``,
``scratchpad``, ...) grouped at the end of :class:`Notepad`; every method documents
itself.  :class:`Nudges` adds seed 001's opt-in hints.

Modules: :mod:`.pad` (the notepad and its results), :mod:`.budget` (budgets, token
estimate), :mod:`.texts` (the seeds' texts), :mod:`.nudges`; the records are
:mod:`blobpad.notes`.
"""

from .budget import DEFAULT_BUDGETS, MAX_CONTENT_BYTES, Budget, estimate_tokens
from .nudges import NUDGE_TEXTS, Nudges
from .pad import Notepad, NoteResult, Version, purge_expired
from .texts import (
    EMPTY_NOTEPAD_HINT,
    NOTEPAD_GUIDANCE,
    NOTEPAD_HEADING,
    PRE_COMPACTION_WARNING,
    SCRATCHPAD_FOOTER,
    SCRATCHPAD_GUIDANCE,
    SCRATCHPAD_HEADER,
    prepend_block,
    scratchpad_guidance,
)

__all__ = [
    "Notepad", "NoteResult", "Version", "Budget", "Nudges", "NUDGE_TEXTS", "DEFAULT_BUDGETS", "estimate_tokens",
    "prepend_block",
    "purge_expired", "scratchpad_guidance",
    "NOTEPAD_HEADING", "EMPTY_NOTEPAD_HINT", "PRE_COMPACTION_WARNING", "NOTEPAD_GUIDANCE",
    "SCRATCHPAD_HEADER", "SCRATCHPAD_FOOTER", "SCRATCHPAD_GUIDANCE", "MAX_CONTENT_BYTES",
]
