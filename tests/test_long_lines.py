"""Lines longer than grep holds at once (issue 12, item 4): searched in overlapping
pieces, reported once, with their true offset and length, in bounded memory.

The piece size is lowered for the test (``reads.SEGMENT_BYTES``, a module constant), so
that lines of a few hundred KB are "very long"; the needles are put at every byte
around each cut between pieces (the cuts fall on chunk boundaries, known from
:func:`blobpad.chunking.cut_chunks`), and every answer is checked against Python.
"""

from __future__ import annotations

import pytest

import blobpad
from blobpad import reads
from blobpad.chunking import cut_chunks

PARAMS = blobpad.ChunkParams(min_size=1024, avg_extra=1024, max_size=4096)
SEGMENT, OVERLAP, BULK = 16 << 10, 1024, 4 << 10


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(reads, "SEGMENT_BYTES", SEGMENT)
    monkeypatch.setattr(reads, "SEGMENT_OVERLAP", OVERLAP)
    monkeypatch.setattr(reads, "BULK_LINE_BYTES", BULK)


def _piece_cuts(content: bytes) -> list[int]:
    """Where the pieces of the content's very long lines end (as _segments cuts them)."""
    cuts, carry, pos = [], 0, 0
    for chunk in cut_chunks([content], PARAMS):
        pos += len(chunk)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            carry = len(chunk) - nl - 1
            continue
        carry += len(chunk)
        if carry >= SEGMENT:
            cuts.append(pos)
            carry = OVERLAP
    return cuts


def _line(length: int, at: int, needle: str = "NEEDLE") -> str:
    return "a" * at + needle + "b" * (length - at - len(needle))


@pytest.mark.parametrize("multibyte", [False, True], ids=["ascii", "multibyte"])
def test_a_match_at_every_byte_around_each_cut_is_found_once_where_it_is(tmp_path, small_pieces, multibyte):
    filler = "é" if multibyte else "a"
    base = "x\n" + filler * (5 * SEGMENT // len(filler.encode())) + "\nNEEDLE last\n"
    cuts = _piece_cuts(base.encode())  # the needle replaces filler bytes: the cuts stay where they are
    assert len(cuts) >= 3
    with blobpad.open(tmp_path / "s", chunk_params=PARAMS) as s:
        for cut in cuts[:3]:
            for at in range(cut - 8, cut + 2):  # byte offsets in the content: the needle ends before, across, after the cut
                if multibyte and at % 2:
                    continue  # keep the needle on a character boundary (the line starts at byte 2)
                raw = base.encode()
                text = (raw[:at] + b"NEEDLE" + raw[at + 6 :]).decode()
                e = s.put(text)
                line = text.split("\n")[1]
                g = s.grep(e.id, "NEEDLE", line_window=40)
                assert [m.line for m in g] == [2, 3], (cut, at)
                m = g.matches[0]
                assert m.line_chars == len(line) and m.clipped
                assert line[m.offset : m.offset + len(m.text)] == m.text
                assert m.text[m.spans[0][0] : m.spans[0][1]] == "NEEDLE"
                assert m.offset + m.spans[0][0] == line.find("NEEDLE")
                assert int(s.count(e.id, "NEEDLE")) == 2
                assert int(s.count(e.id, "NEEDLE", timeout=30)) == 2
                assert s.matching_lines(e.id, "NEEDLE").lines == [(2, line), (3, "NEEDLE last")]
                s.delete(e.id)


def test_a_long_line_matching_in_every_piece_is_reported_once(tmp_path, small_pieces):
    line = ("x" * 1000 + "NEEDLE") * 100  # about 600 KB: many pieces, a match in each
    text = "first\n" + line + "\n" + "NEEDLE\n" + line + "\n"
    with blobpad.open(tmp_path / "s", chunk_params=PARAMS) as s:
        e = s.put(text)
        g = s.grep(e.id, "NEEDLE", max_matches=10, line_window=100)
        assert [m.line for m in g] == [2, 3, 4]
        for m in (g.matches[0], g.matches[2]):
            assert m.offset + m.spans[0][0] == 1000 and m.line_chars == len(line)
            spans = [(m.offset + a, m.offset + b) for a, b in m.spans]
            assert all(line[a:b] == "NEEDLE" for a, b in spans)  # every match inside the window, in place
        assert int(s.count(e.id, "NEEDLE")) == 3
        assert int(s.count(e.id, "x+NEEDLEx")) == 2
        assert s.matching_lines(e.id, "NEEDLE").lines == [(2, line), (3, "NEEDLE"), (4, line)]
        assert s.matching_lines(e.id, "NEEDLE", timeout=30).lines == [(2, line), (3, "NEEDLE"), (4, line)]
        assert s.matching_lines(e.id, "first|x+NEEDLEx").lines == [(1, "first"), (2, line), (4, line)]


@pytest.mark.parametrize("pattern", ["^b", "b$", r"\bb", r"b\b", "^a", "a$", "ba$", "^ab", "b{3}a$"])
def test_anchors_and_word_boundaries_never_match_at_a_cut(tmp_path, small_pieces, pattern):
    """Found in review: each piece was searched as if it were the whole line, so ``^``,
    ``$`` and ``\\b`` matched where a piece was cut."""
    import re

    text = "a" + "b" * (6 * SEGMENT) + "a\nbb\nab\n"
    want = [i + 1 for i, line in enumerate(text.split("\n")[:-1]) if re.search(pattern, line)]
    with blobpad.open(tmp_path / "s", chunk_params=PARAMS) as s:
        e = s.put(text)
        assert [m.line for m in s.grep(e.id, pattern, max_matches=10)] == want
        assert s.matching_lines(e.id, pattern).lines == [(n, text.split("\n")[n - 1]) for n in want]
        assert int(s.count(e.id, pattern)) == len(want)
        assert int(s.count(e.id, pattern, timeout=30)) == len(want)


def _window_spans(line: str, pattern: str, match) -> list[tuple[int, int]]:
    """Oracle: Python's re over the whole decoded line, the matches starting inside the window, cut to it."""
    import re

    lo, hi = match.offset, match.offset + len(match.text)
    return [(a - lo, min(b, hi) - lo) for a, b in (m.span() for m in re.finditer(pattern, line)) if lo <= a < hi]


@pytest.mark.parametrize("pattern", [r"foo\b", r"foo |o$", r"o\b", r"x+fo"])
@pytest.mark.parametrize("binary", [False, True])
def test_a_long_lines_spans_are_those_of_the_whole_line_at_the_windows_end(store, pattern, binary):
    """A line too long to hold (over 1 MiB) is shown in a window around its first match, and the
    window's other matches were searched in the window alone: \\b and $ took its end for the line's,
    adding spans the line does not have ("foo|bar" cut by the window: foo\\b matched).  The line after
    the window is now context; the spans are Python's re over the whole line, kept to the window."""
    col = 1_500_000
    line = "a" * col + "foo "
    line += "x" * (col + 1500 - 3 - len(line)) + "foobar" + "y" * 600_000
    text = line + "\nnext\n"
    e = store.put(b"\xff" + text.encode() if binary else text, session="s")  # binary: a byte no UTF-8 has
    whole = store.lines(e.id, 1, 1)[0]
    [m] = store.grep(e.id, pattern, max_matches=1, line_window=2000).matches
    assert m.spans == _window_spans(whole, pattern, m), (m.offset, m.spans)


@pytest.mark.parametrize("cut", [b"\xc3", b"\xe6\x97", b"\xf0\x9f\x98", b"\xff"])
def test_a_long_binary_lines_match_after_a_sequence_cut_short_starts_where_it_is(store, cut):
    """In a binary line over 1 MiB, bytes of a UTF-8 sequence cut short just before a match were
    counted into the match (its span began one character early, on the U+FFFD); the spans are those
    of Python's re on the line as Store.lines decodes it."""
    data = b"\xfe" + b"a" * 1_200_000 + cut + b"NEEDLE x NEEDLE\n"
    e = store.put(data, session="s")
    whole = store.lines(e.id, 1, 1)[0]
    assert whole == data[:-1].decode("utf-8", "replace")
    [m] = store.grep(e.id, "NEEDLE", max_matches=1).matches
    assert m.spans == _window_spans(whole, "NEEDLE", m)
    assert [m.text[a:b] for a, b in m.spans] == ["NEEDLE", "NEEDLE"]
