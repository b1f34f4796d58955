"""Store.grep_session: grep over every live entry of a session, bounded and paged.

The oracle is Python's ``re`` (``str.find`` with ``fixed``) over each entry's content,
line by line (lines end at ``\\n``; a ``\\r`` before it stays in the line), in the
order the test's own model of the store says: named entries by name, then unnamed
ones in the order they were put.  The model keeps what was put, replaced, deleted and
expired; it never asks the store which entries exist.
"""

from __future__ import annotations

import fnmatch
import json
import re
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
import blobpad.reads
from blobpad import GrepMatch, InvalidArgument, NotFound, SessionGrepResult, SessionMatch

#: small chunks: a few KB of content is spread over many chunks
SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)


@dataclass
class Put:
    id: str
    session: str
    name: str | None
    content: str | bytes
    seq: int


class Model:
    """What the test put in a store, and what is still live there."""

    def __init__(self, store: blobpad.Store) -> None:
        self.store = store
        self.live: dict[str, Put] = {}
        self.seq = 0

    def put(self, content: str | bytes, *, session: str, name: str | None = None, **options) -> str:
        entry = self.store.put(content, session=session, name=name, **options)
        if name is not None:  # a put of the same name replaces the entry of that name
            self.live = {k: p for k, p in self.live.items() if not (p.session == session and p.name == name)}
        self.seq += 1
        self.live[entry.id] = Put(entry.id, session, name, content, self.seq)
        return entry.id

    def delete(self, entry_id: str) -> None:
        self.store.delete(entry_id)
        del self.live[entry_id]

    def order(self, session: str, names: str | None = None, ids: list[str] | None = None) -> list[Put]:
        if ids is not None:
            return [self.live[i] for i in ids if i in self.live]
        here = [p for p in self.live.values() if p.session == session]
        named = sorted((p for p in here if p.name is not None), key=lambda p: p.name)
        if names is not None:
            return [p for p in named if fnmatch.fnmatchcase(p.name, names)]
        return named + sorted((p for p in here if p.name is None), key=lambda p: p.seq)

    def grep(self, session: str, pattern: str, *, names: str | None = None, ids: list[str] | None = None,
             fixed: bool = False, ignore_case: bool = False, max_per_entry: int | None = None,
             ) -> list[tuple[str, int, str]]:
        """(entry id, line number, line text) of every matching line, in search order."""
        out = []
        for p in self.order(session, names, ids):
            found = 0
            for number, text, matched in _lines(p.content, pattern, fixed=fixed, ignore_case=ignore_case):
                if matched:
                    if max_per_entry is not None and found >= max_per_entry:
                        break
                    out.append((p.id, number, text))
                    found += 1
        return out


def _lines(content: str | bytes, pattern: str, *, fixed: bool, ignore_case: bool):
    """(number, decoded text, whether it matches) of each line of ``content``."""
    if isinstance(content, bytes):
        raw_lines = content.split(b"\n")
        if raw_lines and raw_lines[-1] == b"":
            raw_lines.pop()
        if fixed:
            needle = pattern.encode()
            test = (lambda ln: needle.lower() in ln.lower()) if ignore_case else (lambda ln: needle in ln)
        else:
            rx = re.compile(pattern.encode(), re.IGNORECASE if ignore_case else 0)
            test = lambda ln: rx.search(ln) is not None  # noqa: E731
        for k, ln in enumerate(raw_lines, 1):
            yield k, ln.decode("utf-8", "replace"), test(ln)
        return
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if fixed:
        test = (lambda ln: pattern.lower() in ln.lower()) if ignore_case else (lambda ln: ln.find(pattern) >= 0)
    else:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        test = lambda ln: rx.search(ln) is not None  # noqa: E731
    for k, ln in enumerate(lines, 1):
        yield k, ln, test(ln)


#: a line window wider than any line of these tests: every match's text is its whole line
WIDE = 1_000_000


def triples(result: SessionGrepResult) -> list[tuple[str, int, str]]:
    return [(m.entry_id, m.line, m.text) for m in result.matches]


def all_pages(store: blobpad.Store, session: str, pattern: str, *, max_pages: int = 10_000, **options):
    """Every match of every page, following the cursors; and the pages' results."""
    pages = []
    cursor = None
    while True:
        r = store.grep_session(session, pattern, cursor=cursor, line_window=WIDE, **options)
        pages.append(r)
        cursor = r.cursor
        if cursor is None:
            break
        assert len(pages) < max_pages, "the cursors never end"
    return [t for r in pages for t in triples(r)], pages


def fill(model: Model, big: bool = False) -> None:
    """Three sessions of named, unnamed, binary, CRLF and multibyte entries."""
    for session in ("s1", "s2", ""):
        tag = session or "default"
        model.put(f"alpha {tag}\nERROR one\nbeta\nerror two\n", session=session, name="logs/b.txt")
        model.put(f"error first {tag}\r\nplain\r\nError crlf\r\n", session=session, name="logs/a.txt")
        model.put("ünïcode errör €\nerror ünï\nno\n€ error € end", session=session, name="z/ü.log")
        model.put(b"\x00\xff binary error\n\xfe\xfe\nerror\xff tail\nrest", session=session, name="bin.dat")
        model.put(b"error but binary kind\nok\n", session=session, name="kind.bin", kind="binary")
        model.put(f"unnamed error {tag}\nx\nerror again\n", session=session)
        model.put("", session=session)
        model.put("no match here\n", session=session)
        model.put(b"\xff\xfeerror unnamed binary\n", session=session)
        model.put("last unnamed\nerror", session=session)
        if big:
            lines = [f"line {k} {'error' if k % 97 == 0 else 'fine'} {'é' * (k % 5)} {tag}" for k in range(1, 6000)]
            model.put("\n".join(lines) + "\n", session=session, name="big.log")
            model.put(("x" * 3000 + " error far out\n") * 30 + "y" * 70_000 + "error\n", session=session)


PATTERNS = [
    ("error", {}),
    ("error", {"ignore_case": True}),
    ("^error", {}),
    ("error$", {}),
    ("r.o", {}),
    ("ö|€", {}),
    ("[0-9]{2}7 error", {}),
    ("Error crlf\r", {"fixed": True}),
    ("e", {"fixed": True}),
    ("ERROR", {"fixed": True, "ignore_case": True}),
    ("(nothing|matches){2}", {}),
]


@pytest.fixture
def big_model(store_factory) -> Model:
    model = Model(store_factory(chunk_params=SMALL))
    fill(model, big=True)
    return model


def test_matches_the_oracle_in_every_session(big_model):
    s = big_model.store
    assert max(s.stat(p.id).chunks for p in big_model.live.values()) > 100  # spread over many chunks
    for session in ("s1", "s2", ""):
        for pattern, options in PATTERNS:
            want = big_model.grep(session, pattern, **options)
            got = s.grep_session(session, pattern, max_matches=100_000, line_window=WIDE, **options)
            assert triples(got) == want, (session, pattern, options)
            assert not got.truncated and not got.timed_out and got.cursor is None
            assert got.searched_entries == len(big_model.order(session))
            ids = {p.id for p in big_model.live.values() if p.session == session}
            assert {m.entry_id for m in got} <= ids  # never another session's entries


def test_matches_carry_the_entry_and_grep_fields(big_model):
    s = big_model.store
    got = s.grep_session("s1", "error", max_matches=100_000, before=1, after=2)
    assert got.matches
    for m in got:
        assert isinstance(m, SessionMatch) and isinstance(m, GrepMatch)
        one = s.grep(m.entry_id, "error", max_matches=100_000, before=1, after=2)
        same = [g for g in one if g.line == m.line]
        assert len(same) == 1
        g = same[0]
        assert (m.text, m.spans, m.before, m.after, m.offset, m.line_chars) == (
            g.text, g.spans, g.before, g.after, g.offset, g.line_chars)
        assert m.name == s.stat(m.entry_id).name
    d = got.to_dict()
    json.dumps(d)
    assert set(d) == {"matches", "truncated", "timed_out", "cursor", "searched_entries"}
    assert set(d["matches"][0]) == {"entry_id", "name", "line", "text", "spans", "before", "after", "offset",
                                    "line_chars"}


def test_long_lines_come_back_as_windows(store):
    model = Model(store)
    model.put("a" * 5000 + "error" + "b" * 5000 + "\nerror short\n", session="s", name="long")
    got = store.grep_session("s", "error", line_window=100)
    first, second = got.matches
    assert (first.line, first.line_chars, len(first.text), first.clipped) == (1, 10005, 100, True)
    assert first.text[first.spans[0][0] : first.spans[0][1]] == "error"
    assert (second.line, second.text, second.clipped) == (2, "error short", False)


def test_expired_and_deleted_entries_never_appear(store_factory):
    now = [1_000_000.0]
    model = Model(store_factory(clock=lambda: now[0]))
    s = model.store
    short = model.put("error short-lived\n", session="s", ttl=10)
    named_short = model.put("error named short\n", session="s", name="a", ttl=10)
    keep = model.put("error kept\n", session="s", ttl=1000)
    gone = model.put("error deleted\n", session="s", name="b")
    model.delete(gone)
    assert {m.entry_id for m in s.grep_session("s", "error")} == {short, named_short, keep}
    now[0] += 11
    del model.live[short], model.live[named_short]  # expired
    got = s.grep_session("s", "error")
    assert triples(got) == model.grep("s", "error") == [(keep, 1, "error kept")]
    with pytest.raises(NotFound, match=short):
        s.grep_session("s", "error", entries=[keep, short])


def test_a_replaced_name_is_searched_in_its_new_content(store):
    model = Model(store)
    model.put("error old\n", session="s", name="n")
    new = model.put("new error\n", session="s", name="n")
    assert triples(store.grep_session("s", "error")) == [(new, 1, "new error")]


@pytest.mark.parametrize("glob", ["*", "*.txt", "logs/*", "*/*", "*ü*", "logs/?.txt", "[a-z]*", "[!l]*", "*.TXT",
                                  "bin.dat", "nothing*", "[[]x].txt", "*/b.*", "**"])
def test_names_globs_select_as_fnmatchcase(store, glob):
    model = Model(store)
    fill(model)
    model.put("error bracket\n", session="s1", name="[x].txt")
    model.put("error deep\n", session="s1", name="logs/sub/c.txt")
    want = model.grep("s1", "error|ö", names=glob)
    got = store.grep_session("s1", "error|ö", names=glob, max_matches=10_000)
    assert triples(got) == want
    assert all(m.name is not None and fnmatch.fnmatchcase(m.name, glob) for m in got)


def test_entries_searches_those_ids_in_the_order_given(store):
    model = Model(store)
    fill(model)
    s1 = [p.id for p in model.order("s1")]
    chosen = [s1[5], s1[0], s1[3].upper(), s1[8]]
    ids = [i.lower() for i in chosen]
    got = store.grep_session("s1", "error", entries=chosen, max_matches=10_000)
    assert triples(got) == model.grep("s1", "error", ids=ids)
    assert [m.entry_id for m in got] == sorted((m.entry_id for m in got), key=ids.index)
    assert store.grep_session("s1", "error", entries=[]).matches == []


def test_entries_refused_clearly(store):
    model = Model(store)
    fill(model)
    mine = model.order("s1")[0].id
    other = model.order("s2")[0].id
    with pytest.raises(NotFound, match=f"{other} is not in session 's1'"):
        store.grep_session("s1", "error", entries=[mine, other])
    with pytest.raises(NotFound, match="0123456789abcdef"):
        store.grep_session("s1", "error", entries=["0123456789abcdef"])
    with pytest.raises(InvalidArgument, match="twice"):
        store.grep_session("s1", "error", entries=[mine, mine.upper()])
    with pytest.raises(InvalidArgument, match="not an entry id"):
        store.grep_session("s1", "error", entries=[mine, "nope"])
    with pytest.raises(InvalidArgument, match="not both"):
        store.grep_session("s1", "error", entries=[mine], names="*")


@pytest.mark.parametrize("max_matches", [1, 2, 3, 7, 50])
@pytest.mark.parametrize("options", [{}, {"max_per_entry": 1}, {"max_per_entry": 2, "ignore_case": True},
                                     {"names": "logs/*"}, {"fixed": True}])
def test_pages_concatenate_to_the_unpaged_result(big_model, max_matches, options):
    s = big_model.store
    pattern = "error"
    want = big_model.grep("s1", pattern, **{k: v for k, v in options.items() if k != "names"},
                          names=options.get("names"))
    got, pages = all_pages(s, "s1", pattern, max_matches=max_matches, **options)
    assert got == want
    for r in pages[:-1]:
        assert r.truncated and len(r.matches) == max_matches and r.cursor
        assert len(r.cursor) < 100
    assert not pages[-1].truncated
    unpaged = s.grep_session("s1", pattern, max_matches=100_000, line_window=WIDE, **options)
    assert triples(unpaged) == want
    # an entry a page stops inside is counted by the page that began it: the pages add up to the entries
    assert sum(r.searched_entries for r in pages) == unpaged.searched_entries


def test_max_per_entry_caps_each_entry(big_model):
    s = big_model.store
    for cap in (1, 2, 5):
        got = s.grep_session("s2", "e", max_per_entry=cap, max_matches=100_000, line_window=WIDE)
        assert triples(got) == big_model.grep("s2", "e", max_per_entry=cap)
        per: dict[str, int] = {}
        for m in got:
            per[m.entry_id] = per.get(m.entry_id, 0) + 1
        assert max(per.values()) == cap


def test_paging_over_entries_list(big_model):
    s = big_model.store
    ids = [p.id for p in big_model.order("s1")][::-1]
    got, _ = all_pages(s, "s1", "error", entries=ids, max_matches=3)
    assert got == big_model.grep("s1", "error", ids=ids)


def rest_of(store: blobpad.Store, session: str, pattern: str, cursor: str | None, **options) -> list:
    """The matches of every page from ``cursor`` on."""
    got = []
    while cursor:
        r = store.grep_session(session, pattern, cursor=cursor, line_window=WIDE, **options)
        got += triples(r)
        cursor = r.cursor
    return got


def test_entries_deleted_between_pages_are_skipped(store):
    model = Model(store)
    fill(model)
    first = store.grep_session("s1", "error", max_matches=2)
    assert first.cursor
    shown = {m.entry_id for m in first}
    for p in model.order("s1")[3:-1]:  # entries the first page did not reach, but the last
        assert p.id not in shown
        model.delete(p.id)
    got = triples(first) + rest_of(store, "s1", "error", first.cursor, max_matches=2)
    assert got == model.grep("s1", "error")


def test_the_entry_a_cursor_stopped_in_may_be_deleted(store):
    model = Model(store)
    fill(model)
    before = model.order("s1")
    first = store.grep_session("s1", "error", max_matches=1)  # stops inside bin.dat, which has two
    current = first.matches[-1].entry_id
    assert model.live[current].name == "bin.dat"
    assert [t[0] for t in model.grep("s1", "error")][:2] == [current, current]
    model.delete(current)
    later = {p.id for p in before[[p.id for p in before].index(current) + 1 :]}
    got = triples(first) + rest_of(store, "s1", "error", first.cursor, max_matches=1)
    assert got == triples(first) + [t for t in model.grep("s1", "error") if t[0] in later]


def test_entries_deleted_while_paging_an_entries_list(store):
    model = Model(store)
    fill(model)
    ids = [p.id for p in model.order("s1")]
    first = store.grep_session("s1", "error", entries=ids, max_matches=1)
    model.delete(ids[-1])
    rest = rest_of(store, "s1", "error", first.cursor, entries=ids, max_matches=10_000)
    assert triples(first) + rest == model.grep("s1", "error", ids=ids)


def test_entry_cap_pages_large_sessions(store, monkeypatch):
    model = Model(store)
    for k in range(7):
        model.put(f"error {k}\nerror {k} again\n", session="s")
        model.put(f"error named {k}\n", session="s", name=f"n{k}")
    monkeypatch.setattr(blobpad.reads, "MAX_SESSION_ENTRIES", 3)
    got, pages = all_pages(store, "s", "error", max_matches=1000)
    assert got == model.grep("s", "error")
    assert all(r.searched_entries <= 3 for r in pages) and len(pages) == 5
    assert all(not r.truncated for r in pages)
    with pytest.raises(InvalidArgument, match="limit is 3"):
        store.grep_session("s", "error", entries=[p.id for p in model.order("s")][:4])


def test_timeouts_never_lose_matches(big_model):
    s = big_model.store
    r = s.grep_session("s1", "error", timeout=1e-9)
    assert r.timed_out and r.matches == [] and r.cursor and not r.truncated
    assert rest_of(s, "s1", "error", r.cursor) == big_model.grep("s1", "error")
    # pages under a small budget, each continued where it stopped: together, every match once
    pattern = "[0-9].{10,20}$"  # thousands of lines, and RE2's DFA needs many states: budgets run out mid-entry
    collected = []
    cursor = None
    for _ in range(10_000):
        r = s.grep_session("s1", pattern, timeout=0.001, max_matches=50, cursor=cursor, line_window=WIDE)
        if r.timed_out and not r.matches and r.cursor == cursor:  # no progress at all: one page without a budget
            r = s.grep_session("s1", pattern, max_matches=50, cursor=cursor, line_window=WIDE)
        collected += triples(r)
        cursor = r.cursor
        if cursor is None:
            break
    assert collected == big_model.grep("s1", pattern)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=st.lists(
        st.tuples(st.sampled_from([None, "a", "b", "c/d", "é"]), st.text("ab\r\n€ A", max_size=30),
                  st.sampled_from(["s", "t"])),
        max_size=8,
    ),
    pattern=st.sampled_from(["a", "b", "ab", "^a", "b$", "a.b", "[ab]€", "€", "\r", "A", "a*", "(a|b)b", "x"]),
    ignore_case=st.booleans(),
    max_matches=st.integers(1, 5),
    max_per_entry=st.sampled_from([None, 1, 2]),
)
def test_random_sessions_against_re(store, entries, pattern, ignore_case, max_matches, max_per_entry):
    model = Model(store)
    prefix = uuid.uuid4().hex[:8]
    for name, content, session in entries:
        model.put(content, session=prefix + session, name=name)
    session = prefix + "s"
    want = model.grep(session, pattern, ignore_case=ignore_case, max_per_entry=max_per_entry)
    whole = store.grep_session(session, pattern, ignore_case=ignore_case, max_per_entry=max_per_entry,
                               max_matches=1000)
    assert triples(whole) == want
    got, pages = all_pages(store, session, pattern, ignore_case=ignore_case, max_per_entry=max_per_entry,
                           max_matches=max_matches)
    assert got == want
    assert sum(r.searched_entries for r in pages) == whole.searched_entries == len(model.order(session))


BAD_ARGUMENTS = [
    ({"session": None}, "session"),
    ({"session": 3}, "session"),
    ({"session": "x" * 300}, "session"),
    ({"pattern": "("}, "pattern|missing"),
    ({"pattern": 5}, "pattern"),
    ({"pattern": "a" * 5000}, "pattern"),
    ({"names": ""}, "empty glob"),
    ({"names": 5}, "names"),
    ({"names": "*" * 2000}, "names"),
    ({"names": "\ud800"}, "surrogates"),
    ({"entries": "0123456789abcdef"}, "list of entry ids"),
    ({"entries": [5]}, "entry id"),
    ({"entries": {"a": 1}}, "list of entry ids"),
    ({"max_matches": 0}, "max_matches"),
    ({"max_matches": -1}, "max_matches"),
    ({"max_matches": True}, "max_matches"),
    ({"max_matches": "3"}, "max_matches"),
    ({"max_per_entry": 0}, "max_per_entry"),
    ({"max_per_entry": 1.5}, "max_per_entry"),
    ({"before": -1}, "before"),
    ({"after": 1001}, "1000"),
    ({"line_window": 0}, "line_window"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": float("nan")}, "timeout"),
    ({"timeout": "1"}, "timeout"),
    ({"ignore_case": "yes"}, "ignore_case"),
    ({"fixed": 1}, "fixed"),
    ({"cursor": 5}, "cursor"),
    ({"cursor": ""}, "cursor"),
    ({"cursor": "not a cursor!"}, "cursor"),
    ({"cursor": "AAAA"}, "cursor"),
    ({"cursor": "A" * 10_000}, "cursor"),
]


@pytest.mark.parametrize(("change", "words"), BAD_ARGUMENTS)
def test_bad_arguments_are_invalid_argument(store, change, words):
    store.put("error\n", session="s", name="n")
    call = {"session": "s", "pattern": "error"} | change
    session, pattern = call.pop("session"), call.pop("pattern")
    with pytest.raises(InvalidArgument, match=words):
        store.grep_session(session, pattern, **call)


def test_cursors_belong_to_one_search(store):
    model = Model(store)
    fill(model)
    r = store.grep_session("s1", "error", max_matches=1)
    c = r.cursor
    assert c
    assert store.grep_session("s1", "error", max_matches=5, cursor=c, before=1).matches  # paging options may change
    for other in [
        {"session": "s2"}, {"pattern": "err"}, {"ignore_case": True}, {"fixed": True}, {"names": "*"},
        {"max_per_entry": 3}, {"entries": [p.id for p in model.order("s1")]},
    ]:
        call = {"session": "s1", "pattern": "error"} | other
        with pytest.raises(InvalidArgument, match="cursor is not one this search returned"):
            store.grep_session(call.pop("session"), call.pop("pattern"), cursor=c, **call)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    changed = [c[:k] + other + c[k + 1 :] for k in range(len(c)) for other in alphabet[::7] if other != c[k]]
    for broken in [c[:-3], c[:-1], c[:10], c + "A", c + "AAAA", c[1:], *changed]:
        with pytest.raises(InvalidArgument, match="cursor"):
            store.grep_session("s1", "error", cursor=broken)


def test_empty_and_unknown_sessions(store):
    assert store.grep_session("nobody", "error").to_dict() == {
        "matches": [], "truncated": False, "timed_out": False, "cursor": None, "searched_entries": 0}
    store.put("error in default\n")
    assert triples(store.grep_session("", "error"))[0][1:] == (1, "error in default")


# -- the command line: blobpad grep-session ---------------------------------------------------


def cli(capsysbinary, *argv: str) -> tuple[int, str, str]:
    """Run ``blobpad`` in this process: (exit code, stdout, stderr)."""
    from blobpad.cli import main

    rc = main(list(argv))
    out, err = capsysbinary.readouterr()
    return rc, out.decode("utf-8", "surrogateescape"), err.decode("utf-8", "surrogateescape")


@pytest.fixture
def cli_model(tmp_path) -> Model:
    db = tmp_path / "db"
    s = blobpad.open(db)
    model = Model(s)
    fill(model)
    for k in range(30):
        model.put(f"error {k}\nfine\nerror {k} again\n", session="s1", name=f"many/{k:02}", ttl=None)
    s.close()
    model.db = str(db)  # type: ignore[attr-defined]
    return model


def rows(out: str) -> list[str]:
    """The lines printed (split at \\n only: a \\r stays in its line)."""
    return out.split("\n")[:-1]


def cli_lines(model: Model, triples_: list[tuple[str, int, str]]) -> list[str]:
    """What grep-session prints for these matches (no context): NAME:LINE:TEXT, the text of a
    binary entry as its line's own bytes, as rg prints them (read back with surrogateescape)."""
    out = []
    for i, n, t in triples_:
        content = model.live[i].content
        if isinstance(content, bytes):
            t = content.split(b"\n")[n - 1].decode("utf-8", "surrogateescape")
        out.append(f"{model.live[i].name or i}:{n}:{t}")
    return out


def test_cli_prints_every_match_like_rg(cli_model, capsysbinary):
    db = cli_model.db
    rc, out, err = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "--timeout", "0")
    assert (rc, err) == (0, "")
    assert rows(out) == cli_lines(cli_model, cli_model.grep("s1", "error"))
    rc, out, _ = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "--names", "many/*", "--max-per-entry",
                     "1", "-i")
    assert rc == 0
    assert rows(out) == cli_lines(cli_model, cli_model.grep("s1", "error", names="many/*", max_per_entry=1,
                                                                    ignore_case=True))
    rc, out, _ = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "-C", "1", "--names", "many/0[12]")
    assert rows(out) == ["many/01:1:error 1", "many/01-2-fine", "many/01:3:error 1 again", "--",
                                "many/02:1:error 2", "many/02-2-fine", "many/02:3:error 2 again"]


def test_cli_pages_with_max_count_and_cursor(cli_model, capsysbinary):
    db = cli_model.db
    want = cli_lines(cli_model, cli_model.grep("s1", "error"))
    got: list[str] = []
    cursor: list[str] = []
    for _ in range(100):
        rc, out, err = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "-m", "7", *cursor)
        assert rc == 0
        got += rows(out)
        found = re.search(r"--cursor (\S+)", err)
        if found is None:
            assert err == ""
            break
        assert "more exist" in err
        cursor = ["--cursor", found.group(1)]
    assert got == want
    rc, out, _ = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "-m", "3", "--json")
    shown = json.loads(out)
    assert rc == 0 and shown["truncated"] and shown["cursor"] and len(shown["matches"]) == 3
    assert [(m["entry_id"], m["line"], m["text"]) for m in shown["matches"]] == cli_model.grep("s1", "error")[:3]


def test_cli_exit_codes(cli_model, capsysbinary):
    db = cli_model.db
    assert cli(capsysbinary, "--db", db, "grep-session", "s1", "no such words")[:2] == (1, "")
    assert cli(capsysbinary, "--db", db, "grep-session", "nobody", "error")[:2] == (1, "")
    rc, out, err = cli(capsysbinary, "--db", db, "grep-session", "s1", "error(")
    assert (rc, out) == (2, "") and "invalid pattern" in err and "Traceback" not in err
    rc, _, err = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "--cursor", "garbage")
    assert rc == 2 and "cursor is not one this search returned" in err and "leave --cursor out to start over" in err
    assert "None" not in err and "max_per_entry" not in err  # the command line's words, not the library's
    rc, _, err = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "--names", "")
    assert rc == 2 and "empty glob" in err
    with pytest.raises(SystemExit) as refused:  # refused by the option parser, in the command line's words
        cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "--max-per-entry", "0")
    assert refused.value.code == 2
    assert "--max-per-entry: invalid number '0': use a positive integer" in capsysbinary.readouterr().err.decode()
    rc, out, err = cli(capsysbinary, "--db", db, "grep-session", "s1", "error", "--timeout", "1e-9")
    assert (rc, out) == (3, "") and "timed out" in err


def test_a_search_over_many_entries_keeps_their_filters_in_a_few_transactions(store, monkeypatch):
    """The first search of a session's entries builds their chunk filters and keeps them a batch
    of entries per write transaction (one per entry was one flush to disk per entry), searching
    the entries a group at a time in one snapshot: across group and batch boundaries, the matches
    are the oracle's (named entries by name, then the others in creation order), and the next
    search, with every filter kept, writes nothing."""
    monkeypatch.setattr(blobpad.reads, "_KEEP_BATCH", 8)
    monkeypatch.setattr(blobpad.reads, "_GROUP", 5)
    named, unnamed = [], []
    for i in range(30):
        body = "".join(f"entry {i} line {k} ok\n" for k in range(40)) + ("ERROR boom\n" if i % 4 == 0 else "")
        name = f"logs/f{i:02d}.log" if i % 3 else None
        e = store.put(body, session="big", name=name)
        (named if name else unnamed).append((name or "", e.id, body))
    want = [(eid, n, line) for _, eid, body in sorted(named) + unnamed
            for n, line in enumerate(body.splitlines(), 1) if "ERROR" in line]
    engine = store.engine
    real = type(engine).write
    writes: list[int] = []

    def counting(self, fn, **kw):
        if self is engine:
            writes.append(1)
        return real(self, fn, **kw)

    monkeypatch.setattr(type(engine), "write", counting)
    first = store.grep_session("big", "ERROR", max_matches=1000)
    assert [(m.entry_id, m.line, m.text) for m in first.matches] == want and first.searched_entries == 30
    assert 1 <= len(writes) <= 4, len(writes)  # 30 entries' filters, 8 entries per transaction
    writes.clear()
    second = store.grep_session("big", "ERROR", max_matches=1000)
    assert [(m.entry_id, m.line, m.text) for m in second.matches] == want
    assert writes == []
