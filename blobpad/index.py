"""The metadata index: entry records and the keys that find them.

Keyspaces (see :mod:`blobpad.engine.base`):

* ``entries``: 8-byte id -> the entry's JSON record, followed, for an entry of a few chunks,
  by :data:`INLINE_MARK` and its packed chunk list (a larger entry's is a ``manifests``
  record of its own);
* ``by_seq``: creation sequence + id -> id: the index of every entry that stores written
  before kept; no put writes it now (the listing of every entry merges the sessions' indexes;
  the sequence is the creation time in microseconds, :class:`Sequencer`);
* ``by_scope``: (session) + sequence + id -> id + turn (:func:`scope_value`), so that
  listing one session, or one turn of it, reads only that session's keys (stores written
  before also keep (session, turn) + sequence + id -> id, no longer written nor read);
* ``expiry``: expires_at (microseconds) + id, which gc() and the ``max_bytes``
  eviction walk from the front;
* ``names``: (session, name) -> id.

Strings inside keys are length-prefixed, so no value of a session, turn or name can
make its key the prefix of another's.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import InvalidArgument
from .forks import reset_in_child

__all__ = [
    "Entry", "new_id", "is_id", "parse_id", "scope_key", "scope_prefix", "session_of_scope_key", "name_of_key", "name_key",
    "expiry_key",
    "expiry_id", "NEVER", "decode_entry", "INLINE_MARK", "inline_chunk_list", "seq_key", "Sequencer", "NO_TURN",
    "turn_tag", "scope_value",
]

#: expires_at of entries without a TTL, in the expiry index (they sort last).
NEVER = (1 << 64) - 1

_HEX = frozenset("0123456789abcdefABCDEF")


def new_id() -> str:
    """Return a fresh random entry id: 16 lowercase hex characters (64 random bits)."""
    return new_raw_id().hex()


class _RandomIds:
    """Entry ids from the system's random source, fetched :data:`FETCH` bytes at a time (one
    system call for many ids); a forked child drops what its parent fetched, so that the
    two never hand out the same id."""

    FETCH = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0
        reset_in_child(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pool, self._at = b"", 0

    def take(self) -> bytes:
        with self._lock:
            at = self._at
            if at + 8 > len(self._pool):
                self._pool, at = os.urandom(self.FETCH), 0
            self._at = at + 8
            return self._pool[at:at + 8]


_IDS = _RandomIds()


def new_raw_id() -> bytes:
    """A fresh random entry id as its 8 stored bytes (:func:`new_id` written out)."""
    return _IDS.take()


def is_id(value: object) -> bool:
    """Whether ``value`` is written like an entry id (16 hex characters, either case)."""
    return isinstance(value, str) and len(value) == 16 and _HEX.issuperset(value)


def parse_id(entry_id: object) -> bytes:
    """Return the 8 raw bytes of an entry id, or raise InvalidArgument.

    Ids are written in lowercase, and accepted in either case: ``"485D7BEAE4E144EB"``
    names the entry ``"485d7beae4e144eb"``.
    """
    if not isinstance(entry_id, str):
        raise InvalidArgument(f"an entry id is a string of 16 hex characters, not {type(entry_id).__name__}")
    if not is_id(entry_id):
        shown = entry_id[:40] + ("..." if len(entry_id) > 40 else "")
        raise InvalidArgument(
            f"{shown!r} is not an entry id: ids are 16 lowercase hex characters (upper case is accepted too), "
            "like '485d7beae4e144eb'"
        )
    return bytes.fromhex(entry_id)


def _part(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return struct.pack(">I", len(raw)) + raw


def _turn_part(turn: str | int) -> bytes:
    # Type-tagged so that the turn 1 and the turn "1" stay apart.
    return (b"i" if isinstance(turn, int) else b"s") + _part(str(turn))


def scope_key(session: str, turn: str | int | None = None) -> bytes:
    """The ``by_scope`` prefix of a session, or of one turn in it."""
    if turn is None:
        return b"S" + _part(session)
    return b"T" + _part(session) + _turn_part(turn)


#: the end of the session-index value of an entry put without a turn (:func:`scope_value`)
NO_TURN = b"-"


def turn_tag(turn: str | int | None) -> bytes:
    """How a session-index value names an entry's turn (:data:`NO_TURN` for none)."""
    return NO_TURN if turn is None else _turn_part(turn)


def scope_value(raw_id: bytes, turn: str | int | None) -> bytes:
    """The value of an entry's key in its session's ``by_scope`` index: its id, then its turn
    (:func:`turn_tag`), so that listing one turn reads the session's keys, and the records of
    that turn's entries only.  Stores written before kept the id alone there, and one more key
    per entry, in an index of each turn."""
    return raw_id + turn_tag(turn)


def name_of_key(key: bytes, start: int) -> str:
    """The name in a ``names`` key whose name part starts at ``start`` (after the session's part)."""
    (length,) = struct.unpack_from(">I", key, start)
    return key[start + 4 : start + 4 + length].decode("utf-8", "surrogatepass")


def session_of_scope_key(key: bytes) -> str | None:
    """The session a ``by_scope`` key of a session (``scope_key(session) + ...``) belongs to;
    None for a key no session's could be (a damaged one: its length field or its text)."""
    prefix = scope_prefix(key)
    if len(prefix) < 5 or len(prefix) - 5 != struct.unpack_from(">I", prefix, 1)[0]:
        return None
    try:
        return prefix[5:].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def scope_prefix(key: bytes) -> bytes:
    """The session part of a ``by_scope`` key (its :func:`scope_key`), read from its length
    field without decoding it; the whole key when that field is damaged (longer than the key)."""
    if len(key) < 5:
        return key
    (length,) = struct.unpack_from(">I", key, 1)
    return key[: 5 + length] if 5 + length <= len(key) else key


def name_key(session: str, name: str) -> bytes:
    """The ``names`` key of a named entry."""
    return _part(session) + _part(name)


def expiry_key(expires_us: int, raw_id: bytes, seq: int | None = None) -> bytes:
    """The ``expiry`` key: big-endian microseconds, the entry's creation sequence, then the id.

    The sequence orders the entries that expire together (all those without a TTL, or
    put at one instant with one TTL) oldest first, as eviction takes them.  Stores
    written before it was part of the key have keys without it (``seq=None``); both
    end with the id (:func:`expiry_id`)."""
    return expires_us.to_bytes(8, "big") + (b"" if seq is None else seq.to_bytes(8, "big")) + raw_id


def expiry_id(key: bytes) -> bytes:
    """The entry id an ``expiry`` key ends with (either layout of :func:`expiry_key`)."""
    return key[-8:]


def seq_key(seq: int, raw_id: bytes = b"") -> bytes:
    """The creation-order part of a ``by_seq`` or ``by_scope`` key: the sequence, big-endian,
    then the id (keys of stores written before the sequence came from the clock have none)."""
    return seq.to_bytes(8, "big") + raw_id


class Sequencer:
    """The creation sequences of one store's entries in this process: each entry's creation
    time in microseconds, above every sequence handed out before (a clock that stands still
    or steps back still gives increasing ones).  Every handle of a store in a process shares
    one (``catalog._sequencer_of``), and the first sequence it hands out is above the highest
    the store's counters records hold (``store_floor``, read once, ``catalog.highest_sequence``)
    and, in a session, above the highest that session holds (``floor``, read once per session,
    see :meth:`primed`), so that neither a second handle nor a clock set back between two runs
    puts a new entry before older ones.  (Writers in other processes at the same time follow their
    own clocks.)  Two writers can hand out the same one: the id after it in the index keys
    keeps them apart, so no record every writer updates is needed.  Each store has its own,
    so that a store with another clock (a test's, a server's) never shifts the order of
    another store's entries."""

    #: sessions remembered as primed; past this many, the oldest is read again at its next put
    PRIMED_MAX = 1 << 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0
        self._primed: OrderedDict[str, None] = OrderedDict()
        self._store_primed = False

    @property
    def store_primed(self) -> bool:
        """Whether the store's highest sequence was taken into account (:meth:`next` with ``store_floor``)."""
        return self._store_primed

    def primed(self, session: str) -> bool:
        """Whether ``session``'s highest sequence was taken into account (:meth:`next` with ``floor``)."""
        with self._lock:
            if session in self._primed:
                self._primed.move_to_end(session)
                return True
            return False

    def next(self, now: float, session: str, floor: int | None = None, store_floor: int | None = None) -> int:
        """The sequence of an entry of ``session`` created at ``now`` (Unix time); ``floor``: the
        highest sequence the session holds, given until :meth:`primed` says it was;
        ``store_floor``: the highest the store's records hold (``catalog.highest_sequence``),
        given until :attr:`store_primed` says it was."""
        clock = int(now * 1_000_000) if math.isfinite(now) else 0
        with self._lock:
            if store_floor is not None:
                self._last = max(self._last, min(store_floor, (1 << 63) - 2))
                self._store_primed = True
            if floor is not None:
                self._last = max(self._last, min(floor, (1 << 63) - 2))
                self._primed[session] = None
                if len(self._primed) > self.PRIMED_MAX:
                    self._primed.popitem(last=False)
            self._last = min(max(self._last + 1, clock), (1 << 63) - 1)
            return self._last


@dataclass(frozen=True)
class Entry:
    """What the store knows about one stored observation.

    Attributes:
        id: 16 lowercase hex characters, random.
        session: the session it belongs to ("" when put without one).
        turn, step, tool, name: what the caller said at put time (None if not given).
        kind: "text" (valid UTF-8) or "binary".
        size_bytes: length of the content in bytes.
        chars: length in characters for text, None for binary.
        lines: number of lines as ``sed`` and ``grep`` count them (a final line
            without a newline counts; empty content has 0 lines).
        created_at, expires_at: Unix times; expires_at is None when it never expires.
            A named entry replaced by a put of the same name keeps the created_at
            of the first put of that name.
        updated_at: Unix time of the put that stored this content (the same as
            created_at for an entry never replaced; None in records of older stores).
        sha256: hex digest of the content.
        meta: the caller's JSON-serialisable metadata.
        chunks: how many chunks the content was cut into.
    """

    id: str
    session: str
    turn: str | int | None
    step: int | None
    tool: str | None
    name: str | None
    kind: str
    size_bytes: int
    chars: int | None
    lines: int
    created_at: float
    expires_at: float | None
    sha256: str
    meta: dict[str, Any] = field(default_factory=dict)
    chunks: int = 0
    seq: int = 0
    updated_at: float | None = None

    @property
    def size(self) -> int:
        """Alias of :attr:`size_bytes`."""
        return self.size_bytes

    @property
    def is_text(self) -> bool:
        return self.kind == "text"

    @property
    def length(self) -> int:
        """Length in the unit reads use: characters for text, bytes for binary."""
        return self.chars if self.chars is not None else self.size_bytes

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return asdict(self)

    def encode(self) -> bytes:
        # the fields as they are (not to_dict()'s deep copy): json only reads them
        record = {name: getattr(self, name) for name in _FIELDS}
        return _ENCODER.encode(record).encode("utf-8")

    @classmethod
    def decode(cls, raw: bytes) -> Entry:
        """The entry of a stored record (its JSON; a chunk list held after it is left out)."""
        return cls(**json.loads(raw.partition(INLINE_MARK)[0]))


_FIELDS = tuple(Entry.__dataclass_fields__)
#: the encoder of entry records, made once (json.dumps makes one per call when given options)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


#: what separates an entry record's JSON from the chunk list a small entry's record holds
#: after it (``blobpad.catalog.INLINE_CHUNKS``): JSON escapes every control character, so
#: this byte never occurs in the JSON itself
INLINE_MARK = b"\0"


def inline_chunk_list(raw: bytes) -> bytes | None:
    """The packed chunk list an entry record holds after its JSON, or None when it holds none
    (its chunk list is a ``manifests`` record of its own)."""
    _, mark, tail = raw.partition(INLINE_MARK)
    return tail if mark else None


def decode_entry(raw: bytes) -> Entry | None:
    """The entry record ``raw``, or None when it is damaged (unreadable, or fields of the wrong type)."""
    try:
        e = Entry.decode(raw)
    except (ValueError, TypeError, RecursionError):
        return None

    def is_int(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64

    if not (is_int(e.seq) and is_int(e.size_bytes) and isinstance(e.session, str)):
        return None
    if not isinstance(e.sha256, str) or len(e.sha256) != 64 or not set(e.sha256) <= set("0123456789abcdef"):
        return None
    if e.turn is not None and (isinstance(e.turn, bool) or not isinstance(e.turn, (str, int))):
        return None
    if e.name is not None and not isinstance(e.name, str):
        return None
    for t in (e.expires_at, e.updated_at):
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)):
            return None
    return e
