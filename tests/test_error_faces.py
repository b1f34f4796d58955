"""An error's words per face: the library, the ``blobpad`` command and the tools.

The library raises an error with a neutral message and a :class:`~blobpad.errors.Hint`
that says what to do in each face's words; the CLI and the tools pick their face with
``render``, and nothing rewrites the text of another face (the CLI once turned
"pass fixed=True" into "pass -F" with ``str.replace``: a change of the library's
wording silently broke it).  A model is never told to make a call it cannot make.
"""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

import blobpad
import blobpad.errors as errors
from blobpad import InvalidArgument, Toolbox
from blobpad.reads import compile_pattern

ROOT = pathlib.Path(__file__).resolve().parent.parent / "blobpad"
HINTS = {name: value for name, value in vars(errors).items() if isinstance(value, errors.Hint)}
LIBRARY_CALL = re.compile(r"\w\(\)|\w=(True|False|None)\b|\bblobpad\.open\b")


def _library_error(pattern: str) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        compile_pattern(pattern, ignore_case=False, fixed=False)
    return caught.value


@pytest.mark.parametrize("name", sorted(HINTS))
def test_each_face_renders_its_own_words(name):
    hint = HINTS[name]
    err = errors.InvalidArgument("what went wrong", hint=hint)
    assert err.render("library") == str(err) == f"what went wrong; {hint.library}"
    assert err.render("cli") == f"what went wrong; {hint.cli}"
    if hint.tool is None:  # nothing a model can do about it: the message alone, no call it cannot make
        assert err.render("tool") == "what went wrong"
    else:
        assert err.render("tool") == f"what went wrong; {hint.tool}"
        assert not LIBRARY_CALL.search(hint.tool), hint.tool
        assert "blobpad " not in hint.tool and "'" not in hint.tool, hint.tool  # no command line either


def test_an_error_without_a_hint_is_its_message_in_every_face():
    err = errors.NotFound("no entry 'x'")
    assert err.render("library") == err.render("cli") == err.render("tool") == str(err) == "no entry 'x'"


def test_the_tools_word_an_invalid_pattern_for_their_own_parameters(store):
    err = _library_error("(")
    assert err.hint == errors.HINT_FIXED
    e = store.put("a (b) c\n", session="s", turn=1, name="doc")
    tb = Toolbox(store, session="s", turn=1)
    for mode in ("grep", "count"):
        out = tb.call("scratchpad_read", {"scratchpad_id": e.id, "mode": mode, "pattern": "("})
        assert out == {"ok": False, "tool": "scratchpad_read", "error": err.render("tool")}
    assert "fixed_strings=true" in err.render("tool") and "fixed=True" not in err.render("tool")
    # seed 003's regex has no fixed_strings: its tool gives its own way to match literally
    seed003 = Toolbox(store, session="s", turn=1, profile="seed003")
    out = seed003.call("scratchpad_read", {"name": "doc", "regex": "("})
    assert out["ok"] is False
    assert out["error"] == f"{err.message}; escape special characters with a backslash to match them literally"


def test_a_notepad_too_large_is_refused_in_the_tools_words(store):
    tb = Toolbox(store, session="s", profile="seed002")
    out = tb.call("write_notepad", {"content": "x" * ((1 << 20) + 1)})
    assert out["ok"] is False and "1 MiB" in out["error"]
    assert out["error"].endswith(f"; {errors.HINT_NOTEPAD_SIZE.tool}")
    assert "put()" not in out["error"] and "blobpad put" not in out["error"]
    with pytest.raises(InvalidArgument) as caught:  # the library's own words, for a Python caller
        store.notepad("s").write("x" * ((1 << 20) + 1))
    assert str(caught.value).endswith(f"; {errors.HINT_NOTEPAD_SIZE.library}")
    assert out["error"] == caught.value.render("tool")


def test_the_cli_words_an_invalid_pattern_with_its_own_option(tmp_path):
    err = _library_error("(")
    db = tmp_path / "db"
    with blobpad.open(db) as s:
        eid = s.put("a (b) c\n").id
    proc = subprocess.run([sys.executable, "-m", "blobpad", "--db", str(db), "grep", eid, "("],
                          capture_output=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.decode() == f"blobpad: error: {err.render('cli')}\n"
    assert err.render("cli").endswith("; pass -F for a literal")


HOSTILE = [10**5000, -(10**5000), "x" * 100_000, ["y"] * 50_000]


@pytest.mark.parametrize("value", HOSTILE, ids=["huge int", "huge negative int", "long string", "long list"])
def test_a_hostile_argument_is_named_in_a_short_message(store, value):
    from blobpad.reads import check_timeout

    calls = [
        lambda: check_timeout(value, "timeout"),
        lambda: blobpad.Offloader(store, policy=value),
        lambda: blobpad.Offloader(store, ttl=value),
        lambda: Toolbox(store, session="s", turn=1, scope=value),
        lambda: Toolbox(store, session="s", turn=1).schemas(value),
        lambda: Toolbox(store, session="s", turn=1, search_timeout=value),
        lambda: Toolbox(store, session="s", turn=value),
        lambda: Toolbox(store, session="s", turn=1, profile=value),
        lambda: store.notepad("s", ttl=value),
    ]
    for i, call in enumerate(calls):
        if isinstance(value, int) and value > 0 and i in (0, 5):
            continue  # a huge positive timeout is a valid one (no limit in practice)
        with pytest.raises(InvalidArgument) as caught:
            call()
        assert len(str(caught.value)) < 300, (i, str(caught.value)[:300])


# -- no face rewrites another's words --------------------------------------------------------


def _error_names(func: ast.AST) -> set[str]:
    """The names bound by ``except ... as NAME`` inside ``func``."""
    return {node.name for node in ast.walk(func) if isinstance(node, ast.ExceptHandler) and node.name}


def _is_error_text(node: ast.expr, names: set[str]) -> bool:
    """``str(exc)``, ``exc.message``, ``exc.render(...)``, ``exc.args[0]``, ``f"{exc}"`` or ``exc`` itself."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in ("str", "format") and node.args:
            return _is_error_text(node.args[0], names)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("render", "text"):
            return _is_error_text(node.func.value, names)
    if isinstance(node, ast.Attribute) and node.attr in ("message", "args"):
        return _is_error_text(node.value, names)
    if isinstance(node, ast.Subscript):
        return _is_error_text(node.value, names)
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) and _is_error_text(v.value, names) for v in node.values)
    return False


def rewordings(source: str) -> list[int]:
    """Lines of ``source`` where an error's text is changed with ``str.replace`` or ``re.sub``."""
    tree = ast.parse(source)
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            continue
        names = _error_names(func)
        if not names:
            continue
        for node in ast.walk(func):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            replaced = node.func.attr == "replace" and _is_error_text(node.func.value, names)
            substituted = node.func.attr == "sub" and len(node.args) >= 3 and _is_error_text(node.args[2], names)
            if replaced or substituted:
                found.append(node.lineno)
    return sorted(set(found))


def test_the_rewording_check_finds_string_surgery_on_an_error():
    bad = (
        "def f():\n"
        "    try:\n"
        "        g()\n"
        "    except ValueError as exc:\n"
        "        raise Other(str(exc).replace('fixed=True', '-F'))\n"
        "    except KeyError as err:\n"
        "        return re.sub('put\\\\(\\\\)', 'blobpad put', err.render('library'))\n"
        "    except OSError as e:\n"
        "        return f'{e}'.replace('a', 'b')\n"
    )
    assert rewordings(bad) == [5, 7, 9]
    fine = (
        "def f(text):\n"
        "    try:\n"
        "        return text.replace('a', 'b')\n"
        "    except ValueError as exc:\n"
        "        raise Other(exc.render('cli'))\n"
    )
    assert rewordings(fine) == []


def test_no_module_rewords_an_error_by_string_surgery():
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        lines = rewordings(path.read_text(encoding="utf-8"))
        if lines:
            found[str(path.relative_to(ROOT.parent))] = lines
    assert found == {}, f"error texts rewritten by replace/sub (render the right face instead): {found}"
