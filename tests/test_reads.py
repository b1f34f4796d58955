"""Slice reads (issue 3): get, stream, head/tail/range, byte_range, lines, grep, count.

Oracles only: Python slicing of the original (decoded) content, ``io.BytesIO``,
``sed -n A,Bp`` and ``sed -n '$='``, ``rg --json`` / ``rg -c``, and Python's ``re``
run line by line.  The same corpus is stored under several configurations: tiny
chunks (so reads cross many chunk boundaries, including cuts inside long lines of
multi-byte characters), the same without the chunk cache, and default chunks.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import random
import re
import subprocess
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import re2
from conftest import ENGINES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
from blobpad import InvalidArgument, NotFound, sample
from blobpad.chunking import Manifest
from blobpad.view import chunk_list_blob

SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
#: so small that long lines of 4-byte characters are cut every few characters
TINY = blobpad.ChunkParams(min_size=4, avg_extra=8, max_size=15)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _emoji_lines(n: int, seed: int) -> str:
    rnd = random.Random(seed)
    alphabet = ["🙂", "é", "日", "a", "𝔘", " ", "🚀", "ü"]
    return "".join(
        f"{i} " + "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 300))) + "\n" for i in range(n)
    )


def _crlf() -> str:
    rows = [f"{i:04d} ERROR disk full on /dev/sd{i % 7}\r\n" if i % 5 == 0 else f"{i:04d} status ok\r\n"
            for i in range(300)]
    return "".join(rows) + "tail without newline ok\r"


CORPUS: dict[str, str | bytes] = {
    "log": sample.log_text(120_000, 1),
    "multibyte": sample.multibyte_text(40_000, 2),
    "crlf": _crlf(),
    "no-newline": sample.log_text(20_000, 3).rstrip("\n") + " LAST-LINE-TOKEN",
    "newlines": "\n\n\nx\n\n",
    "empty": "",
    "one-char": "é",
    "emoji-lines": _emoji_lines(60, 4),
    "binary": sample.binary_blob(40_000, 5),
    "minijson": sample.minified_json(30_000, 6),
}
TINY_NAMES = ("multibyte", "crlf", "newlines", "empty", "one-char", "emoji-lines", "no-newline")
CONFIGS = {
    "small": {"chunk_params": SMALL},
    "small-nocache": {"chunk_params": SMALL, "cache_bytes": 0},
    "tiny": {"chunk_params": TINY},
    "default": {},
}


@dataclass
class Loaded:
    store: blobpad.Store
    ids: dict[str, str]
    config: str


def _names(config: str) -> tuple[str, ...]:
    return TINY_NAMES if config == "tiny" else tuple(CORPUS)


@pytest.fixture(scope="module", params=ENGINES)
def reads_engine(request):
    """Every read test of the corpus runs on every engine."""
    return request.param


@pytest.fixture(scope="module")
def stores(tmp_path_factory, reads_engine):
    """The corpus stored under each configuration, on the engine under test, opened on first use."""
    opened: dict[str, Loaded] = {}

    def get(config: str) -> Loaded:
        if config not in opened:
            if reads_engine == "lmdb":
                s = blobpad.open(tmp_path_factory.mktemp(f"reads-{config}") / "store", sync=False, **CONFIGS[config])
            else:
                s = blobpad.open(f"memory://reads-{config}-{uuid.uuid4().hex[:8]}", **CONFIGS[config])
            opened[config] = Loaded(s, {name: s.put(CORPUS[name], ttl=None).id for name in _names(config)}, config)
        return opened[config]

    yield get
    for loaded in opened.values():
        loaded.store.close()


@pytest.fixture(scope="module", params=list(CONFIGS))
def loaded(request, stores):
    return stores(request.param)


def _cases(names, configs=tuple(CONFIGS)):
    """(config, name) pairs for the contents each configuration holds."""
    return [(c, n) for c in configs for n in names if n in _names(c)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("originals")
    out = {}
    for name, content in CORPUS.items():
        path = root / f"{name}.dat"
        path.write_bytes(_raw(content))
        out[name] = str(path)
    return out


def _raw(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def _text(content: str | bytes) -> str:
    """What line reads and grep show: text as is, binary decoded with U+FFFD."""
    return content if isinstance(content, str) else content.decode("utf-8", "replace")


def _lines(content: str | bytes) -> list[str]:
    """Lines as sed counts them: split at \\n, a final line without \\n counts."""
    parts = _text(content).split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts


def _sed(*args: str) -> bytes:
    return subprocess.run(["sed", *args], capture_output=True, check=True, env={"LC_ALL": "C"}).stdout


# -- get, stat ------------------------------------------------------------------------------------


def test_get_returns_the_original(loaded):
    for name, eid in loaded.ids.items():
        content = CORPUS[name]
        got = loaded.store.get(eid)
        assert type(got) is type(content) and got == content, name
        e = loaded.store.stat(eid)
        assert e.size_bytes == len(_raw(content))
        assert e.kind == ("text" if isinstance(content, str) else "binary")
        assert e.length == len(content)
        assert e.chars == (len(content) if isinstance(content, str) else None)


def test_entry_lines_counts_like_sed(loaded, files):
    for name, eid in loaded.ids.items():
        sed_count = int(_sed("-n", "$=", files[name]).strip() or 0)
        assert loaded.store.stat(eid).lines == sed_count == len(_lines(CORPUS[name])), name


# -- head, tail, range, byte_range ---------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_range_head_tail_slice_like_python(loaded, data):
    name = data.draw(st.sampled_from(sorted(loaded.ids)), label="name")
    content, eid, s = CORPUS[name], loaded.ids[name], loaded.store
    n = len(content)
    bound = st.integers(-n - 20, n + 20)
    start = data.draw(st.none() | bound, label="start")
    end = data.draw(st.none() | bound, label="end")
    assert s.range(eid, start, end) == content[start:end]
    assert s.range(eid, start) == content[start:]
    k = data.draw(st.integers(0, n + 20), label="k")
    assert s.head(eid, k) == content[:k]
    assert s.tail(eid, k) == content[max(0, n - k):]
    raw = _raw(content)
    b_start = data.draw(st.none() | st.integers(-len(raw) - 20, len(raw) + 20), label="b_start")
    b_end = data.draw(st.none() | st.integers(-len(raw) - 20, len(raw) + 20), label="b_end")
    assert s.byte_range(eid, b_start, b_end) == raw[b_start:b_end]


def test_head_and_tail_defaults(loaded):
    for name, eid in loaded.ids.items():
        content = CORPUS[name]
        assert loaded.store.head(eid) == content[:2000]
        assert loaded.store.tail(eid) == content[max(0, len(content) - 2000):]


@pytest.mark.parametrize(("config", "name"), _cases(["emoji-lines", "multibyte", "crlf"], ("small", "tiny", "small-nocache")))
def test_range_at_every_position(stores, config, name):
    """Every start position (with lengths 0 to 4), so every chunk boundary is crossed,
    including cuts inside long lines of multi-byte characters."""
    loaded = stores(config)
    content, eid, s = CORPUS[name], loaded.ids[name], loaded.store
    step = 1 if config == "tiny" else 3
    for start in range(0, len(content) + 2, step):
        k = start % 5
        assert s.range(eid, start, start + k) == content[start : start + k], (start, k)
    raw = _raw(content)
    for start in range(0, len(raw) + 2, 7):
        assert s.byte_range(eid, start, start + 6) == raw[start : start + 6]


def test_reads_reject_bad_arguments(loaded):
    s, eid = loaded.store, loaded.ids["crlf"]
    for call in (lambda: s.head(eid, -1), lambda: s.tail(eid, -1), lambda: s.range(eid, "0"),
                 lambda: s.range(eid, 0, 1.5), lambda: s.lines(eid, 0), lambda: s.lines(eid, 3, 0),
                 lambda: s.grep(eid, "x", before=1001), lambda: s.grep(eid, "x", max_matches=-1),
                 lambda: s.grep(eid, 42), lambda: s.head("nope"), lambda: s.byte_range(eid, True)):
        with pytest.raises(InvalidArgument):
            call()
    with pytest.raises(NotFound):
        s.tail("0000000000000000")


# -- stream ---------------------------------------------------------------------------------------


_op = st.one_of(
    st.tuples(st.just("read"), st.none() | st.integers(-1, 700), st.just(0)),
    st.tuples(st.just("seek"), st.integers(0, 1 << 16), st.just(io.SEEK_SET)),
    st.tuples(st.just("seek"), st.integers(-300, 300), st.sampled_from([io.SEEK_CUR, io.SEEK_END])),
    st.tuples(st.just("readline"), st.none() | st.integers(-1, 700), st.just(0)),
    st.tuples(st.just("readinto"), st.integers(0, 700), st.just(0)),
)


def _apply(fh, op):
    kind, arg, whence = op
    if kind == "seek":
        return fh.seek(arg, whence)
    if kind == "read":
        return fh.read(arg)
    if kind == "readline":
        return fh.readline(arg)
    buf = bytearray(arg)
    n = fh.readinto(buf)
    return n, bytes(buf[:n])


@SETTINGS
@given(data=st.data())
def test_stream_reads_like_bytesio(loaded, data):
    name = data.draw(st.sampled_from(sorted(loaded.ids)), label="name")
    raw = _raw(CORPUS[name])
    ops = data.draw(st.lists(_op, max_size=20), label="ops")
    with loaded.store.stream(loaded.ids[name]) as fh:
        model = io.BytesIO(raw)
        assert fh.readable() and fh.seekable() and not fh.writable()
        for op in ops:
            kind, arg, whence = op
            if kind == "seek" and whence != io.SEEK_SET and (model.tell() if whence == io.SEEK_CUR else len(raw)) + arg < 0:
                continue  # before the start: see test_stream_refuses_to_seek_before_the_start
            assert _apply(fh, op) == _apply(model, op), op
            assert fh.tell() == model.tell()


@SETTINGS
@given(data=st.data())
def test_stream_seek_then_read_to_the_end(loaded, data):
    name = data.draw(st.sampled_from(sorted(loaded.ids)), label="name")
    raw = _raw(CORPUS[name])
    pos = data.draw(st.integers(0, len(raw) + 10), label="pos")
    with loaded.store.stream(loaded.ids[name]) as fh:
        assert fh.seek(pos) == pos
        assert fh.read() == raw[pos:]
        assert fh.tell() == max(pos, len(raw))
        assert fh.read() == b""
        fh.seek(-min(len(raw), 5), io.SEEK_END)
        assert fh.read() == raw[len(raw) - min(len(raw), 5):]


def test_stream_iterates_lines_like_bytesio(loaded):
    for name in sorted(loaded.ids):  # every corpus entry, those of many chunks and long lines too
        with loaded.store.stream(loaded.ids[name]) as fh:
            assert list(fh) == list(io.BytesIO(_raw(CORPUS[name]))), name


def test_stream_seek_refuses_what_is_not_an_integer(loaded):
    with loaded.store.stream(loaded.ids["crlf"]) as fh:
        fh.seek(3)
        for bad in (1.5, float("nan"), "1", None, b"1"):
            with pytest.raises(InvalidArgument, match="offset must be an integer"):
                fh.seek(bad)
        assert fh.tell() == 3 and fh.read(2) == _raw(CORPUS["crlf"])[3:5]
        with pytest.raises(InvalidArgument, match="size must be an integer"):
            fh.readline(2.0)


@SETTINGS
@given(data=st.data())
def test_buffered_stream_reads_like_bytesio(loaded, data):
    """Wrapped in io.BufferedReader (which reads on until it has what was asked), the
    stream answers every seek/read/readline/readinto like BytesIO of the original."""
    name = data.draw(st.sampled_from(sorted(loaded.ids)), label="name")
    raw = _raw(CORPUS[name])
    ops = data.draw(st.lists(_op, max_size=20), label="ops")
    with io.BufferedReader(loaded.store.stream(loaded.ids[name]), buffer_size=97) as fh:
        model = io.BytesIO(raw)
        for op in ops:
            kind, arg, whence = op
            if kind == "seek" and whence != io.SEEK_SET and (model.tell() if whence == io.SEEK_CUR else len(raw)) + arg < 0:
                continue
            assert _apply(fh, op) == _apply(model, op), op
            assert fh.tell() == model.tell()


def test_stream_refuses_to_seek_before_the_start(loaded):
    with loaded.store.stream(loaded.ids["crlf"]) as fh:
        with pytest.raises(ValueError):
            fh.seek(-1)
        fh.seek(3)
        with pytest.raises(ValueError):
            fh.seek(-4, io.SEEK_CUR)


def test_iterating_a_streams_lines_reads_each_chunk_once_not_each_line(store_factory, monkeypatch):
    """Line by line, a stream opens a read transaction (a request, on a networked engine)
    only when it needs another chunk: 40,000 lines over a few chunks cost a few reads."""
    s = store_factory(cache_bytes=0)
    text = "".join(f"line {n} {'y' * (n % 40)}\n" for n in range(40_000))
    e = s.put(text)
    with s.engine.read() as txn:
        chunks = len(Manifest.unpack(chunk_list_blob(txn, bytes.fromhex(e.id))))
    opened = 0
    real = type(s.engine).read

    def counting(engine: Any) -> Any:
        nonlocal opened
        opened += 1
        return real(engine)

    monkeypatch.setattr(type(s.engine), "read", counting)
    with s.stream(e.id) as fh:
        assert list(fh) == [line.encode() for line in text.splitlines(keepends=True)]
    monkeypatch.undo()
    assert chunks > 1 and opened <= chunks + 1, (opened, chunks)


def test_stream_of_a_deleted_entry_raises_not_found(store_factory):
    s = store_factory(chunk_params=SMALL, cache_bytes=0)
    e = s.put(sample.log_text(10_000, 9))
    fh = s.stream(e.id)
    assert fh.read(10) == sample.log_text(10_000, 9)[:10].encode()
    s.delete(e.id)
    fh.seek(5000)
    with pytest.raises(NotFound):
        fh.read(10)
    with pytest.raises(NotFound):
        s.stream(e.id)


# -- lines ----------------------------------------------------------------------------------------


def _line_pairs(total: int) -> list[tuple[int, int]]:
    pairs = {(1, 1), (1, 3), (2, 2), (1, total + 5), (max(1, total), total + 1), (total + 1, total + 9),
             (max(1, total - 2), max(1, total)), (max(1, total // 2), max(1, total // 2 + 4))}
    return sorted(pairs)


def test_lines_equal_sed(loaded, files):
    for name, eid in loaded.ids.items():
        total = loaded.store.stat(eid).lines
        for first, last in _line_pairs(total):
            expected = _lines(_sed("-n", f"{first},{last}p", files[name]).decode("utf-8", "replace"))
            assert loaded.store.lines(eid, first, last) == expected == _lines(CORPUS[name])[first - 1 : last], (
                name, first, last)


@SETTINGS
@given(data=st.data())
def test_lines_equal_python_split(loaded, data):
    name = data.draw(st.sampled_from(sorted(loaded.ids)), label="name")
    lines = _lines(CORPUS[name])
    first = data.draw(st.integers(1, len(lines) + 3), label="first")
    last = data.draw(st.integers(first, first + 40), label="last")
    s, eid = loaded.store, loaded.ids[name]
    assert s.lines(eid, first, last) == lines[first - 1 : last]
    assert s.lines(eid, first) == lines[first - 1 :]


def test_lines_defaults_to_everything(loaded):
    for name, eid in loaded.ids.items():
        assert loaded.store.lines(eid) == _lines(CORPUS[name]), name


# -- grep and count: oracles ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pat:
    pattern: str
    ignore_case: bool = False
    fixed: bool = False

    def python(self) -> re.Pattern:
        return re.compile(re.escape(self.pattern) if self.fixed else self.pattern, re.IGNORECASE if self.ignore_case else 0)

    def python_bytes(self) -> re.Pattern:
        p = self.pattern.encode()
        return re.compile(re.escape(p) if self.fixed else p, re.IGNORECASE if self.ignore_case else 0)

    def rg_flags(self) -> list[str]:
        return (["-i"] if self.ignore_case else []) + (["-F"] if self.fixed else [])

    def kwargs(self) -> dict[str, bool]:
        return {"ignore_case": self.ignore_case, "fixed": self.fixed}


PATTERNS: dict[str, list[Pat]] = {
    "log": [Pat("ERROR"), Pat("error", ignore_case=True), Pat("timed out after [0-9]+ms"), Pat("^2023-11-1[45]T"),
            Pat("GET /api/v1/users/[0-9]+ (404|500)"), Pat("[kernel]", fixed=True), Pat("quota|crashed"),
            Pat("ms$"), Pat("req=[0-9a-f]{8} (GET|POST)"), Pat("no such thing anywhere")],
    "multibyte": [Pat("🚀launch"), Pat("ошибка"), Pat("caf."), Pat("[日数]据?"), Pat("zürich", ignore_case=True),
                  Pat("ΣΦΆΛΜΑ", ignore_case=True), Pat("𝔘𝔫𝔦", fixed=True), Pat("^000[0-9]+ ok")],
    "crlf": [Pat("ok$"), Pat("ok\r?$"), Pat("ERROR"), Pat("^0+1"), Pat("sd[36]"), Pat("ok\r", fixed=True)],
    "no-newline": [Pat("LAST-LINE-TOKEN$"), Pat("INFO"), Pat("token", ignore_case=True)],
    "newlines": [Pat("^$"), Pat("x")],
    "empty": [Pat("x"), Pat("^")],
    "one-char": [Pat("é"), Pat("É", ignore_case=True), Pat(".")],
    "emoji-lines": [Pat("🙂é"), Pat("日+"), Pat("a🙂", fixed=True), Pat("𝔘.a"), Pat("^[0-9]+ 🚀"), Pat("ü{2,}")],
    "binary": [Pat("[A-Z]{3}"), Pat("abc", ignore_case=True), Pat("[a-z]{2}[0-9]")],
    "minijson": [Pat("needs review"), Pat('"score":9[0-9]\\.'), Pat("日本語"), Pat('"active":false')],
}
ALL_PATTERNS = [(name, p) for name, pats in PATTERNS.items() for p in pats]


def _py_grep(content: str | bytes, pat: Pat) -> list[tuple[int, str, list[tuple[int, int]]]]:
    """(line number, line, character spans) of every matching line, by Python's re."""
    out = []
    if isinstance(content, str):
        rx = pat.python()
        for i, line in enumerate(_lines(content), 1):
            spans = [m.span() for m in rx.finditer(line)]
            if spans:
                out.append((i, line, spans))
        return out
    rx = pat.python_bytes()  # binary: match the bytes, show the line decoded with U+FFFD
    lines = content.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for i, line in enumerate(lines, 1):
        if rx.search(line):
            out.append((i, line.decode("utf-8", "replace"), []))
    return out


def _rg(rg: str, path: str, pat: Pat, *extra: str) -> tuple[dict[int, tuple[bytes, list[tuple[int, int]]]], set[int]]:
    """rg's matching lines {number: (line bytes, byte spans)} and its context line numbers."""
    proc = subprocess.run([rg, *_rg_base(), "--json", *pat.rg_flags(), *extra, "-e", pat.pattern, path],
                          capture_output=True)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    matches, context = {}, set()
    for row in proc.stdout.splitlines():
        event = json.loads(row)
        data = event["data"]
        if event["type"] == "match":
            lines = data["lines"]
            raw = lines["text"].encode() if "text" in lines else base64.b64decode(lines["bytes"])
            raw = raw[:-1] if raw.endswith(b"\n") else raw
            matches[data["line_number"]] = (raw, [(m["start"], m["end"]) for m in data["submatches"]])
        elif event["type"] == "context":
            context.add(data["line_number"])
    return matches, context


def _rg_base() -> list[str]:
    # -a: search binary files as text; -E none: raw bytes, so a leading \xff\xfe is not taken for a UTF-16 BOM
    return ["--no-config", "-a", "-E", "none"]


def _char_spans(line: bytes, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(len(line[:a].decode()), len(line[:b].decode())) for a, b in spans]


def _grep_all(s: blobpad.Store, eid: str, pat: Pat, **kw):
    return s.grep(eid, pat.pattern, max_matches=10**6, line_window=10**7, **pat.kwargs(), **kw)


# -- grep and count: tests ---------------------------------------------------------------------------


GREP_CASES = [(c, n, p) for c, n in _cases(PATTERNS) for p in PATTERNS[n]]


@pytest.mark.parametrize(("config", "name", "pat"), GREP_CASES, ids=[f"{c}-{n}:{p.pattern}" for c, n, p in GREP_CASES])
def test_grep_equals_python_re(stores, config, name, pat):
    loaded = stores(config)
    result = _grep_all(loaded.store, loaded.ids[name], pat)
    expected = _py_grep(CORPUS[name], pat)
    assert not result.truncated
    assert [(m.line, m.text) for m in result] == [(n, t) for n, t, _ in expected]
    if isinstance(CORPUS[name], str):
        assert [m.spans for m in result] == [sp for _, _, sp in expected]
        for m in result:
            assert m.offset == 0 and not m.clipped and m.line_chars == len(m.text)
    assert loaded.store.count(loaded.ids[name], pat.pattern, **pat.kwargs()) == len(expected)


@pytest.mark.parametrize(("name", "pat"), ALL_PATTERNS, ids=[f"{n}:{p.pattern}" for n, p in ALL_PATTERNS])
def test_grep_equals_ripgrep(stores, files, rg, name, pat):
    """Compared with rg on the store with small chunks (many boundaries); the other
    configurations are held to the same answers by test_grep_equals_python_re."""
    loaded = stores("small")
    s, eid = loaded.store, loaded.ids[name]
    rg_matches, _ = _rg(rg, files[name], pat)
    result = _grep_all(s, eid, pat)
    assert [m.line for m in result] == sorted(rg_matches)
    for m in result:
        raw, spans = rg_matches[m.line]
        assert m.text == raw.decode("utf-8", "replace")
        if isinstance(CORPUS[name], str):
            assert m.spans == _char_spans(raw, spans), m.line
    rg_count = subprocess.run([rg, *_rg_base(), "-c", *pat.rg_flags(), "-e", pat.pattern, files[name]],
                              capture_output=True, text=True)
    assert s.count(eid, pat.pattern, **pat.kwargs()) == int(rg_count.stdout.strip() or 0)


CONTEXT_CASES = [
    ("log", "ERROR", 2, 3), ("log", "crashed", 0, 1), ("crlf", "ERROR", 4, 0), ("newlines", "x", 5, 5),
    ("no-newline", "LAST-LINE-TOKEN", 2, 2), ("emoji-lines", "^1[0-9] ", 1, 1), ("multibyte", "ошибка", 3, 3),
]


@pytest.mark.parametrize(("config", "name", "pattern", "before", "after"),
                         [(c, *case) for c in CONFIGS for case in CONTEXT_CASES if case[0] in _names(c)])
def test_grep_context_lines(stores, config, name, pattern, before, after):
    loaded = stores(config)
    s, eid = loaded.store, loaded.ids[name]
    lines = _lines(CORPUS[name])
    result = s.grep(eid, pattern, before=before, after=after, max_matches=10**6, line_window=10**7)
    expected = [n for n, _, _ in _py_grep(CORPUS[name], Pat(pattern))]
    assert [m.line for m in result] == expected and expected
    for m in result:
        lo, hi = max(1, m.line - before), min(len(lines), m.line + after)
        assert m.before == [(k, lines[k - 1]) for k in range(lo, m.line)]
        assert m.after == [(k, lines[k - 1]) for k in range(m.line + 1, hi + 1)]


@pytest.mark.parametrize(("name", "pattern", "before", "after"), CONTEXT_CASES)
def test_grep_context_lines_equal_ripgrep(stores, files, rg, name, pattern, before, after):
    """The lines shown (matches and their context) are the lines rg -B/-A/-C shows."""
    loaded = stores("small")
    result = loaded.store.grep(loaded.ids[name], pattern, before=before, after=after, max_matches=10**6)
    shown = {m.line for m in result} | {k for m in result for k, _ in m.before + m.after}
    extra = ["-C", str(before)] if before == after else ["-B", str(before), "-A", str(after)]
    rg_matches, rg_context = _rg(rg, files[name], Pat(pattern), *extra)
    assert {m.line for m in result} == set(rg_matches)
    assert shown == set(rg_matches) | rg_context


def test_grep_context_lines_are_clipped_to_the_window(store_factory):
    s = store_factory(chunk_params=SMALL)
    content = "short\n" + "x" * 5000 + "\nmatch here\n" + "y" * 5000 + "\n"
    m = s.grep(s.put(content).id, "match", before=1, after=1, line_window=100).matches[0]
    assert m.before == [(2, "x" * 100)] and m.after == [(4, "y" * 100)]


MAX_MATCHES = {"0": lambda total: 0, "1": lambda total: 1, "7": lambda total: 7, "total-1": lambda total: total - 1,
               "total": lambda total: total, "total+1": lambda total: total + 1}


@pytest.mark.parametrize("k_of", list(MAX_MATCHES))
def test_grep_max_matches_and_truncated(loaded, k_of):
    s, eid = loaded.store, loaded.ids["crlf"]
    expected = _py_grep(CORPUS["crlf"], Pat("ERROR"))
    total = len(expected)
    k = MAX_MATCHES[k_of](total)
    result = s.grep(eid, "ERROR", max_matches=k)
    assert [(m.line, m.text) for m in result] == [(n, t) for n, t, _ in expected[:k]]
    assert result.truncated == (total > k)
    assert len(result) == min(k, total)


def test_grep_empty_matches_on_multibyte_lines(loaded):
    """Patterns that can match the empty string give character spans, like Python's re."""
    for name in ("one-char", "emoji-lines", "multibyte"):
        for pat in (Pat("x*"), Pat("é?"), Pat("(🙂|)")):
            result = _grep_all(loaded.store, loaded.ids[name], pat)
            expected = _py_grep(CORPUS[name], pat)
            assert [m.line for m in result] == [n for n, _, _ in expected]
            for m, (_, line, spans) in zip(result, expected, strict=True):
                assert m.text == line
                assert m.spans == spans[:1000]


@pytest.mark.parametrize("pattern", [r"\C", r"\C$", r"é\C", r"x|(\C)", r"\\\C", r"\Q.\E\C"])
def test_a_pattern_with_any_byte_is_refused_everywhere(store, pattern):
    """RE2's ``\\C`` matches one byte: part of a character, or a line's newline (``é\\C``
    matched across lines).  grep reports characters within lines, and rg refuses it too,
    so every search refuses it with the reason, where grep used to fail decoding half a
    character; as a literal (``fixed``) or quoted it is two characters like any other."""
    text = "é\na\\Cé🙂b\nplain\n"
    e = store.put(text, session="s", name="multi")
    calls = [
        lambda: store.grep(e.id, pattern), lambda: store.count(e.id, pattern),
        lambda: store.matching_lines(e.id, pattern), lambda: store.grep_session("s", pattern),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument, match=r"\\C \(any single byte\) is not supported"):
            call()
    answer = blobpad.Toolbox(store, session="s", scope="session").call(
        "scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": pattern})
    assert not answer["ok"] and "any single byte" in answer["error"]
    assert [m.line for m in store.grep(e.id, "\\C", fixed=True)] == [2]
    assert [m.line for m in store.grep(e.id, r"\Qa\C\E")] == [2]
    assert [m.line for m in store.grep(e.id, r"a\\C")] == [2]


@pytest.mark.parametrize("flag", ["ignore_case", "fixed"])
@pytest.mark.parametrize("bad", ["yes", 1, 0, None, [True]])
def test_search_flags_are_true_or_false(store, flag, bad):
    """grep, matching_lines, count and grep_session check their flags alike: 1, "yes" or
    None is refused (grep and count took any value for its truth)."""
    e = store.put("Alpha\nbeta\n", session="s")
    calls = [
        lambda kw: store.grep(e.id, "alpha", **kw), lambda kw: store.count(e.id, "alpha", **kw),
        lambda kw: store.matching_lines(e.id, "alpha", **kw), lambda kw: store.grep_session("s", "alpha", **kw),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument, match=rf"{flag} must be True or False, not"):
            call({flag: bad})
    assert store.count(e.id, "alpha", **{flag: True}) == (1 if flag == "ignore_case" else 0)


@pytest.mark.parametrize("pattern", ["(", "a{2,1}", "(?<=a)b", "(a)\\1", "a**", "[z-a]"])
def test_invalid_regex_is_invalid_argument_with_re2_reason(loaded, pattern):
    options = re2.Options()
    options.log_errors = False
    with pytest.raises(re2.error) as raw:
        re2.compile(pattern, options)
    reason = raw.value.args[0]
    reason = reason.decode() if isinstance(reason, bytes) else str(reason)
    eid = loaded.ids["crlf"]
    for call in (lambda: loaded.store.grep(eid, pattern), lambda: loaded.store.count(eid, pattern)):
        with pytest.raises(InvalidArgument) as err:
            call()
        assert isinstance(err.value, ValueError)
        assert reason in str(err.value)
        assert "fixed=True" in str(err.value)  # says what to do
    assert loaded.store.count(eid, pattern, fixed=True) == 0  # the same text as a literal is fine


@pytest.mark.parametrize(("pattern", "fixed"), [
    ("ERROR\nat", False), ("ERROR\nat", True), (r"ERROR\nat", False), (r"[\n]", False), (r"\x0a", False),
    (r"x\x0Ab", False), (r"\x{0a}", False), (r"\012", False), (r"\12", False), (r"\Qa\E\n", False),
])
def test_a_pattern_naming_a_line_break_is_refused_not_matched_silently(store, pattern, fixed):
    """A match never spans lines (as with rg, which refuses these too), so a pattern naming a
    line break could match nothing: grep, count, matching_lines and grep_session said "no match"
    (a model concludes the text is absent); each now says why and what to do."""
    e = store.put("ERROR\nat main.py:3\nback\\nslash\n", session="s")
    calls = [lambda: store.grep(e.id, pattern, fixed=fixed), lambda: store.count(e.id, pattern, fixed=fixed),
             lambda: store.matching_lines(e.id, pattern, fixed=fixed),
             lambda: store.grep_session("s", pattern, fixed=fixed)]
    for call in calls:
        with pytest.raises(InvalidArgument, match="holds a line break.*never spans lines"):
            call()


@pytest.mark.parametrize("pattern", [
    r"[^\x00-\x09\x0b-\x{10ffff}]", r"ERROR[^\x00-\x09\x0b-\x{10ffff}]at", r"(?i)x(?:[^\x00-\x09\x0b-\x{10ffff}])+",
    r"[^\x00-\x{10ffff}]", r"a[^\x00-\x09\x0b-\x{10ffff}]{2}|[^\x00-\x09\x0b-\x{10ffff}]",
])
def test_a_pattern_that_can_match_nothing_in_a_line_is_refused(store, pattern):
    """Whatever syntax names it: a class whose one character is the newline (no escape of it in the
    text of the pattern), or one holding no character at all.  Python's re, run on each line, is the
    oracle that these match nothing; grep said "no match" where it now says why."""
    text = "ERROR\nat main.py:3\nxx\n"
    e = store.put(text, session="s")
    oracle = re.compile(pattern.replace(r"\x{10ffff}", "\U0010ffff").replace("(?i)", ""), re.I if "(?i)" in pattern else 0)
    assert not any(oracle.search(line) for line in text.split("\n"))
    calls = [lambda: store.grep(e.id, pattern), lambda: store.count(e.id, pattern),
             lambda: store.matching_lines(e.id, pattern), lambda: store.grep_session("s", pattern)]
    for call in calls:
        with pytest.raises(InvalidArgument, match="can never match.*never spans lines"):
            call()
    assert store.count(e.id, r"a|[^\x00-\x09\x0b-\x{10ffff}]") == sum("a" in line for line in text.split("\n"))

@pytest.mark.parametrize(("pattern", "fixed"), [
    (r"back\\nslash", False), (r"back\nslash", True), (r"\Q\n\E", False), (r"\123", False), (r"\x{1a}", False),
])
def test_a_backslash_before_an_n_that_is_no_line_break_is_searched(store, pattern, fixed):
    """An escaped backslash before an ``n``, a literal backslash-n, text quoted by \\Q..\\E and other
    escapes are no line break: they are searched as they are (Python's re is the oracle)."""
    text = "ERROR\nat main.py:3\nback\\nslash S \x1a\n"
    e = store.put(text, session="s")
    oracle = re.compile(re.escape(pattern) if fixed else pattern.replace(r"\Q\n\E", r"\\n").replace(r"\x{1a}", r"\x1a"))
    want = [n for n, line in enumerate(text.splitlines(), 1) if oracle.search(line)]
    assert want and [m.line for m in store.grep(e.id, pattern, fixed=fixed)] == want
    assert store.count(e.id, pattern, fixed=fixed) == len(want)


@pytest.mark.parametrize("pattern", [
    r"[\pL\pN]{1000}[\pL\pN]{1000}", r"\pL{1000}", r"(?i)\p{Greek}{999}\p{Greek}{999}", r"a|[\pL\pN]{1000}",
    r"(?:\pL{100}){10}", r"\pL{56}",
])
def test_a_pattern_too_large_to_compile_is_refused_before_it_is_built(store, pattern, monkeypatch):
    """A short pattern can make RE2 build millions of instructions (seconds holding the GIL, every thread
    of the process waiting): such a pattern is refused by a compile capped small, and is never compiled
    with the full memory (the spy sees no such compile), on every search path and in the tools."""
    e = store.put("alpha\n" + "b" * 40 + "\n", session="s")
    built = []
    compile_ = re2.compile
    monkeypatch.setattr(re2, "compile", lambda raw, options=None: built.append(raw) or compile_(raw, options))
    calls = [lambda: store.grep(e.id, pattern), lambda: store.count(e.id, pattern),
             lambda: store.matching_lines(e.id, pattern), lambda: store.grep_session("s", pattern)]
    for call in calls:
        with pytest.raises(InvalidArgument, match="too large to compile"):
            call()
    tb = blobpad.Toolbox(store, session="s", scope="session")
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": pattern})
    assert not r["ok"] and "too large to compile" in r["error"]
    assert built == []
    # a large class repeated a few times is fine, and matches as Python's re does (ASCII letters here)
    assert [m.line for m in store.grep(e.id, r"\pL{30}")] == [
        n for n, line in enumerate(["alpha", "b" * 40], 1) if re.search("[A-Za-z]{30}", line)] == [2]


#: byte sequences UTF-8 forbids that RE2 alone reads as one character (search._LAX_UTF8), and others it refuses
_LAX = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xe0\x80\xaf", b"\xe0\x9f\xbf", b"\xf0\x80\x80\xaf", b"\xf0\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80", b"\xf4\xbf\xbf\xbf", b"\xc0\xaf", b"\xf5\x80\x80\x80", b"\xff"]


@pytest.mark.parametrize("pattern", [
    ".", "^.$", "^.X", "[^a]", r"\W", ".{3}", "X.*X", r"[\x{D7FF}-\x{E000}]", r"\pL", "^y*.y*$", "^y+[^y]",
])
def test_binary_content_never_matches_a_character_where_utf8_has_none(store_factory, rg, tmp_path, pattern):
    """RE2 reads an encoded surrogate, an overlong three- or four-byte form and a code point past
    U+10FFFF as one character each; rg, and the text decoded with "replace", see invalid bytes. grep,
    count and matching_lines of a binary entry agree with ``rg -n -a`` (line numbers and counts), with
    each sequence alone on a line, between letters, and in long lines of many chunks (the chunker never
    cuts inside one: it moves a cut off continuation bytes)."""
    params = blobpad.ChunkParams(min_size=64, avg_extra=32, max_size=256)
    longs = []
    for i in range(12):
        line = bytearray(b"y" * 700)
        seq = _LAX[i % 8]
        line[250 + 7 * i:250 + 7 * i + len(seq)] = seq
        longs.append(bytes(line))
    head = [*_LAX, *(b"X" + seq + b"X" for seq in _LAX), b"ok", b"a" + b"".join(_LAX) + b"b"]
    content = b"\n".join([*head, *longs]) + b"\n"
    path = tmp_path / "binary.log"
    path.write_bytes(content)
    s = store_factory(chunk_params=params)
    e = s.put(content, session="s")
    assert e.kind == "binary" and e.chunks > 10
    want, _ = _rg(rg, str(path), Pat(pattern))
    assert [m.line for m in s.grep(e.id, pattern, max_matches=10**6)] == sorted(want)
    assert s.count(e.id, pattern) == len(want)
    assert s.matching_lines(e.id, pattern).numbers == sorted(want)
    assert [m.line for m in s.grep_session("s", pattern).matches] == sorted(want)


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)*b", "(a*)*b", "^(a|a?)+$", "(x+x+)+y"])
def test_catastrophic_patterns_finish(store, pattern):
    text = "a" * (1 << 20)
    e = store.put(text + "\n" + "a" * 12 + "\n")
    result = store.grep(e.id, pattern)
    expected = _py_grep("a" * 12 + "\n", Pat(pattern))  # Python's re survives the short line only
    matches_long = bool(re2.search(pattern, text))
    assert [m.line for m in result] == ([1] if matches_long else []) + [n + 1 for n, _, _ in expected]
    assert store.count(e.id, pattern) == len(result)
    for m in result:
        assert len(m.text) <= 2000


@functools.cache
def _big_json() -> str:
    return sample.minified_json(10 << 20, seed=11)


def test_grep_in_a_10mb_single_line_returns_a_bounded_window(store):
    doc = _big_json()
    e = store.put(doc)
    assert e.lines == 1 and e.chars == len(doc)
    last_id = '"id":' + str(json.loads(doc)["count"] - 1) + ","
    for needle, window in (("needs review", 2000), ("日本語のメモ", 2000), (last_id, 2000), ("needs review", 100)):
        result = store.grep(e.id, needle, fixed=True, max_matches=1, line_window=window)
        assert len(result) == 1 and result.truncated is False
        m = result.matches[0]
        assert m.line == 1 and m.line_chars == len(doc) and m.clipped
        assert len(m.text) <= window
        assert doc[m.offset : m.offset + len(m.text)] == m.text
        first = doc.index(needle)
        s0, e0 = m.spans[0]
        assert m.offset + s0 == first and m.text[s0:e0] == needle
        for a, b in m.spans:
            assert 0 <= a <= b <= len(m.text) and doc[m.offset + a : m.offset + b] == needle[: b - a]
    assert store.count(e.id, "needs review") == 1
    assert store.count(e.id, "not in the document") == 0


def test_grep_long_lines_are_cut_around_the_first_match(store_factory):
    s = store_factory(chunk_params=SMALL)
    line = "é" * 3000 + "NEEDLE" + "ü" * 3000 + "NEEDLE" + "z" * 10
    e = s.put("first\n" + line + "\nlast\n")
    m = s.grep(e.id, "NEEDLE", line_window=200).matches[0]
    assert m.line == 2 and m.line_chars == len(line) and len(m.text) <= 200
    assert line[m.offset : m.offset + len(m.text)] == m.text
    assert m.text[m.spans[0][0] : m.spans[0][1]] == "NEEDLE" and m.offset + m.spans[0][0] == 3000


def test_grep_and_count_on_empty_content(store):
    e = store.put("")
    assert store.grep(e.id, "^").matches == [] and store.count(e.id, "^") == 0
    assert store.get(e.id) == "" and store.lines(e.id) == [] and store.head(e.id) == "" and store.tail(e.id) == ""
    assert store.range(e.id, -5, 5) == "" and store.byte_range(e.id, 0) == b""
    with store.stream(e.id) as fh:
        assert fh.read() == b""


def test_count_on_random_patterns_equals_python(loaded):
    rnd = random.Random(7)
    words = ["ERROR", "INFO", "GET", "POST", "timed", "quota", "ok", "🙂", "é", "日", "data", "x", "z"]
    for name, eid in loaded.ids.items():
        content = CORPUS[name]
        if not isinstance(content, str):
            continue
        for _ in range(6):
            pat = Pat("|".join(rnd.sample(words, rnd.randint(1, 3))), ignore_case=rnd.random() < 0.3)
            assert loaded.store.count(eid, pat.pattern, **pat.kwargs()) == len(_py_grep(content, pat)), (name, pat)


@pytest.mark.parametrize(("pattern", "literal"), [
    (r"\Qa.b", "a.b"), (r"\Qa.b\E", "a.b"), (r"\Q(x\E|y", None), ("(?i)ERROR", None), (r"\x41\.", "A."), ("a|", None),
])
def test_count_accepts_every_pattern_grep_accepts(store_factory, pattern, literal):
    """count() and grep() take the same RE2 syntax (\\Q...\\E quoting included) and agree."""
    s = store_factory(chunk_params=SMALL)
    content = "a.b here\nazb\nA. error\n(x and y\nnothing\n\nERROR a.b\n"
    e = s.put(content)
    lines = [m.line for m in s.grep(e.id, pattern, max_matches=100)]
    assert s.count(e.id, pattern) == len(lines)
    if literal is not None:
        assert lines == [n for n, line in enumerate(_lines(content), 1) if literal in line]


def test_count_on_binary_lines_counts_each_line_once(store):
    content = b"ABC\xff ABC\nxyz\n\xfe\xffDEF GHI\xc3\n"
    e = store.put(content)
    assert e.kind == "binary"
    assert len(_py_grep(content, Pat("[A-Z]{3}"))) == 2  # as rg -c -a says too
    assert [m.line for m in store.grep(e.id, "[A-Z]{3}")] == [1, 3]
    assert store.count(e.id, "[A-Z]{3}") == 2


# -- what a read decompresses -------------------------------------------------------


class _Counting:
    """How many chunks ``store`` decompressed since this was made (``calls[0]``, read live)."""

    def __init__(self, store: blobpad.Store) -> None:
        self._store = store
        self._start = store.codec.decompressed

    def __getitem__(self, i: int) -> int:
        assert i == 0
        return self._store.codec.decompressed - self._start

    def __setitem__(self, i: int, value: int) -> None:  # calls[0] = 0 starts counting again
        assert i == 0 and value == 0
        self._start = self._store.codec.decompressed


def _counting(store: blobpad.Store) -> _Counting:
    """Count the chunks ``store`` decompresses (every read path goes through the codec)."""
    return _Counting(store)


def _settle(store: blobpad.Store) -> None:
    """Wait for read-ahead a finished read left running on the worker pool (a grep that
    stopped early cancels the tasks not yet started; those running finish), so that the
    next count belongs to the next read alone."""
    store.codec.settle()


def _slice_reads(s: blobpad.Store, e: blobpad.Entry, text: str) -> dict:
    """name -> (the read, what slicing the original gives), around the middle of ``e``."""
    lines = text.split("\n")
    raw = text.encode()
    mid_c, mid_b, mid_l = e.chars // 2, e.size_bytes // 2, e.lines // 2
    return {
        "head": (lambda: s.head(e.id, 2000), text[:2000]),
        "tail": (lambda: s.tail(e.id, 2000), text[-2000:]),
        "range": (lambda: s.range(e.id, mid_c, mid_c + 2000), text[mid_c : mid_c + 2000]),
        "byte_range": (lambda: s.byte_range(e.id, mid_b, mid_b + 2000), raw[mid_b : mid_b + 2000]),
        "lines": (lambda: s.lines(e.id, mid_l, mid_l + 99), lines[mid_l - 1 : mid_l + 99]),
        "stream": (lambda: _seek_read(s.stream(e.id), mid_b, 2000), raw[mid_b : mid_b + 2000]),
        "grep first 5": (
            lambda: [m.line for m in s.grep(e.id, "INFO", max_matches=5).matches],
            [i + 1 for i, t in enumerate(lines) if "INFO" in t][:5],
        ),
    }


def test_slice_reads_decompress_only_the_chunks_that_hold_the_answer(store_factory):
    """The same reads on a 2 MB and a 16 MB entry (cache off) decompress the same few
    chunks, and give what slicing the original gives; reading everything decompresses all."""
    s = store_factory(cache_bytes=0, filters=True)
    calls = _counting(s)
    seen: dict[str, list[int]] = {}
    for size in (2_000_000, 16_000_000):
        text = sample.log_text(size, 11)
        e = s.put(text)
        assert e.chunks >= size // (256 << 10)
        for name, (read, want) in _slice_reads(s, e, text).items():
            calls[0] = 0
            assert read() == want, name
            _settle(s)
            seen.setdefault(name, []).append(calls[0])
        calls[0] = 0
        assert s.count(e.id, "z[0-9]{30}z") == 0 and calls[0] == e.chunks  # a full scan reads every chunk
        calls[0] = 0
        assert s.count(e.id, "zz-absent-zz") == 0 and calls[0] == 0  # the chunk filters exclude every chunk
    for name, (small, big) in seen.items():
        # a slice may straddle one cut; grep stops after its first task plus two read-ahead tasks of <= 256 KB
        limit = 2 if name != "grep first 5" else 16
        assert small <= limit and big <= limit, (name, seen)


def _seek_read(f, pos: int, n: int) -> bytes:
    f.seek(pos)
    return f.read(n)


def test_the_chunk_cache_saves_decompressing_the_same_region_again(store_factory):
    text = sample.log_text(3_000_000, 12)
    lines = text.split("\n")
    for cache_bytes in (64 << 20, 0):
        s = store_factory(f"cache-{cache_bytes}", cache_bytes=cache_bytes)
        e = s.put(text)
        calls = _counting(s)
        mid = e.lines // 2
        assert s.lines(e.id, mid, mid + 20) == lines[mid - 1 : mid + 20]
        assert calls[0] >= 1
        calls[0] = 0
        assert s.lines(e.id, mid + 5, mid + 10) == lines[mid + 4 : mid + 10]  # the same chunk again
        assert calls[0] == (0 if cache_bytes else 1)


# -- cancellation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [None, 60.0])
def test_a_cancelled_search_stops_as_if_its_budget_ran_out(store, timeout):
    """Searches started inside ``cancel_on(event)`` stop once the event is set (the MCP
    server sets it for a request the client cancelled); without it they run to the end."""
    import threading

    from blobpad.search import cancel_on

    text = sample.log_text(6 << 20, seed=4)  # over rgscan's 4 MiB: counts and listings go through rg
    e = store.put(text, session="s")
    lines = text.count("\n")
    event = threading.Event()
    searches = {
        # patterns whose chunks the filters cannot rule out: every chunk is read
        "grep": lambda: store.grep(e.id, r"[a-z]{60}", timeout=timeout),
        "count": lambda: store.count(e.id, "ERROR", timeout=timeout),
        "matching_lines": lambda: store.matching_lines(e.id, "ERROR", timeout=timeout),
        "grep_session": lambda: store.grep_session("s", r"[a-z]{60}", timeout=timeout),
    }
    with cancel_on(event):
        whole = {name: run() for name, run in searches.items()}  # not cancelled: the whole entry
        event.set()
        cut = {name: run() for name, run in searches.items()}
    for name in searches:
        assert not whole[name].timed_out and cut[name].timed_out, name
    for name in ("grep", "count", "matching_lines"):
        assert whole[name].searched_lines is None and cut[name].searched_lines < lines, name
    assert int(cut["count"]) < int(whole["count"]) == sum("ERROR" in line for line in text.splitlines())
    assert not store.grep(e.id, r"[a-z]{60}", timeout=timeout).timed_out  # outside the block: not cancelled


# -- matches that can be empty, in text of many-byte characters ----------------------------------

_WIDE_LINES = ["aé", "é", "béb", "日本語", "aéb c", "x", "éx", "ÿÿ x", "é é", "ab", "😀a😀"]
#: patterns that can match the empty string: RE2 searches bytes, so each could match between two
#: bytes of one character (\B did: ASCII-only, it holds between the bytes of é)
_EMPTY_CAPABLE = [r"\B", r"x*", r"^", r"$", r"\B$", r"^\B", "", r"é*", r"\Bx?", r"a*\B"]


def _ascii_spans(pattern: str, line: str) -> list[tuple[int, int]]:
    """Python's re.finditer spans with ASCII \\b, \\B (RE2's, as the README says)."""
    return [m.span() for m in re.finditer(pattern, line, re.ASCII)]


@pytest.mark.parametrize("pattern", _EMPTY_CAPABLE)
def test_a_match_that_can_be_empty_never_falls_inside_a_character(store, pattern):
    """grep, count, matching_lines and grep_session of a pattern that can match the empty
    string agree with Python's re (ASCII \\b and \\B, as RE2's): spans between characters
    only, the same lines everywhere (grep raised UnicodeDecodeError where \\B matched inside
    é, and counted lines grep could not show); on a line longer than 1 MiB too, whose first
    empty match was listed twice."""
    text = "\n".join(_WIDE_LINES) + "\n"
    e = store.put(text, session="s")
    hits = [i + 1 for i, line in enumerate(_WIDE_LINES) if _ascii_spans(pattern, line)]
    g = store.grep(e.id, pattern, max_matches=1000)
    assert [m.line for m in g.matches] == hits
    for m in g.matches:
        assert m.spans == _ascii_spans(pattern, _WIDE_LINES[m.line - 1])
    assert store.count(e.id, pattern) == len(hits)
    assert store.matching_lines(e.id, pattern).lines == [(n, _WIDE_LINES[n - 1]) for n in hits]
    assert [m.line for m in store.grep_session("s", pattern, max_matches=1000).matches] == hits
    long_line = "aé" * 600_000  # over 1 MiB: its window is read through the view
    big = store.put(long_line + "\n", session="t")
    found = store.grep(big.id, pattern, line_window=40)
    window = found.matches[0] if found.matches else None
    spans = []
    for m in re.finditer(pattern, long_line, re.ASCII):
        edge = window.offset + 40 if window is not None else 0
        if window is None or m.start() > edge or m.start() == edge < len(long_line):  # an empty match at the end shows
            break
        if m.start() >= window.offset:
            spans.append((m.start() - window.offset, min(m.end(), window.offset + 40) - window.offset))
    if window is None:
        assert spans == [] and store.count(big.id, pattern) == 0
    else:
        assert window.spans == spans and store.count(big.id, pattern) == 1


def test_a_literal_holding_a_line_break_is_not_told_to_pass_fixed(store):
    """The refusal of a pattern naming a line break advises fixed=True for a regex (a literal
    backslash-n), never for a pattern that was a literal already."""
    e = store.put("a\nb\n", session="s")
    with pytest.raises(InvalidArgument) as literal:
        store.grep(e.id, "a\nb", fixed=True)
    assert "line break" in str(literal.value) and "fixed" not in str(literal.value)
    with pytest.raises(InvalidArgument) as regex:
        store.grep(e.id, r"a\nb")
    assert "fixed=True" in str(regex.value)


def _binary_log(size: int) -> bytes:
    """A log of about ``size`` bytes whose every 7th line holds a byte that is not UTF-8."""
    rows = sample.log_text(size, 11).encode().split(b"\n")
    return b"\n".join(row + b" \xff\xfe" if i % 7 == 0 else row for i, row in enumerate(rows))


@pytest.mark.parametrize("kind", ["text", "binary"])
@pytest.mark.parametrize("pattern", ["ERROR", r"\d{3}", "^", "absent_token_zz"])
def test_matching_lines_hands_its_lines_on_in_bounded_batches(store, monkeypatch, kind, pattern):
    """``matching_lines(on_lines=...)``: the lines come in order, a batch at a time, none kept,
    the same as those the result holds without it (a literal on a large text entry through
    ``rg``, the others in process; with and without a time budget), and no batch holds more
    than a few MB whatever matches: a grep of every line of a large log needs no more memory
    than a batch."""
    from blobpad import rgscan

    spied: list[int] = []
    real_scan = rgscan.scan
    monkeypatch.setattr(rgscan, "scan", lambda *a, **kw: spied.append(1) or real_scan(*a, **kw))
    content: str | bytes = sample.log_text(12 << 20, 11) if kind == "text" else _binary_log(3 << 20)
    e = store.put(content, session="s")
    raw = content if isinstance(content, bytes) else content.encode()
    rows = raw.removesuffix(b"\n").split(b"\n")  # the lines, as rg -n numbers them
    expected = [(n, row.decode("utf-8", "replace")) for n, row in enumerate(rows, 1)
                if re.search(pattern.encode(), row)]
    for timeout in (None, 600):
        kept = store.matching_lines(e.id, pattern, timeout=timeout)
        assert kept.lines == expected and kept.found == len(expected)
        batches: list[tuple[list[int], list[str]]] = []
        handed = store.matching_lines(e.id, pattern, timeout=timeout,
                                      on_lines=lambda numbers, texts, into=batches: into.append((numbers, texts)))
        assert handed.lines == [] and handed.found == len(expected) and not handed.timed_out
        got = [pair for numbers, texts in batches for pair in zip(numbers, texts, strict=True)]
        assert got == expected
        assert all(numbers and sum(map(len, texts)) <= 16 << 20 for numbers, texts in batches)
        if pattern == "^":
            assert len(batches) > 1  # every line of 12 MB: never one batch of all of them
    assert bool(spied) == (kind == "text" and pattern in ("ERROR", "absent_token_zz"))  # rg where it applies


@pytest.mark.parametrize("pattern", ["ERROR", r"E\w+R"])  # through rg, and in process
def test_what_on_lines_raises_ends_the_search_and_the_store_goes_on(store, pattern):
    """An exception of ``on_lines`` propagates (through ``rg``'s path too, not swallowed into
    a search in process); one that uses the store inside it is told why it cannot; the store
    answers as before afterwards."""
    text = sample.log_text(6 << 20, 4)
    e = store.put(text, session="s")

    class Stop(Exception):
        pass

    def stop(numbers: list[int], texts: list[str]) -> None:
        raise Stop

    with pytest.raises(Stop):
        store.matching_lines(e.id, pattern, on_lines=stop)
    with pytest.raises(blobpad.BlobpadError, match="such as matching_lines' on_lines, used the store"):
        store.matching_lines(e.id, pattern, on_lines=lambda numbers, texts: store.stat(e.id))
    with pytest.raises(InvalidArgument, match="on_lines must be a function"):
        store.matching_lines(e.id, pattern, on_lines="print")  # type: ignore[arg-type]
    assert store.count(e.id, pattern) == len(store.matching_lines(e.id, pattern)) > 0
    assert store.stat(e.id).size_bytes == len(text.encode())


@pytest.mark.parametrize("pattern", ["ERROR", r"\d+ms", "absent_zz"])
def test_grep_skip_passes_over_matches_by_their_numbers(store, pattern):
    """``grep(skip=N)``: the matches after the first N, as a grep of them all gives them (text,
    spans, context), and the numbers of the N passed over in ``skipped``; ``truncated`` as
    for the matches past them; a skip past every match gives none."""
    text = sample.log_text(300_000, 8)
    e = store.put(text, session="s")
    every = [n for n, row in enumerate(text.removesuffix("\n").split("\n"), 1) if re.search(pattern, row)]
    whole = store.grep(e.id, pattern, max_matches=10**6, before=1, after=2)
    assert [m.line for m in whole] == every and whole.skipped == []
    for skip, limit in [(0, 5), (3, 4), (max(0, len(every) - 2), 10), (len(every), 3), (len(every) + 5, 3)]:
        page = store.grep(e.id, pattern, skip=skip, max_matches=limit, before=1, after=2)
        assert page.skipped == every[:skip]
        assert [m.to_dict() for m in page] == [m.to_dict() for m in whole.matches[skip : skip + limit]]
        assert page.truncated == (len(every) > skip + limit)
    with pytest.raises(InvalidArgument, match="skip"):
        store.grep(e.id, pattern, skip=-1)


@pytest.mark.parametrize("pattern", ["ERROR", r"caf.", "."])
def test_matching_lines_as_bytes_gives_each_lines_own_bytes(store, pattern):
    """``matching_lines(as_bytes=True)``: each line's own bytes, as ``rg -n -a`` prints them:
    those of a binary entry that are not UTF-8 as they are (the text shows U+FFFD), those of a
    text entry its UTF-8 (a large one through ``rg``), kept or handed to ``on_lines``.  The CLI
    printed a binary entry's lines by reading each again (47 s for 236,000 lines)."""
    rows = sample.log_text(6 << 20, 9).encode().removesuffix(b"\n").split(b"\n")
    binary = b"\n".join(row + b" caf\xe9 \xff" if i % 5 == 0 else row for i, row in enumerate(rows[:20_000])) + b"\n"
    for content in (binary, b"\n".join(rows) + b"\n"):
        e = store.put(content, session="s", kind="binary" if content is binary else None)
        lines = content.removesuffix(b"\n").split(b"\n")
        as_text = store.matching_lines(e.id, pattern)  # which lines match: tested against rg elsewhere
        expected = [(n, lines[n - 1]) for n in as_text.numbers]
        assert expected and (content is not binary or any(b"\xff" in row for _, row in expected))
        kept = store.matching_lines(e.id, pattern, as_bytes=True)
        assert kept.lines == expected and kept.found == len(expected)
        batches: list[tuple[int, bytes]] = []
        handed = store.matching_lines(e.id, pattern, as_bytes=True,
                                      on_lines=lambda numbers, texts, into=batches: into.extend(zip(numbers, texts, strict=True)))
        assert batches == expected and handed.found == len(expected) and handed.lines == []
        assert [(n, t.decode("utf-8", "replace")) for n, t in expected] == as_text.lines


@pytest.mark.parametrize("pattern", ["ERROR", r"\d+ms", "absent_zz"])
def test_grep_start_line_searches_from_that_line_on(store, pattern):
    """``grep(start_line=L)``: the matches at line L and after, as a grep of them all gives
    them (context still reaching before L), read from the chunk that holds L; pages that each
    start after the last match of the one before give every match once."""
    text = sample.log_text(300_000, 12)
    e = store.put(text, session="s")
    whole = store.grep(e.id, pattern, max_matches=10**6, before=2, after=1)
    total = store.stat(e.id).lines
    for start in (1, 2, total // 3, total, total + 5):
        part = store.grep(e.id, pattern, max_matches=10**6, before=2, after=1, start_line=start)
        assert [m.to_dict() for m in part] == [m.to_dict() for m in whole if m.line >= start], start
        assert not part.truncated and not part.timed_out
    paged, start = [], 1
    while True:
        page = store.grep(e.id, pattern, max_matches=7, before=2, after=1, start_line=start)
        paged += page.matches
        if not page.truncated:
            break
        start = page.matches[-1].line + 1
    assert [m.to_dict() for m in paged] == [m.to_dict() for m in whole]
    with pytest.raises(InvalidArgument, match="start_line"):
        store.grep(e.id, pattern, start_line=0)
