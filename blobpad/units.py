"""Sizes in words: the binary units the CLI, the demo and the tools show."""

from __future__ import annotations

__all__ = ["SIZE_UNITS", "human_size"]

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
