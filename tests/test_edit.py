"""Store.edit: in-place replacement in a named text entry, storing only the chunks that change (issue 15, item 4).

The oracle is Python's ``str.replace`` (and ``str.count``) on the content; what is
stored is read back with ``get()``.  Every test runs on every engine.
"""

from __future__ import annotations

import dataclasses
import functools
import io

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import blobpad
import blobpad.edit as edit_module
from blobpad import Conflict, Edit, InvalidArgument, NotFound, NoUniqueMatch, sample
from blobpad.catalog import Catalog
from blobpad.put import Putter
from blobpad.view import Reader

#: tiny chunks, so that a few hundred bytes span many chunk boundaries
SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _footprint(s: blobpad.Store) -> tuple[int, int, int, int, int]:
    st_ = s.stats()
    return st_.entries, st_.chunks, st_.logical_bytes, st_.stored_bytes, st_.unique_bytes


@functools.cache
def _log(size: int) -> str:
    return sample.log_text(size, 7)


# -- what an edit does ----------------------------------------------------------------------------------


def test_one_occurrence_is_replaced_under_the_same_name(store):
    content = "alpha\nbeta\ngamma\n"
    e = store.put(content, name="notes.txt", session="s")
    done = store.edit(e.id, "beta", "BETA!")
    assert isinstance(done, Edit) and done.occurrences == 1
    assert store.get(done.entry.id) == content.replace("beta", "BETA!")
    assert done.entry.id != e.id and not store.exists(e.id)
    assert store.find("notes.txt", session="s") == done.entry
    assert [x.id for x in store.entries(session="s")] == [done.entry.id]
    assert done.entry.size_bytes == len(content.replace("beta", "BETA!").encode())
    assert done.entry.lines == 3 and done.entry.chars == len(content) + 1


def test_replace_all_replaces_every_occurrence_like_str_replace(store):
    content = "aaaa\nab aa\nxaaay\n" * 50
    e = store.put(content, name="f")
    done = store.edit(e.id, "aa", "b", replace_all=True)
    assert done.occurrences == content.count("aa") == 200
    assert store.get(done.entry.id) == content.replace("aa", "b")


def test_replace_all_with_one_occurrence_and_an_empty_new(store):
    e = store.put("keep this, drop THIS", name="f")
    done = store.edit(e.id, ", drop THIS", "", replace_all=True)
    assert done.occurrences == 1 and store.get(done.entry.id) == "keep this"
    done = store.edit(done.entry.id, "keep this", "")
    assert store.get(done.entry.id) == "" and done.entry.lines == 0


def test_an_edit_returns_an_entry_the_reads_use(store):
    e = store.put("x\n" * 1000 + "needle\n" + "y\n" * 1000, name="f")
    done = store.edit(e.id, "needle", "thread\nand more")
    assert store.lines(done.entry.id, 1001, 1002) == ["thread", "and more"]
    assert store.grep(done.entry.id, "thread").matches[0].line == 1001
    assert done.entry.lines == 2002


@SETTINGS
@given(data=st.data())
def test_edits_match_str_replace(store_factory, monkeypatch, data):
    """Random contents (multibyte characters, CRLF, lines past the chunk size), an ``old``
    taken from the content or made of its letters, chunks of a few hundred bytes and
    blocks read a few bytes at a time, so that occurrences span chunk and block edges."""
    s = store_factory("prop", chunk_params=SMALL)
    letters = st.sampled_from(["a", "b", "é", "€", "😀", "\r\n", "\n", " ", "ab", "x" * 300, "é" * 150])
    content = "".join(data.draw(st.lists(letters, max_size=40), label="content"))
    if content and data.draw(st.booleans(), label="from content"):
        i = data.draw(st.integers(0, len(content) - 1), label="i")
        old = content[i : data.draw(st.integers(i + 1, min(len(content), i + 400)), label="j")]
    else:
        old = "".join(data.draw(st.lists(st.sampled_from(["a", "b", "é", "😀", "\r", "\n", "\r\n"]), min_size=1,
                                         max_size=4), label="old"))
    new = "".join(data.draw(st.lists(letters, max_size=3), label="new"))
    replace_all = data.draw(st.booleans(), label="replace_all")
    monkeypatch.setattr(edit_module, "READ_BLOCK", data.draw(st.sampled_from([1, 3, 7, 64, 1 << 20]), label="block"))
    e = s.put(content, name=f"f{data.draw(st.integers(0, 3), label='name')}", kind="text")
    n = content.count(old)
    event("refused" if n == 0 or (n > 1 and not replace_all) else f"replaced {min(n, 3)}{'+' if n > 3 else ''}")
    before = _footprint(s)
    if n == 0 or (n > 1 and not replace_all):
        with pytest.raises(NoUniqueMatch) as caught:
            s.edit(e.id, old, new, replace_all=replace_all)
        assert caught.value.occurrences == n
        assert s.find(e.name).id == e.id and s.get(e.id) == content and _footprint(s) == before
    else:
        done = s.edit(e.id, old, new, replace_all=replace_all)
        assert done.occurrences == n
        assert s.get(done.entry.id) == content.replace(old, new)
        assert s.find(e.name).id == done.entry.id and not s.exists(e.id)
        e2 = s.put(content.replace(old, new), kind="text")  # the entry a put of the result makes
        assert (done.entry.size_bytes, done.entry.chars, done.entry.lines, done.entry.sha256) == (
            e2.size_bytes, e2.chars, e2.lines, e2.sha256)
        s.delete(e2.id)
    assert s.verify().ok


# -- what it keeps ---------------------------------------------------------------------------------------


def test_metadata_and_creation_time_are_kept_and_updated_at_moves(store_factory):
    t = [1_000_000.0]
    s = store_factory(clock=lambda: t[0])
    e = s.put("one\ntwo\n", name="n", session="sess", turn=4, step=2, tool="bash", meta={"k": [1, "é"]}, ttl=600)
    t[0] += 10
    done = s.edit(e.id, "two", "three").entry
    kept = ("session", "name", "turn", "step", "tool", "meta", "kind", "created_at", "expires_at")
    assert {k: getattr(done, k) for k in kept} == {k: getattr(e, k) for k in kept}
    assert done.updated_at == 1_000_010.0 and e.updated_at == 1_000_000.0


def test_the_remaining_ttl_is_kept(store_factory):
    t = [1_000_000.0]
    s = store_factory(clock=lambda: t[0])
    e = s.put("a\nb\n", name="n", ttl=100)
    t[0] += 30
    done = s.edit(e.id, "a", "A").entry
    assert done.expires_at == e.expires_at == 1_000_100.0  # 70 seconds left, as before
    t[0] += 69
    assert s.get(done.id) == "A\nb\n"
    t[0] += 1
    assert not s.exists(done.id)
    with pytest.raises(NotFound):
        s.find("n")


def test_no_ttl_stays_no_ttl(store):
    e = store.put("a\nb\n", name="n", ttl=None)
    done = store.edit(e.id, "b", "B").entry
    assert done.expires_at is None and e.expires_at is None


# -- what it refuses, changing nothing ------------------------------------------------------------------


def _refused(s: blobpad.Store, e: blobpad.Entry, content: str, error: type[Exception], *args, match: str, **kw):
    before = _footprint(s)
    with pytest.raises(error, match=match):
        s.edit(*args, **kw)
    assert _footprint(s) == before and s.get(e.id) == content
    if e.name is not None:
        assert s.find(e.name, session=e.session).id == e.id


def test_refused_edits_change_nothing(store):
    content = "twice twice once\n"
    e = store.put(content, name="n")
    _refused(store, e, content, NoUniqueMatch, e.id, "absent", "x", match="does not occur")
    _refused(store, e, content, NoUniqueMatch, e.id, "twice", "x", match="occurs 2 times.*replace_all=True")
    _refused(store, e, content, InvalidArgument, e.id, "", "x", match="old is empty")
    _refused(store, e, content, InvalidArgument, e.id, "", "x", replace_all=True, match="old is empty")
    _refused(store, e, content, InvalidArgument, e.id, 3, "x", match="old must be a str")
    _refused(store, e, content, InvalidArgument, e.id, "once", b"x", match="new must be a str")
    _refused(store, e, content, InvalidArgument, e.id, "once", "\ud800", match="lone surrogates")
    _refused(store, e, content, InvalidArgument, e.id, "once", "x", replace_all="yes", match="replace_all")
    _refused(store, e, content, InvalidArgument, "nope", "once", "x", match="not an entry id")
    _refused(store, e, content, NotFound, "0123456789abcdef", "once", "x", match="no entry")


def test_no_unique_match_says_how_many_and_is_an_invalid_argument(store):
    e = store.put("ab ab ab", name="n")
    with pytest.raises(InvalidArgument) as caught:
        store.edit(e.id, "ab", "x")
    assert isinstance(caught.value, NoUniqueMatch) and caught.value.occurrences == 3
    assert caught.value.message == f"'ab' occurs 3 times in entry {e.id}"
    assert "replace_all=true" in caught.value.render("tool")
    with pytest.raises(NoUniqueMatch) as caught:
        store.edit(e.id, "abc", "x")
    assert caught.value.occurrences == 0 and caught.value.hint is None


def test_a_huge_old_is_shown_short(store):
    e = store.put("small\n", name="n")
    with pytest.raises(NoUniqueMatch) as caught:
        store.edit(e.id, "z" * 1_000_000, "x")
    assert len(str(caught.value)) < 400


def test_binary_and_unnamed_entries_are_refused(store):
    b = store.put(b"\xff\x00 bytes", name="bin")
    _refused(store, b, b"\xff\x00 bytes", InvalidArgument, b.id, "bytes", "x", match="binary")
    u = store.put("no name here\n")
    _refused(store, u, "no name here\n", InvalidArgument, u.id, "name", "x", match="has no name")
    t = store.put("valid utf-8", name="as-binary", kind="binary")
    _refused(store, t, b"valid utf-8", InvalidArgument, t.id, "valid", "x", match="binary")


def test_an_expired_entry_is_not_found(store_factory):
    t = [1_000_000.0]
    s = store_factory(clock=lambda: t[0])
    e = s.put("a\n", name="n", ttl=5)
    t[0] += 5
    with pytest.raises(NotFound):
        s.edit(e.id, "a", "b")


# -- only the changed chunks -----------------------------------------------------------------------------


def test_an_edit_in_the_middle_stores_only_the_chunks_around_it(store):
    """A named entry of many chunks (default chunk sizes); a copy of the content under
    another name keeps the old chunks alive, so that the chunk count shows what the edit
    created, then is deleted to show what the edit costs alone."""
    content = _log(4 << 20)
    e = store.put(content, name="big.log", ttl=None)
    assert e.chunks >= 30
    copy = store.put(content, name="copy.log", ttl=None)
    before = store.stats()
    mid = len(content) // 2
    start = content.rfind("\n", 0, mid) + 1
    old = content[start : content.index("\n", mid)]
    assert content.count(old) == 1
    done = store.edit(e.id, old, "EDITED " + old)
    assert store.get(done.entry.id) == content.replace(old, "EDITED " + old)
    after = store.stats()
    per_chunk = before.stored_bytes / before.chunks
    assert 1 <= after.chunks - before.chunks <= 3, (before.chunks, after.chunks)
    assert after.stored_bytes - before.stored_bytes <= 4 * per_chunk
    assert done.entry.chunks - 2 <= e.chunks <= done.entry.chunks + 2
    store.delete(copy.id)
    alone = store.stats()
    assert abs(alone.chunks - e.chunks) <= 2  # the chunks around the edit replaced the old ones
    assert abs(alone.stored_bytes - before.stored_bytes) <= 4 * per_chunk


# -- another writer ---------------------------------------------------------------------------------------


class _Racing(Putter):
    """A put pipeline that lets another writer put ``name`` before it commits: after the
    edit counted, either before it reads the entry again (``when="before"``) or after
    (``when="after"``)."""

    def __init__(self, store: blobpad.Store, when: str) -> None:
        reader = Reader(store.engine, store.codec, store.now)
        super().__init__(store.engine, store.codec, Catalog(reader, store.now), store.chunk_params, store.now,
                         lambda txn: None)
        self.store, self.when, self.reader = store, when, reader

    def put(self, data, **fields):
        if self.when == "after":
            data = io.BytesIO(data.read())
        self.store.put("the other writer's\n", name=fields["name"], session=fields["session"])
        return super().put(data, **fields)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_name_put_again_during_the_edit_is_a_conflict(store, when):
    e = store.put("mine\n" * 100, name="n", session="s")
    racing = _Racing(store, when)
    with pytest.raises(Conflict, match="nothing was changed"):
        edit_module.edit(racing.reader, racing, e.id, "mine", "edited", replace_all=True)
    other = store.find("n", session="s")
    assert store.get(other.id) == "the other writer's\n"
    assert [x.id for x in store.entries()] == [other.id]
    assert _footprint(store)[:3] == (1, 1, len("the other writer's\n"))
    assert store.verify().ok


class _Meanwhile(Putter):
    """A put pipeline that runs ``meanwhile()`` after the edit counted, before it commits."""

    def __init__(self, store: blobpad.Store, meanwhile) -> None:
        reader = Reader(store.engine, store.codec, store.now)
        super().__init__(store.engine, store.codec, Catalog(reader, store.now), store.chunk_params, store.now,
                         lambda txn: None)
        self.reader, self.meanwhile = reader, meanwhile

    def put(self, data, **fields):
        self.meanwhile()
        return super().put(data, **fields)


@pytest.mark.parametrize("ttl", [None, 5.0, 500.0, 0.001])
def test_an_expiry_changed_during_the_edit_is_kept(store_factory, ttl):
    """A touch() of the entry while it is edited keeps its id, so the name check alone
    cannot see it: the edit takes the expiry the entry has when the edit commits."""
    t = [1_000_000.0]
    s = store_factory(clock=lambda: t[0])
    e = s.put("plan: draft\n", name="plan", session="s", ttl=60)
    racing = _Meanwhile(s, lambda: s.touch(e.id, ttl=ttl))
    done = edit_module.edit(racing.reader, racing, e.id, "draft", "final").entry
    assert done.expires_at == (None if ttl is None else t[0] + ttl)
    assert s.find("plan", session="s").expires_at == done.expires_at
    t[0] += 61  # the expiry the edit began with has passed
    assert s.exists(done.id) == (ttl is not None and ttl > 61 or ttl is None)


def test_an_entry_that_expires_during_the_edit_is_a_conflict(store_factory):
    t = [1_000_000.0]
    s = store_factory(clock=lambda: t[0])
    e = s.put("plan: draft\n", name="plan", session="s", ttl=60)
    before = _footprint(s)

    def expire() -> None:
        t[0] += 60

    racing = _Meanwhile(s, expire)
    with pytest.raises(Conflict, match="replaced, deleted or expired.*nothing was changed"):
        edit_module.edit(racing.reader, racing, e.id, "draft", "final")
    after = _footprint(s)
    assert after[1] == before[1] and after[3:] == before[3:]  # no chunk stored (the entry counts as expired)
    with pytest.raises(NotFound):
        s.find("plan", session="s")


def test_the_store_is_unchanged_by_edits_that_put_the_same_text(store):
    e = store.put("same\n" * 10, name="n")
    before = _footprint(store)
    done = store.edit(e.id, "same", "same", replace_all=True)
    assert done.occurrences == 10 and store.get(done.entry.id) == "same\n" * 10
    assert _footprint(store) == before
    assert dataclasses.replace(done.entry, id=e.id, seq=e.seq, updated_at=e.updated_at, expires_at=e.expires_at) == e


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_occurrences_counts_like_str_count_across_chunks(store_factory, data):
    """Store.occurrences on entries cut in tiny chunks (occurrences across cuts, overlapping
    candidates such as "aa" in "aaa", multibyte text) against ``str.count``."""
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    pieces = ["a", "aa", "b", "\n", "é", "日本", "ab\n", "x" * 40]
    text = "".join(data.draw(st.lists(st.sampled_from(pieces), max_size=200)))
    needle = "".join(data.draw(st.lists(st.sampled_from(pieces[:7]), min_size=1, max_size=3)))
    e = s.put(text, session="s")
    assert s.occurrences(e.id, needle) == text.count(needle), (needle, text)


def test_occurrences_refuses_what_it_cannot_count(store):
    text = store.put("some text\n", session="s")
    binary = store.put(b"\x00\xff" * 10, session="s")
    assert store.occurrences(text.id, "text") == 1
    for bad in ("", b"text", None):
        with pytest.raises(InvalidArgument):
            store.occurrences(text.id, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="binary"):
        store.occurrences(binary.id, "x")
    with pytest.raises(NotFound):
        store.occurrences("0" * 16, "x")
