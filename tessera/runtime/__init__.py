"""The runtime: NDArrays, compiled Modules (ctypes), the executors of compiled models (over a Plan:
runtime/plan.py), and the C compiler driver with its cache (runtime/c_compiler.py: compile_source, which
loading and running a library never import). The runtime imports nothing from graph, ops or frontend,
and nothing of the code generator (tessera.abi is the calling convention both sides share)."""
from . import nd
from .aot_executor import AotExecutor
from .executor import Executor
from .graph_executor import GraphExecutor
from .library import load_module
from .module import BenchmarkResult, Function, Module
from .ndarray import NDArray
from .plan import Plan
from .profile import ProfileReport

__all__ = ["AotExecutor", "BenchmarkResult", "Executor", "Function", "GraphExecutor", "Module", "NDArray", "Plan",
           "ProfileReport", "load_module", "nd"]
