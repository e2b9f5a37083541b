"""The module import graph of tessera/, function-local imports included: no file-level cycle, and no
function-local import of a tessera module (a local import would hide a cycle or an upward import from
the layer contracts' reader). The package face tessera/__init__.py is the one exception: it loads its
subpackages on first use, so that `import tessera` does not import torch, onnx or xgboost."""
import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAZY_FACE = {"tessera/__init__.py"}

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter, in the dev extra")


def _cycles(graph) -> list:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle_between_files():
    graph = grimp.build_graph("tessera")
    cycles = _cycles(graph)
    assert not cycles, "import cycles (function-local imports included):\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def _local_imports(path: pathlib.Path) -> list:
    """(line, module) of the imports of tessera modules that are not at a module's top level."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if id(node) in top or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level > 0 or (node.module or "").startswith("tessera"):
                out.append((node.lineno, "." * node.level + (node.module or "")))
        elif any(a.name.startswith("tessera") for a in node.names):
            out.append((node.lineno, ", ".join(a.name for a in node.names)))
    return out


def test_no_function_local_import_of_a_tessera_module():
    found = []
    for path in sorted((ROOT / "tessera").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in LAZY_FACE:
            continue
        found += [f"{rel}:{line}: {mod}" for line, mod in _local_imports(path)]
    assert not found, "function-local imports of tessera modules (import them at the top):\n" + "\n".join(found)


def test_the_checks_see_a_cycle_and_a_local_import(tmp_path, monkeypatch):
    """The two checks can fail: a package whose modules import each other (one inside a function)."""
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("cyclepkg", None)
    assert _cycles(grimp.build_graph("cyclepkg")) == [["cyclepkg.a", "cyclepkg.b"]]
    assert _local_imports(pkg / "b.py") == [(2, ".")]
