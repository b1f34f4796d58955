"""Peak memory of one operation, measured in a fresh process.

The parent runs ``python -m benchmarks.memory '<json spec>'``; the child imports
what it needs, opens the store, notes its peak RSS so far (the baseline), runs the
operation once and prints a JSON line with the baseline, the peak and the time.
Command-line peers run under GNU ``time -f %M``, which gives their own peak RSS.

Operations: ``put`` (a file, streamed: ``Store.put(pathlib.Path(...))``; the
peers' own way), ``put_bytes`` (blobpad given the content in memory), and
``lines`` (a 100-line window from the middle of a stored observation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

from .config import WINDOW_LINES


def _peak_kb() -> int:
    """This process's peak RSS in KB.

    Linux's ``VmHWM`` first: ``ru_maxrss`` of a process started by another one
    counts the parent's peak at fork time (the pytest process, often bigger than
    what is measured here).
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    if resource is not None:
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KB on Linux, bytes on macOS
    import psutil  # pragma: no cover

    info = psutil.Process().memory_info()  # pragma: no cover
    return int(getattr(info, "peak_wset", info.rss)) // 1024  # pragma: no cover


class _Sampler:
    """Peak anonymous and file-backed RSS (``RssAnon``, ``RssFile``), sampled every 2 ms.

    File-backed pages are mostly the store's memory map (LMDB): shared with the page
    cache and reclaimable, unlike anonymous memory.
    """

    def __init__(self) -> None:
        self.anon = self.file = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("RssAnon:"):
                        self.anon = max(self.anon, int(line.split()[1]))
                    elif line.startswith("RssFile:"):
                        self.file = max(self.file, int(line.split()[1]))
        except OSError:
            pass

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self._sample()

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    from .data import Dataset
    from .peers import READERS, WRITERS, BlobpadWriter

    ds = Dataset(spec["kind"], spec["size_mb"])
    op = spec["op"]
    peer = spec["peer"]
    cli_peak = None
    if op in ("put", "put_bytes"):
        writer = WRITERS[peer](Path(spec["directory"]))
        if hasattr(writer, "measure_memory"):
            writer.measure_memory = True
        payload = ds.path.read_bytes() if op == "put_bytes" else None
        baseline = _peak_kb()
        t0 = time.perf_counter()
        with _Sampler() as sampler:
            if payload is not None:
                assert isinstance(writer, BlobpadWriter)
                writer.store.put(payload)
            else:
                writer.put(ds)
        seconds = time.perf_counter() - t0
        cli_peak = getattr(writer, "last_peak_rss_kb", None)
        writer.close()
    elif op == "lines":
        reader = READERS[peer].reopen(ds, spec["location"])
        reader.measure_memory = True
        first = spec["first"]
        baseline = _peak_kb()
        t0 = time.perf_counter()
        with _Sampler() as sampler:
            got = reader.lines(first, first + WINDOW_LINES - 1)
        seconds = time.perf_counter() - t0
        if len(got) != WINDOW_LINES:
            raise AssertionError(f"{peer} returned {len(got)} lines, not {WINDOW_LINES}")
        cli_peak = reader.last_peak_rss_kb
        reader.close()
    else:
        raise ValueError(f"unknown operation {op!r}")
    return {"baseline_kb": baseline, "peak_kb": _peak_kb(), "cli_peak_kb": cli_peak, "seconds": seconds,
            "peak_anon_kb": sampler.anon, "peak_file_kb": sampler.file}


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one operation in a fresh interpreter and return what it reported."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", json.dumps(spec)],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
