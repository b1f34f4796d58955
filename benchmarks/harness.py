"""What the benchmark modules share: the session's stores, and how results are recorded.

Every benchmark records, in pytest-benchmark's ``extra_info``, the operation, the
kind and size of the data, the peer, and any figure that is not a time (stored
bytes, new chunks, peak RSS).  ``python -m benchmarks`` builds its report from
those records alone, so the report and ``pytest --benchmark-only`` always agree.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from . import redis_server
from .config import Settings
from .data import Dataset, Truth
from .peers import READERS, WRITERS, Reader, Writer


def group_name(op: str, dataset: Dataset) -> str:
    """The pytest-benchmark group: one table per operation, kind and size, peers side by side.

    Sizes are right-aligned so that the groups sort by size (pytest-benchmark sorts
    them by name).
    """
    return f"{op} {dataset.kind} {dataset.size_mb:>4}MB"


def record(benchmark: Any, op: str, dataset: Dataset, peer: str, **extra: Any) -> None:
    benchmark.group = group_name(op, dataset)
    benchmark.extra_info.update(
        op=op, kind=dataset.kind, size_mb=dataset.size_mb, size_bytes=dataset.size, peer=peer, **extra
    )


class Bench:
    """Session-wide state: datasets, their reference answers, and loaded readers."""

    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        self._truths: OrderedDict[Dataset, Truth] = OrderedDict()
        self._readers: dict[tuple[str, Dataset], Reader] = {}
        self._counter = 0

    def new_dir(self, prefix: str) -> Path:
        self._counter += 1
        path = self.workdir / f"{prefix}-{self._counter}"
        path.mkdir(parents=True)
        return path

    def dataset(self, kind: str, size_mb: int, variant: str = "") -> Dataset:
        ds = Dataset(kind, size_mb, variant=variant)
        ds.path  # noqa: B018 - generate it now, outside any timing
        return ds

    def truth(self, dataset: Dataset) -> Truth:
        """The reference answers (the two most recent datasets stay in memory)."""
        t = self._truths.get(dataset)
        if t is None:
            t = self._truths[dataset] = Truth(dataset)
            while len(self._truths) > 2:
                self._truths.popitem(last=False)
        self._truths.move_to_end(dataset)
        return t

    def reader(self, peer: str, dataset: Dataset) -> Reader:
        """A reader of ``dataset`` in ``peer`` (loaded once per session), or skip the test."""
        cls = READERS[peer]
        reason = cls.unavailable(dataset)
        if reason:
            pytest.skip(reason)
        key = (peer, dataset)
        r = self._readers.get(key)
        if r is None:
            r = self._readers[key] = cls.load(dataset, self.new_dir(f"{peer}-{dataset.kind}-{dataset.label}"))
        return r

    def positions(self, op: str, dataset: Dataset, low: int, high: int) -> list[int]:
        """Deterministic random positions in ``[low, high]`` for one operation on one dataset."""
        rnd = random.Random(f"{op}/{dataset.kind}/{dataset.size_mb}")
        return [rnd.randint(low, max(low, high)) for _ in range(32)]

    def close(self) -> None:
        """Close every reader, stop the run's Valkey server (if a Redis peer started one), remove the files."""
        try:
            for r in self._readers.values():
                r.close()
        finally:
            self._readers.clear()
            self._truths.clear()
            redis_server.stop()
            shutil.rmtree(self.workdir, ignore_errors=True)


def make_workdir() -> Path:
    import os

    base = os.environ.get("BLOBPAD_BENCH_TMP") or None
    return Path(tempfile.mkdtemp(prefix="blobpad-bench-", dir=base))


class Scratch:
    """Writers and readers made by one test, closed and deleted when done even if a
    round's teardown never ran.

    (With pytest-benchmark disabled, ``pedantic`` calls the target once and skips
    ``teardown``.)
    """

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self._writers: list[Writer] = []
        self._readers: list[tuple[Reader, Path]] = []

    def reader(self, peer: str, dataset: Dataset) -> Reader:
        """A reader of ``dataset`` in ``peer`` loaded into a new store for this test alone,
        so that its first call is the first on the entry (or skip the test)."""
        cls = READERS[peer]
        reason = cls.unavailable(dataset)
        if reason:
            pytest.skip(reason)
        directory = self.bench.new_dir(f"fresh-{peer}-{dataset.kind}-{dataset.label}")
        r = cls.load(dataset, directory)
        self._readers.append((r, directory))
        return r

    def writer(self, peer: str, dataset: Dataset) -> Writer:
        cls = WRITERS[peer]
        reason = cls.unavailable(dataset)
        if reason:
            pytest.skip(reason)
        w = cls(self.bench.new_dir(f"put-{peer}"))
        self._writers.append(w)
        return w

    def release(self, writer: Writer) -> None:
        if writer in self._writers:
            self._writers.remove(writer)
            writer.close()
            shutil.rmtree(writer.directory, ignore_errors=True)

    def close(self) -> None:
        for w in list(self._writers):
            self.release(w)
        for r, directory in self._readers:
            r.close()
            shutil.rmtree(directory, ignore_errors=True)
        self._readers.clear()


def pedantic(benchmark: Any, target: Callable[..., Any], *, rounds: int,
             setup: Callable[[], Any] | None = None, teardown: Callable[..., None] | None = None) -> Any:
    """``benchmark.pedantic`` with one round per call of ``target``."""
    return benchmark.pedantic(target, setup=setup, teardown=teardown, rounds=rounds, iterations=1, warmup_rounds=0)
