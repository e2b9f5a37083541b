"""The graph tests' helpers (tests/graph: the private `test.*` operators, the VDLA example models),
importable here: the executor tests build graphs of them."""
import importlib.util
import pathlib
import sys

_GRAPH = pathlib.Path(__file__).resolve().parent.parent / "graph"
sys.path.insert(0, str(_GRAPH))
if "tessera_test_graph_ops" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("tessera_test_graph_ops", _GRAPH / "graph_ops.py")
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["tessera_test_graph_ops"] = _mod
    _spec.loader.exec_module(_mod)
