"""Oracles shared by the tests: what the reference tools say about a text."""

from __future__ import annotations


def sed_lines(text: str) -> list[str]:
    """The lines of ``text`` as ``sed -n`` numbers them (a final newline ends the last line)."""
    if not text:
        return []
    parts = text.split("\n")
    return parts[:-1] if text.endswith("\n") else parts
