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
