"""What a benchmark run measures: sizes, kinds, patterns, and the smoke mode.

Everything here can be chosen on the pytest command line or through the
environment (the environment is what ``python -m benchmarks`` and CI use):

==========================  ===========================  ================================
option                      environment                  meaning
==========================  ===========================  ================================
``--bench-sizes 1,10,100``  ``BLOBPAD_BENCH_SIZES``      sizes in MB (1 MB = 2**20 bytes)
``--bench-1gb``             ``BLOBPAD_BENCH_1GB=1``      add 1 GB (log text only)
``--bench-kinds log,json``  ``BLOBPAD_BENCH_KINDS``      restrict the kinds of data
``--bench-rounds 3``        ``BLOBPAD_BENCH_ROUNDS``     rounds of the put benchmarks
==========================  ===========================  ================================

Without ``--benchmark-only`` (plain ``pytest``, as CI runs it) the suite is in
smoke mode: only the smallest size, and pytest-benchmark disabled, so each
benchmark runs its function exactly once and checks the result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MB = 1 << 20
GB_MB = 1024

#: the sizes of a full run, in MB
DEFAULT_SIZES_MB: tuple[int, ...] = (1, 10, 100)

#: the kinds of content, as agents offload them
KINDS: tuple[str, ...] = ("log", "multibyte", "json", "binary")
TEXT_KINDS: tuple[str, ...] = ("log", "multibyte", "json")
#: kinds with many lines (line windows make no sense on one 100 MB line of JSON)
LINE_KINDS: tuple[str, ...] = ("log", "multibyte")
#: the only kind generated at 1 GB: it is written to disk as a stream
GB_KINDS: tuple[str, ...] = ("log",)

SEED = 0

#: characters (bytes for binary) read by head, tail and range
SLICE_CHARS = 2000
#: lines of a line window
WINDOW_LINES = 100
#: matching lines a "grep first matches" asks for
GREP_LIMIT = 100
#: how many random offsets or positions a read benchmark cycles through
POSITIONS = 32

#: a literal that never occurs in the generated data
ABSENT_LITERAL = "blobpad-needle-7f3a9c"
#: a literal on only a few lines, per kind with lines (the same lines at every size:
#: both sit in the first MB, and what makes them rare never repeats further on).
#: log: the timestamps of one tenth of a second (monotonic time, 6 lines with seed 0);
#: multibyte: the number of one line and its first word (1 line).  json has no rare
#: literal: it is one line, so a literal present matches all of it.
RARE_LITERAL: dict[str, str] = {
    "log": "2023-11-14T22:15:00.3",
    "multibyte": "0004321 ошибка",
}
#: the case-insensitive alternation counted over the whole content
COUNT_PATTERN = "error|fail(ed|ure)"
#: a frequent pattern per kind, for "the first 100 matching lines"
FREQUENT_PATTERN: dict[str, str] = {
    "log": "ERROR|WARN",
    "multibyte": "エラー|ошибка",
}


def size_label(size_mb: int) -> str:
    """``1MB``, ``100MB``, ``1GB``: how a size appears in test ids and reports."""
    return f"{size_mb // GB_MB}GB" if size_mb % GB_MB == 0 else f"{size_mb}MB"


def parse_sizes(text: str) -> tuple[int, ...]:
    """Parse ``"1,10,100"`` (MB; ``1GB`` and ``1024`` are accepted too) into sorted sizes."""
    sizes = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        upper = part.upper()
        if upper.endswith("GB"):
            sizes.add(int(float(upper[:-2]) * GB_MB))
        else:
            sizes.add(int(float(upper.removesuffix("MB"))))
    if not sizes or min(sizes) < 1:
        raise ValueError(f"bad sizes {text!r}: give MB as comma-separated integers, like 1,10,100")
    return tuple(sorted(sizes))


def parse_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k for k in KINDS if k in {p.strip() for p in text.split(",")})
    unknown = {p.strip() for p in text.split(",") if p.strip()} - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"bad kinds {text!r}: choose among {', '.join(KINDS)}")
    return kinds


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Settings:
    """The resolved choices of one pytest session."""

    sizes_mb: tuple[int, ...]
    kinds: tuple[str, ...]
    smoke: bool
    rounds: int | None = None

    @property
    def largest_mb(self) -> int:
        return max(self.sizes_mb)

    def kinds_at(self, size_mb: int) -> tuple[str, ...]:
        """The kinds generated at a size: everything up to 100 MB, log text only beyond."""
        if size_mb > 100:
            return tuple(k for k in self.kinds if k in GB_KINDS)
        return self.kinds

    def put_rounds(self, size_mb: int) -> int:
        """Rounds of a benchmark that needs a fresh store per round (put)."""
        if self.rounds:
            return self.rounds
        if size_mb <= 1:
            return 10
        if size_mb <= 10:
            return 5
        if size_mb <= 100:
            return 3
        return 1


def resolve(
    *,
    sizes: str | None,
    one_gb: bool,
    kinds: str | None,
    rounds: int | None,
    smoke: bool,
) -> Settings:
    """Combine the command line (which wins) with the environment."""
    sizes = sizes or os.environ.get("BLOBPAD_BENCH_SIZES")
    chosen = parse_sizes(sizes) if sizes else DEFAULT_SIZES_MB
    if (one_gb or env_flag("BLOBPAD_BENCH_1GB")) and GB_MB not in chosen:
        chosen = (*chosen, GB_MB)
    if smoke:
        chosen = (min(chosen),)
    kinds = kinds or os.environ.get("BLOBPAD_BENCH_KINDS")
    chosen_kinds = parse_kinds(kinds) if kinds else KINDS
    if rounds is None and os.environ.get("BLOBPAD_BENCH_ROUNDS"):
        rounds = int(os.environ["BLOBPAD_BENCH_ROUNDS"])
    return Settings(sizes_mb=tuple(sorted(chosen)), kinds=chosen_kinds, smoke=smoke, rounds=rounds)
