"""The layout of the package: no import cycle among blobpad's own modules.

Every import is read from the source with :mod:`ast`: at module level, inside
functions (a lazy import closes a cycle as surely as an eager one, only later) and
under ``if TYPE_CHECKING:`` (a module typed by another that imports it cannot be read,
nor moved, on its own), relative imports resolved against the importing module's
package.  ``from pkg import name`` is an import of the module ``pkg.name`` when there
is one, else of ``pkg`` itself; a parent package is not counted as imported by its
submodules (Python loads it first anyway).
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "blobpad"


def module_names(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    """Every module below ``root`` (the directory of ``package``): dotted name -> file."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, wherever it stands."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def import_graph(root: pathlib.Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (see the module docstring)."""
    modules = module_names(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]  # the package it sits in
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:  # import a.b.c of a module a.b: a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted: every
    module of one imports, directly or through the others, every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_checker_finds_cycles_through_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from .a import A\n",
        "a.py": "from . import b\nA = 1\n",
        "b.py": "def f():\n    from .sub.c import C\n    return C\n",          # a lazy import
        "sub/__init__.py": "",
        "sub/c.py": "import pkg.a\nfrom ..d import D\nC = 2\n",                # absolute, and two levels up
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .e import E\nD = 3\n",
        "e.py": "from pkg import d\n",                                          # d -> e for typing: a cycle too
        "f.py": "from pkg.sub import c\n",                                      # f imports c, nothing imports f
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(pkg, "pkg")
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.a", "pkg.d"}
    assert graph["pkg.d"] == {"pkg.e"}
    assert graph["pkg.e"] == {"pkg.d"}
    assert graph["pkg.f"] == {"pkg.sub.c"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"], ["pkg.d", "pkg.e"]]


def _shown(found: list[list[str]]) -> str:
    return "; ".join(" <-> ".join(c) for c in found)


def test_no_import_cycle_inside_blobpad():
    """Imports only go down: no module of blobpad imports one that imports it back,
    lazily (inside a function) or for typing included."""
    found = cycles(import_graph(ROOT, "blobpad"))
    assert found == [], f"import cycles among blobpad's modules: {_shown(found)}"


def test_reads_and_the_engines_never_import_the_store():
    graph = import_graph(ROOT, "blobpad")

    def reached(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    for module in ("blobpad.reads", "blobpad.view", "blobpad.codec", "blobpad.notes", "blobpad.notepad",
                   "blobpad.engine", "blobpad.engine.base", "blobpad.engine.lmdb", "blobpad.engine.memory"):
        assert "blobpad.store" not in reached(module), f"{module} imports blobpad.store, directly or not"
    assert "blobpad.store" in reached("blobpad.cli")  # the check can see an import when there is one


#: libraries of extras, or needed only by some commands: ``import blobpad`` and the CLI's start
#: must not load them (numpy alone took a quarter of every ``blobpad`` command's start)
HEAVY = ("numpy", "redis", "mcp", "matplotlib", "langgraph", "deepagents", "agents", "pydantic", "tqdm")


def test_importing_blobpad_and_its_cli_loads_no_optional_library():
    import subprocess
    import sys

    probe = "import sys, blobpad, blobpad.cli, blobpad.mcp_server; print(' '.join(m for m in sys.argv[1:] if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe, *HEAVY], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [], f"imported at start: {out.stdout.strip()}"


def test_filters_are_still_built_with_numpy_after_a_lazy_import():
    from blobpad import prefilter

    chunk = b"ERROR disk full on /dev/sda1\n" * 100
    assert prefilter.FAST
    assert prefilter.build(chunk) == prefilter.build_numpy(chunk, None, 1)  # build() took the numpy path
    assert prefilter.build_numpy(chunk, None, 1) == prefilter.build_python(chunk, None, 1)
