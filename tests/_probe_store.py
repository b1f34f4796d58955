"""Open a possibly damaged store and report what every read did, as one JSON line.

Usage: ``python _probe_store.py STORE EXPECTED_JSON`` where EXPECTED_JSON maps entry
ids to the SHA-256 of their content.  Run in a subprocess by tests/test_corruption.py,
so that a crash (SIGBUS on a truncated map, a segfault in a C extension) shows as the
process dying instead of taking pytest down.

The report: ``open`` ("ok" or "ExceptionName: message"), ``reads`` (id -> "ok", "wrong
bytes" or "ExceptionName: message" for get, a slice and grep), ``verify`` (ok,
problems, damaged_entries, or an error), and ``blobpad_errors`` listing which raised
exceptions were blobpad.BlobpadError instances.
"""

from __future__ import annotations

import hashlib
import json
import sys


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:500]}"


def main() -> None:
    import blobpad

    path, expected = sys.argv[1], json.loads(sys.argv[2])
    report: dict = {"open": "ok", "reads": {}, "verify": None, "foreign_errors": []}

    def note(exc: BaseException) -> str:
        if not isinstance(exc, blobpad.BlobpadError):
            report["foreign_errors"].append(describe(exc))
        return describe(exc)

    try:
        store = blobpad.open(path)
    except Exception as exc:
        report["open"] = note(exc)
        print(json.dumps(report))
        return
    for eid, digest in expected.items():
        outcome = []
        for label, read in (
            ("get", lambda e=eid: store.get(e)),
            ("tail", lambda e=eid: store.tail(e, 10**9)),
            ("byte_range", lambda e=eid: store.byte_range(e, 0)),
        ):
            try:
                got = read()
                got = got.encode() if isinstance(got, str) else got
                outcome.append(f"{label}: ok" if hashlib.sha256(got).hexdigest() == digest else f"{label}: wrong bytes")
            except Exception as exc:
                outcome.append(f"{label}: {note(exc)}")
        try:
            store.count(eid, "x")
            outcome.append("count: ok")
        except Exception as exc:
            outcome.append(f"count: {note(exc)}")
        report["reads"][eid] = outcome
    try:
        r = store.verify()
        report["verify"] = {"ok": r.ok, "problems": r.problems[:20], "damaged_entries": r.damaged_entries}
    except Exception as exc:
        report["verify"] = note(exc)
    try:
        store.put(b"written after the damage")
        report["put"] = "ok"
    except Exception as exc:
        report["put"] = note(exc)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
