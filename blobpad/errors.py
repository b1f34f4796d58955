"""The one exception hierarchy of blobpad.

Every error the library raises on purpose is a :class:`BlobpadError`.  The
subclasses also derive from the built-in exception a Python caller would expect
(``KeyError`` for a missing id, ``ValueError`` for a bad argument), so existing
``except`` clauses keep working.  Each message says what was wrong and what to do.
"""

from __future__ import annotations

__all__ = ["BlobpadError", "NotFound", "InvalidArgument", "CorruptData", "StoreFull"]


class BlobpadError(Exception):
    """Base class of every error raised by blobpad."""

    def __str__(self) -> str:  # KeyError would otherwise repr() its message
        return str(self.args[0]) if self.args else self.__class__.__name__


class NotFound(BlobpadError, KeyError):
    """An entry, name or notepad version does not exist, or has expired.

    Unknown, expired and other sessions' ids raise the same error with the same
    wording, so a caller cannot tell them apart.
    """


class InvalidArgument(BlobpadError, ValueError):
    """An argument has the wrong type, is out of range, or is malformed."""


class CorruptData(BlobpadError):
    """Stored bytes failed their checksum or the store file is damaged.

    blobpad never returns bytes that failed verification; run ``Store.verify()``
    (``blobpad verify``) to list the damaged entries, delete them and put them again.
    """


class StoreFull(BlobpadError):
    """The store reached its ``max_bytes`` cap or its map-size ceiling, or the disk is full."""


# -- argument checks shared by the modules that take values from a model ---------------

_INT_LIMIT = 1 << 62  # every count, offset and size blobpad accepts fits in 62 bits
MAX_STR = 4096  # longest session, turn, tool or name accepted


def describe(value: object, limit: int = 80) -> str:
    """A short, always-printable description of ``value`` for an error message.

    Never raises and never grows with the argument: a 1 MB string, a 5000-digit
    integer or a dict nested 50,000 deep all describe themselves in ``limit`` or so
    characters, because messages travel back to a model's context.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of about {value.bit_length() * 3 // 10 + 1} digits"
    try:
        text = repr(value)
    except Exception:  # RecursionError, a __repr__ that raises, ...
        return f"a {type(value).__name__}"
    if len(text) > limit:
        return f"{text[: limit - 20]}... ({len(text)} characters)"
    return text


def check_int(
    label: str, value: object, *, minimum: int | None = None, maximum: int | None = None, allow_none: bool = False
) -> int | None:
    """Return ``value`` if it is an int (not a bool) within bounds, else raise InvalidArgument.

    ``maximum`` defaults to 2**62, so no later arithmetic or formatting can overflow.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{label} must be an integer, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise InvalidArgument(f"{label} must be at least {minimum}, not {describe(value)}")
    top = _INT_LIMIT if maximum is None else maximum
    if value > top or value < -_INT_LIMIT:
        raise InvalidArgument(f"{label} must be at most {top}, not {describe(value)}")
    return value


def check_str(label: str, value: object, *, allow_none: bool = True) -> None:
    """Raise InvalidArgument unless ``value`` is a string of valid Unicode, at most MAX_STR long."""
    if value is None and allow_none:
        return
    if not isinstance(value, str):
        raise InvalidArgument(f"{label} must be a string, not {type(value).__name__}")
    if len(value) > MAX_STR:
        raise InvalidArgument(f"{label} is {len(value)} characters long; the limit is {MAX_STR}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{label} contains lone surrogates; pass valid Unicode text") from None
