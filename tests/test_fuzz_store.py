"""Hostile input (issue 8): every public Store method, with arguments a model may write.

Arguments come from language models that may have read attacker pages: malformed,
huge, negative, wrong-type and Unicode-edge values (lone surrogates, NUL, 1 MB
strings, floats, None, bools, nested and deeply nested dicts, 5000-digit integers).
Whatever they are:

* only ``blobpad.BlobpadError`` subclasses escape (``errors.py``: "every error the
  library raises on purpose is a BlobpadError"; a bare ``ValueError``,
  ``UnicodeEncodeError`` or ``RecursionError`` is a bug even though it shares a base
  with ``InvalidArgument``);
* error messages stay short: ``len(str(exc)) < 2000`` even for a 1 MB argument;
* nothing hangs (a faulthandler watchdog ends the run if a call does), and the store
  still verifies ok afterwards.

Known catastrophic-backtracking patterns run on 1 MB lines in a subprocess with a 30 s
hang guard (never timed).  ``Toolbox.call`` gets names and arguments from
hypothesis and must always return a dict with ``ok``.

``BLOBPAD_FUZZ_EXAMPLES`` sets the number of hypothesis examples (300 by default).
"""

from __future__ import annotations

import faulthandler
import io
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blobpad
from blobpad import BlobpadError, sample

SMALL = blobpad.ChunkParams(min_size=64, avg_extra=64, max_size=256)
EXAMPLES = int(os.environ.get("BLOBPAD_FUZZ_EXAMPLES", "300"))
MB_STR = "a" * 1_000_000
MB_HEXISH = "0123456789abcdef" * 62_500
MAX_MESSAGE = 2000


def _deep(n: int) -> dict:
    d: dict = {}
    cur = d
    for _ in range(n):
        cur["a"] = {}
        cur = cur["a"]
    return d


DEEP_DICT = _deep(50_000)
HUGE_INTS = [2**31, 2**53 + 1, 2**62, 2**62 + 1, 2**63, -(2**63), 2**64, 10**400, -(10**400), 10**5000, -(10**5000)]
ODD_STRINGS = [
    "", " ", "\x00", "a\x00b", "\ud800", "\udfff", "x\udc80y", "\ufeff", "\u202e", "🙂" * 100, "\r\n", "\n" * 1000,
    MB_STR, MB_HEXISH, "0123456789abcdef", "0123456789ABCDEF", " 0123456789abcdef", "0123456789abcde\x00",
    "../../../../etc/passwd", "/dev/zero", "(a+)+$", "[", "\\", "(?P<x>a)", "\\1", "(?=a)", "a{99999}", "*",
    "%s%n", "{0}", "None", "null", "NaN", "-1", "1e309",
]
ODD_VALUES = [
    float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324, 2.5, b"", b"\xff" * 10, bytearray(b"ab"),
    memoryview(b"xy"), [], [1, "2"], {}, {"a": {"b": [1, {"c": None}]}}, (1, 2), {1, 2}, object(), DEEP_DICT,
    pathlib.Path("/nonexistent/blobpad/file"), pathlib.Path("a\x00b"), pathlib.Path("x\ud800"), pathlib.Path("/"),
    pathlib.Path("a" * 100_000), io.StringIO("text mode"), Ellipsis, NotImplemented, type, print,
]

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
weird = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5000),
    st.integers(),
    st.sampled_from(HUGE_INTS),
    st.floats(),
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc", "Zs", "So"]), max_size=20),
    st.sampled_from(ODD_STRINGS),
    st.binary(max_size=40),
    st.sampled_from(ODD_VALUES),
    json_like,
)


def half_weird(plain: st.SearchStrategy) -> st.SearchStrategy:
    """``plain`` or ``weird``, half and half (st.one_of would flatten weird's twelve branches and let them win)."""
    return st.booleans().flatmap(lambda p: plain if p else weird)


small_int = st.integers(min_value=-3000, max_value=3000)
maybe_int = half_weird(small_int)
maybe_bool = half_weird(st.booleans())
maybe_str = half_weird(st.one_of(st.text(max_size=30), st.sampled_from(["s1", "s2", ""])))

PUT_KW = {
    "session": maybe_str, "turn": half_weird(st.one_of(small_int, st.text(max_size=10))),
    "ttl": half_weird(st.one_of(st.none(), st.floats(), st.floats(0.001, 1e6))),
    "name": maybe_str, "step": maybe_int, "tool": maybe_str, "kind": half_weird(st.sampled_from(["text", "binary", None])),
    "meta": half_weird(st.one_of(json_like, st.dictionaries(st.text(max_size=10), json_like, max_size=5))),
}
GREP_KW = {"ignore_case": maybe_bool, "fixed": maybe_bool, "before": maybe_int, "after": maybe_int,
           "max_matches": maybe_int, "line_window": maybe_int}


def _kwargs(draw, spec: dict) -> dict:
    names = draw(st.lists(st.sampled_from(sorted(spec)), unique=True, max_size=len(spec)))
    return {n: draw(spec[n]) for n in names}


def _short(value: object, limit: int = 120) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a 5000-digit int has no repr
        text = f"<{type(value).__name__}: {type(exc).__name__}>"
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


class Fuzzer:
    """Draws one call of a public Store method and runs it, collecting what went wrong."""

    def __init__(self, store: blobpad.Store, tmp: pathlib.Path) -> None:
        self.store = store
        self.tmp = tmp
        self.ids: dict[str, str] = {}
        self.failures: dict[tuple[str, str], str] = {}
        self.calls = 0
        self.errors = 0
        self.methods: dict[str, int] = {}
        (tmp / "afile.txt").write_text(sample.log_text(5000, 1))
        (tmp / "adir").mkdir(exist_ok=True)
        self.reset()

    def reset(self) -> None:
        """Make sure the reference entries exist (a fuzzed delete may have removed them)."""
        seeds = {
            "text": sample.log_text(4000, 2), "multi": sample.multibyte_text(3000, 3), "binary": sample.binary_blob(3000, 4),
            "empty": "", "oneline": "x" * 5000,
        }
        for key, data in seeds.items():
            eid = self.ids.get(key)
            if eid is None or not self.store.exists(eid):
                self.ids[key] = self.store.put(data, session="s1", turn=1, name=key, ttl=None).id

    def entry_id(self, draw) -> object:
        return draw(half_weird(st.sampled_from(sorted(self.ids.values()))))

    def call(self, draw) -> None:
        method = draw(st.sampled_from([
            "put", "stat", "exists", "get", "stream", "head", "tail", "range", "byte_range", "lines", "grep", "count",
            "find", "entries", "sessions", "delete", "delete_session", "gc", "stats", "verify", "now",
        ]))
        args: tuple = ()
        kwargs: dict = {}
        if method == "put":
            data = draw(half_weird(st.one_of(
                st.text(max_size=500), st.binary(max_size=500),
                st.sampled_from([self.tmp / "afile.txt", self.tmp / "adir", self.tmp / "missing"]),
                st.binary(max_size=300).map(io.BytesIO),
            )))
            args, kwargs = (data,), _kwargs(draw, PUT_KW)
        elif method in ("stat", "exists", "get", "stream", "delete"):
            args = (self.entry_id(draw),)
        elif method in ("head", "tail"):
            args = (self.entry_id(draw),) + tuple(draw(st.lists(maybe_int, max_size=1)))
        elif method in ("range", "byte_range"):
            args = (self.entry_id(draw),) + tuple(draw(st.lists(maybe_int, min_size=1, max_size=2)))
        elif method == "lines":
            args = (self.entry_id(draw),) + tuple(draw(st.lists(maybe_int, max_size=2)))
        elif method == "grep":
            args, kwargs = (self.entry_id(draw), draw(maybe_str)), _kwargs(draw, GREP_KW)
        elif method == "count":
            args, kwargs = (self.entry_id(draw), draw(maybe_str)), _kwargs(draw, {"ignore_case": maybe_bool, "fixed": maybe_bool})
        elif method == "find":
            args, kwargs = (draw(half_weird(st.sampled_from(sorted(self.ids)))),), _kwargs(draw, {"session": maybe_str})
        elif method == "entries":
            kwargs = _kwargs(draw, {"session": maybe_str, "turn": half_weird(small_int), "limit": maybe_int})
        elif method == "delete_session":
            args = (draw(half_weird(st.one_of(st.just("s2"), st.text(max_size=10)))),)  # never "s1": the reference entries
        self.run(method, args, kwargs)

    def run(self, method: str, args: tuple, kwargs: dict) -> object:
        self.calls += 1
        self.methods[method] = self.methods.get(method, 0) + 1
        try:
            result = getattr(self.store, method)(*args, **kwargs)
            if method == "stream":
                with result as fh:
                    fh.read()
            if method == "exists":
                assert isinstance(result, bool)
            return result
        except BlobpadError as exc:
            self.errors += 1
            msg = str(exc)
            if not msg or len(msg) >= MAX_MESSAGE:
                self.fail(method, args, kwargs, f"BlobpadError message of {len(msg)} characters")
        except Exception as exc:
            self.fail(method, args, kwargs, f"{type(exc).__name__}: {str(exc)[:200]}")
        return None

    def fail(self, method: str, args: tuple, kwargs: dict, what: str) -> None:
        key = (method, what.split(":")[0][:80])
        if key not in self.failures:
            shown = ", ".join([_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()])
            self.failures[key] = f"{method}({shown}) -> {what}"

    def report(self) -> str:
        return "\n".join(sorted(self.failures.values()))


@pytest.fixture
def hang_guard():
    """Dump every thread's stack and end the run if a test hangs (there is no pytest-timeout)."""
    faulthandler.dump_traceback_later(600, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def test_every_store_method_survives_hostile_arguments(tmp_path, target, hang_guard):
    store = blobpad.open(target("fuzz"), chunk_params=SMALL)
    fuzzer = Fuzzer(store, tmp_path)
    examples = [0]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one_example(data):
        examples[0] += 1
        fuzzer.reset()
        for _ in range(data.draw(st.integers(1, 4))):
            fuzzer.call(data.draw)

    try:
        one_example()
        report = store.verify()
        assert report.ok, report.problems[:5]
    finally:
        store.close()
    print(f"\nfuzz: {examples[0]} hypothesis examples, {fuzzer.calls} Store calls "
          f"({fuzzer.errors} raised BlobpadError), per method {dict(sorted(fuzzer.methods.items()))}")
    if fuzzer.failures:
        pytest.fail("hostile arguments broke the contract:\n" + fuzzer.report(), pytrace=False)


# -- the same contract, on the exact inputs found so far (no luck needed to hit them) -------------

HOSTILE_CALLS = [
    ("put", ("x",), {"ttl": 10**400}),
    ("put", ("x",), {"step": 10**5000}),
    ("put", ("x",), {"kind": MB_STR}),
    ("put", ("x",), {"meta": DEEP_DICT}),
    ("put", ("x",), {"meta": {"a": "\ud800"}}),
    ("put", ("x",), {"meta": {"\udc80": 1}}),
    ("put", ("x",), {"turn": 10**5000}),
    ("put", (pathlib.Path("a\x00b"),), {}),
    ("put", (pathlib.Path("x\ud800"),), {}),
    ("put", (pathlib.Path("a" * 1_000_000),), {}),
    ("put", (MB_STR,), {"session": MB_STR}),
    ("put", ("x",), {"name": "\x00", "session": "\x00"}),
    ("entries", (), {"turn": 10**5000}),
    ("entries", (), {"limit": -(10**5000)}),
    ("entries", (), {"limit": MB_STR}),
    ("entries", (), {"session": MB_STR}),
    ("entries", (), {"turn": MB_STR}),
    ("get", (MB_STR,), {}),
    ("get", (MB_HEXISH,), {}),
    ("find", (MB_STR,), {}),
    ("find", ("\ud800",), {}),
    ("delete_session", (MB_STR,), {}),
    ("delete", ("\ud800" * 16,), {}),
    ("exists", (10**5000,), {}),
    ("put", ("x",), {"step": DEEP_DICT}),
    ("entries", (), {"limit": DEEP_DICT}),
    ("head", ("0123456789abcdef", -(10**5000)), {}),
    ("lines", ("0123456789abcdef", -(10**5000)), {}),
    ("grep", ("0123456789abcdef", "x"), {"before": -(10**5000)}),
]


@pytest.mark.parametrize("method,args,kwargs", HOSTILE_CALLS, ids=[
    f"{m}-{i}" for i, (m, _, _) in enumerate(HOSTILE_CALLS)
])
def test_known_hostile_calls_raise_short_blobpad_errors(store, method, args, kwargs):
    store.put("hello\n", session="s1")
    fuzzer = Fuzzer.__new__(Fuzzer)
    fuzzer.store, fuzzer.failures, fuzzer.calls, fuzzer.errors, fuzzer.methods = store, {}, 0, 0, {}
    fuzzer.run(method, args, kwargs)
    if fuzzer.failures:
        pytest.fail(fuzzer.report(), pytrace=False)
    assert store.verify().ok


HOSTILE_OPEN = [
    {"level": 10**5000}, {"max_bytes": -(10**5000)}, {"cache_bytes": MB_STR}, {"map_size": MB_STR},
    {"max_map_size": 10**5000}, {"level": MB_STR}, {"workers": -1}, {"workers": MB_STR}, {"max_readers": -5},
    {"max_readers": MB_STR}, {"map_size": 2**70}, {"chunk_params": MB_STR}, {"clock": MB_STR}, {"sync": MB_STR},
]


@pytest.mark.parametrize("options", HOSTILE_OPEN, ids=[f"{next(iter(o))}-{i}" for i, o in enumerate(HOSTILE_OPEN)])
def test_hostile_open_options_raise_short_blobpad_errors(tmp_path, options):
    try:
        s = blobpad.open(tmp_path / "s", **options)
    except BlobpadError as exc:
        if not 0 < len(str(exc)) < MAX_MESSAGE:
            pytest.fail(f"open(**{_short(options)}) raised a BlobpadError message of {len(str(exc))} characters", pytrace=False)
        return
    except Exception as exc:
        pytest.fail(f"open(**{_short(options)}) raised {type(exc).__name__}: {str(exc)[:300]}", pytrace=False)
    try:  # accepted: the store must then work
        if s.get(s.put("ok").id) != "ok":
            pytest.fail(f"open(**{_short(options)}) was accepted, then a put did not read back")
    except BlobpadError as exc:
        if len(str(exc)) >= MAX_MESSAGE:
            pytest.fail(f"open(**{_short(options)}) was accepted, then a put raised a message of {len(str(exc))} characters")
    except Exception as exc:
        pytest.fail(f"open(**{_short(options)}) was accepted, then a put raised {type(exc).__name__}: {str(exc)[:300]}")
    finally:
        s.close()


# -- catastrophic-backtracking patterns on 1 MB lines ----------------------------------------------

REDOS = textwrap.dedent(
    """
    import json, sys
    import blobpad
    s = blobpad.open(sys.argv[1])
    docs = {
        "a-line-then-b": "a" * 1_000_000 + "b",
        "a-lines": ("a" * 999 + "\\n") * 1000,
        "x-line": "x" * 1_000_000,
        "x-line-then-y": "x" * 1_000_000 + "y",
        "mixed": ("ab" * 300 + "a\\n") * 800 + "a" * 200_000,
    }
    out = {}
    for name, text in docs.items():
        eid = s.put(text).id
        for pattern in ["(a+)+$", "(.*a){20}", "(a|aa)+$", "(x+x+)+y", "^(a+)+$", "(a*)*b", "(\\\\w+\\\\s?)*$"]:
            grep = s.grep(eid, pattern, max_matches=5000)
            out[f"{name} {pattern}"] = [s.count(eid, pattern), len(grep), grep.truncated]
    print(json.dumps(out))
    """
)


def _expected_redos() -> dict[str, list]:
    """The matching line counts, worked out by hand (Python's re would hang on these)."""
    a_b = {"(a+)+$": 0, "(.*a){20}": 1, "(a|aa)+$": 0, "(x+x+)+y": 0, "^(a+)+$": 0, "(a*)*b": 1, "(\\w+\\s?)*$": 1}
    a_lines = {"(a+)+$": 1000, "(.*a){20}": 1000, "(a|aa)+$": 1000, "(x+x+)+y": 0, "^(a+)+$": 1000, "(a*)*b": 0,
               "(\\w+\\s?)*$": 1000}
    x = {"(a+)+$": 0, "(.*a){20}": 0, "(a|aa)+$": 0, "(x+x+)+y": 0, "^(a+)+$": 0, "(a*)*b": 0, "(\\w+\\s?)*$": 1}
    x_y = dict(x, **{"(x+x+)+y": 1})
    mixed = {"(a+)+$": 801, "(.*a){20}": 801, "(a|aa)+$": 801, "(x+x+)+y": 0, "^(a+)+$": 1, "(a*)*b": 800,
             "(\\w+\\s?)*$": 801}
    out = {}
    for name, counts in (("a-line-then-b", a_b), ("a-lines", a_lines), ("x-line", x), ("x-line-then-y", x_y), ("mixed", mixed)):
        for pattern, n in counts.items():
            out[f"{name} {pattern}"] = [n, n, False]
    return out


def test_catastrophic_backtracking_patterns_finish_on_1mb_lines(tmp_path):
    try:
        proc = subprocess.run([sys.executable, "-c", REDOS, str(tmp_path / "redos")], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("grep/count with a catastrophic-backtracking pattern on 1 MB did not finish within 30 s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got == _expected_redos()
    print(f"\nredos: {len(got)} pattern x document runs of grep and count finished")


# -- Toolbox.call ------------------------------------------------------------------------------------

#: True nine times in ten (hypothesis draws the simplest value, the first one, far more often than st.booleans' half)
MOSTLY = st.sampled_from([True] * 9 + [False])


def _to_json(value: object) -> str:
    try:
        return json.dumps(value, default=repr)
    except (ValueError, TypeError, RecursionError):  # deeply nested drawn values: the json module gives up
        return "{}"


def _toolbox_module():
    try:
        from blobpad import tools
    except ImportError:
        return None
    return tools


@pytest.mark.skipif(_toolbox_module() is None, reason="blobpad.tools (the Toolbox) does not exist yet")
def test_toolbox_call_never_raises_and_always_answers_ok(tmp_path, target, hang_guard):
    tools = _toolbox_module()
    store = blobpad.open(target("tools"), chunk_params=SMALL)
    ids = [store.put(sample.log_text(6000, i), session="agent", turn=1, name=f"n{i}", ttl=None).id for i in range(3)]
    ids.append(store.put(sample.binary_blob(2000, 9), session="agent", turn=1, ttl=None).id)
    other = store.put("another session's secret\n", session="intruder", turn=1, ttl=None).id
    boxes, unavailable = [], []
    for profile in tools.PROFILES:
        try:
            boxes.append(tools.Toolbox(store, session="agent", turn=1, profile=profile))
        except BlobpadError as exc:  # the notepad profiles, while blobpad.notepad is being built
            unavailable.append(f"{profile} ({str(exc)[:80]})")
    assert boxes
    names = sorted({n for b in boxes for n in b.tool_names()} | {"scratchpad_read", "scratchpad_list"})
    props: dict[tuple[int, str], dict[str, dict]] = {}  # (toolbox, tool) -> parameter -> JSON schema
    required: dict[tuple[int, str], list[str]] = {}
    for i, b in enumerate(boxes):
        for schema in b.schemas("anthropic"):
            props[i, schema["name"]] = schema["input_schema"].get("properties", {})
            required[i, schema["name"]] = schema["input_schema"].get("required", [])
    all_params = sorted({p for ps in props.values() for p in ps} | {"id", "path"})
    strings = st.one_of(
        st.sampled_from(ids + [other, "n0", "n1", "missing-name", "INFO", "ERROR", "(a+)+$", "[", "", "a" * 5000]),
        st.text(max_size=30),
    )

    def value_for(schema: dict):
        typed = {"integer": st.integers(-5, 3000), "number": st.floats(-5, 3000), "boolean": st.booleans(),
                 "array": st.lists(strings, max_size=3)}.get(schema.get("type"), strings)
        if "enum" in schema:
            typed = st.sampled_from(schema["enum"])
        return st.sampled_from([True] * 6 + [False]).flatmap(lambda plain: typed if plain else weird)

    @st.composite
    def arguments_for(draw, box, name):
        schema = props.get((box, name), {})
        out = {k: draw(value_for(schema[k])) for k in required.get((box, name), ()) if draw(MOSTLY)}
        for k in draw(st.lists(st.sampled_from(sorted(schema) or all_params), unique=True, max_size=4)):
            out[k] = draw(value_for(schema.get(k, {})))
        if not draw(MOSTLY):
            out[draw(st.sampled_from(all_params) | st.text(max_size=8))] = draw(weird)
        return out

    def arguments(box, name):
        # one_of flattens nested one_ofs, so pick the family first: weird would otherwise win 12 draws in 15
        return st.sampled_from(["dict"] * 6 + ["json", "broken-json", "weird"]).flatmap(lambda family: {
            "dict": arguments_for(box, name),
            "json": arguments_for(box, name).map(_to_json),
            "broken-json": st.text(max_size=200),
            "weird": weird,
        }[family])

    stats = {"calls": 0, "ok": 0, "internal": 0}
    internal: list[str] = []
    rejected: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(range(len(boxes))), st.data())
    def one_call(box, data):
        own = boxes[box].tool_names()
        family = data.draw(st.sampled_from(["own"] * 8 + ["other", "weird"]))
        name = data.draw({"own": st.sampled_from(own), "other": st.sampled_from(names), "weird": weird}[family])
        args = data.draw(arguments(box, name) if isinstance(name, str) else weird)
        stats["calls"] += 1
        result = boxes[box].call(name, args)
        assert isinstance(result, dict) and isinstance(result.get("ok"), bool), _short(result, 300)
        json.dumps(result)  # a tool answer is JSON
        stats["ok"] += result["ok"]
        if not result["ok"] and len(rejected) < 8:
            rejected.append(f"{name!r:.40}: {result.get('error', '')[:150]}")
        if not result["ok"] and "internal error" in result.get("error", ""):
            stats["internal"] += 1
            internal.append(f"{name!r}({_short(args, 200)})")
        assert "another session's secret" not in json.dumps(result), "a toolbox read another session's entry"

    try:
        one_call()
    finally:
        store.close()
    print(f"\ntoolbox fuzz: {stats['calls']} calls over {len(boxes)} profiles, {stats['ok']} ok, "
          f"{stats['internal']} internal errors" + (f" e.g. {internal[:3]}" if internal else "")
          + (f"; profiles not built: {unavailable}" if unavailable else "") + f"; rejections like {rejected[:8]}")
