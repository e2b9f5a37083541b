"""The interpreter (`TESSERA_INTERPRET=1`): a kernel run on numpy, one program instance at a time.

The kernel's own Python code runs (the same rewritten function the tracer runs: a debugger steps
through it, `print` shows values), with every op computed by numpy on the block it names. A pointer
is its tensor argument's flat view and an array of element offsets; a load or store of an offset
outside the argument where the mask holds is refused, naming the kernel line, the argument, the
offset and the argument's size.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..ir.dtype import numpy_dtype
from ..target import Target
from . import core, ir
from .arguments import flat
from .core import tensor, to_tensor
from .frontend import location
from .ir import TileType
from .passes import eval_binary


class Pointer:
    """A pointer handle: the argument `name`'s flat array and offsets (an int64 array)."""

    __slots__ = ("name", "base", "off")

    def __init__(self, name, base, off):
        self.name, self.base, self.off = name, base, np.asarray(off, np.int64)


def _np(ty: TileType):
    return numpy_dtype(ty.element.ir)


_UNARY = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt, "sin": np.sin,
          "cos": np.cos, "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil, "abs": np.abs}


def _erf(x):
    try:
        from scipy.special import erf
    except ImportError:
        erf = np.vectorize(math.erf, otypes=[np.float64])
    return erf(x)


class Interpreter:
    """The builder that computes (core.py asks the current builder for every result)."""

    def __init__(self, grid):
        self.grid = grid
        self.pid = (0, 0, 0)

    def location(self):
        return location()

    def constant(self, value, ty):
        return np.asarray(value, _np(ty))

    def program_id(self, axis, ty):
        return np.asarray(self.pid[axis], np.int32)

    def num_programs(self, axis, ty):
        return np.asarray(self.grid[axis], np.int32)

    def arange(self, start, end, ty):
        return np.arange(start, end, dtype=np.int32)

    def _shape_op(self, x, f):
        if isinstance(x, Pointer):
            return Pointer(x.name, x.base, f(x.off))
        return f(x)

    def splat(self, x, ty):
        return self._shape_op(x, lambda a: np.broadcast_to(a, ty.shape).copy())

    def broadcast(self, x, ty):
        return self._shape_op(x, lambda a: np.broadcast_to(a, ty.shape).copy())

    def expand_dims(self, x, axis, ty):
        return self._shape_op(x, lambda a: np.expand_dims(a, axis))

    def reshape(self, x, ty):
        return self._shape_op(x, lambda a: np.reshape(a, ty.shape))

    def trans(self, x, perm, ty):
        return self._shape_op(x, lambda a: np.transpose(a, perm).copy())

    def binary(self, op, a, b, ty):
        el = ir.dtype_of(np.asarray(a).dtype.name)
        return eval_binary(op, np.asarray(a), np.asarray(b), el, ty.element)

    def unary(self, op, x, ty):
        with np.errstate(all="ignore"):
            if op == "not":
                r = np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)
            elif op == "rsqrt":
                r = 1.0 / np.sqrt(x.astype(np.float64))
            elif op == "sigmoid":
                r = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
            elif op == "erf":
                r = _erf(x.astype(np.float64))
            else:
                r = _UNARY[op](x)
        return np.asarray(r).astype(_np(ty))

    def fma(self, a, b, c, ty):
        return (a.astype(np.float64) * b + c).astype(_np(ty))

    def where(self, c, a, b, ty):
        if isinstance(a, Pointer) or isinstance(b, Pointer):
            if not (isinstance(a, Pointer) and isinstance(b, Pointer) and a.base is b.base):
                raise core.error("where: the two pointers point into different tensors; a pointer block must stay "
                                 "within one kernel argument")
            return Pointer(a.name, a.base, np.where(c, a.off, b.off))
        return np.where(c, a, b).astype(_np(ty))

    def cast(self, x, ty):
        if ty.element.is_bool():
            return np.asarray(x != 0)
        with np.errstate(all="ignore"):
            return np.asarray(x).astype(_np(ty))

    def addptr(self, p, off, ty):
        return Pointer(p.name, p.base, p.off + np.asarray(off, np.int64))

    def _check(self, p: Pointer, mask, what):
        off = p.off if mask is None else p.off[np.broadcast_to(mask, p.off.shape)]
        n = p.base.shape[0]
        bad = (off < 0) | (off >= n)
        if np.any(bad):
            first = int(off[bad].flat[0])
            raise core.error(f"out-of-range {what}: element offset {first} of argument {p.name!r}, which has {n} "
                             f"elements (program {self.pid[:len(self.grid)]})"
                             + ("" if mask is None else "; the mask lets it through"))

    def load(self, p, mask, other, ty):
        self._check(p, mask, "load")
        if mask is None:
            return p.base[p.off].astype(_np(ty))
        safe = np.where(mask, p.off, 0)
        vals = p.base[safe] if p.base.shape[0] else np.zeros(p.off.shape, p.base.dtype)
        return np.where(mask, vals, other).astype(_np(ty))

    def store(self, p, v, mask):
        self._check(p, mask, "store")
        v = np.broadcast_to(v, p.off.shape)
        if mask is None:
            p.base[p.off.reshape(-1)] = v.reshape(-1)
        else:
            m = np.broadcast_to(mask, p.off.shape)
            p.base[p.off[m]] = v[m]

    def atomic_add(self, p, v, mask, ty):
        self._check(p, mask, "atomic_add")
        m = np.ones(p.off.shape, bool) if mask is None else np.broadcast_to(mask, p.off.shape)
        old = np.zeros(p.off.shape, _np(ty))
        old[m] = p.base[p.off[m]]
        np.add.at(p.base, p.off[m], np.broadcast_to(v, p.off.shape)[m])
        return old

    def reduce(self, kind, x, axis, ty):
        keep = len(ty.shape) == x.ndim
        dt = _np(ty)
        if kind == "sum":
            r = np.sum(x, axis=axis, dtype=dt, keepdims=keep)
        elif kind == "max":
            r = np.max(x, axis=axis, keepdims=keep)
        elif kind == "min":
            r = np.min(x, axis=axis, keepdims=keep)
        elif kind == "argmax":
            r = np.argmax(x, axis=axis, keepdims=keep)
        else:
            r = np.argmin(x, axis=axis, keepdims=keep)
        return np.asarray(r).astype(dt)

    def reduce_fn(self, xs, axis, fn, in_types, out_types, n):
        accs = [np.take(x, 0, axis=axis) for x in xs]
        for i in range(1, xs[0].shape[axis]):
            nxt = [np.take(x, i, axis=axis) for x in xs]
            a = [tensor(h, TileType(t.element, h.shape)) for h, t in zip(accs, in_types)]
            b = [tensor(h, TileType(t.element, h.shape)) for h, t in zip(nxt, in_types)]
            res = fn(*(a + b)) if n == 1 else fn(tuple(a), tuple(b))
            res = list(res) if isinstance(res, (tuple, list)) else [res]
            accs = [np.broadcast_to(to_tensor(r).handle, acc.shape).astype(acc.dtype) for r, acc in zip(res, accs)]
        return [np.reshape(a, t.shape) for a, t in zip(accs, out_types)]

    def dot(self, a, b, acc, ty):
        wide = np.float64 if ty.element.is_floating() else np.int64
        return (a.astype(wide) @ b.astype(wide) + acc).astype(_np(ty))

    def hint(self, x, kind, values, ty):
        return x

    def for_loop(self, bounds, body, inits, names):
        bounds = [int(b.handle) if isinstance(b, tensor) else int(core._unwrap(b)) for b in bounds]
        carried = [to_tensor(x) for x in inits]
        for i in range(*bounds):
            iv = tensor(np.asarray(i, np.int64 if abs(i) >= 2**31 else np.int32),
                        TileType(ir.int64 if abs(i) >= 2**31 else ir.int32, ()))
            out = body(iv, *carried)
            nxt = []
            for name, init, y in zip(names, carried, out):
                y = core._unwrap(y)
                if not isinstance(y, tensor) and not init.type.shape:
                    y = core.cast(to_tensor(y, init), init.dtype)
                core.check_carried(name, init, y)
                nxt.append(y)
            carried = nxt
        return tuple(carried)


def interpret(kernel, bound: dict, grid: tuple):
    """Run kernel (a JITFunction) with the bound arguments over grid on numpy."""
    params, consts, values, _ = kernel.specialize(bound, Target("c"), False)
    make = kernel.rewritten()
    interp = Interpreter(grid)
    args = dict(consts)
    vals = iter(values)
    for name, (kind, what) in params:
        if kind == "ptr":
            arr = next(vals)
            if not isinstance(arr, np.ndarray):
                raise core.KernelError(f"kernel {kernel.__name__}: the interpreter runs on host arrays; argument "
                                       f"{name} is a {type(arr).__name__}")
            args[name] = tensor(Pointer(name, flat(arr), 0), TileType(ir.PointerType(what), ()))
        elif kind == "scalar":
            args[name] = tensor(np.asarray(next(vals), numpy_dtype(what.ir)), TileType(what, ()))
        else:
            args[name] = what
    prev = getattr(core._state, "builder", None)
    core._state.builder = interp
    try:
        fn = make(interp.for_loop)
        for z, y, x in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
            interp.pid = (x, y, z)
            fn(**args)
    finally:
        core._state.builder = prev
    return None
