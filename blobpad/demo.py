"""``blobpad demo``: the main job end to end, in a few seconds.

It writes a realistic multi-MB log (:mod:`blobpad.sample`), offloads it into the
store with :class:`blobpad.offload.Offloader` (seed 000's policy, as an agent runtime
would), prints what the agent sees in its context instead of the log (the synthetic
observation: a summary and an id), then reads a head, a line window and a grep by
id, timing each call, each shown as the ``blobpad`` command that reads the same.

The entry stays (it expires in an hour, as seed 000's entries do), so that every
command the demo prints works when typed next; a new demo replaces the previous
demo's entry (the session ``blobpad-demo``), and the last command printed deletes it.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from typing import IO, TypeVar

from . import sample
from .engine import ENV_VAR, env_target
from .engine.targets import without_password
from .offload import Offloader
from .store import Store
from .store import open as open_store
from .units import human_size

__all__ = ["run"]

T = TypeVar("T")

#: the session of the demo entry
DEMO_SESSION = "blobpad-demo"


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - t0) * 1000


def run(db: str | None = None, *, size: int = 6 << 20, out: IO[str] | None = None) -> int:
    """Run the demo on the store at ``db`` (default: ``blobpad.open()``'s); return 0.

    Every line that starts with ``$ `` is a command that works on that store right
    after the demo (the demo's entry is kept for an hour; on an in-memory store the
    demo says that it is gone when the command ends); the others are its output.
    """
    out = out or sys.stdout

    def say(text: str = "") -> None:
        out.write(text + "\n")

    # a store named by the environment is named on the commands too: they work in a shell
    # where it was set for the demo alone (BLOBPAD_STORE=... blobpad demo) as in one that exported it
    named = db if db is not None else env_target()
    prefix = "blobpad" if named is None else f"blobpad --db {shlex.quote(named)}"
    if db is None and named is not None and without_password(named) != named:
        # a password the environment holds is not printed: the commands name the variable
        variable = next(v for v in (ENV_VAR, "BLOBPAD_DIR") if os.environ.get(v))
        prefix = f'blobpad --db "${variable}"'
    with open_store(db) as store, tempfile.TemporaryDirectory(prefix="blobpad-demo-") as tmp:
        say(f"blobpad demo: store {store.path}")
        say()
        store.delete_session(DEMO_SESSION)  # the previous demo's entry: this one replaces it
        path = os.path.join(tmp, "service.log")
        written, ms = _timed(lambda: sample.write_log(path, size))
        say(f"1. A tool returned a {human_size(written)} log, far too big for a model's context")
        say(f"   (generated in {ms:.0f} ms: {path})")
        say()

        before = store.stats().stored_bytes
        offloader = Offloader(store)
        obs, put_ms = _timed(lambda: offloader.offload_content(
            pathlib.Path(path), session=DEMO_SESSION, turn=1, step=1, tool="fs_read",
            metadata={"path": path, "bytes": written, "encoding": "utf-8"},
        ))
        entry = store.stat(obs["scratchpad_id"])
        added = store.stats().stored_bytes - before
        say(f"2. Offload it: put + summary in {put_ms:.1f} ms -> id {entry.id}")
        say(f"   {entry.lines:,} lines, {entry.chunks} chunks, {human_size(max(0, added))} stored after compression")
        say()
        shown = json.dumps(obs, ensure_ascii=False, indent=2)
        say(f"3. What the agent sees instead ({len(shown.encode()):,} bytes instead of {entry.size_bytes:,}):")
        say(shown)
        say()
        say("4. The agent reads slices by id; each read decompresses only the chunks it needs:")
        eid = entry.id
        middle = max(1, entry.lines // 2)
        reads: list[tuple[str, Callable[[], str]]] = [
            (f"read {eid} --head 300", lambda: _text(store.head(eid, 300))),
            (f"read {eid} --lines {middle}:{middle + 4}", lambda: "\n".join(store.lines(eid, middle, middle + 4))),
            (f"grep {eid} 'ERROR.*timed out' -m 3", lambda: _grep(store, eid, "ERROR.*timed out", 3)),
            (f"grep {eid} -c ERROR", lambda: str(int(store.count(eid, "ERROR")))),
        ]
        for command, read in reads:
            text, ms = _timed(read)
            say()
            say(f"$ {prefix} {command}    # {ms:.1f} ms")
            say(text.rstrip("\n"))
        say()
        if not store.engine.capabilities.persistent:
            say(f"5. {store.path} is an in-memory store: the entry is gone when this command ends, so the commands")
            say("   above work inside one process only (the library, blobpad mcp); give --db a directory to keep it.")
        else:
            say("5. The entry stays for an hour (the next demo replaces it): try the commands above, or these.")
            say(f"$ {prefix} read {eid} --lines -3:-1    # the last 3 lines")
            say(f"$ {prefix} grep {eid} -i 'quota' -C 1 -m 2")
            say(f"$ {prefix} rm {eid}    # delete it now")
    out.flush()
    return 0


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _grep(store: Store, eid: str, pattern: str, limit: int) -> str:
    result = store.grep(eid, pattern, max_matches=limit)
    return "\n".join(f"{m.line}:{m.text}" for m in result.matches)
