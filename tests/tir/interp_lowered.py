"""A reference interpreter of tessera IR for the lowering tests (slow, simple, strict).

It runs unlowered functions (blocks with TVM's semantics: iter vars bound to their values, the
init run when every reduce iter var is at its domain minimum) and lowered ones (flat buffers via
attrs["flat_params"], Ramp/Broadcast vectors as numpy arrays). Out-of-bounds indices raise, and
fresh allocations are filled with garbage (NaN / 77) so a missing init shows up in the results.

    run(func, [a, b, c])   # numpy arrays for Buffer params (written in place), numbers for Vars
A parameter Buffer with explicit strides is passed as its 1-D storage array.
"""
from __future__ import annotations

import math

import numpy as np

from tessera import ir
from tessera.ir import numpy_dtype


class InterpError(Exception):
    pass


def run(func: ir.PrimFunc, args):
    Interp(func, args).exec(func.body)


def _garbage(dtype):
    dt = numpy_dtype(dtype)
    if dt.kind == "f" or dtype == "bfloat16":
        return np.nan
    return True if dt == np.bool_ else 77


def _trunc_div(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        q = np.abs(a) // np.abs(b)
        return np.where((np.asarray(a) >= 0) == (np.asarray(b) >= 0), q, -q)
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.asarray(x).dtype])(x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_CALLS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs, "fabs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": np.rint, "nearbyint": np.rint, "trunc": np.trunc,
    "sigmoid": _sigmoid, "erf": _erf, "rsqrt": lambda x: 1 / np.sqrt(x), "power": np.power,
    "pow": np.power, "fma": lambda a, b, c: a * b + c, "sin": np.sin, "cos": np.cos,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.invert, "shift_left": np.left_shift, "shift_right": np.right_shift,
}


class Interp:
    def __init__(self, func, args):
        if len(args) != len(func.params):
            raise InterpError(f"{len(args)} arguments for {len(func.params)} parameters")
        self.vars, self.bufs = {}, {}
        flat = func.attrs.get("flat_params") or (None,) * len(func.params)
        for p, a, fp in zip(func.params, args, flat):
            if isinstance(p, ir.Var):
                self.vars[p] = a
                continue
            if p.strides:
                storage = a
                view = self.strided_view(p, storage)
            else:
                for s, n in zip(p.shape, a.shape):
                    if isinstance(s, ir.Var) and s not in self.vars:
                        self.vars[s] = n
                shape = tuple(self.eval(s) for s in p.shape)
                if a.shape != shape or a.dtype != numpy_dtype(p.dtype):
                    raise InterpError(f"argument {p.name}: got {a.shape} {a.dtype}, want {shape} {p.dtype}")
                view, storage = a, a.reshape(-1)
                if not np.shares_memory(storage, a):
                    raise InterpError(f"argument {p.name} must be contiguous")
            self.bufs[p] = view
            if fp is not None:
                self.bufs[fp] = storage

    def strided_view(self, buf, storage):
        shape = tuple(self.eval(s) for s in buf.shape)
        strides = tuple(self.eval(s) * storage.itemsize for s in buf.strides)
        return np.lib.stride_tricks.as_strided(storage, shape, strides)

    def alloc(self, buf):
        if buf.strides:
            size = 1 + sum((self.eval(s) - 1) * self.eval(st) for s, st in zip(buf.shape, buf.strides))
            storage = np.full(size, _garbage(buf.dtype), numpy_dtype(buf.dtype))
            return self.strided_view(buf, storage)
        shape = tuple(self.eval(s) for s in buf.shape)
        return np.full(shape, _garbage(buf.dtype), numpy_dtype(buf.dtype))

    # ----------------------------------------------------------------------------- statements
    def exec(self, s):
        getattr(self, "s_" + type(s).__name__)(s)

    def s_For(self, s):
        lo, ext = self.eval(s.min), self.eval(s.extent)
        for i in range(lo, lo + ext):
            self.vars[s.loop_var] = i
            self.exec(s.body)
        self.vars.pop(s.loop_var, None)

    def s_SeqStmt(self, s):
        for x in s.seq:
            self.exec(x)

    def s_BufferStore(self, s):
        arr = self.bufs[s.buffer]
        idx = self.indices(s.buffer, arr, s.indices)
        value = self.eval(s.value)
        if s.value.dtype.lanes != max([1] + [np.size(i) for i in idx]):
            raise InterpError(f"store to {s.buffer.name}: value lanes do not match the indices")
        arr[idx] = value

    def s_IfThenElse(self, s):
        c = self.eval(s.condition)
        if np.ndim(c) != 0:
            raise InterpError("vector condition in IfThenElse")
        if c:
            self.exec(s.then_case)
        elif s.else_case is not None:
            self.exec(s.else_case)

    def s_LetStmt(self, s):
        self.vars[s.var] = self.eval(s.value)
        self.exec(s.body)
        del self.vars[s.var]

    def s_Allocate(self, s):
        self.bufs[s.buffer] = self.alloc(s.buffer)
        self.exec(s.body)
        del self.bufs[s.buffer]

    def s_Evaluate(self, s):
        self.eval(s.value)

    def s_AttrStmt(self, s):
        self.exec(s.body)

    def s_AssertStmt(self, s):
        if not self.eval(s.condition):
            raise InterpError(s.message)
        self.exec(s.body)

    def s_BlockRealize(self, r):
        if not self.eval(r.predicate):
            return
        b = r.block
        values = [self.eval(v) for v in r.iter_values]
        for iv, v in zip(b.iter_vars, values):
            lo, ext = self.eval(iv.dom.min), self.eval(iv.dom.extent)
            if not lo <= v < lo + ext:
                raise InterpError(f"block {b.name_hint}: {iv.var.name} = {v} outside [{lo}, {lo + ext})")
        for iv, v in zip(b.iter_vars, values):
            self.vars[iv.var] = v
        for buf in b.alloc_buffers:
            self.bufs[buf] = self.alloc(buf)
        if b.init is not None and all(v == self.eval(iv.dom.min) for iv, v in zip(b.iter_vars, values)
                                      if iv.iter_type == "reduce"):
            self.exec(b.init)
        self.exec(b.body)
        for buf in b.alloc_buffers:
            del self.bufs[buf]
        for iv in b.iter_vars:
            del self.vars[iv.var]

    # ---------------------------------------------------------------------------- expressions
    def indices(self, buf, arr, indices):
        idx = tuple(self.eval(i) for i in indices)
        if len(idx) != arr.ndim:
            raise InterpError(f"{buf.name}: {len(idx)} indices for a {arr.ndim}-d array")
        for d, i in enumerate(idx):
            if np.min(i) < 0 or np.max(i) >= arr.shape[d]:
                raise InterpError(f"{buf.name}: index {i} out of bounds [0, {arr.shape[d]}) in dim {d}")
        return idx

    def eval(self, e):
        return getattr(self, "e_" + type(e).__name__)(e)

    def e_IntImm(self, e):
        return bool(e.value) if e.dtype.is_bool() else e.value

    def e_FloatImm(self, e):
        return numpy_dtype(e.dtype).type(e.value)

    def e_Var(self, e):
        try:
            return self.vars[e]
        except KeyError:
            raise InterpError(f"unbound variable {e.name}") from None

    e_SizeVar = e_Var

    def e_Add(self, e):
        return self.eval(e.a) + self.eval(e.b)

    def e_Sub(self, e):
        return self.eval(e.a) - self.eval(e.b)

    def e_Mul(self, e):
        return self.eval(e.a) * self.eval(e.b)

    def e_Div(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return a / b if e.dtype.is_float() else _trunc_div(a, b)

    def e_Mod(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return np.fmod(a, b) if e.dtype.is_float() else a - _trunc_div(a, b) * b

    def e_FloorDiv(self, e):
        return self.eval(e.a) // self.eval(e.b)

    def e_FloorMod(self, e):
        return self.eval(e.a) % self.eval(e.b)

    def e_Min(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return np.minimum(a, b) if np.ndim(a) or np.ndim(b) else min(a, b)

    def e_Max(self, e):
        a, b = self.eval(e.a), self.eval(e.b)
        return np.maximum(a, b) if np.ndim(a) or np.ndim(b) else max(a, b)

    def e_EQ(self, e):
        return self.eval(e.a) == self.eval(e.b)

    def e_NE(self, e):
        return self.eval(e.a) != self.eval(e.b)

    def e_LT(self, e):
        return self.eval(e.a) < self.eval(e.b)

    def e_LE(self, e):
        return self.eval(e.a) <= self.eval(e.b)

    def e_GT(self, e):
        return self.eval(e.a) > self.eval(e.b)

    def e_GE(self, e):
        return self.eval(e.a) >= self.eval(e.b)

    def e_And(self, e):
        return np.logical_and(self.eval(e.a), self.eval(e.b))

    def e_Or(self, e):
        return np.logical_or(self.eval(e.a), self.eval(e.b))

    def e_Not(self, e):
        return np.logical_not(self.eval(e.a))

    def e_Select(self, e):
        c, t, f = self.eval(e.condition), self.eval(e.true_value), self.eval(e.false_value)
        if np.ndim(c) == 0 and np.ndim(t) == 0:
            return t if c else f
        return np.where(c, t, f)

    def e_Cast(self, e):
        v = self.eval(e.value)
        dt = numpy_dtype(e.dtype.element_of())
        if dt.kind in "iu" and np.asarray(v).dtype.kind == "f":
            v = np.trunc(v)
        if np.ndim(v) == 0:
            out = np.asarray(v).astype(dt)[()]
            return int(out) if dt.kind in "iu" else bool(out) if dt == np.bool_ else out
        return np.asarray(v).astype(dt)

    def e_Let(self, e):
        self.vars[e.var] = self.eval(e.value)
        out = self.eval(e.body)
        del self.vars[e.var]
        return out

    def e_Call(self, e):
        if e.op == "if_then_else":
            c = self.eval(e.args[0])
            if np.ndim(c) == 0:
                return self.eval(e.args[1]) if c else self.eval(e.args[2])
            return np.where(c, self.eval(e.args[1]), self.eval(e.args[2]))
        fn = _CALLS.get(e.op)
        if fn is None:
            raise InterpError(f"no reference for call {e.op!r}")
        out = fn(*[self.eval(a) for a in e.args])
        dt = numpy_dtype(e.dtype.element_of())
        return np.asarray(out).astype(dt) if np.ndim(out) else dt.type(out)

    def e_Ramp(self, e):
        return self.eval(e.base) + self.eval(e.stride) * np.arange(e.lanes, dtype=np.int64)

    def e_Broadcast(self, e):
        v = self.eval(e.value)
        return np.full(e.lanes, v, dtype=np.asarray(v).dtype if e.dtype.is_float() else None)

    def e_BufferLoad(self, e):
        arr = self.bufs[e.buffer]
        v = arr[self.indices(e.buffer, arr, e.indices)]
        if np.ndim(v) == 0 and e.buffer.dtype.is_integer():
            return int(v)
        return v
