"""The one exception hierarchy of blobpad.

Every error the library raises on purpose is a :class:`BlobpadError`.  The
subclasses also derive from the built-in exception a Python caller would expect
(``KeyError`` for a missing id, ``ValueError`` for a bad argument), so existing
``except`` clauses keep working.  Each message says what was wrong and what to do.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

__all__ = [
    "BlobpadError", "NotFound", "InvalidArgument", "NoUniqueMatch", "CorruptData", "StoreFull", "Conflict", "Unavailable",
    "Hint", "Face",
]

#: The faces of blobpad an error is shown through: the Python library, the ``blobpad``
#: command, and the tools a model calls (:class:`blobpad.Toolbox`, the MCP server).
Face = Literal["library", "cli", "tool"]


@dataclass(frozen=True)
class Hint:
    """What to do about an error, in the words of each face of blobpad.

    An error's message states what went wrong in neutral words; its hint names the
    call that helps, as a Python caller writes it (``library``: "run verify() to
    find the damaged entries") and as a shell user types it (``cli``: "run 'blobpad
    verify' to find the damaged entries") and, where a model can act on it through
    its tools, as the tools say it (``tool``: "pass fixed_strings=true ..."; None
    where only its user can: a model is shown the message alone, never a call it
    cannot make).  ``str(error)`` gives the library's words, :meth:`BlobpadError.render`
    any face's.  Each caller picks its face; none rewrites another face's text.
    """

    library: str
    cli: str
    tool: str | None = None

    def text(self, face: Face) -> str | None:
        """The hint in the words of ``face`` (None: the tools have no words for it)."""
        if face == "tool":
            return self.tool
        return self.cli if face == "cli" else self.library


class BlobpadError(Exception):
    """Base class of every error raised by blobpad.

    ``BlobpadError(message, hint=Hint(...))``: ``message`` says what went wrong
    without naming any call, ``hint`` (optional) what to do, per face; ``str()``
    is the message and the library's hint, ``render("cli")`` the message and the
    command line's.
    """

    def __init__(self, *args: object, hint: Hint | None = None) -> None:
        super().__init__(*args)
        self.hint = hint

    @property
    def message(self) -> str:
        """What went wrong, without the hint."""
        return str(self.args[0]) if self.args else self.__class__.__name__

    def render(self, face: Face = "library") -> str:
        """The message and the hint in the words of ``face`` ("library", "cli" or "tool";
        the message alone where the hint has no words for that face)."""
        words = None if self.hint is None else self.hint.text(face)
        return self.message if words is None else f"{self.message}; {words}"

    def __str__(self) -> str:  # KeyError would otherwise repr() its message
        return self.render("library")

    def __reduce__(self) -> tuple[Any, ...]:  # the hint is a keyword argument: keep it across pickling
        return (_rebuild, (type(self), self.args, self.hint))


def _rebuild(cls: type[BlobpadError], args: tuple[object, ...], hint: Hint | None) -> BlobpadError:
    return cls(*args, hint=hint)


class NotFound(BlobpadError, KeyError):
    """An entry, name or notepad version does not exist, or has expired.

    Unknown, expired and other sessions' ids raise the same error with the same
    wording, so a caller cannot tell them apart.
    """


class InvalidArgument(BlobpadError, ValueError):
    """An argument has the wrong type, is out of range, or is malformed."""


class NoUniqueMatch(InvalidArgument):
    """The text an edit replaces does not occur in the entry (``occurrences`` is 0), or occurs
    several times (``occurrences`` says how many) and the edit was to replace one.

    ``NoUniqueMatch(message, occurrences, hint=...)``; nothing was changed.
    """

    def __init__(self, message: str, occurrences: int, *, hint: Hint | None = None) -> None:
        super().__init__(message, occurrences, hint=hint)

    @property
    def occurrences(self) -> int:
        """How many times the text occurs in the entry (0: not at all)."""
        return int(self.args[1])


class CorruptData(BlobpadError):
    """Stored bytes failed their checksum or the store file is damaged.

    blobpad never returns bytes that failed verification; run ``Store.verify()``
    (``blobpad verify``) to list the damaged entries, delete them and put them again.
    """


class StoreFull(BlobpadError):
    """The store reached its ``max_bytes`` cap or its map-size ceiling, or the disk is full."""


class Unavailable(BlobpadError):
    """The store's server did not answer within the engine's retry time (``retry_seconds``):
    nothing is known about the data, and nothing was changed by a call that raised it
    before its commit.  Retry once the server is back."""


class Conflict(BlobpadError):
    """Another writer changed an entry while an operation that read it was under way
    (``Store.edit``: the name was put again, or the entry deleted); nothing was changed.
    Read the entry again and retry."""


# -- hints shared by the modules: each names its call as the library and the CLI do -----

#: An id that names no entry.
HINT_UNKNOWN_ID = Hint(
    "use an id returned by put() (the scratchpad_id of an offloaded observation)",
    "use an id printed by 'blobpad put' or listed by 'blobpad ls'",
)
#: A name that names no entry.
HINT_UNKNOWN_NAME = Hint("list the names with entries()", "list the names with 'blobpad ls'")
#: Damaged data: find out what it touches.
HINT_VERIFY = Hint("run verify() to find the damaged entries", "run 'blobpad verify' to find the damaged entries")
#: Damage that stops a store from opening: verify cannot open it either.
HINT_UNOPENABLE = Hint(
    "verify() cannot open it either: move the store aside (keep it: its sound pages still hold data) and open a "
    "new one, or restore it from a backup",
    "'blobpad verify' cannot open it either: move the store aside (keep it: its sound pages still hold data) and "
    "use a new one, or restore it from a backup",
)
#: A TTL too long to mean anything but "never".
HINT_TTL_NEVER = Hint("pass ttl=None for an entry that never expires", "pass --ttl never for an entry that never expires")
#: The store's max_bytes cap refuses a put.
HINT_MAX_BYTES = Hint(
    "raise max_bytes (blobpad.open(max_bytes=...)) or put less",
    "put less, or raise the cap from Python (blobpad.open(path, max_bytes=...))",
)
#: The disk is full.
HINT_DISK_FULL = Hint(
    "free disk space, or delete entries and run gc()",
    "free disk space, or delete entries ('blobpad rm') and run 'blobpad gc'",
)
#: The store reached its map-size ceiling.
HINT_MAP_CEILING = Hint(
    "delete entries or run gc(), or open it with a larger max_map_size",
    "delete entries ('blobpad rm') or run 'blobpad gc', or open it from Python with a larger max_map_size "
    "(blobpad.open(path, max_map_size=...))",
)
#: The map-size ceiling is too low even to free space.
HINT_MAP_CEILING_FULL = Hint(
    "open it with a larger max_map_size, then delete entries",
    "open it from Python with a larger max_map_size (blobpad.open(path, max_map_size=...)), then delete entries",
)
#: A Redis / Valkey server at its memory limit.
HINT_SERVER_FULL = Hint(
    "delete entries or run gc() (both work on a full server), or raise the server's maxmemory",
    "delete entries ('blobpad rm') or run 'blobpad gc' (both work on a full server), or raise the server's "
    "maxmemory",
)
#: A notepad text too large for a notepad.
HINT_NOTEPAD_SIZE = Hint(
    "keep working notes short and store large data as entries with put()",
    "keep working notes short and store large data as entries with 'blobpad put'",
    "keep working notes short: plans, findings and decisions, not whole files or tool outputs",
)
#: compact() while another process has the store open.
HINT_COMPACT_ALONE = Hint(
    "close the other processes (agents, MCP servers) and call compact() again",
    "close the other processes (agents, MCP servers) and run 'blobpad compact' again",
)
#: An invalid regular expression that may have been meant literally.
HINT_NAME_TAKEN = Hint("choose another name, or put without exclusive=True to replace it",
                       "choose another name, or put without --exclusive to replace it")

HINT_EXCLUSIVE_NAME = Hint("pass a name with exclusive=True", "pass --name with --exclusive")

HINT_CURSOR = Hint("or None to start over", "or leave --cursor out to start over", "or leave cursor out to start over")

HINT_FIXED = Hint("pass fixed=True for a literal", "pass -F for a literal",
                  "pass fixed_strings=true to search for the literal text")


# -- argument checks shared by the modules that take values from a model ---------------

_INT_LIMIT = 1 << 62  # every count, offset and size blobpad accepts fits in 62 bits
#: longest session, turn, name or tool accepted, in bytes of UTF-8.  Index keys hold up to
#: two of them: a session and a name (8 more bytes), a session and a turn (18 more), and a
#: notepad key a session, a space name of up to 32 bytes and a version (17 more); so every
#: key fits LMDB's 511-byte limit.
MAX_STR_BYTES = 240
#: longest finite ttl, in seconds (100 years); a longer one is refused with :data:`HINT_TTL_NEVER`
MAX_TTL = 100 * 365 * 86400

_JSON_TYPES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "an array",
               dict: "an object", type(None): "null"}


def typename(value: object, *, json: bool = False) -> str:
    """The type of ``value`` for an error message: Python's name (``int``; ``null`` for
    None), or with ``json=True`` the JSON words a model's argument is named by (``an
    integer``, ``a string``, ``an object``, ``null``)."""
    if json:
        return _JSON_TYPES.get(type(value), type(value).__name__)
    return "null" if value is None else type(value).__name__


def one_line(text: str, keep: str = "") -> str:
    """Caller-chosen text on one line of a terminal or log: every character that is not
    printable (a line break, a terminal escape, a lone surrogate) shown as its Python escape,
    except those in ``keep``; the others as they are."""
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


#: the first members of a large container, for :func:`describe`
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 80, 80, 80
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = _SHORT.maxfrozenset = 16


def describe(value: object, limit: int = 80) -> str:
    """A short, always-printable description of ``value`` for an error message.

    Never raises and never grows with the argument: a 1 MB string, a 5000-digit
    integer or a dict nested 50,000 deep all describe themselves in ``limit`` or so
    characters, because messages travel back to a model's context.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"  # log10(2) digits a bit
    if isinstance(value, list | tuple | dict | set | frozenset):
        # its first members only, a few levels deep: the whole repr of a list of millions (or of
        # a list holding one) is hundreds of MB; one reprlib shortened nothing of is repr's
        shown = _SHORT.repr(value)
        if len(value) > limit or "..." in shown:
            count = f"{len(value)} member{'s' if len(value) != 1 else ''}"
            return f"{shown[: limit - 20]}... (a {type(value).__name__} of {count})"
    try:
        text = repr(value)
    except Exception:  # RecursionError, a __repr__ that raises, ...
        return f"a {type(value).__name__}"
    if len(text) > limit:
        return f"{text[: limit - 20]}... ({len(text)} characters)"
    return text


@overload
def check_int(
    label: str, value: object, *, minimum: int | None = None, maximum: int | None = None,
    allow_none: Literal[False] = False,
) -> int: ...


@overload
def check_int(
    label: str, value: object, *, minimum: int | None = None, maximum: int | None = None, allow_none: bool
) -> int | None: ...


def check_int(
    label: str, value: object, *, minimum: int | None = None, maximum: int | None = None, allow_none: bool = False
) -> int | None:
    """Return ``value`` if it is an int (not a bool) within bounds, else raise InvalidArgument.

    ``maximum`` defaults to 2**62, so no later arithmetic or formatting can overflow.  The
    one integer check of blobpad: it never clamps; a caller for which a value past any
    content means "to the end" clamps it itself, before the check (see reads).
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{label} must be an integer, not {typename(value)}")
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{label} must be at least {minimum}, not {describe(value)}")
    top = _INT_LIMIT if maximum is None else maximum
    if value > top or value < -_INT_LIMIT:
        raise InvalidArgument(f"{label} must be at most {top}, not {describe(value)}")
    return value


def check_bool(label: str, value: object) -> bool:
    """``value`` if it is True or False (not 1, "yes" or None); else InvalidArgument."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{label} must be True or False, not {typename(value)}")
    return value


def check_items(label: str, value: object, item: type | tuple[type, ...], words: str) -> list[Any]:
    """The items of ``value``, a list (or another iterable, not a string) of ``item``
    instances; else InvalidArgument saying ``label`` is a list of ``words``."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgument(f"{label} must be a list of {words}, not {describe(value)}")
    items = list(value)
    for one in items:
        if isinstance(one, bool) or not isinstance(one, item):
            raise InvalidArgument(f"{label} must be a list of {words}; it holds {describe(one)}")
    return items


def check_str(label: str, value: object, *, allow_none: bool = True) -> None:
    """Raise InvalidArgument unless ``value`` is a string of valid Unicode of at most
    :data:`MAX_STR_BYTES` bytes of UTF-8.

    The one check of every session, turn, name and tool, on every path that takes one
    (put, find, entries, notepads, delete_session, the tools, the CLI), so that each
    key built from them fits the store.
    """
    if value is None and allow_none:
        return
    if not isinstance(value, str):
        raise InvalidArgument(f"{label} must be a string, not {typename(value)}")
    if len(value) > MAX_STR_BYTES:  # every character is at least one byte: no need to encode a huge string
        raise InvalidArgument(
            f"{label} is {len(value)} characters long (at least as many bytes of UTF-8); the limit is {MAX_STR_BYTES} bytes"
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"{label} contains lone surrogates; pass valid Unicode text") from None
    if size > MAX_STR_BYTES:
        raise InvalidArgument(
            f"{label} is {size} bytes of UTF-8 ({len(value)} characters); the limit is {MAX_STR_BYTES} bytes"
        )


def check_turn(turn: object) -> None:
    """Raise InvalidArgument unless ``turn`` is None, a string :func:`check_str` accepts or
    an integer :func:`check_int` accepts: the one check of a turn, wherever one is given."""
    if turn is None:
        return
    if isinstance(turn, bool) or not isinstance(turn, (str, int)):
        raise InvalidArgument(f"turn must be a string, an integer or None, not {typename(turn)}")
    if isinstance(turn, str):
        check_str("turn", turn)
    else:
        check_int("turn", turn)


#: The shortest ttl: expiry is kept in microseconds, and a shorter one (below the float
#: resolution of today's Unix time, too) expires an entry as it is put.
MIN_TTL = 1e-6


def check_ttl(ttl: object, label: str = "ttl") -> float | None:
    """Return ``ttl`` (seconds an entry or a notepad lives; None: never) if it is a
    number of seconds from :data:`MIN_TTL` to :data:`MAX_TTL`, else raise InvalidArgument.

    The one check of every ttl (``Store.put``, ``Offloader``, ``Toolbox``, ``Notepad``);
    a longer one says to pass None (:data:`HINT_TTL_NEVER`).
    """
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidArgument(f"{label} must be a positive number of seconds or None, not {typename(ttl)}")
    if isinstance(ttl, int) and abs(ttl) > MAX_TTL:  # float() of a huge int overflows
        ttl = math.inf if ttl > 0 else -math.inf
    if math.isnan(ttl) or ttl <= 0:
        raise InvalidArgument(f"{label} must be a positive number of seconds or None, not {describe(ttl)}")
    if ttl < MIN_TTL:  # shorter than the clock can tell: expired when put, an id that reads as unknown
        raise InvalidArgument(f"{label} must be at least a microsecond ({MIN_TTL:g} s), not {describe(ttl)}")
    if ttl > MAX_TTL:
        raise InvalidArgument(f"{label} is over 100 years", hint=HINT_TTL_NEVER)
    return ttl
