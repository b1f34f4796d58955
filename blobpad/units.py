"""Sizes in words: the binary units the CLI, the demo and the tools show, and the counts
their command lines take."""

from __future__ import annotations

import argparse
import math
import re

__all__ = ["SIZE_UNITS", "human_size", "non_negative", "ascii_integer", "ascii_number", "seconds_or_zero", "positive"]

_ASCII_INTEGER = re.compile(r"[+-]?[0-9]{1,4000}")  # int() converts up to 4,300 digits

#: The units of human_size, each 1024 times the one before (IEC binary prefixes).
SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_size(n: int) -> str:
    """A byte count in binary units, one decimal: ``89177500`` -> ``"85.0 MiB"``, ``512`` -> ``"512 B"``.

    The unit is the largest whose value is at least 1 (after rounding to one decimal,
    so 1023.96 KiB shows as ``1.0 MiB``, never ``1024.0 KiB``).
    """
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in SIZE_UNITS[1:]:
        size /= 1024
        if round(size, 1) < 1024 or unit == SIZE_UNITS[-1]:
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def ascii_integer(text: str) -> int | None:
    """The integer ``text`` writes in ASCII digits (a sign allowed, blanks around it), else None:
    ``int()`` also takes other scripts' digits ("１２") and underscores ("1_0"), which a
    command line must not read as numbers."""
    text = text.strip()
    return int(text) if _ASCII_INTEGER.fullmatch(text) else None


def ascii_number(text: str) -> float | None:
    """The number ``text`` writes in ASCII (digits, one decimal point, a sign; blanks around
    it; an exponent as in ``1e-3``), else None, as for a number too large to be finite:
    ``float()`` also takes other scripts' digits, underscores, ``inf`` and ``nan``, which a
    command line must not read as numbers."""
    text = text.strip()
    if not _ASCII_NUMBER.fullmatch(text):
        return None
    number = float(text)
    return number if math.isfinite(number) else None


_ASCII_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")


def non_negative(text: str) -> int:
    """A count on a command line (an ``argparse`` type): a non-negative integer, else
    the usage error of the ``blobpad`` command and of ``python -m blobpad.mcp_server``."""
    n = ascii_integer(text)
    if n is None or n < 0:
        raise argparse.ArgumentTypeError(f"invalid number {text[:100]!r}: use a non-negative integer")
    return n


def positive(text: str) -> int:
    """A count of at least 1 on a command line (an ``argparse`` type), else its usage error."""
    n = ascii_integer(text)
    if n is None or n < 1:
        raise argparse.ArgumentTypeError(f"invalid number {text[:100]!r}: use a positive integer")
    return n


def seconds_or_zero(text: str) -> float:
    """A time budget on a command line (an ``argparse`` type): a non-negative number of
    seconds in ASCII, 0 meaning no limit; else the usage error of the ``blobpad`` command and
    of ``python -m blobpad.mcp_server``."""
    seconds = ascii_number(text)
    if seconds is None or seconds < 0:
        raise argparse.ArgumentTypeError(f"invalid time {text[:100]!r}: use a number of seconds (0: no limit)")
    return seconds
