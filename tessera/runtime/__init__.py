"""The runtime: NDArrays, compiled Modules (ctypes), and the C compiler driver with its cache."""
from . import nd
from .compiler import compile_source
from .module import BenchmarkResult, Function, Module, load_module
from .ndarray import NDArray

__all__ = ["BenchmarkResult", "Function", "Module", "NDArray", "compile_source", "load_module", "nd"]
