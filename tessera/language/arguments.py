"""The arguments of a tile kernel's launch: arrays as a compiled module (or the interpreter) takes
them and the flat views their pointer parameters address, constexprs as specialization keys, and the
grid (its extents, and a GPU build's launch bucket). jit.py binds a launch with these; the
interpreter and the autotuner read the same views.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import TesseraError
from ..runtime.ndarray import NDArray
from ..runtime.opencl import DeviceArray
from ..target import Target
from . import ir
from .core import constexpr


def hashable(v, name, kernel):
    try:
        hash(v)
    except TypeError:
        raise TesseraError(f"kernel {kernel}: constexpr {name}={v!r} is not hashable (constexprs key the "
                           f"compiled kernels)") from None
    if isinstance(v, ir.DType):
        return ("dtype", v.ir)
    return (type(v).__name__, v)


def as_array(v, name, kernel, target):
    """An argument as something a compiled module takes: a numpy array (NDArrays, CPU torch tensors
    and other DLPack producers are viewed without copying) or an OpenCL DeviceArray."""
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, NDArray):
        return v.numpy()
    if getattr(v, "device", None) == "opencl" and hasattr(v, "buffer"):
        return v
    if hasattr(v, "__cuda_array_interface__"):      # a CUDA device array (cupy's): for cuda targets
        if target is not None and Target(target).kind != "cuda":
            raise TesseraError(f"kernel {kernel}: argument {name} is a CUDA device array; launch with target='cuda'")
        return v
    if hasattr(v, "__dlpack__"):
        dev = getattr(v, "device", None)
        if dev is not None and getattr(dev, "type", "cpu") != "cpu":
            raise TesseraError(f"kernel {kernel}: argument {name} is on device {dev}; tessera's tile kernels take "
                               f"CPU tensors (and OpenCL device arrays)")
        try:
            return np.from_dlpack(v)
        except (TypeError, BufferError, RuntimeError) as e:
            if "bfloat16" in str(getattr(v, "dtype", "")):
                import ml_dtypes
                import torch

                return np.from_dlpack(v.view(torch.int16)).view(ml_dtypes.bfloat16)
            raise TesseraError(f"kernel {kernel}: argument {name} could not be viewed through DLPack: {e}") from None
    raise TesseraError(f"kernel {kernel}: argument {name} is a {type(v).__name__}; a kernel takes arrays (numpy, "
                       f"tessera NDArray, CPU torch tensors, OpenCL device arrays), Python ints and floats, and "
                       f"constexprs")


def size(arr) -> int:
    return int(np.prod(arr.shape, dtype=np.int64)) if not isinstance(arr, np.ndarray) else span(arr)


def shape_of(arr):
    return (size(arr),)


def span(a: np.ndarray) -> int:
    """Elements from a's first element to its last one in memory (its pointer's reach)."""
    if a.size == 0:
        return 0
    if any(s < 0 for s in a.strides):
        raise TesseraError("a kernel argument with negative strides (a reversed view) is not supported; pass "
                           "np.ascontiguousarray(x)")
    item = a.itemsize
    for s in a.strides:
        if s % item:
            raise TesseraError(f"a kernel argument's strides {a.strides} are not multiples of its element size")
    return 1 + sum((d - 1) * (s // item) for d, s in zip(a.shape, a.strides))


def flat(a):
    """The 1-d view a kernel's pointer parameter addresses (elements from the first one on)."""
    if not isinstance(a, np.ndarray):
        return flat_device(a)
    if a.flags.c_contiguous:
        return a.reshape(-1)
    n = span(a)
    return np.lib.stride_tricks.as_strided(a, shape=(n,), strides=(a.itemsize,))


def flat_device(a):
    if hasattr(a, "__cuda_array_interface__"):
        if not a.flags.c_contiguous:
            raise TesseraError("a CUDA device array argument must be C-contiguous")
        return a.reshape(-1)
    if a.ndim == 1:
        return a
    out = DeviceArray.__new__(DeviceArray)
    for slot in DeviceArray.__slots__:
        if slot != "__weakref__":
            object.__setattr__(out, slot, getattr(a, slot))
    out.shape = (a.size,)
    return out


def launch_grid(grid, bound, kernel) -> tuple:
    g = grid(bound) if callable(grid) else grid
    if isinstance(g, numbers.Integral):
        g = (g,)
    try:
        g = tuple(int(x.value if isinstance(x, constexpr) else x) for x in g)
    except TypeError:
        raise TesseraError(f"kernel {kernel}: the grid must be a tuple of ints (or a function of the arguments "
                           f"returning one), got {g!r}") from None
    if not 1 <= len(g) <= 3 or any(x < 0 for x in g):
        raise TesseraError(f"kernel {kernel}: the grid must have 1 to 3 non-negative extents, got {g}")
    if any(x >= 2**31 for x in g):
        raise TesseraError(f"kernel {kernel}: grid {g} has an extent of 2^31 or more")
    return g + (1,) * (3 - len(g))


def grid_bucket(g) -> tuple:
    """Launch extents of a GPU build: each axis rounded up to a power of two, capped."""
    caps = (1 << 16, 1 << 12, 1 << 8)
    out = []
    for x, cap in zip(g, caps):
        b = 1
        while b < x and b < cap:
            b *= 2
        out.append(b)
    return tuple(out)


__all__ = ["hashable", "as_array", "size", "shape_of", "span", "flat", "flat_device", "launch_grid", "grid_bucket"]
