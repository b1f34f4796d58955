"""Model-based test and session isolation (issue 8).

``StoreMachine`` is a hypothesis ``RuleBasedStateMachine`` that drives a real store
(tiny chunks, an injected clock) with put, named put, delete, expiry (the clock moves
in a rule), gc, and every read mode — get, head, tail, range, byte_range, lines,
grep and count with ``fixed=True``, stat, entries, find, exists, stream — and
compares each answer with a plain in-memory model: Python slicing, ``str.split`` for
lines and ``str.find`` for literal matches.  Any divergence fails with the shortest
sequence of calls hypothesis can find.

The isolation tests check that dedup across sessions never lets one session observe
another's content: the same content in several sessions survives deletes in the
others, equal names in different sessions are different entries, and
``entries(session=A)`` never lists B's.

``BLOBPAD_MODEL_EXAMPLES`` / ``BLOBPAD_MODEL_STEPS`` scale the machine (40 x 40 by
default).  Shrinking a failure can take hypothesis five minutes, so by default it is
off (the failing sequence is shown as found, and the divergences found so far are
pinned as plain tests at the end); ``BLOBPAD_MODEL_SHRINK=1`` turns it on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import blobpad
from blobpad import InvalidArgument, NotFound, sample

SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
EXAMPLES = int(os.environ.get("BLOBPAD_MODEL_EXAMPLES", "40"))
STEPS = int(os.environ.get("BLOBPAD_MODEL_STEPS", "40"))
SESSIONS = ["", "A", "B"]
TURNS = [None, 1, "1", 2]
NAMES = [None, None, "plan", "notes"]
WINDOW = 2000  # grep's default line_window

text_chars = st.sampled_from(list("abc xyz\n\n\r\tAé日🙂\x00") + ["ab", "line\n", "日本", "\n\n"])
texts = st.one_of(
    st.lists(text_chars, max_size=400).map("".join),
    st.text(max_size=300),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "ab\n", "é", "\n"]), st.integers(0, 2500)),  # repeated chunks
    st.builds(lambda n, seed: sample.log_text(n, seed), st.integers(0, 3000), st.integers(0, 5)),
    st.builds(lambda n, seed: sample.multibyte_text(n, seed), st.integers(0, 3000), st.integers(0, 5)),
)
binaries = st.one_of(
    st.binary(max_size=600),
    st.binary(max_size=600).map(lambda b: b"\xff" + b),
    st.builds(lambda n, seed: sample.binary_blob(n, seed), st.integers(0, 3000), st.integers(0, 5)),
)


@dataclass
class Model:
    id: str
    data: bytes
    kind: str
    session: str
    turn: str | int | None
    name: str | None
    expires_at: float | None
    seq: int

    @property
    def value(self) -> str | bytes:
        return self.data.decode() if self.kind == "text" else self.data

    def lines(self) -> list[str]:
        text = self.data.decode() if self.kind == "text" else self.data.decode("utf-8", "replace")
        if not text:
            return []
        out = text.split("\n")
        if text.endswith("\n"):
            out.pop()
        return out

    def raw_lines(self) -> list[bytes]:
        if not self.data:
            return []
        out = self.data.split(b"\n")
        if self.data.endswith(b"\n"):
            out.pop()
        return out


def _find_all(line: str, pattern: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    p = 0
    while p <= len(line) and len(spans) < 1000:
        i = line.find(pattern, p)
        if i < 0:
            break
        spans.append((i, i + len(pattern)))
        p = i + len(pattern) if pattern else i + 1
    return spans


class StoreMachine(RuleBasedStateMachine):
    """The store against a model, on LMDB (a fresh directory); :class:`MemoryStoreMachine` runs it on memory."""

    engine = "lmdb"

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="blobpad-model-")
        self.now = [1_700_000_000.0]
        target = self.dir if self.engine == "lmdb" else f"memory://model-{os.path.basename(self.dir)}"
        self.store = blobpad.open(target, chunk_params=SMALL, clock=lambda: self.now[0], cache_bytes=1 << 16)
        self.live: dict[str, Model] = {}
        self.gone: list[str] = []  # deleted, replaced or collected ids
        self.seq = 0
        self.contents: list[bytes] = []

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------------

    def expired(self, m: Model) -> bool:
        return m.expires_at is not None and m.expires_at <= self.now[0]

    def visible(self) -> list[Model]:
        return sorted((m for m in self.live.values() if not self.expired(m)), key=lambda m: m.seq)

    def pick(self, data) -> tuple[str, Model | None]:
        """An id to read: usually a visible entry, sometimes an expired or gone one."""
        choices = [m.id for m in self.live.values()] + self.gone[-5:] + ["0123456789abcdef"]
        eid = data.draw(st.sampled_from(choices))
        m = self.live.get(eid)
        return eid, (m if m is not None and not self.expired(m) else None)

    def read(self, m: Model | None, fn, expect_fn):
        """Run a read; it must raise NotFound when the model has no visible entry."""
        if m is None:
            with pytest.raises(NotFound):
                fn()
            return None
        got = fn()
        expect = expect_fn(m)
        assert got == expect, f"{got!r:.300} != {expect!r:.300}"
        return got

    # -- writes -----------------------------------------------------------------------------

    @rule(data=st.data(), session=st.sampled_from(SESSIONS), turn=st.sampled_from(TURNS), name=st.sampled_from(NAMES),
          ttl=st.sampled_from([None, None, 5, 50]), binary=st.booleans(), kind=st.sampled_from([None, None, "binary"]))
    def put(self, data, session, turn, name, ttl, binary, kind):
        if self.contents and data.draw(st.integers(0, 3)) == 0:
            content = data.draw(st.sampled_from(self.contents))  # the same content again: dedup
        else:
            content = data.draw(binaries) if binary else data.draw(texts).encode()
        self.contents.append(content)
        e = self.store.put(content, session=session, turn=turn, name=name, ttl=ttl, kind=kind)
        try:
            content.decode()
            natural = "text"
        except UnicodeDecodeError:
            natural = "binary"
        expect_kind = kind or natural
        assert e.kind == expect_kind, f"put(kind={kind!r}) of {natural} content made a {e.kind} entry"
        assert e.size_bytes == len(content) and e.sha256 == hashlib.sha256(content).hexdigest()
        assert (e.session, e.turn, e.name) == (session, turn, name)
        if name is not None:
            for old in [m for m in self.live.values() if m.session == session and m.name == name]:
                del self.live[old.id]
                self.gone.append(old.id)
        self.seq += 1
        expires = None if ttl is None else self.now[0] + ttl
        assert e.expires_at == expires
        self.live[e.id] = Model(e.id, content, expect_kind, session, turn, name, expires, self.seq)

    @rule(data=st.data(), ttl=st.sampled_from([None, 1, 30, 3600]))
    def touch(self, data, ttl):
        eid, m = self.pick(data)
        if m is None:
            with pytest.raises(NotFound):
                self.store.touch(eid, ttl=ttl)
            return
        e = self.store.touch(eid, ttl=ttl)
        m.expires_at = None if ttl is None else self.now[0] + ttl
        assert e.id == eid and e.expires_at == m.expires_at and e.size_bytes == len(m.data)

    @rule(data=st.data())
    def delete(self, data):
        eid, m = self.pick(data)
        if m is None:
            with pytest.raises(NotFound):
                self.store.delete(eid)
        else:
            self.store.delete(eid)
        if eid in self.live:
            del self.live[eid]
            self.gone.append(eid)

    @rule(seconds=st.sampled_from([0.5, 3, 10, 60]))
    def advance_clock(self, seconds):
        self.now[0] += seconds

    @rule()
    def gc(self):
        doomed = [m.id for m in self.live.values() if self.expired(m)]
        report = self.store.gc()
        assert report.entries == len(doomed)
        for eid in doomed:
            del self.live[eid]
            self.gone.append(eid)

    # -- reads ------------------------------------------------------------------------------

    @rule(data=st.data())
    def get(self, data):
        eid, m = self.pick(data)
        self.read(m, lambda: self.store.get(eid), lambda m: m.value)
        self.read(m, lambda: self.store.stream(eid).read(), lambda m: m.data)
        assert self.store.exists(eid) == (m is not None)

    @rule(data=st.data(), n=st.integers(0, 3000))
    def head_tail(self, data, n):
        eid, m = self.pick(data)
        self.read(m, lambda: self.store.head(eid, n), lambda m: m.value[:n])
        self.read(m, lambda: self.store.tail(eid, n), lambda m: m.value[max(0, len(m.value) - n):])

    @rule(data=st.data(), start=st.integers(-3000, 3000), end=st.one_of(st.none(), st.integers(-3000, 3000)))
    def ranges(self, data, start, end):
        eid, m = self.pick(data)
        self.read(m, lambda: self.store.range(eid, start, end), lambda m: m.value[start:end])
        self.read(m, lambda: self.store.byte_range(eid, start, end), lambda m: m.data[start:end])

    @rule(data=st.data(), first=st.integers(1, 60), span=st.one_of(st.none(), st.integers(-1, 60)))
    def lines(self, data, first, span):
        eid, m = self.pick(data)
        last = None if span is None else first + span
        if last == 0:  # there is no line 0, whatever the entry
            with pytest.raises(InvalidArgument):
                self.store.lines(eid, first, last)
            return
        # as sed -n first,lastp: a last line before the first selects the first alone
        stop = first if last is not None and last < first else last
        self.read(m, lambda: self.store.lines(eid, first, last),
                  lambda m: m.lines()[first - 1 : stop])

    @rule(data=st.data(), before=st.integers(0, 2), after=st.integers(0, 2), max_matches=st.integers(0, 30))
    def grep_fixed(self, data, before, after, max_matches):
        eid, m = self.pick(data)
        if m is not None and m.lines() and data.draw(st.booleans()):
            line = data.draw(st.sampled_from(m.lines()))
            a = data.draw(st.integers(0, len(line)))
            pattern = line[a : a + data.draw(st.integers(1, 6))]
            if m.kind == "binary" and "\ufffd" in pattern:
                pattern = "x"
        else:
            pattern = data.draw(st.sampled_from(["a", "x", "日", "ab", "\r", "\t", "é", "line", "INFO", " "]))
        if m is None:
            with pytest.raises(NotFound):
                self.store.grep(eid, pattern, fixed=True)
            return
        result = self.store.grep(eid, pattern, fixed=True, before=before, after=after, max_matches=max_matches)
        count = self.store.count(eid, pattern, fixed=True)
        lines = m.lines()
        if m.kind == "text":
            hits = [i for i, line in enumerate(lines) if pattern in line]
        else:
            needle = pattern.encode()
            hits = [i for i, raw in enumerate(m.raw_lines()) if needle in raw]
        assert count == len(hits)
        assert [g.line for g in result] == [i + 1 for i in hits[:max_matches]]
        assert result.truncated == (len(hits) > max_matches)
        for g in result:
            line = lines[g.line - 1]
            assert g.line_chars == len(line)
            assert g.text == line[g.offset : g.offset + len(g.text)] and len(g.text) <= WINDOW
            if m.kind == "text" and not g.clipped:
                assert g.spans == _find_all(line, pattern)
            lo = max(1, g.line - before)
            assert g.before == [(k, lines[k - 1][:WINDOW]) for k in range(lo, g.line)]
            hi = min(len(lines), g.line + after)
            assert g.after == [(k, lines[k - 1][:WINDOW]) for k in range(g.line + 1, hi + 1)]

    @rule(data=st.data())
    def stat(self, data):
        eid, m = self.pick(data)
        if m is None:
            with pytest.raises(NotFound):
                self.store.stat(eid)
            return
        e = self.store.stat(eid)
        assert (e.id, e.kind, e.size_bytes, e.session, e.turn, e.name, e.expires_at) == (
            m.id, m.kind, len(m.data), m.session, m.turn, m.name, m.expires_at)
        assert e.sha256 == hashlib.sha256(m.data).hexdigest()
        assert e.lines == len(m.raw_lines())
        assert e.chars == (len(m.data.decode()) if m.kind == "text" else None)
        assert e.length == len(m.value)

    @rule(session=st.sampled_from([None] + SESSIONS), turn=st.sampled_from(TURNS), limit=st.sampled_from([None, 1, 3]))
    def entries(self, session, turn, limit):
        got = [e.id for e in self.store.entries(session=session, turn=turn, limit=limit)]
        want = [
            m.id for m in self.visible()
            if (session is None and turn is None)
            or (m.session == (session or "") and (turn is None or (type(m.turn) is type(turn) and m.turn == turn)))
        ]
        assert got == want[:limit]

    @rule(session=st.sampled_from(SESSIONS), name=st.sampled_from(["plan", "notes", "other"]))
    def find(self, session, name):
        owners = [m for m in self.live.values() if m.session == session and m.name == name and not self.expired(m)]
        if not owners:
            with pytest.raises(NotFound):
                self.store.find(name, session=session)
        else:
            assert self.store.find(name, session=session).id == owners[0].id

    @invariant()
    def listing_matches(self):
        assert [e.id for e in self.store.entries()] == [m.id for m in self.visible()]

    @precondition(lambda self: self.seq % 7 == 6)
    @rule()
    def verify(self):
        report = self.store.verify()
        assert report.ok and report.problems == [], report.problems[:3]


class MemoryStoreMachine(StoreMachine):
    engine = "memory"


PHASES = list(Phase) if os.environ.get("BLOBPAD_MODEL_SHRINK") else [p for p in Phase if p is not Phase.shrink]
for _machine in (StoreMachine, MemoryStoreMachine):
    _machine.TestCase.settings = settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), phases=PHASES,
    )
TestStoreModel = StoreMachine.TestCase  # on LMDB
TestStoreModelMemory = MemoryStoreMachine.TestCase  # the same machine on the memory engine


def test_model_machine_size_is_reported():
    print(f"\nmodel: StoreMachine runs {EXAMPLES} examples of up to {STEPS} steps each")


# -- isolation --------------------------------------------------------------------------------------

CONTENTS = {
    "log": sample.log_text(20_000, 1),
    "multibyte": sample.multibyte_text(8_000, 2),
    "repetitive": "x" * 6000,  # the same chunk many times over
    "zeros": "\0" * 4000,
}


@pytest.mark.parametrize("kind", list(CONTENTS))
def test_dedup_never_lets_a_delete_in_one_session_reach_another(store_factory, kind):
    s = store_factory(chunk_params=SMALL)
    content = CONTENTS[kind]
    ids = {session: s.put(content, session=session, ttl=None).id for session in ("A", "B", "C", "D")}
    s.delete(ids["A"])
    s.delete(ids["B"])
    s.delete_session("C")
    assert s.get(ids["D"]) == content, "deleting other sessions' copies changed D's content"
    assert s.stat(ids["D"]).session == "D"
    report = s.verify()
    assert report.ok and report.problems == [], report.problems[:3]
    s.delete(ids["D"])
    assert s.stats().chunks == 0 and s.verify().ok


def test_same_name_in_two_sessions_stays_two_entries(store_factory):
    s = store_factory(chunk_params=SMALL)
    a = s.put("A's plan\n", session="A", name="plan")
    b = s.put("B's plan\n", session="B", name="plan")
    assert s.find("plan", session="A").id == a.id and s.find("plan", session="B").id == b.id
    a2 = s.put("A's new plan\n", session="A", name="plan")  # replaces A's only
    assert s.get(b.id) == "B's plan\n" and s.find("plan", session="B").id == b.id
    with pytest.raises(NotFound):
        s.get(a.id)
    s.delete(a2.id)
    with pytest.raises(NotFound):
        s.find("plan", session="A")
    assert s.find("plan", session="B").id == b.id
    with pytest.raises(NotFound):
        s.find("plan")  # the default session "" has no such name
    # the same content under the same name: still two entries, each its own
    c = s.put("same\n", session="A", name="n")
    d = s.put("same\n", session="B", name="n")
    assert c.id != d.id and s.stat(c.id).session == "A" and s.stat(d.id).session == "B"
    s.delete(c.id)
    assert s.get(d.id) == "same\n"


@pytest.mark.parametrize("a,b", [("A", "B"), ("A", "AB"), ("", "A"), ("s\0", "s"), ("s", "s\0x"), ("é", "e"), ("1", "01")])
def test_entries_of_one_session_never_list_anothers(store_factory, a, b):
    s = store_factory(chunk_params=SMALL)
    mine = [s.put(f"{a} {i}\n", session=a, turn=i % 2, meta={"owner": a}).id for i in range(4)]
    theirs = [s.put(f"{b} {i}\n", session=b, turn=i % 2, meta={"owner": b}).id for i in range(4)]
    shared = s.put("same content\n", session=a).id, s.put("same content\n", session=b).id
    assert [e.id for e in s.entries(session=a)] == mine + [shared[0]]
    assert [e.id for e in s.entries(session=b)] == theirs + [shared[1]]
    assert [e.id for e in s.entries(session=a, turn=1)] == mine[1::2]
    assert all(e.meta == {"owner": b} for e in s.entries(session=b) if e.id != shared[1])
    assert s.stat(shared[1]).session == b and s.stat(shared[0]).session == a
    assert s.delete_session(a) == 5
    assert [e.id for e in s.entries(session=b)] == theirs + [shared[1]]
    assert s.get(shared[1]) == "same content\n"
    assert s.verify().ok


# -- divergences the machine can find, pinned as plain examples -----------------------------------


def test_count_equals_the_number_of_grep_lines_on_invalid_utf8(store):
    """count() counts matching lines, like grep -c, also when a line holds invalid UTF-8."""
    for data, want in ((b"a\x80a", 1), (b"a\x80a\x80a\nb\n", 1), (b"\xffab ab\nab\n", 2)):
        e = store.put(data)
        assert len(store.grep(e.id, "a", fixed=True)) == want
        assert store.count(e.id, "a", fixed=True) == want, f"count() of {data!r}"
        assert store.count(e.id, "a") == want, f"count() of {data!r} with a regex"


def test_kind_of_a_deduplicated_put_follows_its_own_content(store):
    """kind=None means text when the content is valid UTF-8, even if an identical
    entry was put before with kind='binary'."""
    first = store.put(b"plain text\n", kind="binary")
    assert first.kind == "binary"
    again = store.put(b"plain text\n")
    assert again.kind == "text" and store.get(again.id) == "plain text\n"


@pytest.mark.parametrize("pattern,fixed", [("", True), ("", False), ("x*", False), ("\\b", False)])
def test_grep_with_a_pattern_matching_the_empty_string_on_multibyte_text(store, pattern, fixed):
    e = store.put("é日\nab\n🙂x\n")
    lines = ["é日", "ab", "🙂x"]
    result = store.grep(e.id, pattern, fixed=fixed)
    assert {m.line for m in result} <= {1, 2, 3}
    for m in result:
        assert m.text == lines[m.line - 1]
        for s, t in m.spans:
            assert 0 <= s <= t <= len(m.text)
    if pattern in ("", "x*"):
        assert [m.line for m in result] == [1, 2, 3] and store.count(e.id, pattern, fixed=fixed) == 3
