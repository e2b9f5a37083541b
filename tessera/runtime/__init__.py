"""The runtime: NDArrays, compiled Modules (ctypes), executors of compiled models, and the C
compiler driver with its cache (loaded on first use: running a library never needs it)."""
from . import nd
from .module import BenchmarkResult, Function, Module, load_module
from .ndarray import NDArray


def __getattr__(name):
    if name == "compile_source":
        from .compiler import compile_source

        return compile_source
    if name == "AotExecutor":
        from .aot_executor import AotExecutor

        return AotExecutor
    raise AttributeError(f"module 'tessera.runtime' has no attribute {name!r}")


__all__ = ["AotExecutor", "BenchmarkResult", "Function", "Module", "NDArray", "compile_source", "load_module", "nd"]
