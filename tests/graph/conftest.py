"""Registers the private `test.*` operators (graph_ops.py) under a unique module name."""
import importlib.util
import pathlib
import sys

if "tessera_test_graph_ops" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("tessera_test_graph_ops",
                                                   pathlib.Path(__file__).with_name("graph_ops.py"))
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["tessera_test_graph_ops"] = _mod
    _spec.loader.exec_module(_mod)
