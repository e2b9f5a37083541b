"""The machine's memory read bandwidth, measured: read_bandwidth.c (a STREAM-like read kernel, package
data) behind a PrimFunc, built by the target's C backend like the decoding step (generation.engine)
and run at the target's threads. A decoding step reads every weight once, so the weights' bytes divided
by this bandwidth is the floor of its time (benchmarks/generate.py compares the step to it).

    k = ReadKernel(494_000_000, "c -num-threads=2")   # an array of that many bytes, filled once
    k.seconds()                                       # one timed pass over it
    read_bandwidth(494_000_000, "c -num-threads=2")   # bytes per second: the median of a few passes

Measure over as many bytes as the step reads: caches make a smaller array read faster.
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np

from ..build_module import build
from ..errors import TesseraError
from ..ir import AttrStmt, Buffer, Call, Evaluate, PrimFunc, StringImm, Var
from ..ir.expr import BufferLoad
from ..target import Target

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "read_bandwidth.c")
_BLOCK = 64               # floats a kernel iteration reads
_MODULES: dict = {}


def _read_function() -> PrimFunc:
    """rb_read(a, n, threads, out): a float32 [n] read whole, out float32 [threads] its partial sums."""
    n, threads = Var("n", "int64"), Var("threads", "int64")
    a, out = Buffer((n,), "float32", "a"), Buffer((threads,), "float32", "out")

    def addr(b):
        return Call("handle", "address_of", [BufferLoad(b, [0])])

    with open(_SOURCE, encoding="utf-8") as f:
        source = f.read()
    call = Evaluate(Call("handle", "rb_read", [addr(a), n, threads, addr(out)]))
    body = AttrStmt(StringImm("rb_read"), "pragma_import_c", StringImm(source), call)
    return PrimFunc([a, out], body, attrs={"written_params": (1,)}, name="read_bandwidth")


def _module(target: Target):
    key = str(target)
    if key not in _MODULES:
        _MODULES[key] = build(_read_function(), target=target)
    return _MODULES[key]


class ReadKernel:
    """An array of `nbytes` (rounded up to 256 bytes) and the compiled read kernel at `target`'s threads."""

    def __init__(self, nbytes: int, target=None):
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 1:
            raise TesseraError(f"read bandwidth: nbytes must be a positive int, got {nbytes!r}")
        target = Target.host() if target is None else Target(target)
        if target.kind != "c":
            raise TesseraError(f"read bandwidth: the read kernel runs on CPU targets (kind 'c'), not {str(target)!r}")
        self.target = target
        self.threads = max(1, target.num_threads)         # (Target: -num-threads, else every usable core)
        n = -(-int(nbytes) // (4 * _BLOCK)) * _BLOCK
        self.array = np.ones(n, np.float32)            # written, so every page is backed before timing
        self.out = np.zeros(self.threads, np.float32)
        self._fn = _module(target)["read_bandwidth"]

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def run(self) -> None:
        self._fn(self.array, self.out)

    def seconds(self) -> float:
        """One timed pass over the array."""
        t0 = time.perf_counter()
        self._fn(self.array, self.out)
        return time.perf_counter() - t0

    def check(self) -> None:
        """The partial sums are the array's (all ones): the kernel read every element."""
        if float(self.out.astype(np.float64).sum()) != float(self.array.size):
            raise TesseraError(f"read bandwidth: the kernel summed {float(self.out.sum())}, not {self.array.size}")


def read_bandwidth(nbytes: int, target=None, repeat: int = 5) -> float:
    """Bytes per second the read kernel reaches over `nbytes`: the median of `repeat` passes after one."""
    k = ReadKernel(nbytes, target)
    k.run()
    k.check()
    return k.nbytes / statistics.median(k.seconds() for _ in range(max(1, int(repeat))))
