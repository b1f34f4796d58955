"""In-place edits of named text entries that store only the chunks the edit changes.

``Store.edit(entry_id, old, new, replace_all=False)`` replaces ``old`` with ``new`` in
a named text entry exactly as ``content.replace(old, new)`` does (every occurrence,
non-overlapping, left to right), or replaces its one occurrence, and puts the result
under the entry's session and name.  It never holds the entry in memory whole:

1. It counts the occurrences, reading the entry one block at a time.  The search is
   on the UTF-8 bytes of ``old``: UTF-8 is self-synchronising, so a byte match of
   valid UTF-8 in valid UTF-8 starts and ends on character boundaries and the byte
   matches are the character matches.  ``len(old) - 1`` bytes are carried from one
   block to the next, so an occurrence across a block (or chunk) boundary is found.
   An edit refused here (no occurrence, or several and not ``replace_all``) has
   written nothing.
2. It streams the replaced content into the store's put pipeline as a binary file
   object.  Chunks are cut on line boundaries by content (:mod:`blobpad.chunking`)
   and a put shares the chunks already stored, so the unchanged regions map to the
   chunks they had: only the chunks around the edits are compressed and stored anew,
   and those of the old content that nothing else uses are freed when it is replaced.

The new entry keeps the old one's session, name, turn, step, tool, meta, kind and
``created_at`` (as any put of a name does), and its expiry: it expires when the old
one would have, as the old one stands when the edit commits (a ``touch()`` made while
the edit ran is kept), and an entry without a TTL stays without one; ``updated_at``
is the time of the edit.  Its
id is new, as every put's is: find it again by its name (``Store.find``).

Only named entries can be edited: an unnamed entry is known by its id alone, which
the edit cannot keep, and which others may hold (a model's context, an offload
reference); put the edited content as a new entry instead.

Concurrency: the put's final transaction checks that the name still names the entry
that was read and that it is still live (``Catalog.commit_entry(replaces=...)``); if
another writer put the name again, or the entry was deleted or expired, meanwhile, the edit raises
:class:`~blobpad.errors.Conflict` and writes nothing (also when the entry went away
while the second pass read it: it is read by id, and an id's content never changes).  Crash safety is the put's: an
edit killed at any point leaves the old entry as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .errors import Conflict, Hint, InvalidArgument, NotFound, NoUniqueMatch, check_bool, describe
from .index import Entry
from .put import Putter
from .reads import EntryStream
from .view import Reader, not_found

__all__ = ["Edit", "edit", "occurrences", "READ_BLOCK"]

#: bytes of the entry read at a time (the search and the replacement hold about this much)
READ_BLOCK = 1 << 20

_HINT_MANY = Hint(
    "pass replace_all=True to replace every occurrence, or include more of the surrounding text so that it occurs once",
    "replace every occurrence, or include more of the surrounding text so that it occurs once",
    "pass replace_all=true to replace every occurrence, or include more of the surrounding text so that it occurs once",
)


@dataclass(frozen=True)
class Edit:
    """What ``Store.edit`` did.

    Attributes:
        entry: the entry now stored under the name (a new id; the old entry is gone).
        occurrences: how many occurrences of the old text were replaced.
    """

    entry: Entry
    occurrences: int


class _Splitter:
    """Splits a stream of blocks at the occurrences of ``old``, as ``content.split(old)`` splits it whole.

    Each :meth:`feed` returns the parts of the content it completes: every part but
    the last ends where an occurrence starts (so ``len(parts) - 1`` occurrences), the
    last is content after them that cannot begin one.  Up to ``len(old) - 1`` bytes
    that might begin an occurrence wait for the next block; :meth:`rest` returns them
    at the end.
    """

    def __init__(self, old: bytes) -> None:
        self._old = old
        self._keep = len(old) - 1
        self._carry = b""

    def feed(self, block: bytes) -> list[bytes]:
        # The scan restarts where the last block's left off: the carried bytes start
        # at or after the end of the last occurrence, and before them no occurrence
        # can start (it would have been complete).  Matches found in carry + block are
        # therefore exactly the whole content's, up to the last complete one.
        parts = (self._carry + block).split(self._old)
        tail = parts[-1]
        cut = max(0, len(tail) - self._keep)
        self._carry = tail[cut:]
        parts[-1] = tail[:cut]
        return parts

    def rest(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest


def _blocks(reader: Reader, entry: Entry) -> Iterator[bytes]:
    """The content of ``entry`` in blocks of ``READ_BLOCK`` bytes (NotFound if it goes away meanwhile)."""
    with EntryStream(reader, entry) as stream:
        while block := stream.read(READ_BLOCK):
            yield block


def _count(reader: Reader, entry: Entry, old: bytes) -> int:
    splitter = _Splitter(old)
    return sum(len(splitter.feed(block)) - 1 for block in _blocks(reader, entry))


def _replaced(reader: Reader, entry: Entry, old: bytes, new: bytes) -> Iterator[bytes]:
    """The content of ``entry`` with every occurrence of ``old`` replaced, in non-empty pieces."""
    splitter = _Splitter(old)
    for block in _blocks(reader, entry):
        parts = splitter.feed(block)
        for part in parts[:-1]:
            if part:
                yield part
            if new:
                yield new
        if parts[-1]:
            yield parts[-1]
    rest = splitter.rest()
    if rest:
        yield rest


class _Pieces:
    """A binary file object over an iterator of non-empty pieces: what ``put`` reads as a stream."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._piece = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        out: list[memoryview] = []
        n = 0
        while size < 0 or n < size:
            if not self._piece:
                piece = next(self._pieces, None)
                if piece is None:
                    break
                self._piece = memoryview(piece)
            take = len(self._piece) if size < 0 else min(len(self._piece), size - n)
            out.append(self._piece[:take])
            self._piece = self._piece[take:]
            n += take
        return b"".join(out)


def _utf8(label: str, value: object) -> bytes:
    if not isinstance(value, str):
        raise InvalidArgument(f"{label} must be a str, not {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{label} contains lone surrogates; pass valid Unicode text") from None


def occurrences(reader: Reader, entry_id: str, text: str) -> int:
    """How many times ``text`` occurs in the text entry ``entry_id``, as ``str.count`` counts
    (without overlaps), read one block at a time.

    Raises:
        InvalidArgument: ``text`` is empty or not a str, or the entry is binary.
        NotFound: no live entry ``entry_id``.
    """
    needle = _utf8("text", text)
    if not needle:
        raise InvalidArgument("text is empty: give the text to count")
    entry = reader.stat(entry_id)
    if entry.kind != "text":
        raise InvalidArgument(f"entry {entry.id} is binary; occurrences counts text")
    return _count(reader, entry, needle)


def edit(reader: Reader, putter: Putter, entry_id: str, old: str, new: str, *, replace_all: bool = False,
         evict_untimed: bool = True) -> Edit:
    """Replace ``old`` with ``new`` in the named text entry ``entry_id`` (see the module docstring).

    Raises:
        InvalidArgument: ``old`` is empty, an argument has the wrong type, or the entry
            is binary or has no name; :class:`~blobpad.errors.NoUniqueMatch` (an
            InvalidArgument) when ``old`` does not occur (``occurrences == 0``) or
            occurs several times and ``replace_all`` is false.  Nothing is changed.
        NotFound: no live entry ``entry_id`` (or it went away while being counted).
        Conflict: another writer put the name again, or the entry was deleted or
            expired, after it was counted; nothing is changed.
        StoreFull: the store cannot hold the new chunks (``evict_untimed``: as for
            :meth:`blobpad.Store.put`).
    """
    old_bytes = _utf8("old", old)
    new_bytes = _utf8("new", new)
    if not old_bytes:
        raise InvalidArgument("old is empty: give the text to replace")
    check_bool("replace_all", replace_all)
    check_bool("evict_untimed", evict_untimed)
    entry = reader.stat(entry_id)
    if entry.kind != "text":
        raise InvalidArgument(f"entry {entry.id} is binary; only text entries can be edited")
    if entry.name is None:
        raise InvalidArgument(
            f"entry {entry.id} has no name; only named entries can be edited (the result replaces the entry "
            "under its name): put the edited content as a new entry instead"
        )
    occurrences = _count(reader, entry, old_bytes)
    if occurrences == 0:
        raise NoUniqueMatch(f"{describe(old, 200)} does not occur in entry {entry.id}", 0)
    if occurrences > 1 and not replace_all:
        raise NoUniqueMatch(f"{describe(old, 200)} occurs {occurrences} times in entry {entry.id}", occurrences,
                            hint=_HINT_MANY)
    if entry.expires_at is not None and entry.expires_at <= reader.now():
        raise not_found(entry.id)  # it expired while it was being read
    try:
        stored = putter.put(  # no ttl: the commit takes the entry's expiry as it stands then (replaces=)
            _Pieces(_replaced(reader, entry, old_bytes, new_bytes)), kind="text", session=entry.session,
            turn=entry.turn, ttl=None, name=entry.name, step=entry.step, tool=entry.tool, meta=dict(entry.meta),
            replaces=bytes.fromhex(entry.id), evict_untimed=evict_untimed,
        )
    except NotFound:  # the entry went away while the edit read it again
        raise Conflict(
            f"entry {entry.id} (named {entry.name[:200]!r}) was replaced, deleted or expired while it was being "
            "edited; nothing was changed: read it again and retry"
        ) from None
    return Edit(stored, occurrences)
