"""Oracles shared by the tests: what the reference tools say about a text."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
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
    saved.pop("last_seq", None)  # the highest creation sequence, no counter
    for _, raw in txn.scan("meta", SHARD_PREFIX, SHARD_PREFIX[:-1] + b";"):  # the counters, then (8 bytes) a sequence
        for k, v in zip(SHARD_FIELDS, SHARD.unpack(raw[: SHARD.size]), strict=True):
            saved[k] = saved.get(k, 0) + v
    return saved


class Meanwhile:
    """Another agent's (or host's) change committing while the call under test runs: once
    ``obj.method`` (a public method: ``store.get``, ``store.find``) first returns, ``change``
    runs ``times`` times at most, each in a thread of its own that is waited for (a
    thread, as another host: the call under test may hold a read snapshot, inside which
    its own thread cannot write).  The change's own calls of the method do not trigger it.
    ``with Meanwhile(...) as m:`` installs it for the block; ``m.done`` counts the changes."""

    def __init__(self, obj: Any, method: str, change: Callable[[], Any], times: int = 1) -> None:
        self.obj, self.method, self.change, self.left = obj, method, change, times
        self.real = getattr(obj, method)
        self.done = 0
        self.answers: list[Any] = []
        self._busy = threading.local()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.real(*args, **kwargs)
        if self.left and not getattr(self._busy, "on", False):
            self.left -= 1
            errors: list[BaseException] = []

            def run() -> None:
                self._busy.on = True
                try:
                    self.answers.append(self.change())
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    errors.append(exc)

            worker = threading.Thread(target=run)
            worker.start()
            worker.join(60)
            assert not worker.is_alive(), "the change made meanwhile did not finish within 60 s"
            if errors:
                raise errors[0]
            self.done += 1
        return out

    def __enter__(self) -> Meanwhile:
        setattr(self.obj, self.method, self)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self.obj, self.method, self.real)


def wait_child(pid: int, seconds: float) -> int | None:
    """The exit code of the forked child ``pid``, waited for at most ``seconds``; None when it did
    not finish by then (it is killed with SIGKILL and reaped: a test never leaves it behind)."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)
