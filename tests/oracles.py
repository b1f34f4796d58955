"""Oracles shared by the tests: what the reference tools say about a text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blobpad.catalog import BASE_KEY, SHARD, SHARD_FIELDS, SHARD_PREFIX

README = Path(__file__).resolve().parent.parent / "README.md"


def sed_lines(text: str) -> list[str]:
    """The lines of ``text`` as ``sed -n`` numbers them (a final newline ends the last line)."""
    if not text:
        return []
    parts = text.split("\n")
    return parts[:-1] if text.endswith("\n") else parts


def readme_snippet(heading: str) -> str:
    """The first ```python block of the README after the line ``heading`` (such as "## LangGraph"):
    what a reader copies, which the tests run as written."""
    section = README.read_text(encoding="utf-8").split("\n" + heading + "\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def saved_counters(txn: Any) -> dict[str, int]:
    """The counters a store keeps, read through ``store.engine.read()``: its base record
    (JSON) plus every writer's shard record (signed 64-bit integers)."""
    saved = json.loads(txn.get("meta", BASE_KEY) or b"{}")
    for _, raw in txn.scan("meta", SHARD_PREFIX, SHARD_PREFIX[:-1] + b";"):
        for k, v in zip(SHARD_FIELDS, SHARD.unpack(raw), strict=True):
            saved[k] = saved.get(k, 0) + v
    return saved
