"""The house (docs/architecture.md): layers that import only downwards, no import cycle,
bindings small, and the public API where it was.

Layers, bottom first: the contract (value types and codecs, the standard library only),
the engine (``storetest._engine``), the bindings, the clauses, ``check()`` and what a run
reports, then the front (the plugin, the command line, the report). A module may import
its own layer and the layers below it, never one above; imports inside functions count,
those under ``if TYPE_CHECKING:`` do not (they never run).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import storetest

SRC = Path(storetest.__file__).resolve().parent.parent
ROOT = SRC.parent

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("contract", ("storetest", "storetest.contract", "storetest.codec", "storetest.entries", "storetest.items",
                  "storetest.projections")),
    ("engine", ("storetest._engine",)),
    ("bindings", ("storetest.bindings",)),
    ("clauses", ("storetest.clauses",)),
    ("check", ("storetest.runner", "storetest.results", "storetest.databases")),
    ("front", ("storetest.plugin", "storetest.cli", "storetest.report", "storetest.durable")),
)


def _layer(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    if rank < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")
    return rank


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "storetest").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(path: Path, module: str) -> set[str]:
    """The storetest modules ``module`` imports when it runs (TYPE_CHECKING blocks apart)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                # `from storetest._engine import stops` imports the module storetest._engine.stops
                names.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in _MODULES else base)
    return {n for n in names if n == "storetest" or n.startswith("storetest.")}


_MODULES = _modules()


def test_every_module_is_in_a_layer_and_imports_none_above_it() -> None:
    upward = []
    for module, path in _MODULES.items():
        for imported in _imports(path, module):
            if imported in _MODULES and _layer(imported) > _layer(module):
                upward.append(f"{module} ({LAYERS[_layer(module)][0]}) imports {imported} "
                              f"({LAYERS[_layer(imported)][0]})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle() -> None:
    graph = {m: {i for i in _imports(p, m) if i in _MODULES and i != m} for m, p in _MODULES.items()}
    # A package's __init__ importing its own submodules is how Python packages work: not a cycle.
    for m in graph:
        graph[m] = {i for i in graph[m] if not i.startswith(m + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt):], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_each_binding_module_is_under_300_lines() -> None:
    bindings = sorted((SRC / "storetest" / "bindings").glob("*.py"))
    assert len(bindings) >= 4
    long = {p.name: n for p in bindings if (n := len(p.read_text(encoding="utf-8").splitlines())) >= 300}
    assert not long, long


def test_every_public_name_imports_from_storetest() -> None:
    for name in storetest.__all__:
        assert getattr(storetest, name) is not None, name


DOCUMENTED_MODULES = (
    "storetest.contract", "storetest.codec", "storetest.entries", "storetest.items", "storetest.projections",
    "storetest.databases", "storetest.plugin", "storetest.cli", "storetest.report", "storetest.results",
    "storetest.runner", "storetest.clauses", "storetest.bindings.openai_agents", "storetest.bindings.langchain",
    "storetest.bindings.adk", "storetest.bindings.agent_framework", "storetest.bindings.agent_framework_sessions",
    "reference_stores.durable",
)


@pytest.mark.parametrize("module", DOCUMENTED_MODULES)
def test_each_documented_module_path_imports(module: str) -> None:
    importlib.import_module(module)


def test_the_old_durable_path_still_imports_with_a_deprecation_warning() -> None:
    code = ("import warnings; warnings.simplefilter('error')\n"
            "try:\n    import storetest.durable\nexcept DeprecationWarning as w:\n    print('warned:', w)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "warned:" in done.stdout and "reference_stores.durable" in done.stdout, done.stdout + done.stderr
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("storetest.durable")
    new = importlib.import_module("reference_stores.durable")
    assert old.DurableSession is new.DurableSession


def test_the_install_makes_only_the_two_packages_importable(tmp_path: Path) -> None:
    """The editable install puts src/ on sys.path, not the clone's root: from another
    directory, ``tests``, ``scripts``, ``benchmarks`` and ``examples`` are not importable."""
    # Another distribution may own a top-level name (one installs an `examples` namespace into
    # site-packages): what must not happen is that the name resolves into this clone.
    code = ("import importlib.util, storetest, reference_stores\n"
            "def where(n):\n"
            "    spec = importlib.util.find_spec(n)\n"
            "    found = [] if spec is None else [spec.origin or '', *(spec.submodule_search_locations or [])]\n"
            f"    return [p for p in found if p.startswith({str(ROOT)!r}) and 'site-packages' not in p]\n"
            "print([n for n in ('tests', 'scripts', 'benchmarks', 'examples') if where(n)])\n"
            "print(storetest.__file__)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                          env=env)
    found, origin = done.stdout.splitlines()
    assert found == "[]", done.stdout
    assert Path(origin).resolve().is_relative_to(SRC), origin
