"""Store targets as errors show them: a URL's password masked, a long target cut short.

A target comes from callers, configuration files and models alike, so showing one costs
time linear in its length, whatever it holds.
"""

from __future__ import annotations

from typing import Any

import re2

__all__ = ["URL_SCHEME", "TARGET_SHOWN", "without_password", "shown_target"]

#: a URL's scheme as RFC 3986 writes one: a letter, then letters, digits, "+", "-" or "."
URL_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"


def without_password(text: str) -> str:
    """``text`` with the password of any URL in it replaced by ``***`` (errors quote targets).

    Everything from the user name's ``:`` to the last ``@`` goes: a password may hold
    ``@``, ``#``, ``/`` or spaces its writer forgot to percent-encode, and masking too
    much hides nothing but the password.  The URL may be mistyped with fewer slashes
    (``redis:/user:pw@host``, ``rediss:user:pw@host``): its password goes too.  In time
    linear in the text's length (RE2), whatever it holds: a target comes from callers
    and models alike (Python's ``re`` took minutes on a long run of letters)."""
    if "@" not in text:
        return text
    raw = text.encode("utf-8", "surrogatepass")  # bytes as Latin-1: any str round-trips
    return _PASSWORD.sub(rb"\1:***@", raw).decode("utf-8", "surrogatepass")


def _password_pattern() -> Any:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.dot_nl = True
    options.log_errors = False
    return re2.compile(rb"(" + URL_SCHEME.encode() + rb":/{0,3}[^/@\s:'\"]*):.*@", options)


_PASSWORD = _password_pattern()

#: the most characters of a target an error quotes
TARGET_SHOWN = 200


def shown_target(text: str) -> str:
    """A store target as an error quotes it: without its password (:func:`without_password`),
    cut to :data:`TARGET_SHOWN` characters, in quotes (``repr``: a line break or a terminal
    escape shows as its escape)."""
    masked = without_password(text)
    return repr(masked if len(masked) <= TARGET_SHOWN else masked[:TARGET_SHOWN - 1] + "…")
