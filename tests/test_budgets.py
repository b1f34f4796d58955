"""Time budgets of grep and count, bounded lines reads, and resolve_refs' bounds (issue 12).

Every test checks results against an oracle: Python's ``re`` on the decoded lines,
Python slicing, ``bytes.split``.  Nothing here measures speed: a budget is checked by
what it promises (a call that runs out returns what it found for a prefix of the
lines and says so), never by a clock; the time figures come from scripts.
"""

from __future__ import annotations

import functools
import json
import pickle
import re

import pytest
from oracles import sed_lines as _lines

import blobpad
from blobpad import CountResult, InvalidArgument, Offloader, Toolbox, resolve_refs, sample
from blobpad.cli import TIMED_OUT
from blobpad.cli import main as cli_main
from blobpad.offload import MAX_REF_DEPTH, MAX_RESOLVED
from blobpad.reads import SEARCH_TIMEOUT

#: defeats RE2's DFA: about a second a megabyte of log lines; every line ending in 100
#: characters after a digit matches, about half of the sample log's lines
SLOW = r".*[0-9].{100}$"
#: as slow, matching one line in a hundred: a Toolbox page (1000 matches) never fills
SLOW_RARE = r".*[0-9].{100}0\)$"
#: as slow, matching no line of the sample log
SLOW_NONE = r".*[0-9].{100}y$"
#: a budget far shorter than the whole search of the few-MB entries below takes
SHORT = 0.2


@functools.cache
def _log(size: int, seed: int = 3) -> str:
    return sample.log_text(size, seed)


def _hits(text: str, pattern: str) -> list[int]:
    return [i + 1 for i, line in enumerate(_lines(text)) if re.search(pattern, line)]


def _spans(line: str, pattern: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(pattern, line)]


def _check_prefix(result, text: str, pattern: str) -> None:
    """grep's result holds exactly the matching lines among those it searched, with the
    text and spans Python's re gives them."""
    lines = _lines(text)
    searched = result.searched_lines if result.timed_out else len(lines)
    assert 0 <= searched <= len(lines)
    assert [m.line for m in result.matches] == [n for n in _hits(text, pattern) if n <= searched]
    for m in result.matches:
        line = lines[m.line - 1]
        assert m.line_chars == len(line)
        assert m.text == line[m.offset:m.offset + len(m.text)]
        assert [(s + m.offset, e + m.offset) for s, e in m.spans] == _spans(line, pattern)[: len(m.spans)]


# -- grep and count under a budget ------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_entry(tmp_path_factory):
    """A 3 MB log whose whole search for SLOW takes seconds (and far more than SHORT)."""
    store = blobpad.open(tmp_path_factory.mktemp("budgets") / "store")
    text = _log(3 << 20)
    entry = store.put(text, session="s", turn=1)
    yield store, entry, text
    store.close()


def test_a_slow_pattern_returns_a_correct_prefix_when_the_budget_runs_out(slow_entry):
    store, e, text = slow_entry
    total = len(_lines(text))
    result = store.grep(e.id, SLOW, max_matches=10**9, timeout=SHORT)
    assert result.timed_out and result.searched_lines < total
    assert not result.truncated
    _check_prefix(result, text, SLOW)
    assert result.to_dict()["timed_out"] is True and result.to_dict()["searched_lines"] == result.searched_lines

    counted = store.count(e.id, SLOW, timeout=SHORT)
    assert isinstance(counted, CountResult) and counted.timed_out
    assert 0 <= counted.searched_lines < total
    assert counted == len([n for n in _hits(text, SLOW) if n <= counted.searched_lines])

    found = store.matching_lines(e.id, SLOW, timeout=SHORT)
    assert found.timed_out and 0 <= found.searched_lines < total
    lines = _lines(text)
    assert found.lines == [(n, lines[n - 1]) for n in _hits(text, SLOW) if n <= found.searched_lines]


def test_a_slow_pattern_with_enough_budget_finds_everything(store):
    text = _log(200 << 10)
    e = store.put(text, session="s")
    result = store.grep(e.id, SLOW, max_matches=10**9, timeout=300)
    assert not result.timed_out and result.searched_lines is None
    _check_prefix(result, text, SLOW)
    assert len(result) == len(_hits(text, SLOW)) > 500
    counted = store.count(e.id, SLOW, timeout=300)
    assert counted == len(_hits(text, SLOW)) and not counted.timed_out and counted.searched_lines is None
    found = store.matching_lines(e.id, SLOW, timeout=300)
    assert not found.timed_out and found.searched_lines is None
    assert found.lines == [(n, _lines(text)[n - 1]) for n in _hits(text, SLOW)]


@pytest.mark.parametrize("pattern", [r"ERROR|WARN", r"req=[0-9a-f]{8} .*timeout", r"^2023.*5$", r"(?i)refused|quota", r"\bdisk"])
def test_a_normal_pattern_under_the_default_budget_finds_every_match(slow_entry, pattern):
    store, e, text = slow_entry
    result = store.grep(e.id, pattern, max_matches=10**9, timeout=SEARCH_TIMEOUT)
    assert not result.timed_out
    _check_prefix(result, text, pattern)
    assert len(result) == len(_hits(text, pattern))
    counted = store.count(e.id, pattern, timeout=SEARCH_TIMEOUT)
    assert counted == len(_hits(text, pattern)) and not counted.timed_out


def test_a_budget_stops_a_slow_pattern_inside_one_long_line(store):
    """One 2 MB line: the search cannot stop between lines, it stops inside the line."""
    line = _log(2 << 20).replace("\n", " ")
    e = store.put(f"first line 1\n{line}\nlast\n", session="s")
    result = store.grep(e.id, SLOW, timeout=SHORT)
    # line 1 does not match; either the budget ran out on line 2, or it was searched whole in time
    if result.timed_out:
        assert result.searched_lines in (0, 1) and result.matches == []
    else:
        assert [m.line for m in result] == _hits(f"first line 1\n{line}\nlast\n", SLOW)
    counted = store.count(e.id, SLOW, timeout=SHORT)
    assert counted == (0 if counted.timed_out else len(_hits(f"first line 1\n{line}\nlast\n", SLOW)))
    assert counted.searched_lines in ((0, 1) if counted.timed_out else (None,))


@pytest.mark.parametrize("search", ["grep", "count", "matching_lines"])
def test_a_spent_budget_stops_gathering_a_line_of_many_chunks(store_factory, search):
    """A line that spans many chunks is gathered before it is searched; a budget spent
    meanwhile stops the gathering (each chunk may be a round trip to a server), not only
    the search: the call reads a few of the line's chunks, not all of them, and says it
    searched none of its lines (the budget, a microsecond, is spent before the first).
    Checked by the chunks read, not by a clock."""
    tiny = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
    store = store_factory(chunk_params=tiny, filters=False)
    text = "a" * 100_000 + "!\n" + "short line\n" * 50
    e = store.put(text, session="s")
    assert e.chunks > 300
    result = getattr(store, search)(e.id, "a!$", timeout=1e-6)
    assert result.timed_out and result.searched_lines == 0, result
    assert (int(result) if search == "count" else len(result)) == 0
    assert result.chunks_read < e.chunks // 4, (result.chunks_read, e.chunks)


@pytest.mark.engines("memory", "lmdb")  # 40,000 chunks: the class is the readers', not an engine's
def test_a_budget_spent_after_a_long_line_matched_never_returns_it_past_the_searched_lines(store_factory):
    """A line longer than a search buffer (8 MiB) is searched piece by piece; once a piece
    matched, the line is reported, and a budget spent while the rest of it is gathered must
    count it as searched: a result holds only lines up to ``searched_lines``, so the results
    of budgets spent at any moment are prefixes of the whole result, and a session search
    continued with its cursor reports no line twice.  Budgets from 20 ms to 240 ms, no clock
    asserted: whichever moment each one ends at, the prefix must hold."""
    store = store_factory(chunk_params=blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256), filters=False)
    text = "first\n" + "NEEDLE " + "x" * (9 << 20) + "\nlast NEEDLE\n"
    e = store.put(text, session="s")
    whole = [m.line for m in store.grep(e.id, "NEEDLE", max_matches=100)]
    assert whole == [2, 3]
    for budget in [0.02 * k for k in range(1, 13)]:
        for search in ("grep", "matching_lines"):
            found = getattr(store, search)(e.id, "NEEDLE", timeout=budget)
            lines = [m.line for m in found] if search == "grep" else list(found.numbers)
            searched = found.searched_lines if found.timed_out else 3
            assert lines == [n for n in whole if n <= searched], (search, budget, found.searched_lines, lines)
        seen: list[int] = []
        cursor = None
        for _ in range(4):
            page = store.grep_session("s", "NEEDLE", timeout=budget, cursor=cursor)
            seen += [m.line for m in page.matches]
            cursor = page.cursor
            if cursor is None:
                break
        # in order, none twice (a budget too short to get through line 2 makes no progress: each
        # page starts that line again; the pages then hold nothing, which is a prefix too)
        assert seen == whole[:len(seen)], (budget, seen)


def test_long_lines_under_a_budget_give_the_same_matches_as_without(store):
    """Lines longer than one RE2 call's window are searched in windows, then whole: the
    matches, their spans and windows are those of the search without a budget."""
    block = _log(1 << 20, seed=5).replace("\n", " ")
    long_a = block[:300_000] + " needle-17 " + block[300_000:900_000] + " needle-99"
    long_b = "a" + "b" * 700_000 + "c"  # one match of a.*c over 700 KB: longer than any window
    text = f"short needle-1\n{long_a}\n{long_b}\nend\n"
    e = store.put(text, session="s")
    for pattern in (r"needle-\d+", r"a.*c", r"needle-99$", r"^a", r"b{3}c", r"zzz-absent"):
        limited = store.grep(e.id, pattern, max_matches=10**9, timeout=120)
        free = store.grep(e.id, pattern, max_matches=10**9)
        assert not limited.timed_out
        assert limited.to_dict() == free.to_dict()
        assert [m.line for m in limited] == _hits(text, pattern)
        for m in limited:
            line = _lines(text)[m.line - 1]
            assert m.text == line[m.offset:m.offset + len(m.text)]
            assert m.spans[0][0] + m.offset == re.search(pattern, line).start()
        assert store.count(e.id, pattern, timeout=120) == len(_hits(text, pattern))


@pytest.mark.parametrize("size", [150_000, 600_000, 1_000_000])
def test_long_lines_with_many_matches_fit_the_default_budget(store, size):
    """A long line where the pattern matches every few bytes (minified JSON, base64,
    CSV rows): each RE2 call stops at the next match, so no single call says much about
    the speed; the budget must still see that the calls are fast, not time out at once
    on a guess (it did, with no match, for lines of about 128 KB to 1 MiB)."""
    rows = json.dumps([{"id": i, "name": f"user{i}", "status": "ok"} for i in range(size // 45)])[:size]
    text = f"header\n{rows}\nfooter id\n"
    e = store.put(text, session="s")
    for pattern in ("id", r"user\d+", "ok|name"):
        limited = store.grep(e.id, pattern, max_matches=10**9, timeout=SEARCH_TIMEOUT)
        free = store.grep(e.id, pattern, max_matches=10**9)
        assert not limited.timed_out
        assert limited.to_dict() == free.to_dict()
        assert [m.line for m in limited] == _hits(text, pattern)
        m = limited.matches[0]
        spans = [(x.start() - m.offset, x.end() - m.offset) for x in re.finditer(pattern, _lines(text)[1])]
        inside = [(a, b) for a, b in spans if a >= 0 and b <= len(m.text)]  # those the window cuts are clipped
        assert [(a, b) for a, b in m.spans if b < len(m.text)] == [(a, b) for a, b in inside if b < len(m.text)]


class _StallingClock:
    """``time.monotonic`` as a process sees it when it is descheduled for ``stall`` seconds
    at its ``at``-th reading, and again every ``every`` readings after (on a loaded machine)."""

    def __init__(self, real, at: int, every: int, stall: float = 0.05) -> None:
        self.real, self.at, self.every, self.stall = real, at, every, stall
        self.calls = 0
        self.lost = 0.0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls >= self.at and (self.calls - self.at) % self.every == 0:
            self.lost += self.stall
        return self.real() + self.lost


@pytest.mark.parametrize("size", [150_000, 1_000_000])
@pytest.mark.parametrize("at", [2, 20, 100])
def test_a_moment_of_descheduling_does_not_stop_a_search_that_fits(store, size, at, monkeypatch):
    """A budget is weighed on speeds measured as the search goes; one slow reading of the
    clock (the process descheduled for 50 ms, then every 150 readings) must not make a
    search that fits many times over in the budget stop: grep of a long line matching
    every few bytes timed out on the first line on a loaded machine, its calls, each
    stopping a few bytes on, judged one at a time on the speed of the last few."""
    import time

    rows = json.dumps([{"id": i, "name": f"user{i}", "status": "ok"} for i in range(size // 45)])[:size]
    text = f"header\n{rows}\n" + "".join(f"line {i} id {i}\n" for i in range(300))
    e = store.put(text, session="s")
    for pattern in ("id", r"user\d+"):
        free = store.grep(e.id, pattern, max_matches=10**9)
        clock = _StallingClock(time.monotonic, at, every=150)
        monkeypatch.setattr(time, "monotonic", clock)
        limited = store.grep(e.id, pattern, max_matches=10**9, timeout=SEARCH_TIMEOUT)
        counted = store.count(e.id, pattern, timeout=SEARCH_TIMEOUT)
        monkeypatch.undo()
        assert clock.lost > 0  # the clock did stall during the search
        assert not limited.timed_out and limited.to_dict() == free.to_dict()
        assert [m.line for m in limited] == _hits(text, pattern)
        assert not counted.timed_out and counted == len(_hits(text, pattern))


def test_count_result_is_an_int(slow_entry):
    store, e, text = slow_entry
    n = store.count(e.id, "ERROR")
    assert isinstance(n, int) and n == len(_hits(text, "ERROR")) and n + 1 == len(_hits(text, "ERROR")) + 1
    assert json.dumps({"n": n}) == json.dumps({"n": int(n)})
    assert pickle.loads(pickle.dumps(n)) == n
    partial = CountResult(3, timed_out=True, searched_lines=10)
    back = pickle.loads(pickle.dumps(partial))
    assert back == 3 and back.timed_out and back.searched_lines == 10
    assert "timed_out=True" in repr(partial) and repr(CountResult(4)) == "CountResult(4)"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5", [1]])
def test_a_bad_timeout_is_refused(store, bad):
    e = store.put("a\n", session="s")
    with pytest.raises(InvalidArgument, match="timeout"):
        store.grep(e.id, "a", timeout=bad)
    with pytest.raises(InvalidArgument, match="timeout"):
        store.count(e.id, "a", timeout=bad)


# -- the Toolbox, the CLI and the MCP server say it ---------------------------------------


def test_the_toolbox_gives_its_searches_a_budget_and_says_when_it_ran_out(slow_entry):
    store, e, text = slow_entry
    assert Toolbox(store, session="s", turn=1).search_timeout == SEARCH_TIMEOUT == 5.0
    tb = Toolbox(store, session="s", turn=1, search_timeout=SHORT)
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": SLOW_RARE, "max_matches": 1000})
    assert r["ok"] and r["timed_out"] is True and "Timed out" in r["notice"]
    searched = r["searched_lines"]
    found = [n for n in _hits(text, SLOW_RARE) if n <= searched]
    shown = [int(row.split(":", 1)[0]) for row in r["content"].split("\n") if row]
    assert shown == found[: len(shown)] and r["total_matches"] == len(found)
    assert f"line {searched + 1} of {len(_lines(text))}" in r["notice"]

    c = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "count", "pattern": SLOW})
    assert c["ok"] and c["timed_out"] is True and "Timed out" in c["notice"]
    assert c["count"] == len([n for n in _hits(text, SLOW) if n <= c["searched_lines"]])

    # a page found in time, but counting them all ran out: at least that many, and how far the count got
    few = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "grep", "pattern": SLOW, "max_matches": 5})
    assert few["ok"] and few["shown_matches"] == 5 and few["timed_out"] is True and few["total_matches_at_least"]
    assert 0 <= few["searched_lines"] < len(_lines(text)) and f"at line {few['searched_lines'] + 1} of" in few["notice"]
    assert few["total_matches"] >= len([n for n in _hits(text, SLOW) if n <= few["searched_lines"]])

    fine = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "count", "pattern": "ERROR"})
    assert fine["ok"] and "timed_out" not in fine and fine["count"] == len(_hits(text, "ERROR"))
    with pytest.raises(InvalidArgument):
        Toolbox(store, session="s", turn=1, search_timeout=-1)


def test_seed003_regex_says_when_it_ran_out(store):
    text = _log(3 << 20)
    tb = Toolbox(store, session="s", profile="seed003", search_timeout=SHORT)
    assert tb.call("scratchpad_write", {"name": "log", "content": text})["ok"]
    r = tb.call("scratchpad_read", {"name": "log", "regex": SLOW_NONE})
    assert r["ok"] and r["timed_out"] is True and "Timed out" in r["notice"]


def test_the_cli_prints_what_it_found_and_exits_3_when_it_runs_out(slow_entry, capfd):
    store, e, text = slow_entry
    db = store.path
    rc = cli_main(["--db", db, "grep", e.id, SLOW, "--timeout", str(SHORT)])
    out, err = capfd.readouterr()
    assert rc == TIMED_OUT == 3
    assert "blobpad: timed out after 0.2 s at line" in err
    said = re.search(r"lines 1-(\d+) only", err)
    searched = int(said.group(1)) if said else 0
    assert said or "no line was searched" in err
    lines = _lines(text)
    assert out == "".join(f"{n}:{lines[n - 1]}\n" for n in _hits(text, SLOW) if n <= searched)

    rc = cli_main(["--db", db, "grep", e.id, SLOW, "--timeout", str(SHORT), "-c", "--json"])
    out, err = capfd.readouterr()
    shown = json.loads(out)
    assert rc == 3 and shown["timed_out"] is True and "timed out" in err
    assert shown["count"] == len([n for n in _hits(text, SLOW) if n <= shown["searched_lines"]])

    rc = cli_main(["--db", db, "grep", e.id, "ERROR", "-c"])
    out, err = capfd.readouterr()
    assert rc == 0 and out == f"{len(_hits(text, 'ERROR'))}\n" and err == ""


def test_a_search_stopped_before_its_first_line_says_no_line_was_searched(slow_entry, capfd):
    """Never "lines 1-0": a budget spent before the first line is said in words, by the CLI and the tools."""
    from blobpad.cli import _timed_out, build_parser
    from blobpad.tools.reading import timed_out_notice

    store, e, _ = slow_entry
    args = build_parser().parse_args(["--db", store.path, "grep", e.id, SLOW, "--timeout", "1"])
    assert _timed_out(args, 0, e.lines, "count is that of") == TIMED_OUT
    err = capfd.readouterr().err
    assert "at line 1 of" in err and "no line was searched" in err and "1-0" not in err, err
    tb = Toolbox(store, session="s", turn=1, search_timeout=1e-9)
    for searched in (0, None):
        said = timed_out_notice(tb, e, searched, "the count covers")
        assert "at line 1 of" in said and "no line was searched" in said and "1-0" not in said, said
    assert "lines 1-7 (the later lines" in timed_out_notice(tb, e, 7, "the count covers")
    # end to end, with a budget so short that the search stops at once (at its first line, or just after)
    for argv in (["grep", e.id, SLOW], ["grep", e.id, SLOW, "-c"], ["grep", e.id, SLOW, "-C", "1"]):
        assert cli_main(["--db", store.path, *argv, "--timeout", "1e-9"]) == TIMED_OUT
        err = capfd.readouterr().err
        assert "1-0" not in err and ("no line was searched" in err) == ("at line 1 of" in err), err
    for mode in ("grep", "count"):
        r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": mode, "pattern": SLOW})
        assert r["timed_out"] is True and "1-0" not in r["notice"], r
        assert ("no line was searched" in r["notice"]) == (r["searched_lines"] == 0), r


def test_the_mcp_server_passes_its_search_budget_to_the_toolbox():
    from blobpad.mcp_server import _parser

    assert _parser().parse_args([]).search_timeout == SEARCH_TIMEOUT
    assert _parser().parse_args(["--search-timeout", "0.5"]).search_timeout == 0.5


# -- lines reads never materialise a long line ------------------------------------------------


@pytest.fixture
def long_lines(store):
    """Lines of 10, 3 M and 5 characters, a 1.5 MB multibyte line and a last line without
    its newline: longer than any chunk, and longer in bytes than in characters."""
    big = _log(3 << 20, seed=9).replace("\n", "|")
    wide = "é中😀x" * 400_000
    lines = ["0123456789", big, "short", wide, "tail"]
    text = "\n".join(lines)
    return store, store.put(text, session="s", turn=1), lines


@pytest.mark.parametrize("width,column", [(2000, 0), (1, 0), (80, 1_234_567), (5000, 1_599_990), (10, 10**9)])
def test_line_windows_are_python_slices_of_the_lines(long_lines, width, column):
    store, e, lines = long_lines
    got = store.line_windows(e.id, 1, None, width=width, column=column)
    assert [(w.line, w.text, w.offset, w.line_chars) for w in got] == [
        (k + 1, line[column:column + width], column, len(line)) for k, line in enumerate(lines)
    ]
    assert [w.clipped for w in got] == [column > 0 or column + width < len(line) for line in lines]
    assert store.line_windows(e.id, 2, 2, width=7)[0].text == lines[1][:7]


def test_binary_line_windows_are_slices_of_the_replaced_decoding(store):
    raw = bytes(b for b in range(256) if b != 10) * 9000 + b"\nab\xff\n" + b"\xe4\xb8" * 700_000
    e = store.put(raw, session="s")
    lines = raw.decode("utf-8", "replace").split("\n")
    for width, column in ((100, 0), (1000, 1_000_000), (3, 700_001)):
        got = store.line_windows(e.id, width=width, column=column)
        assert [(w.text, w.line_chars) for w in got] == [(line[column:column + width], len(line)) for line in lines]


def test_the_toolbox_lines_mode_windows_long_lines_exactly(long_lines):
    store, e, lines = long_lines
    tb = Toolbox(store, session="s", turn=1)
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "lines"})
    rows = r["content"].split("\n")
    assert rows[0] == "1\t0123456789" and rows[2] == "3\tshort" and rows[4] == "5\ttail"
    cap = tb.line_chars
    assert rows[1] == (f"2\t{lines[1][:cap]} [... line 2 continues for {len(lines[1]) - cap} more characters; read on "
                       f'with scratchpad_id="{e.id}", mode="lines", start_line=2, end_line=2, column={cap}]')
    assert rows[3].startswith(f"4\t{lines[3][:cap]} [... line 4 continues for {len(lines[3]) - cap} more")
    # reading on from a column deep inside the line gives the slice there
    column = 1_500_001
    r = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "lines", "start_line": 4, "end_line": 5,
                                    "column": column})
    body = r["content"].split("\n")[0]
    rest = len(lines[3]) - column
    assert body == (f"4\t[... {column} characters ...]{lines[3][column:column + cap]} [... line 4 continues for "
                    f"{rest - cap} more characters; read on with scratchpad_id=\"{e.id}\", mode=\"lines\", "
                    f"start_line=4, end_line=4, column={column + cap}]")
    assert r["content"].split("\n")[1] == "5\ttail"
    past = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": "lines", "start_line": 3, "column": 6})
    assert not past["ok"] and "past the end of line 3 (5 characters)" in past["error"]


def test_grep_context_lines_are_cut_without_reading_them_whole(long_lines):
    store, e, lines = long_lines
    res = store.grep(e.id, "^short$", before=1, after=1, line_window=50)
    (m,) = res.matches
    assert m.before == [(2, lines[1][:50])] and m.after == [(4, lines[3][:50])]


def test_cli_read_lines_copies_the_bytes_of_the_lines(long_lines, capfd):
    store, e, lines = long_lines
    raw = "\n".join(lines).encode()
    parts = raw.split(b"\n")
    for spec, first, last in (("2:2", 2, 2), ("1:5", 1, 5), ("4:", 4, 5), ("-2:-1", 4, 5), ("3", 3, 3)):
        assert cli_main(["--db", store.path, "read", e.id, "--lines", spec]) == 0
        out = capfd.readouterr().out.encode("utf-8", "surrogateescape")
        want = b"".join(p + b"\n" for p in parts[first - 1:last])
        assert out == (want[:-1] if last == len(parts) else want)  # the last line has no newline
        start, end = store.line_offsets(e.id, first, last)
        assert raw[start:end] == out


# -- resolve_refs -----------------------------------------------------------------------------


@pytest.fixture
def step(store):
    out = Offloader(store).offload({"stdout": "x" * 100_000, "exit_code": 0}, session="s", turn=1, step=1,
                                   tool="shell")
    assert "scratchpad_id" in out
    return store, {1: out}


def test_resolve_refs_refuses_more_than_max_size_before_building_it(step):
    store, steps = step
    assert MAX_RESOLVED == 16 << 20
    ten = {"content": "{{step1.stdout}}" * 10}
    assert resolve_refs(ten, steps, store, max_size=1_000_000) == {"content": "x" * 1_000_000}  # exactly the limit
    for args in ({"content": "{{step1.stdout}}" * 11}, ["{{step1.stdout}}"] * 11, {"a": ["{{step1.stdout}}"] * 6,
                                                                                    "b": "{{step1.stdout}}" * 5}):
        with pytest.raises(InvalidArgument, match="max_size"):
            resolve_refs(args, steps, store, max_size=1_000_000)
    with pytest.raises(InvalidArgument, match="max_size"):  # 300 copies of the output under the default limit
        resolve_refs({"content": "{{step1.stdout}}" * 300}, steps, store)
    with pytest.raises(InvalidArgument, match="offloaded content, 100000 characters"):
        resolve_refs("{{step1.stdout}}", steps, store, max_size=99_999)  # refused before the entry is read
    assert resolve_refs("{{step1.exit_code}} and {{step1.exit_code}}", steps, store, max_size=2) == "0 and 0"
    with pytest.raises(InvalidArgument, match="max_size"):
        resolve_refs("{{step1.exit_code}} {{step1.exit_code}} {{step1.exit_code}}", steps, store, max_size=2)
    with pytest.raises(InvalidArgument):
        resolve_refs("x", steps, store, max_size=-1)


def _nested(depth: int, kind: type) -> object:
    root: object = "{{step1.exit_code}}"
    for _ in range(depth):
        root = [root] if kind is list else {"k": root}
    return root


@pytest.mark.parametrize("kind", [list, dict])
def test_resolve_refs_refuses_deep_nesting_with_a_clear_error(step, kind):
    store, steps = step
    with pytest.raises(InvalidArgument, match="nested more than"):
        resolve_refs(_nested(100_000, kind), steps, store)
    with pytest.raises(InvalidArgument, match="nested more than"):
        resolve_refs(_nested(MAX_REF_DEPTH + 1, kind), steps, store)
    resolved = resolve_refs(_nested(MAX_REF_DEPTH, kind), steps, store)
    oracle = _nested(MAX_REF_DEPTH, kind)
    assert json.dumps(resolved) == json.dumps(oracle).replace('"{{step1.exit_code}}"', "0")


def test_resolve_refs_refuses_cycles_and_deep_referenced_values(step):
    store, steps = step
    cyclic: list[object] = ["{{step1.exit_code}}"]
    cyclic.append(cyclic)
    with pytest.raises(InvalidArgument, match="contain"):
        resolve_refs(cyclic, steps, store)
    deep = {2: _nested(100_000, dict)}
    with pytest.raises(InvalidArgument, match="nested too deeply"):
        resolve_refs("in text: {{step2}}", deep, store)
    with pytest.raises(InvalidArgument, match="nested too deeply"):
        resolve_refs({"whole": "{{step2}}"}, deep, store)


def test_resolve_refs_keeps_the_shape_of_the_arguments(step):
    store, steps = step
    args = {"a": [1, ("x", "{{step1.exit_code}}", {"q": "pre {{ step1.exit_code }} post"})], "b": "{{step1.stdout}}",
            "c": None, "d": (), "e": {}}
    out = resolve_refs(args, steps, store)
    assert out == {"a": [1, ("x", 0, {"q": "pre 0 post"})], "b": "x" * 100_000, "c": None, "d": (), "e": {}}
    assert isinstance(out["a"][1], tuple)
    assert resolve_refs("plain", steps, store) == "plain" and resolve_refs(7, steps, store) == 7


# -- the context lines of matches count against the budget ---------------------------------------------


def test_context_lines_filled_past_the_budget_stop_the_search_at_the_first_match_left_without(store, monkeypatch):
    """Filling the context lines of many matches used to run outside the budget (100,000
    matching lines with a line of context each: 30 s under a 2 s budget).  They now count
    against it (plus ``CONTEXT_GRACE``): when it runs out, the matches left without their
    context are dropped and the search says it stopped before the first of them; a grep
    of the lines after it (grep_session: its cursor) goes on from there.  The grace is set
    below zero here, so the budget is spent at the first match, whatever the machine's speed."""
    from blobpad import reads

    text = "".join(f"line {n} INFO step {n % 97}\n" for n in range(3000))
    lines = _lines(text)
    e = store.put(text, session="s")
    monkeypatch.setattr(reads, "CONTEXT_GRACE", -1000.0)
    r = store.grep(e.id, "INFO", before=1, after=2, max_matches=10**6, timeout=600)
    assert [m.line for m in r.matches] == [1] and r.timed_out and r.searched_lines == 1 and not r.truncated
    assert r.matches[0].before == [] and r.matches[0].after == [(2, lines[1]), (3, lines[2])]
    pages, cursor = [], None
    for _ in range(10_000):  # one match per call: resumed by its cursor, every line once, with its context
        page = store.grep_session("s", "INFO", before=1, after=2, max_matches=10**6, timeout=600, cursor=cursor)
        assert len(page.matches) == 1 and page.timed_out == (page.cursor is not None)
        pages += page.matches
        cursor = page.cursor
        if cursor is None or len(pages) == 5:
            break
    monkeypatch.setattr(reads, "CONTEXT_GRACE", 0.25)
    pages += store.grep_session("s", "INFO", before=1, after=2, max_matches=10**6, timeout=600, cursor=cursor).matches
    assert [m.line for m in pages] == list(range(1, len(lines) + 1))
    for m in pages:
        assert m.before == [(n, lines[n - 1]) for n in range(max(1, m.line - 1), m.line)]
        assert m.after == [(n, lines[n - 1]) for n in range(m.line + 1, min(len(lines), m.line + 2) + 1)]
