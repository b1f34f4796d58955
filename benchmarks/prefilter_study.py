"""Which per-chunk filter to build at put: a study on real logs (issue 16, item 1).

Run ``python -m benchmarks.prefilter_study`` (``--sample-mb N`` sets the size of the
generated log, 16 by default).  It chunks each log as blobpad does
(:func:`blobpad.chunking.cut_chunks`, default :class:`~blobpad.chunking.ChunkParams`),
builds candidate filters for every chunk, and prints for each candidate and each
corpus a Markdown table of

* the filters' size as a share of the chunks' zstd level-1 compressed size (the
  issue caps filters at 3% of stored bytes);
* for each pattern, how many chunks the filters let through out of the chunks that
  hold no match (a skipped chunk is one that is not decompressed);
* build time, in MB of raw chunk per second on one core.

The corpora are the Loghub 2k samples in ``../shared/corpus/loghub/`` when that
directory exists (16 systems, each file its own entry), and always
:func:`blobpad.sample.log_text`.  The patterns: an absent literal
(``blobpad-needle-7f3a9c``, the benchmarks' one); a token found once in the
corpus (a request id, block id or hex token: the rare literal); an exception class
name (the rarest ``...Exception`` of the corpus, ``NullPointerException`` when it has
none); ``error|fail(ed|ure)`` case-insensitive; ``ERROR|WARN``.

The candidates: trigram Bloom filters on case-folded bytes with one hash at 0.5, 1,
2 and 4 bits per distinct trigram (``tri-b1`` is :mod:`blobpad.prefilter`'s), the
same with two hashes at 4 bits (``tri-b4-k2``), and a Bloom filter of the folded
tokens (maximal runs of ``[0-9A-Za-z_]`` and non-ASCII bytes) at 4 bits per distinct
token (``tok-b4``), which only helps a literal holding a whole token between two
separators, and ``prefilter.build`` capped at 3% of the chunk's compressed size.

The run of 2026-11-23 (full tables in benchmarks/README.md, "Chunk prefilters");
"read" is the share of the chunks holding no match that the filter lets through:

======================  ==========  ======  ==========  ===========
corpus, filter          size share  absent  rare token  exception
======================  ==========  ======  ==========  ===========
generated, tri-b1       2.43%       0%      0%          0%
generated, chosen       2.40%       0%      0%          0%
Loghub, tri-b0.5        2.23%       15%     50%         34%
Loghub, tri-b1          4.41%       0%      19%         8%
Loghub, tok-b4          6.74%       41%     73%         100%
Loghub, chosen          2.75%       11%     48%         21%
======================  ==========  ======  ==========  ===========

Build: 275 MB/s on one core for a 96 KiB chunk with numpy (zstd -1: 274 MB/s), 2.7 MB/s
in pure Python.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zstandard

from blobpad import prefilter, sample
from blobpad.chunking import ChunkParams, cut_chunks
from blobpad.prefilter import SPILL, Query
from blobpad.reads import compile_pattern

LOGHUB = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "loghub"
ABSENT = "blobpad-needle-7f3a9c"
_MULT2 = 0x85EBCA77
_MASK = (1 << prefilter._SCRATCH_LOG) - 1
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_WORD = bytes(b if (48 <= b < 58 or 65 <= b < 91 or 97 <= b < 123 or b == 95 or b >= 128) else 32 for b in range(256))


@dataclass
class Pattern:
    """One query of the study."""

    label: str
    pattern: str
    ignore_case: bool = False
    fixed: bool = False


@dataclass
class Candidate:
    """A filter design: how to build a chunk's filter and test a query against it."""

    name: str
    build: Callable[[bytes, bytes, int], object]
    size: Callable[[object], int]
    may_match: Callable[[Pattern, object], bool]
    seconds: float = 0.0
    raw: int = 0
    bytes_: int = 0


@dataclass
class Corpus:
    """Entries (each a list of chunks) and the patterns asked of them."""

    name: str
    entries: list[list[bytes]]
    patterns: list[Pattern] = field(default_factory=list)


# -- candidates ----------------------------------------------------------------------------


def _trigram_candidate(bits_per_gram: float, hashes: int = 1) -> Candidate:
    """prefilter's design at another density, or with a second hash (the same 16-bit trigram hashes)."""

    def build(chunk: bytes, spill: bytes, z: int) -> object:
        data = chunk + spill[:SPILL]
        hs = np.flatnonzero(prefilter.trigram_bits(data)) if len(data) >= 3 else np.zeros(0, dtype=np.intp)
        m = 8 * max(prefilter.MIN_BYTES, min(prefilter.MAX_BYTES, math.ceil(len(hs) * bits_per_gram / 8)))
        bits = np.zeros(m, dtype=np.bool_)
        bits[(hs * m) >> prefilter._SCRATCH_LOG] = True
        if hashes == 2:
            bits[(((hs * _MULT2) & _MASK) * m) >> prefilter._SCRATCH_LOG] = True
        return (m, bits)

    def size(f: object) -> int:
        m, _bits = f  # type: ignore[misc]
        return 3 + m // 8

    def may_match(p: Pattern, f: object) -> bool:
        m, bits = f  # type: ignore[misc]
        q = Query.compile(p.pattern, ignore_case=p.ignore_case, fixed=p.fixed)

        def present(h: int) -> bool:
            if not bits[(h * m) >> prefilter._SCRATCH_LOG]:
                return False
            return hashes == 1 or bool(bits[(((h * _MULT2) & _MASK) * m) >> prefilter._SCRATCH_LOG])

        return _eval(q._formula, present)

    name = f"tri-b{bits_per_gram:g}" + (f"-k{hashes}" if hashes > 1 else "")
    return Candidate(name, build, size, may_match)


def _chosen_candidate(share: float) -> Candidate:
    """blobpad.prefilter as put would call it: capped at ``share`` of the chunk's compressed size."""

    def build(chunk: bytes, spill: bytes, z: int) -> object:
        return prefilter.build(chunk, spill, max_bytes=int(share * z))

    def may_match(p: Pattern, f: object) -> bool:
        return Query.compile(p.pattern, ignore_case=p.ignore_case, fixed=p.fixed).may_match(f)  # type: ignore[arg-type]

    return Candidate(f"**prefilter.build, max {100 * share:g}%**", build, len, may_match)  # type: ignore[arg-type]


def _eval(f: object, present: Callable[[int], bool]) -> bool:
    if f is True or f is False:
        return f
    assert isinstance(f, tuple)
    if f[0] == "and":
        return all(_eval(x, present) for x in f[1])
    if f[0] == "or":
        return any(_eval(x, present) for x in f[1])
    return all(present(h) for h in f)


def _tokens(data: bytes) -> set[bytes]:
    return set(data.translate(_LOWER).translate(_WORD).split())


def _token_candidate(bits_per_token: float) -> Candidate:
    def build(chunk: bytes, spill: bytes, z: int) -> object:
        toks = _tokens(chunk)
        log_m = max(6, min(16, round(math.log2(max(1, len(toks)) * bits_per_token))))
        bits = bytearray(1 << log_m)
        for t in toks:
            bits[hash_token(t) >> (32 - log_m)] = 1
        return (log_m, bytes(bits))

    def size(f: object) -> int:
        log_m, _bits = f  # type: ignore[misc]
        return 2 + (1 << log_m >> 3)

    def may_match(p: Pattern, f: object) -> bool:
        log_m, bits = f  # type: ignore[misc]
        if not p.fixed:
            return True  # whole tokens of a regular expression: not derived here (Query's formula is trigrams)
        inner = p.pattern.encode().translate(_LOWER).translate(_WORD).split(b" ")[1:-1]
        return all(bits[hash_token(t) >> (32 - log_m)] for t in inner if t)

    return Candidate(f"tok-b{bits_per_token:g}", build, size, may_match)


def hash_token(token: bytes) -> int:
    """A 32-bit hash of a token (zlib's crc32, mixed)."""
    import zlib

    return (zlib.crc32(token) * prefilter._MULT) & 0xFFFFFFFF


# -- corpora ----------------------------------------------------------------------------------


def _chunks(data: bytes) -> list[bytes]:
    return list(cut_chunks([data], ChunkParams()))


def _patterns(text: bytes) -> list[Pattern]:
    counts: dict[bytes, int] = {}
    for tok in re.findall(rb"[0-9A-Za-z_.:-]{8,}", text):
        if re.search(rb"[0-9]", tok) and re.search(rb"[A-Za-z]", tok):
            counts[tok] = counts.get(tok, 0) + 1
    singles = sorted(t for t, n in counts.items() if n == 1)
    middle = len(singles) // 2
    once = [t for t in singles[middle:middle + 50] if text.count(t) == 1][:1]  # not inside a longer token either
    exc: dict[bytes, int] = {}
    for name in re.findall(rb"\b[A-Z][A-Za-z]*Exception\b", text):
        exc[name] = exc.get(name, 0) + 1
    exception = min(exc, key=lambda k: (exc[k], k)).decode() if exc else "NullPointerException"
    out = [Pattern("absent literal", ABSENT, fixed=True)]
    if once:
        out.append(Pattern("token present once", once[0].decode(), fixed=True))
    out += [
        Pattern("exception class", exception, fixed=True),
        Pattern("error|fail(ed|ure) -i", "error|fail(ed|ure)", ignore_case=True),
        Pattern("ERROR|WARN", "ERROR|WARN"),
    ]
    return out


def corpora(sample_mb: int) -> list[Corpus]:
    """The Loghub samples (when present) and blobpad's generated log."""
    out: list[Corpus] = []
    files = sorted(LOGHUB.glob("*.log")) if LOGHUB.is_dir() else []
    if files:
        datas = [f.read_bytes() for f in files]
        # each system gets its own patterns: the corpus is the union of per-file entries
        for f, data in zip(files, datas, strict=True):
            out.append(Corpus(f"loghub/{f.stem}", [_chunks(data)], _patterns(data)))
    data = sample.log_text(sample_mb << 20, seed=0).encode()
    out.append(Corpus(f"sample.log_text {sample_mb} MB", [_chunks(data)], _patterns(data)))
    return out


# -- the run ----------------------------------------------------------------------------------


def _matches(p: Pattern, chunk: bytes) -> bool:
    return compile_pattern(p.pattern, ignore_case=p.ignore_case, fixed=p.fixed).search(chunk) is not None


def run(sample_mb: int) -> str:
    """Measure every candidate on every corpus; return the Markdown report."""
    cands = [_trigram_candidate(b) for b in (0.5, 0.75, 1, 2, 4)] + [_trigram_candidate(4, 2), _token_candidate(4),
                                                                     _chosen_candidate(0.03)]
    cctx = zstandard.ZstdCompressor(level=1)
    lines = []
    zsum: dict[str, int] = {}
    # per corpus group (loghub summed over systems, sample): chunks, compressed bytes,
    # and per candidate, per pattern label: (passed non-matching, non-matching)
    groups: dict[str, dict] = {}
    zstd_s = 0.0
    for corpus in corpora(sample_mb):
        group = "loghub (16 systems)" if corpus.name.startswith("loghub/") else corpus.name
        g = groups.setdefault(group, {"chunks": 0, "z": 0, "raw": 0, "size": {}, "skip": {}, "hit": {},
                                      "exact": 0, "folded": 0, "patterns": []})
        g["patterns"].append((corpus.name, corpus.patterns))
        for chunks in corpus.entries:
            for i, chunk in enumerate(chunks):
                t0 = time.perf_counter()
                z = len(cctx.compress(chunk))
                zstd_s += time.perf_counter() - t0
                g["chunks"] += 1
                g["z"] += z
                g["raw"] += len(chunk)
                if len(chunk) >= 3:  # distinct trigrams with and without case folding
                    g["exact"] += int(np.count_nonzero(prefilter.trigram_bits(chunk, fold=False)))
                    g["folded"] += int(np.count_nonzero(prefilter.trigram_bits(chunk)))
                spill = b"".join(chunks[i + 1:i + 1 + SPILL])[:SPILL]
                truth = {p.label: _matches(p, chunk) for p in corpus.patterns}
                for p in corpus.patterns:
                    g["hit"][p.label] = g["hit"].get(p.label, 0) + truth[p.label]
                for c in cands:
                    t0 = time.perf_counter()
                    f = c.build(chunk, spill, z)
                    c.seconds += time.perf_counter() - t0
                    c.raw += len(chunk)
                    g["size"][c.name] = g["size"].get(c.name, 0) + c.size(f)
                    for p in corpus.patterns:
                        ok = c.may_match(p, f)
                        if truth[p.label] and not ok:
                            raise AssertionError(f"{c.name} missed {p.pattern!r} in {corpus.name} chunk {i}")
                        if not truth[p.label]:
                            key = (c.name, p.label)
                            passed, total = g["skip"].get(key, (0, 0))
                            g["skip"][key] = (passed + ok, total + 1)
        zsum[group] = g["z"]
    labels = ["absent literal", "token present once", "exception class", "error|fail(ed|ure) -i", "ERROR|WARN"]
    for group, g in groups.items():
        lines.append(f"\n**{group}**: {g['chunks']} chunks, {g['raw'] / 1e6:.1f} MB raw, "
                     f"{g['z'] / 1e6:.2f} MB at zstd -1 (ratio {g['raw'] / g['z']:.1f}); chunks with a match: "
                     + ", ".join(f"{lab} {g['hit'].get(lab, 0)}" for lab in labels if lab in g["hit"]) + "\n")
        lines.append("| filter | size / compressed | " + " | ".join(f"{lab}: read" for lab in labels) + " |")
        lines.append("|---|---|" + "---|" * len(labels))
        for c in cands:
            cells = []
            for lab in labels:
                passed, total = g["skip"].get((c.name, lab), (0, 0))
                cells.append(f"{passed}/{total} ({100 * passed / total:.0f}%)" if total else "-")
            lines.append(f"| {c.name} | {100 * g['size'][c.name] / g['z']:.2f}% | " + " | ".join(cells) + " |")
        lines.append(f"\nDistinct trigrams per chunk: {g['exact'] / g['chunks']:.0f} as stored, {g['folded'] / g['chunks']:.0f} "
                     f"after case folding ({100 * g['folded'] / g['exact']:.1f}%). Patterns: "
                     + "; ".join(f"{name}: " + ", ".join(f"`{p.pattern}`" for p in pats if p.label in
                                                          ("token present once", "exception class"))
                                 for name, pats in g["patterns"]))
    raw = cands[0].raw
    lines.append("\nBuild speed (one core, MB of raw chunk per second; zstd -1 of the same chunks: "
                 f"{raw / zstd_s / 1e6:.0f} MB/s): "
                 + ", ".join(f"{c.name} {c.raw / c.seconds / 1e6:.0f}" for c in cands))
    chunk = sample.log_text(1 << 20).encode()[: 96 << 10]
    reps = 20
    t_np = statistics.median(_time(lambda: prefilter.build(chunk)) for _ in range(reps))
    t_py = _time(lambda: prefilter.build_python(chunk, None))
    lines.append(f"\n`prefilter.build` of a 96 KiB log chunk: {t_np * 1e3:.2f} ms with numpy "
                 f"({len(chunk) / t_np / 1e6:.0f} MB/s), {t_py * 1e3:.1f} ms in pure Python "
                 f"({len(chunk) / t_py / 1e6:.1f} MB/s); a filter check (`Query.may_match`) of the absent literal: "
                 f"{_check_time(chunk) * 1e6:.1f} us")
    return "\n".join(lines)


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _check_time(chunk: bytes) -> float:
    f = prefilter.build(chunk)
    q = Query.compile(ABSENT, ignore_case=False, fixed=True)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        q.may_match(f)
    return (time.perf_counter() - t0) / n


def main() -> None:
    """Command line: print the study's tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample-mb", type=int, default=16, help="size of the generated log (default 16)")
    args = ap.parse_args()
    print(run(args.sample_mb))


if __name__ == "__main__":
    main()
