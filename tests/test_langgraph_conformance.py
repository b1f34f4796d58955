"""LangGraph's own store tests, run against BlobpadStore on every engine.

The oracle is LangGraph's ``tests/test_store.py`` (with ``tests/embed_test_utils.py``)
from the langgraph-checkpoint sdist on the package index, at a pinned version and
checksum: the session fixture downloads it with pip (bounded by a timeout) into a
temporary directory, and each engine's run is a pytest subprocess with
``tests/_langgraph_plugin.py``, which substitutes ``BlobpadStore`` for the
``InMemoryStore`` those tests build.  Every test must pass; DESELECTED lists the ones
left out and why (none today), as the README's LangGraph section does.

Without the index the test is skipped saying so, or fails when ``$CI`` is set: the
proof must run in CI.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.base", reason="langgraph-checkpoint is not installed: pip install 'blobpad[langgraph]'")

#: the sdist the tests come from, and its sha256 as the index publishes it
PINNED = "4.3.2"
SHA256 = "fcab8468c7e965d7055e2a35c253d73a145624ef4728b150ca7c361f4afca286"
#: test ids left out, with the reason (the README's LangGraph section lists the same)
DESELECTED: dict[str, str] = {}
#: test functions and cases of that file (34 functions, 117 cases)
CASES = 117
FILES = ("tests/__init__.py", "tests/test_store.py", "tests/embed_test_utils.py")
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def langgraph_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding LangGraph's store tests, from the pinned sdist."""
    download = tmp_path_factory.mktemp("langgraph-sdist")
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--disable-pip-version-check",
           "-d", str(download), f"langgraph-checkpoint=={PINNED}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        failure = None if done.returncode == 0 else (done.stderr or done.stdout).strip()[-600:]
    except subprocess.TimeoutExpired:
        failure = "pip download took more than 180 s"
    if failure is not None:
        message = (f"could not download the langgraph-checkpoint {PINNED} sdist from the package index "
                   f"(LangGraph's store tests come from it): {failure}")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    (sdist,) = download.glob("langgraph_checkpoint-*.tar.gz")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert digest == SHA256, f"the langgraph-checkpoint {PINNED} sdist's sha256 is {digest}, not the pinned {SHA256}"
    root = tmp_path_factory.mktemp("langgraph-tests")
    top = f"langgraph_checkpoint-{PINNED}/"
    with tarfile.open(sdist) as tar:  # the files named, read one by one (extractall's filter= needs 3.11.4)
        for name in FILES:
            source = tar.extractfile(top + name)
            assert source is not None, f"{top + name} is not a file in the sdist"
            dest = root / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(source.read())
    # the sdist's own pytest settings (its pyproject.toml), without its -vv and durations
    (root / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n", encoding="utf-8"
    )
    return root


@pytest.mark.parametrize("engine", ["lmdb", "memory"])
def test_langgraph_store_tests_pass_against_blobpad_store(langgraph_tests: Path, engine: str) -> None:
    report = langgraph_tests / f"report-{engine}.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "_langgraph_plugin", "-p", "no:cacheprovider",
           "--rootdir", str(langgraph_tests), f"--junitxml={report}", "tests/test_store.py"]
    for test_id in DESELECTED:
        cmd += ["--deselect", test_id]
    env = dict(os.environ, BLOBPAD_LANGGRAPH_ENGINE=engine,
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    done = subprocess.run(cmd, cwd=langgraph_tests, env=env, capture_output=True, text=True, timeout=600)
    assert f"InMemoryStore is blobpad.integrations.langgraph.BlobpadStore on the {engine} engine" in done.stdout, \
        done.stdout[-3000:] + done.stderr[-3000:]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert done.returncode == 0 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, \
        done.stdout[-5000:] + done.stderr[-3000:]
    passed = counts["tests"]
    assert passed + len(DESELECTED) == CASES, f"{passed} passed, {len(DESELECTED)} deselected, of {CASES} cases"
    print(f"LangGraph {PINNED} tests/test_store.py on {engine}: {passed} passed, {len(DESELECTED)} deselected")
