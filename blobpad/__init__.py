"""blobpad: storage for what does not fit in an AI agent's context.

Park a huge tool observation outside the model's context, hand the model a short
summary and an id, and let it read slices (head, tail, ranges, line windows, grep)
that cost the same on 100 KB or 1 GB.  See README.md.
"""

from __future__ import annotations

from .chunking import ChunkParams
from .edit import Edit
from .errors import BlobpadError, Conflict, CorruptData, InvalidArgument, NotFound, NoUniqueMatch, StoreFull, Unavailable
from .index import Entry
from .notepad import Budget, Notepad, NoteResult, Nudges, Version
from .offload import Offloader, resolve_refs
from .reads import (
    CountResult,
    EntryStream,
    GrepMatch,
    GrepResult,
    LineWindow,
    MatchingLines,
    SessionGrepResult,
    SessionMatch,
)
from .store import GcReport, Stats, Store, VerifyReport, open
from .tools import PROFILES, Toolbox

__version__ = "0.1.0"

__all__ = [
    "open", "Store", "Entry", "Stats", "GcReport", "VerifyReport", "ChunkParams",
    "GrepMatch", "GrepResult", "MatchingLines", "SessionMatch", "SessionGrepResult", "CountResult", "LineWindow", "EntryStream",
    "Notepad", "NoteResult", "Version", "Budget", "Nudges",
    "BlobpadError", "NotFound", "InvalidArgument", "NoUniqueMatch", "CorruptData", "StoreFull", "Conflict", "Unavailable", "Edit",
    "Offloader", "resolve_refs", "Toolbox", "PROFILES",
    "__version__",
]
