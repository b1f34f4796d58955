"""The victim of tests/test_crash.py: a process that works on a store until it is SIGKILLed.

Usage: ``python _crash_child.py STORE ACKFILE SEED FIRST_COUNTER READYFILE BIG_FIRST``

It loops forever over puts (small and multi-batch), named puts, deletes, gc and
notepad writes (when ``blobpad.notepad`` exists).  Before each operation it appends
an intent line to ACKFILE, and after the operation returned an acknowledgement line,
each flushed and fsynced, as JSON.  The parent kills it at a random moment and checks
the store against the acknowledgements.

The content of put number ``c`` is ``content(c)``: the parent recomputes it to
compare byte for byte.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import sys
import time

import blobpad
from blobpad import sample

#: the chunk sizes of the crash store: a 35 MB put is ~4,000 chunks
CRASH_PARAMS = blobpad.ChunkParams(min_size=4096, avg_extra=4096, max_size=16384)
#: an entry that big is written in at least three transactions (blobpad.put.BATCH_BYTES is 16 MiB,
#: and the first batch is written once 32 MiB are cut)
BIG = 33 << 20
SESSIONS = ("alpha", "beta", "")
NAMES = ("plan", "report", "todo")
SHORT_TTL = 1.5


def is_big(c: int) -> bool:
    return c % 37 == 3


@functools.lru_cache(maxsize=4)
def content(c: int) -> bytes:
    """The deterministic content of put number ``c`` (some counters share content: dedup)."""
    if is_big(c):
        rng = random.Random(c)
        return rng.randbytes(BIG + rng.randrange(0, 8 << 20))
    key = c if c % 4 else c % 12  # every fourth put repeats one of three contents
    rng = random.Random(key * 7 + 1)
    size = rng.randrange(0, 60_000)
    if key % 3 == 0:
        return sample.binary_blob(size, seed=key)
    if key % 3 == 1:
        return sample.multibyte_text(size, seed=key).encode()
    return sample.log_text(size, seed=key).encode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main() -> None:
    path, ack_path, seed, first, ready = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    big_first = sys.argv[6] == "1"
    rng = random.Random(seed)
    has_notepad = notepad_available()
    ack = open(ack_path, "a", encoding="utf-8")  # noqa: SIM115 - lives until the kill

    def log(**record: object) -> None:
        ack.write(json.dumps(record) + "\n")
        ack.flush()
        os.fsync(ack.fileno())

    store = blobpad.open(path, chunk_params=CRASH_PARAMS)
    with open(ready, "w") as fh:
        fh.write(str(os.getpid()))
    c = first
    step = 0
    while True:
        step += 1
        roll = rng.random()
        if step == 1 and big_first:
            while not is_big(c):  # start with a multi-batch put: the kill often lands in it
                c += 1
            roll = 0.0
        if roll < 0.6:
            session = rng.choice(SESSIONS)
            name = rng.choice(NAMES) if rng.random() < 0.25 else None
            ttl = rng.choice([None, 3600.0, SHORT_TTL])
            if is_big(c):
                ttl = rng.choice([SHORT_TTL, 3600.0])
            log(op="put-intent", c=c, session=session, name=name, ttl=ttl, big=is_big(c))
            data = content(c)
            e = store.put(data, session=session, name=name, ttl=ttl, meta={"c": c})
            log(op="put", c=c, id=e.id, sha=e.sha256, session=session, name=name, expires_at=e.expires_at)
            c += 1
        elif roll < 0.78:
            live = store.entries()
            if not live:
                continue
            big = [e for e in live if e.size_bytes >= BIG]
            victim = big[0] if big else (live[0] if len(live) > 30 else rng.choice(live))
            log(op="del-intent", id=victim.id)
            try:
                store.delete(victim.id)
            except blobpad.NotFound:
                log(op="del-missing", id=victim.id)  # expired between entries() and delete()
                continue
            log(op="del", id=victim.id)
        elif roll < 0.88:
            log(op="gc-intent")
            report = store.gc()
            log(op="gc", **report.to_dict())
        elif has_notepad:
            notepad_step(store, rng, log)
        else:
            time.sleep(0.001)


def notepad_available() -> bool:
    """Whether the notepad (blobpad/notepad/) is importable."""
    return callable(getattr(blobpad.Store, "notepad", None))


def note_text(rng: random.Random) -> str:
    return "".join(f"- [ ] step {rng.randrange(1 << 30)}\n" for _ in range(rng.randrange(1, 2000)))


def notepad_step(store: blobpad.Store, rng: random.Random, log) -> None:
    """One notepad write: a full replacement of the session's notepad."""
    session = rng.choice(SESSIONS[:2])
    text = note_text(rng)
    log(op="note-intent", session=session, sha=sha(text.encode()))
    result = store.notepad(session).write(text)  # type: ignore[attr-defined]
    log(op="note", session=session, sha=sha(text.encode()), version=result.version)


if __name__ == "__main__":
    main()
