"""tessera's tile language: kernels written on blocks, as in Triton (`import tessera.language as tl`).

    import tessera, tessera.language as tl

    @tessera.jit
    def add(X, Y, Z, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(Z + offs, tl.load(X + offs, mask=mask) + tl.load(Y + offs, mask=mask), mask=mask)

    add[(tl.cdiv(n, 1024),)](x, y, z, n, BLOCK=1024)

A kernel is traced into the tile IR (ir.py), optimized (passes.py) and lowered to a tir.PrimFunc
(lower.py for CPU, lower_gpu.py for OpenCL and CUDA) that tessera's backends build; docs/tile.md
walks through it.
"""
from .core import *  # noqa: F401,F403  (the language's names, triton.language's)
from .core import KernelError, constexpr, tensor
from .autotuner import Autotuner, Config, autotune, heuristics
from .jit import Inspection, JITFunction, jit

__all__ = list(__import__("tessera.language.core", fromlist=["__all__"]).__all__) + [
    "jit", "JITFunction", "Inspection", "autotune", "Autotuner", "Config", "heuristics"]
