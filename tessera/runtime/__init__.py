"""The runtime: NDArrays, compiled Modules (ctypes), the executors of compiled models (over a Plan:
runtime/plan.py), and the C compiler driver with its cache (loaded on first use: running a library
never needs it). The runtime imports nothing from graph, ops or frontend."""
from . import nd
from .library import load_module
from .module import BenchmarkResult, Function, Module
from .ndarray import NDArray

_LAZY = {"compile_source": "compiler", "AotExecutor": "aot_executor", "GraphExecutor": "graph_executor",
         "Executor": "executor", "Plan": "plan", "ProfileReport": "profile"}


def __getattr__(name):
    home = _LAZY.get(name)
    if home is not None:
        import importlib

        return getattr(importlib.import_module(f".{home}", __name__), name)
    raise AttributeError(f"module 'tessera.runtime' has no attribute {name!r}")


__all__ = ["AotExecutor", "BenchmarkResult", "Executor", "Function", "GraphExecutor", "Module", "NDArray", "Plan",
           "ProfileReport", "compile_source", "load_module", "nd"]
