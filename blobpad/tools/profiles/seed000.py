"""Profile "seed000", seed 000's drop-in: scratchpad_read(scratchpad_id, mode full/head/tail/range, n, start, end)."""

from __future__ import annotations

from typing import Any

from ..reading import read_range, slice_result
from ..spec import Param, Profile, ToolContext, ToolSpec


def _read_seed000(tb: ToolContext, a: dict[str, Any], budget: int) -> dict[str, Any]:
    entry = tb.entry(a["scratchpad_id"])
    mode = a["mode"]
    length = entry.length
    if mode == "full":
        return slice_result(tb, entry, 0, length, budget, mode=mode)
    if mode == "head":
        return slice_result(tb, entry, 0, min(a["n"], length), budget, mode=mode)
    if mode == "tail":
        return slice_result(tb, entry, max(0, length - a["n"]), length, budget, mode=mode, keep_end=True)
    return read_range(tb, entry, a, budget, mode)


def _seed000_tools(tb: ToolContext) -> list[ToolSpec]:
    read = ToolSpec(
        "scratchpad_read",
        ("Reads from the scratchpad an observation previously saved because it was too large for the "
         "conversation (its observation shows a summary and a scratchpad_id). Modes: full = the entire content "
         "(only when it is small); head = first n characters (default 2000); tail = last n characters (default "
         "2000); range = characters start to end (end exclusive). "
         f"Results are capped at about {tb.max_result_chars} characters; a cut result has truncated=true and "
         "'next' holds the arguments that read on. Binary entries are read in bytes, base64-encoded."),
        (
            Param("scratchpad_id", "string", "Id obtained from the 'scratchpad_id' field of a previous observation.",
                  required=True, min_length=1, max_length=64),
            Param("mode", "string", "full, head, tail or range (default head).", default="head",
                  enum=("full", "head", "tail", "range")),
            Param("n", "integer", "For mode head/tail: number of characters to read. Default 2000.", default=2000),
            Param("start", "integer", "For mode range: start index."),
            Param("end", "integer", "For mode range: end index (exclusive)."),
        ),
        _read_seed000,
        reader=True,
    )
    return [read]


PROFILE = Profile(
    name="seed000",
    description=(
        "seed 000 drop-in: scratchpad_read(scratchpad_id, mode full/head/tail/range, n=2000, start, end); "
        "sees the current turn's entries"
    ),
    tools=_seed000_tools,
    scope="turn",
    readers_wait=True,
    instructions=(
        "A large observation is saved in the scratchpad: you see its summary (its start and its end) and a "
        "scratchpad_id. Read it with scratchpad_read(scratchpad_id, mode): head or tail for its first or last "
        "n characters, range for characters start to end, full for all of it."
    ),
)
