"""Benchmark data: generated deterministically, cached on disk, checked by a reference.

Files live in ``bench-data/`` at the root of the checkout (gitignored; set
``BLOBPAD_BENCH_DATA`` to put them elsewhere), named after their kind, size, seed
and a fingerprint of :mod:`blobpad.sample`, so a change to the generators
regenerates them and nothing else does.  Writing 100 MB of log text takes about
12 s; every later run reuses the file.

:class:`Truth` computes the expected answer of every read with the plainest
possible Python over the file's bytes, so every peer (blobpad included) is checked
against something that is not one of the contestants.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import blobpad.sample as sample

from .config import GB_KINDS, MB, SEED, size_label

#: bump when the way this module derives files (variants, compression) changes
_DERIVE_VERSION = 1

EXTENSIONS = {"log": "log", "multibyte": "txt", "json": "json", "binary": "bin"}

#: the line inserted in the middle of a log by the "insert one line" variant
INSERTED_LINE = b"2023-11-14T22:13:20.000 ERROR [bench] req=00000000 a line inserted in the middle by the benchmark\n"


def data_dir() -> Path:
    env = os.environ.get("BLOBPAD_BENCH_DATA")
    root = Path(env) if env else Path(__file__).resolve().parent.parent / "bench-data"
    root.mkdir(parents=True, exist_ok=True)
    return root


@functools.lru_cache(maxsize=1)
def _fingerprint() -> str:
    source = Path(sample.__file__).read_bytes()
    return hashlib.sha256(source + str(_DERIVE_VERSION).encode()).hexdigest()[:8]


def _atomic_write(final: Path, produce: Callable[[str], object]) -> None:
    """Run ``produce(tmp_path)`` and move the result into place (safe across concurrent runs)."""
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix="." + final.name, suffix=".part")
    os.close(fd)
    try:
        produce(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_kind(kind: str, size: int, seed: int, path: str) -> None:
    if kind == "log":
        sample.write_log(path, size, seed)
        return
    if kind not in ("multibyte", "json", "binary"):
        raise ValueError(f"unknown kind {kind!r}")
    if size > 128 * MB:
        raise ValueError(f"{kind} is generated in memory; sizes over 128 MB are for kinds {GB_KINDS}")
    if kind == "multibyte":
        data = sample.multibyte_text(size, seed).encode("utf-8")
    elif kind == "json":
        data = sample.minified_json(size, seed).encode("utf-8")
    else:
        data = sample.binary_blob(size, seed)
    with open(path, "wb") as fh:
        fh.write(data)


@dataclass(frozen=True)
class Dataset:
    """One generated file: ``kind`` at ``size_mb`` MB (``variant`` marks a derived copy)."""

    kind: str
    size_mb: int
    seed: int = SEED
    variant: str = ""

    @property
    def label(self) -> str:
        return size_label(self.size_mb)

    @property
    def is_text(self) -> bool:
        return self.kind != "binary"

    @property
    def name(self) -> str:
        extra = f"+{self.variant}" if self.variant else ""
        return f"{self.kind}-{self.label}-s{self.seed}{extra}-{_fingerprint()}.{EXTENSIONS[self.kind]}"

    @property
    def path(self) -> Path:
        """The file, generated (once) if missing."""
        final = data_dir() / self.name
        if not final.exists():
            self._generate(final)
        return final

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def _generate(self, final: Path) -> None:
        _forget_stale(final.parent, f"{self.kind}-{self.label}-s{self.seed}", self.variant, final.name)
        if not self.variant:
            _atomic_write(final, lambda tmp: _write_kind(self.kind, self.size_mb * MB, self.seed, tmp))
        elif self.variant == "append1MB":
            # The log goes on: the first size_mb MB are byte for byte the base file.
            base = Dataset(self.kind, self.size_mb, self.seed).path
            _atomic_write(final, lambda tmp: _write_kind(self.kind, self.size_mb * MB + MB, self.seed, tmp))
            with open(base, "rb") as a, open(final, "rb") as b:
                while True:
                    block = a.read(MB)
                    if not block:
                        break
                    if b.read(len(block)) != block:
                        final.unlink()
                        raise RuntimeError(f"{final.name} does not start with {base.name}: sample.write_log changed")
        elif self.variant == "insert":
            base = Dataset(self.kind, self.size_mb, self.seed).path

            def insert(tmp: str) -> None:
                raw = base.read_bytes()
                mid = raw.index(b"\n", len(raw) // 2) + 1
                with open(tmp, "wb") as fh:
                    fh.write(raw[:mid])
                    fh.write(INSERTED_LINE)
                    fh.write(raw[mid:])

            _atomic_write(final, insert)
        else:
            raise ValueError(f"unknown variant {self.variant!r}")

    def newlines(self) -> int:
        """How many newlines the file holds (read in blocks, without decoding)."""
        n = 0
        with open(self.path, "rb") as fh:
            while block := fh.read(MB):
                n += block.count(b"\n")
        return n

    def variant_of(self, variant: str) -> Dataset:
        return Dataset(self.kind, self.size_mb, self.seed, variant)

    def zst_path(self) -> Path:
        """The file compressed with ``zstd -3`` (made once; needs the zstd CLI)."""
        src = self.path
        final = src.with_name(src.name + ".zst")
        if not final.exists():
            zstd = shutil.which("zstd")
            if zstd is None:
                raise FileNotFoundError("the zstd command is not installed")
            _atomic_write(final, lambda tmp: subprocess.run(
                [zstd, "-3", "-T2", "-q", "-f", str(src), "-o", tmp], check=True
            ))
        return final


def _forget_stale(folder: Path, stem: str, variant: str, keep: str) -> None:
    """Delete files of the same kind, size, seed and variant made by other generator versions."""
    extra = f"+{variant}" if variant else ""
    pattern = re.compile(re.escape(stem + extra) + r"-[0-9a-f]{8}\.")
    for p in folder.iterdir():
        if p.name != keep and not p.name.startswith(keep) and pattern.match(p.name):
            with contextlib.suppress(OSError):
                p.unlink()


class Truth:
    """The expected answers for one dataset, computed the simple way from its bytes."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    @cached_property
    def raw(self) -> bytes:
        return self.dataset.path.read_bytes()

    @cached_property
    def text(self) -> str:
        return self.raw.decode("utf-8")

    @cached_property
    def content(self) -> str | bytes:
        return self.text if self.dataset.is_text else self.raw

    @cached_property
    def line_list(self) -> list[str]:
        lines = self.text.split("\n")
        if lines and lines[-1] == "" and self.text.endswith("\n"):
            lines.pop()
        return lines

    @property
    def length(self) -> int:
        """Characters (text) or bytes (binary)."""
        return len(self.content)

    @property
    def n_lines(self) -> int:
        return len(self.line_list)

    def head(self, n: int) -> str | bytes:
        return self.content[:n]

    def tail(self, n: int) -> str | bytes:
        return self.content[-n:] if n else self.content[:0]

    def range(self, start: int, end: int) -> str | bytes:
        return self.content[start:end]

    def lines(self, first: int, last: int) -> list[str]:
        return self.line_list[first - 1 : last]

    def matching_lines(self, pattern: str, *, ignore_case: bool = False, fixed: bool = False,
                       limit: int | None = None) -> list[int]:
        rx = re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
        found = []
        for number, line in enumerate(self.line_list, 1):
            if rx.search(line):
                found.append(number)
                if limit is not None and len(found) >= limit:
                    break
        return found
