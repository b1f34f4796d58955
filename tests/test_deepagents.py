"""BlobpadBackend against deepagents' own StoreBackend over LangGraph's InMemoryStore.

The oracle is deepagents itself: every operation runs on both backends and the answers
must agree (timestamps aside), on every engine.  Then a real ``create_deep_agent`` run with
a scripted chat model evicts a 4 MB tool result into blobpad and reads it back.
"""

from __future__ import annotations

import base64
import random
import string

import pytest

pytest.importorskip("deepagents")

from deepagents.backends import StoreBackend  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402
from oracles import Meanwhile, readme_snippet  # noqa: E402

import blobpad  # noqa: E402
from blobpad.integrations.deepagents import HASHED_NAME, BlobpadBackend  # noqa: E402

#: characters that end lines for str.splitlines, and others that do not
ALPHABET = "ab é\n\r\x0b\x0c\x1c\x85\u2028\u2029\t"


@pytest.fixture
def pair(store):
    """(blobpad backend, deepagents' StoreBackend) over empty stores."""
    ours = BlobpadBackend(store, session="agent")
    theirs = StoreBackend(store=InMemoryStore(), namespace=lambda _rt: ("fs",))
    return ours, theirs


def _read(result):
    fd = result.file_data
    return (result.error, None if fd is None else (fd["content"], fd["encoding"]), result.total_lines,
            result.start_line, result.end_line, result.next_offset, result.no_lines_requested)


def _infos(infos):
    return None if infos is None else sorted((i["path"], i.get("is_dir"), i.get("size")) for i in infos)


def _grep(result):
    matches = None if result.matches is None else sorted((m["path"], m["line"], m["text"]) for m in result.matches)
    return result.error is None, matches, result.truncated


def both(pair, method, *args, **kwargs):
    ours, theirs = pair
    return getattr(ours, method)(*args, **kwargs), getattr(theirs, method)(*args, **kwargs)


def write_both(pair, path, content):
    a, b = both(pair, "write", path, content)
    assert (a.error, a.path) == (b.error, b.path)


# -- reads ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.text(ALPHABET, max_size=60), offset=st.integers(-3, 30), limit=st.integers(-2, 12))
def test_read_windows_match_store_backend(pair, content, offset, limit):
    write_both(pair, "/f.txt", content)
    ours, theirs = both(pair, "read", "/f.txt", offset, limit)
    assert _read(ours) == _read(theirs)


@pytest.mark.parametrize("content", [
    "".join(f"line {i} " + "x" * (i % 300) + "\n" for i in range(40_000)),  # ~6.6 MB, many chunks
    "".join(f"row {i}\r\n" for i in range(30_000)),                          # CRLF throughout
    "a\rb\n" * 5 + "é" * 200_000 + "\u2028tail",                              # other line ends, one long line
])
def test_read_large_files_match_splitlines(pair, content):
    write_both(pair, "/big.log", content)
    lines = content.splitlines(keepends=True)
    for offset, limit in [(0, 5), (len(lines) // 2, 100), (len(lines) - 3, 10), (len(lines) - 1, 1), (len(lines), 5)]:
        ours, theirs = both(pair, "read", "/big.log", offset, limit)
        assert _read(ours) == _read(theirs)


def test_read_streams_a_crlf_cut_between_blocks(store):
    """The streamed reader must not split a \\r\\n that straddles its 1 MB blocks."""
    backend = BlobpadBackend(store, session="s")
    head = "x" * ((1 << 20) - 1)
    content = head + "\r\n" + "next\r\n" + "\x0clast"
    backend.write("/cut.txt", content)
    lines = content.splitlines(keepends=True)
    got = backend.read("/cut.txt", 0, 10)
    assert got.total_lines == len(lines) == 4
    assert got.file_data["content"] == "".join(lines).replace("\r\n", "\n").replace("\r", "\n")
    assert backend.read("/cut.txt", 1, 1).file_data["content"] == "next\n"


def test_read_of_a_file_written_elsewhere_checks_its_line_ends(store):
    """An entry the backend did not write is checked once for line ends other than \\n."""
    content = "one\ntwo\rthree\nfour\n"
    store.put(content, session="s", name="/other.txt", ttl=None)
    backend = BlobpadBackend(store, session="s")
    got = backend.read("/other.txt", 1, 2)
    assert (got.file_data["content"], got.total_lines) == ("two\nthree\n", 4)
    store.put("plain\nlines\n", session="s", name="/plain.txt", ttl=None)
    got = backend.read("/plain.txt", 1, 5)
    assert (got.file_data["content"], got.total_lines, got.next_offset) == ("lines\n", 2, None)


def test_read_is_bounded_by_max_read_bytes(store):
    backend = BlobpadBackend(store, session="s", max_read_bytes=100)
    content = "".join(f"{i:09d}\n" for i in range(1000))  # 10 bytes a line
    backend.write("/n.txt", content)
    got = backend.read("/n.txt", 10, 500)
    assert (got.start_line, got.end_line, got.next_offset) == (11, 20, 20)
    assert got.file_data["content"] == content[100:200]
    backend.write("/long.txt", "y" * 1000 + "\nz\n")
    got = backend.read("/long.txt", 0, 5)
    assert got.file_data["content"] == "y" * 1000 + "\n" and got.next_offset == 1  # one line, whole
    backend.write("/other.txt", "\r".join("abcdefghij" for _ in range(100)))
    got = backend.read("/other.txt", 0, 50)
    assert got.end_line == 9 and got.file_data["content"] == "abcdefghij\n" * 9
    backend.write("/wide.txt", "\r\n".join("éééé" for _ in range(100)))  # 8 bytes and 2 of line end: bytes count
    got = backend.read("/wide.txt", 0, 50)
    assert got.end_line == 10 and got.file_data["content"] == "éééé\n" * 10
    # what a read shows whole (white space only, a binary file, a type deepagents does not split) is shown
    # only when it fits, else an error says why: never more than max_read_bytes
    backend.write("/blank.txt", " " * 99 + "\n")
    backend.write("/blank-big.txt", " " * 500 + "\n")
    backend.upload_files([("/small.bin", b"\xff" * 75), ("/big.bin", b"\xff" * 76)])  # 100 and 104 bytes of base64
    backend.write("/doc.pdf", "x" * 100)
    backend.write("/big.pdf", "x" * 101)
    for path in ("/blank.txt", "/small.bin", "/doc.pdf"):
        got = backend.read(path)
        assert got.error is None and len(got.file_data["content"]) == 100, path
    for path in ("/blank-big.txt", "/big.bin", "/big.pdf"):
        got = backend.read(path)
        assert got.file_data is None and "max_read_bytes" in got.error, path


def test_paths_and_texts_with_lone_surrogates_answer_as_results_naming_the_cause(store):
    """A model's JSON can carry \\ud800: no file has such a path (listings are empty, a delete
    finds nothing), and an edit with such a text says so, not that the file is missing."""
    backend = BlobpadBackend(store, session="s")
    backend.write("/dir/f.txt", "header\nbody\n")
    bad = "/dir\ud800"
    assert backend.ls(bad).entries == [] and backend.glob("*", bad).matches == []
    assert not backend.grep("x", bad).matches
    assert "not found" in backend.delete(bad).error and "not found" in backend.read(bad).error
    for old, new, word in (("header", "\ud800", "new contains lone surrogates"),
                           ("\udc80", "x", "old contains lone surrogates")):
        got = backend.edit("/dir/f.txt", old, new)
        assert word in got.error and "not found" not in got.error, got.error
    assert backend.read("/dir/f.txt").file_data["content"] == "header\nbody\n"


def test_a_path_too_long_to_keep_is_refused_saying_so(store):
    backend = BlobpadBackend(store, session="s")
    path = "/" + "d/" * 35_000 + "f.txt"
    got = backend.write(path, "x")
    assert got.error is not None and "the path is 70006 characters" in got.error
    assert backend.upload_files([(path, b"x")])[0].error.startswith("InvalidArgument: the path is")
    assert backend.ls("/").entries == []


def test_read_errors_and_degenerate_windows(pair):
    write_both(pair, "/a.txt", "x\ny\n")
    write_both(pair, "/blank.txt", "  \n\t\n")
    write_both(pair, "/empty.txt", "")
    for args in [("/missing.txt",), ("/a.txt", 5, 2), ("/a.txt", -4, 0), ("/a.txt", 0, -1), ("/blank.txt", 1, 1),
                 ("/empty.txt", 3, 3), ("/a.txt", 2, 2)]:
        ours, theirs = both(pair, "read", *args)
        assert _read(ours) == _read(theirs), args
    ours = pair[0]
    assert ours.read(None).error and ours.read("/a.txt", "x", 1).error
    assert ours.read("/a.txt", 10**30, 1).error


def test_binary_upload_and_download_roundtrip(pair):
    ours, theirs = pair
    blobs = [("/img.png", bytes(range(256)) * 3), ("/notes.txt", "héllo\nthere\n".encode()),
             ("/raw.txt", b"\xff\xfe\x00bad")]
    assert [r.error for r in ours.upload_files(blobs)] == [None, None, None]
    theirs.upload_files(blobs)
    for path, data in blobs:
        assert ours.download_files([path])[0].content == data
        assert _read(ours.read(path, 0, 10)) == _read(theirs.read(path, 0, 10)), path
    assert _infos(ours.ls("/").entries) == _infos(theirs.ls("/").entries)
    assert ours.download_files(["/none"])[0].error == "file_not_found"
    bad = ours.upload_files([("/x", "not bytes")])  # type: ignore[list-item]
    assert bad[0].error


# -- listing ------------------------------------------------------------------------------

TREE = {
    "/README.md": "# readme\nTODO: write\n",
    "/src/app.py": "import os\n# TODO fix\nprint('x')\n",
    "/src/lib/util.py": "def f():\n    return 'TODO'\n",
    "/src/lib/data.json": '{"todo": "TODO"}',
    "/docs/guide.txt": "no match here\n",
    "/.hidden/cfg.yml": "a: TODO\n",
    "/srcx/other.py": "TODO\r\nTODO again\r\n",
}


@pytest.fixture
def tree(pair):
    for path, content in TREE.items():
        write_both(pair, path, content)
    return pair


@pytest.mark.parametrize("path", ["/", "/src", "/src/", "/src/lib", "/docs/", "/nothing", "/src/app.py"])
def test_ls_matches(tree, path):
    ours, theirs = both(tree, "ls", path)
    assert (ours.error, _infos(ours.entries)) == (theirs.error, _infos(theirs.entries))


@pytest.mark.parametrize("pattern,path", [
    ("*.py", None), ("**/*.py", "/"), ("src/**/*.py", "/"), ("/*.md", "/"), ("*.yml", "/"), ("*", "/src"),
    ("*.py", "/src/app.py"), ("util.*", "/src/lib/"), ("*.{py,json}", "/"), ("[a-d]*", "/"), ("../*", "/"),
    ("*.py", ""),
])
def test_glob_matches(tree, pattern, path):
    ours, theirs = both(tree, "glob", pattern, path)
    assert (ours.error is None, _infos(ours.matches)) == (theirs.error is None, _infos(theirs.matches))


@pytest.mark.parametrize("pattern,path,glob,max_count", [
    ("TODO", None, None, None), ("TODO", "/src", None, None), ("TODO", "/src/app.py", None, None),
    ("TODO", "/", "*.py", None), ("TODO", "/", "src/**/*.py", None), ("TODO", "/", "*.py", 2),
    ("TODO", "/", None, 0), ("TODO", "/", None, 7), ("TODO", "/", None, 8), ("'", "/", None, None),
    ("again\r", "/", None, None), ("nothing-like-this", "/", None, None), ("TODO", "/", "../x", None),
    ("(", "/", None, None), (".*", "/", None, None), ("TODO", "/src", "lib/*", None),
])
def test_grep_matches(tree, pattern, path, glob, max_count):
    ours, theirs = both(tree, "grep", pattern, path, glob, max_count=max_count)
    assert _grep(ours) == _grep(theirs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.text(ALPHABET, max_size=40), min_size=1, max_size=4),
       pattern=st.text("ab é\r\t", min_size=1, max_size=3))
def test_grep_random_contents_match(pair, files, pattern):
    for i, content in enumerate(files):
        write_both(pair, f"/d/f{i}.txt", content)
    ours, theirs = both(pair, "grep", pattern, "/d")
    assert _grep(ours) == _grep(theirs)


def test_grep_with_max_count_gives_the_matches_storebackend_gives_first(pair):
    """Files are searched in the order they were first written, as StoreBackend finds them
    in its store (an edit keeps a file's place): with max_count, which matches come back
    is the same, not only how many (deepagents' middleware always passes max_count)."""
    long_dir = "/deep/" + "d" * 230
    paths = ["/b.txt", "/a.txt", f"{long_dir}/z.txt", "/c/x.txt", f"{long_dir}/a.txt", "/0.txt"]
    for i, path in enumerate(paths):
        write_both(pair, path, f"x {i}\nnone\nx again {i}\n")
    both(pair, "edit", "/a.txt", "none", "x edited")
    for cap in [None, 0, 1, 2, 3, 5, 8, 13, 100]:
        for path, glob in [(None, None), ("/", "*.txt"), ("/deep", None)]:
            ours, theirs = both(pair, "grep", "x", path, glob, max_count=cap)
            assert ours.error is None and theirs.error is None
            assert ours.matches == theirs.matches, (cap, path, glob)  # in order, not sorted
            assert ours.truncated == theirs.truncated
    ours, theirs = both(pair, "grep", "", None)  # every line: the same order too
    assert ours.matches == theirs.matches


def test_grep_over_more_files_than_one_session_search_takes_is_storebackends(pair, monkeypatch):
    """``Store.grep_session`` takes at most MAX_SESSION_ENTRIES entries per call (10,000; 2
    here): a folder of more files is searched a batch at a time, with the same matches, in
    the same order, and the same ``truncated`` as deepagents' StoreBackend."""
    import blobpad.integrations.deepagents as module
    import blobpad.reads as reads

    monkeypatch.setattr(reads, "MAX_SESSION_ENTRIES", 2)
    monkeypatch.setattr(module, "MAX_SESSION_ENTRIES", 2)
    for i in range(7):
        write_both(pair, f"/logs/f{i}.txt", "nothing\n" if i in (2, 3) else f"hit {i}\nnone\nhit again {i}\n")
    for cap in [None, 0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 100]:
        for path, glob in [("/logs", None), ("/", "f[1-5].txt")]:
            ours, theirs = both(pair, "grep", "hit", path, glob, max_count=cap)
            assert ours.error is None and theirs.error is None, ours.error
            assert ours.matches == theirs.matches, (cap, path, glob)
            assert ours.truncated == theirs.truncated, (cap, path, glob)


@pytest.mark.parametrize("timeout", [0, -1, "30", True, float("nan")])
def test_a_grep_timeout_the_store_refuses_is_refused_at_once(store, timeout):
    with pytest.raises(blobpad.InvalidArgument, match="grep_timeout"):
        BlobpadBackend(store, session="agent", grep_timeout=timeout)


def test_grep_answers_the_files_as_listed_when_one_is_deleted_meanwhile(store):
    """Another host deletes a file between this grep's listing and its search: the grep
    searches the files as they were when it began (one snapshot), without an error."""
    backend, other = BlobpadBackend(store, session="agent"), BlobpadBackend(store, session="agent")
    for name in ("a", "b", "c"):
        backend.write(f"/notes/{name}.txt", f"needle in {name}\n")
    with Meanwhile(store, "named", lambda: other.delete("/notes/b.txt")) as meanwhile:
        result = backend.grep("needle", "/notes")
    assert result.error is None and meanwhile.done == 1
    assert [(m["path"], m["text"]) for m in result.matches] == [(f"/notes/{n}.txt", f"needle in {n}") for n in "abc"]
    assert [m["path"] for m in backend.grep("needle", "/notes").matches] == ["/notes/a.txt", "/notes/c.txt"]


def test_grep_empty_pattern_matches_every_line(pair):
    write_both(pair, "/e.txt", "one\ntwo\n")
    write_both(pair, "/f.txt", "")
    ours, theirs = both(pair, "grep", "", "/")
    assert _grep(ours) == _grep(theirs)


@pytest.mark.parametrize("pattern", ["\r\n", "TODO\nTODO", "\n"])
def test_grep_of_a_pattern_holding_a_line_break_says_why_it_cannot_match(tree, pattern):
    """Lines are split on \\n, so such a literal matches nothing (StoreBackend finds no match either):
    the model is told why, and not the store's advice to pass fixed=True, which this grep always does."""
    ours, theirs = both(tree, "grep", pattern, "/")
    assert _grep(theirs)[:2] == (True, [])
    assert ours.error is not None and "line break" in ours.error and "fixed" not in ours.error
    assert not ours.matches


def test_grep_is_bounded(store):
    backend = BlobpadBackend(store, session="s", max_grep_matches=50)
    backend.write("/many.txt", "hit\n" * 500)
    result = backend.grep("hit")
    assert len(result.matches) == 50 and result.truncated
    assert [m["line"] for m in result.matches] == list(range(1, 51))


def test_grep_reads_across_chunks_like_a_split(pair):
    rng = random.Random(7)
    lines = ["".join(rng.choices(string.ascii_lowercase + " ", k=rng.randrange(0, 200))) for _ in range(30_000)]
    for i in rng.sample(range(len(lines)), 25):
        lines[i] += " NEEDLE-42 "
    content = "\n".join(lines)
    write_both(pair, "/log/big.txt", content)
    ours, theirs = both(pair, "grep", "NEEDLE-42", "/log")
    assert _grep(ours) == _grep(theirs) and len(ours.matches) == 25


# -- writes ------------------------------------------------------------------------------


@pytest.mark.parametrize("old,new,replace_all", [
    ("TODO", "DONE", False), ("TODO", "DONE", True), ("import os\n", "", False), ("absent", "x", False),
    ("", "x", False), ("print('x')\n", "y", False), ("print('x')", "é\r\n", False),
])
def test_edit_matches(tree, old, new, replace_all):
    for path in ("/src/app.py", "/src/lib/data.json", "/missing.py"):
        ours, theirs = both(tree, "edit", path, old, new, replace_all)
        assert (ours.error, ours.occurrences) == (theirs.error, theirs.occurrences), path
        a, b = both(tree, "read", path, 0, 100)
        assert _read(a) == _read(b)


def test_edit_newline_hints_match(pair):
    write_both(pair, "/n.txt", "alpha\nbeta")
    write_both(pair, "/m.txt", "beta, beta")
    for path in ("/n.txt", "/m.txt"):
        ours, theirs = both(pair, "edit", path, "beta\n", "gamma\n")
        assert ours.error == theirs.error and ours.error


def test_edit_refuses_binary_files(pair):
    ours, theirs = pair
    for backend in pair:
        backend.upload_files([("/b.bin", b"\xff\x00abc")])
    assert ours.edit("/b.bin", "abc", "x").error == theirs.edit("/b.bin", "abc", "x").error


def test_delete_matches(tree):
    for path in ("/src/lib", "/README.md", "/nothing", "/src/"):
        ours, theirs = both(tree, "delete", path)
        assert (ours.error is None, ours.path) == (theirs.error is None, theirs.path), path
        a, b = both(tree, "ls", "/")
        assert _infos(a.entries) == _infos(b.entries)
        a, b = both(tree, "glob", "**", "/")
        assert _infos(a.matches) == _infos(b.matches)


def test_write_replaces_and_keeps_created_at(store):
    backend = BlobpadBackend(store, session="s")
    backend.write("/w.txt", "one")
    first = backend.read("/w.txt").file_data
    backend.write("/w.txt", "two\nlines")
    second = backend.read("/w.txt").file_data
    assert second["content"] == "two\nlines" and second["created_at"] == first["created_at"]
    assert len(store.named(session="s")) == 1


def test_long_paths_are_hashed_and_work_everywhere(pair):
    deep = "/" + "/".join(["directory-name-that-is-long"] * 12) + "/file.txt"
    write_both(pair, deep, "needle\nhay\n")
    for method, args in [("read", (deep, 0, 5)), ("ls", (deep.rsplit("/", 1)[0],)), ("grep", ("needle",)),
                         ("glob", ("*.txt",))]:
        ours, theirs = both(pair, method, *args)
        if method == "read":
            assert _read(ours) == _read(theirs)
        elif method == "grep":
            assert _grep(ours) == _grep(theirs)
        else:
            assert _infos(getattr(ours, "entries", None) or ours.matches) == _infos(
                getattr(theirs, "entries", None) or theirs.matches)
    names = [e.name for e in pair[0].store.named(session="agent")]
    assert len(names) == 1 and names[0].startswith(HASHED_NAME)
    a, b = both(pair, "edit", deep, "hay", "straw")
    assert a.occurrences == b.occurrences == 1
    assert pair[0].read(deep).file_data["content"] == "needle\nstraw\n"
    assert pair[0].delete("/" + "directory-name-that-is-long").error is None
    assert pair[0].ls("/").entries == []


def test_sessions_are_isolated(store):
    a = BlobpadBackend(store, session="alice")
    b = BlobpadBackend(store, session="bob")
    a.write("/secret.txt", "alice's secret\n")
    assert b.read("/secret.txt").error and b.ls("/").entries == [] and b.grep("secret").matches == []
    assert b.glob("*").matches == [] and b.delete("/secret.txt").error
    assert a.read("/secret.txt").file_data["content"] == "alice's secret\n"


def test_session_factory_and_bad_arguments(store):
    backend = BlobpadBackend(store, session=lambda runtime: "from-factory" if runtime is None else "graph")
    backend.write("/x.txt", "1")
    assert [e.session for e in store.named(session="from-factory")] == ["from-factory"]
    reads_runtime = BlobpadBackend(store, session=lambda rt: rt.server_info.user.identity)
    with pytest.raises(RuntimeError, match="outside a LangGraph graph execution"):
        reads_runtime.write("/x.txt", "1")
    assert "session function returned" in BlobpadBackend(store, session=lambda rt: 3).write("/x.txt", "1").error
    with pytest.raises(blobpad.InvalidArgument):
        BlobpadBackend(store, session=3)  # type: ignore[arg-type]
    with pytest.raises(blobpad.InvalidArgument):
        BlobpadBackend(object())  # type: ignore[arg-type]
    for bad in (-5, 0, float("nan"), "1h", True, 10 ** 400):  # refused when built, not at every later write
        for option in ("ttl", "evicted_ttl"):
            with pytest.raises(blobpad.InvalidArgument, match=option):
                BlobpadBackend(store, **{option: bad})
    assert backend.write(None, "x").error  # type: ignore[arg-type]
    assert backend.grep(None).error  # type: ignore[arg-type]
    assert backend.grep("x", max_count=-1).error
    assert backend.glob(None).error  # type: ignore[arg-type]
    assert backend.edit("/x.txt", None, "y").error  # type: ignore[arg-type]


def test_under_a_cap_files_are_never_evicted_and_a_write_that_does_not_fit_is_refused(store_factory):
    """A capped store (BlobpadBackend()'s default is 1 GiB): evicted tool results make room
    first; once only files are left, a write that does not fit is refused with an error
    and every file stays (before: it evicted the oldest files, and answered success)."""
    import os as _os

    size = 200_000
    store = store_factory(max_bytes=4 * size + 8_000)
    backend = BlobpadBackend(store, session="s", evicted_ttl=600)
    files = {f"/src/{i}.bin": _os.urandom(size).hex()[:size] for i in range(3)}  # hex: ~2x compression at most
    assert backend.write("/large_tool_results/call_1", _os.urandom(size).hex()[:size]).error is None
    for path, text in files.items():
        assert backend.write(path, text).error is None
    answers = [backend.write(f"/more/{i}.txt", _os.urandom(size).hex()[:size]) for i in range(6)]
    refused = [a for a in answers if a.error is not None]
    assert refused and all("Error writing file" in a.error and "max_bytes" in a.error for a in refused)
    for path, text in files.items():  # every earlier file is still there, whole
        assert backend.read(path, limit=1).error is None and store.get(store.find(path, session="s").id) == text
    written = [f"/more/{i}.txt" for i, a in enumerate(answers) if a.error is None]
    assert sorted(i["path"] for i in backend.ls("/more").entries) == sorted(written)
    assert backend.read("/large_tool_results/call_1").error is not None  # the evicted result made room first
    # an edit that grows a file past the cap is refused as a write is: it evicts no other file
    head = files["/src/1.bin"][:40]
    grown = backend.edit("/src/1.bin", head, head + _os.urandom(size).hex()[:size])
    assert grown.error is not None and "Error editing file" in grown.error and "max_bytes" in grown.error
    for path, text in files.items():
        assert store.get(store.find(path, session="s").id) == text
    assert sorted(i["path"] for i in backend.ls("/more").entries) == sorted(written)


def test_evicted_results_expire_and_files_do_not(store):
    backend = BlobpadBackend(store, session="s", evicted_ttl=600)
    backend.write("/large_tool_results/call_1", "big\n")
    backend.write("/notes.md", "keep\n")
    by_name = {e.name: e for e in store.named(session="s")}
    evicted, kept = by_name["/large_tool_results/call_1"], by_name["/notes.md"]
    assert evicted.expires_at is not None and 590 < evicted.expires_at - evicted.created_at <= 600
    assert kept.expires_at is None


@pytest.mark.parametrize("artifacts_root", ["/", "/artifacts", "/runs/7/artifacts/"])
def test_evicted_results_expire_under_any_artifacts_root(store, artifacts_root):
    """deepagents evicts to ``{artifacts_root}/large_tool_results/`` (CompositeBackend's
    ``artifacts_root``); the path its middleware computes gets the TTL, ordinary files not."""
    from deepagents.backends.composite import CompositeBackend
    from deepagents.middleware.filesystem import FilesystemMiddleware

    backend = BlobpadBackend(store, session="s", evicted_ttl=600)
    other = StoreBackend(store=InMemoryStore(), namespace=lambda rt: ("fs",))
    composite = CompositeBackend(default=backend, routes={"/memories/": other}, artifacts_root=artifacts_root)
    evicted_path = FilesystemMiddleware(backend=composite)._large_tool_results_prefix + "/call_2"
    assert composite.write(evicted_path, "big\n").error is None
    assert composite.write("/notes/large_tool_results.md", "keep\n").error is None
    by_name = {e.name: e for e in store.named(session="s")}
    assert by_name[evicted_path].expires_at is not None and by_name["/notes/large_tool_results.md"].expires_at is None


def test_a_backend_routed_at_the_eviction_folder_takes_every_path_as_evicted(store):
    """A CompositeBackend route strips its prefix: the README's setting for that case."""
    from deepagents.backends.composite import CompositeBackend

    backend = BlobpadBackend(store, session="s", evicted_ttl=600, evict_prefixes=("/",))
    composite = CompositeBackend(default=StoreBackend(store=InMemoryStore(), namespace=lambda rt: ("fs",)),
                                 routes={"/large_tool_results/": backend})
    assert composite.write("/large_tool_results/call_1", "big\n").error is None
    (entry,) = store.named(session="s")
    assert entry.name == "/call_1" and entry.expires_at is not None
    with pytest.raises(blobpad.InvalidArgument, match="evict_prefixes"):
        BlobpadBackend(store, evict_prefixes=[None])


def test_grep_under_a_long_directory_finds_its_files(store):
    """A path over 240 bytes is a hashed name: grep sees the files ls, glob and read see,
    as StoreBackend does."""
    root = "/" + "d" * 120 + "/" + "e" * 130
    ours = BlobpadBackend(store, session="s")
    theirs = StoreBackend(store=InMemoryStore(), namespace=lambda rt: ("fs",))
    for be in (ours, theirs):
        be.write(root + "/f.py", "foo\nbar foo\n")
        be.write("/short.py", "foo\n")
    for path in (root, root + "/f.py", "/" + "d" * 120, None):
        expect = theirs.grep("foo", path=path).matches
        assert ours.grep("foo", path=path).matches == expect and expect, path


def test_default_backend_is_a_capped_memory_store():
    with BlobpadBackend() as backend:
        assert backend.store.path.startswith("memory://") and backend.store.max_bytes == 1 << 30
        backend.write("/a", "b")
        assert backend.read("/a").file_data["content"] == "b"


@pytest.mark.asyncio
async def test_async_twins(store):
    backend = BlobpadBackend(store, session="s")
    assert (await backend.awrite("/a.txt", "x\ny\n")).error is None
    assert (await backend.aread("/a.txt", 1, 1)).file_data["content"] == "y\n"
    assert [m["line"] for m in (await backend.agrep("y")).matches] == [2]
    assert (await backend.aedit("/a.txt", "y", "z")).occurrences == 1
    assert [i["path"] for i in (await backend.aglob("*.txt")).matches] == ["/a.txt"]
    assert [i["path"] for i in (await backend.als("/")).entries] == ["/a.txt"]
    assert (await backend.adelete("/a.txt")).error is None


# -- a real agent ------------------------------------------------------------------------


def _log(lines: int = 62_000) -> str:
    """A ~4 MB log with one rare error line at a known place."""
    out = [f"2026-11-23 12:{i // 3600 % 60:02d}:{i % 60:02d} INFO worker-{i % 7} handled request {i:06d} in {i % 97} ms"
           for i in range(lines)]
    out[41_234] = "2026-11-23 12:11:27 ERROR worker-3 OutOfMemoryError: heap exhausted in request 041234"
    return "\n".join(out) + "\n"


def test_create_deep_agent_evicts_into_blobpad_and_reads_back(store):
    """A scripted model calls a tool returning a 4 MB log; deepagents evicts it through the
    backend into blobpad, then ``read_file`` with an offset and ``grep`` are answered from it."""
    from deepagents import create_deep_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool

    log = _log()
    assert len(log) > 4_000_000

    @tool
    def fetch_log() -> str:
        """Fetch the build log."""
        return log

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):  # the script decides the calls; tools need no binding
            return self

    path = "/large_tool_results/call_log"
    script = [
        AIMessage(content="", tool_calls=[{"name": "fetch_log", "args": {}, "id": "call_log"}]),
        AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"file_path": path, "offset": 41_230,
                                                                          "limit": 8}, "id": "call_read"}]),
        AIMessage(content="", tool_calls=[{"name": "grep", "args": {"pattern": "OutOfMemoryError",
                                                                     "path": "/large_tool_results",
                                                                     "output_mode": "content"},
                                           "id": "call_grep"}]),
        AIMessage(content="The build ran out of memory in request 041234."),
    ]
    backend = BlobpadBackend(store, session="agent-run", evicted_ttl=3600)
    agent = create_deep_agent(model=Scripted(messages=iter(script)), tools=[fetch_log], backend=backend)
    state = agent.invoke({"messages": [{"role": "user", "content": "Why did the build fail?"}]},
                         {"recursion_limit": 20})
    replies = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}

    entry = store.find(path, session="agent-run")  # evicted into blobpad, whole, under a TTL
    assert store.get(entry.id) == log and entry.expires_at is not None
    assert path in replies["call_log"].content and len(replies["call_log"].content) < 100_000

    lines = log.splitlines()
    read = replies["call_read"].content
    for number in range(41_231, 41_239):  # 1-based numbers of lines offset+1 .. offset+limit
        assert f"{number}" in read and lines[number - 1] in read
    assert lines[41_238] not in read

    grep = replies["call_grep"].content
    assert path in grep and "41235" in grep and "OutOfMemoryError: heap exhausted" in grep
    assert state["messages"][-1].content == "The build ran out of memory in request 041234."


def test_the_readme_snippet_runs_as_written(capsys):
    code = readme_snippet("## deepagents")
    namespace: dict = {}
    exec(compile(code, "README.md#deepagents", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    window = namespace["result"]["messages"][-2].content
    assert "299999" in window and "300001" in window and "step 300000: ERROR disk full" in window
    grep = namespace["result"]["messages"][-4].content
    assert "step 300000: ERROR disk full" in grep and namespace["evicted"] in grep
    assert float(printed[-1]) > 0  # the evicted result's expiry
    namespace["store"].close()


def test_evicted_results_never_pile_up_under_the_cap(store_factory):
    """Under the store's max_bytes, older evicted results (they expire) make room for new ones;
    ordinary files (no TTL) are never evicted."""
    store = store_factory(max_bytes=3 << 20)
    backend = BlobpadBackend(store, session="s")
    rng = random.Random(3)
    backend.write("/notes.md", "the plan\n")
    for i in range(12):  # 12 results of ~1 MB of poorly compressible text: far more than the cap
        text = base64.b64encode(rng.randbytes(3 << 18)).decode()
        assert backend.write(f"/large_tool_results/call_{i}", text).error is None
    kept = [e.name for e in store.named(session="s")]
    assert "/notes.md" in kept and "/large_tool_results/call_11" in kept
    assert 1 < len(kept) < 13 and store.stats().stored_bytes <= 3 << 20
    assert backend.read("/notes.md").file_data["content"] == "the plan\n"


# -- another host writing meanwhile --------------------------------------------------------


#: each operation, the store method it reads through after looking the path up, and what it
#: answers when that read sees "two\nTODO\n" written over "one\nTODO\n" or the state before it
_WHILE_REWRITTEN = {
    "read": ("line_offsets", lambda b: b.read("/f.txt").file_data["content"], ["one\nTODO\n", "two\nTODO\n"]),
    "edit": ("find", lambda b: (b.edit("/f.txt", "TODO", "DONE").error, b.read("/f.txt").file_data["content"]),
             [(None, "two\nDONE\n")]),
    "grep": ("grep_session", lambda b: _grep(b.grep("TODO", "/")),
             [(True, [("/f.txt", 2, "TODO"), ("/g.txt", 1, "TODO")], False)]),
    "grep-empty": ("tail", lambda b: _grep(b.grep("", "/")),
                   [(True, [("/f.txt", 1, w), ("/f.txt", 2, "TODO"), ("/f.txt", 3, ""), ("/g.txt", 1, "TODO"),
                            ("/g.txt", 2, "")], False) for w in ("one", "two")]),
    "download": ("get", lambda b: b.download_files(["/f.txt"])[0].content, [b"one\nTODO\n", b"two\nTODO\n"]),
}


@pytest.mark.parametrize("operation", list(_WHILE_REWRITTEN))
def test_a_file_another_host_rewrites_meanwhile_is_never_missing(store, operation):
    """Another host writes the file again between this host's lookup of the path and its
    reads (a write makes a new entry and deletes the old one): read, grep and download
    answer the file as it was or as it is, edit edits what it is now; never "not found",
    a skipped file or an exception (before: all three)."""
    here, there = BlobpadBackend(store, session="s"), BlobpadBackend(store, session="s")
    here.write("/f.txt", "one\nTODO\n")
    here.write("/g.txt", "TODO\n")
    method, run, expected = _WHILE_REWRITTEN[operation]
    with Meanwhile(store, method, lambda: there.write("/f.txt", "two\nTODO\n")) as meanwhile:
        answer = run(here)
    assert meanwhile.done == 1 and answer in expected, answer
