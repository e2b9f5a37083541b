"""The tracer: runs a rewritten kernel with its constexprs bound and records the tile IR.

Each builder call appends one op (with the kernel line that made it) to the region being traced; a
runtime for loop traces its body once into a nested region. `trace(...)` returns the Function.
"""
from __future__ import annotations

import numbers

from . import core, ir
from .core import KernelError, tensor, to_tensor
from .frontend import location
from .ir import Op, Param, Region, TileType, Value


class Tracer:
    """The builder that records ops (core.py asks the current builder for every result)."""

    def __init__(self):
        self.regions = [[]]
        self.grid_rank = 1

    # the protocol of core.py's builder --------------------------------------------------------
    def location(self):
        return location()

    def emit(self, kind, operands=(), result_types=(), attrs=(), region=None):
        results = tuple(Value(t) for t in result_types)
        op = Op(kind, tuple(operands), results, tuple(attrs), self.location(), region)
        self.regions[-1].append(op)
        return results

    def one(self, kind, operands, ty, attrs=()):
        return self.emit(kind, operands, (ty,), attrs)[0]

    def constant(self, value, ty):
        if ty.element.is_bool():
            value = bool(value)
        elif ty.element.is_int():
            value = int(value)
        else:
            value = float(value)
        return self.one("constant", (), ty, (("value", value),))

    def program_id(self, axis, ty):
        self.grid_rank = max(self.grid_rank, axis + 1)
        return self.one("program_id", (), ty, (("axis", axis),))

    def num_programs(self, axis, ty):
        self.grid_rank = max(self.grid_rank, axis + 1)
        return self.one("num_programs", (), ty, (("axis", axis),))

    def arange(self, start, end, ty):
        return self.one("arange", (), ty, (("start", start), ("end", end)))

    def splat(self, x, ty):
        return self.one("splat", (x,), ty)

    def broadcast(self, x, ty):
        return self.one("broadcast", (x,), ty)

    def expand_dims(self, x, axis, ty):
        return self.one("expand_dims", (x,), ty, (("axis", axis),))

    def reshape(self, x, ty):
        return self.one("reshape", (x,), ty)

    def trans(self, x, perm, ty):
        return self.one("trans", (x,), ty, (("perm", tuple(perm)),))

    def binary(self, op, a, b, ty):
        return self.one("binary", (a, b), ty, (("op", op),))

    def unary(self, op, x, ty):
        return self.one("unary", (x,), ty, (("op", op),))

    def fma(self, a, b, c, ty):
        return self.one("fma", (a, b, c), ty)

    def where(self, c, a, b, ty):
        return self.one("where", (c, a, b), ty)

    def cast(self, x, ty):
        return self.one("cast", (x,), ty)

    def addptr(self, p, off, ty):
        return self.one("addptr", (p, off), ty)

    def load(self, p, mask, other, ty):
        ops = (p,) if mask is None else (p, mask, other)
        return self.one("load", ops, ty)

    def store(self, p, v, mask):
        self.emit("store", (p, v) if mask is None else (p, v, mask))

    def atomic_add(self, p, v, mask, ty):
        return self.one("atomic_add", (p, v) if mask is None else (p, v, mask), ty)

    def reduce(self, kind, x, axis, ty):
        return self.one("reduce", (x,), ty, (("kind", kind), ("axis", axis)))

    def reduce_fn(self, xs, axis, fn, in_types, out_types, n):
        # the combine function traced once on scalars: a region (a0.., b0..) -> yields
        args = tuple(Value(TileType(t.element, ())) for t in in_types) + \
            tuple(Value(TileType(t.element, ())) for t in in_types)
        self.regions.append([])
        try:
            a = [tensor(v, v.type) for v in args[:n]]
            b = [tensor(v, v.type) for v in args[n:]]
            res = fn(*(a + b)) if n == 1 else fn(tuple(a), tuple(b))
        finally:
            ops = self.regions.pop()
        res = list(res) if isinstance(res, (tuple, list)) else [res]
        if len(res) != n:
            raise core.error(f"reduce: combine_fn returned {len(res)} values for {n} inputs")
        ys = []
        for r, t in zip(res, in_types):
            r = core.cast(to_tensor(r), t.element) if not isinstance(r, tensor) else r
            if r.type != TileType(t.element, ()):
                raise core.error(f"reduce: combine_fn must return scalars of {t.element}, got {r.type}")
            ys.append(r.handle)
        region = Region(args, tuple(ops), tuple(ys))
        return self.emit("reduce", xs, out_types, (("kind", "combine"), ("axis", axis)), region)

    def dot(self, a, b, acc, ty):
        return self.one("dot", (a, b, acc), ty)

    def hint(self, x, kind, values, ty):
        return self.one("hint", (x,), ty, (("kind", kind), ("values", tuple(values))))

    def for_loop(self, bounds, body, inits, names):
        bounds = [core._unwrap(b) for b in bounds]
        if len(bounds) == 1:
            bounds = [0, bounds[0], 1]
        elif len(bounds) == 2:
            bounds = [bounds[0], bounds[1], 1]
        lb, ub, step = bounds
        if isinstance(step, numbers.Integral) and step == 0:
            raise core.error("range() step must not be zero")
        vals = [to_tensor(b) for b in (lb, ub, step)]
        for v in vals:
            if v.type.shape or not (v.dtype.is_int()):
                raise core.error(f"range() bounds must be integer scalars, got {v.type}")
        idt = ir.int64 if any(v.dtype.bits == 64 for v in vals) else ir.int32
        vals = [core.cast(v, idt) for v in vals]
        init_ts = []
        for name, x in zip(names, inits):
            x = core._unwrap(x)
            if not isinstance(x, (tensor, numbers.Number)):
                raise core.error(f"the loop changes {name!r}, a {type(x).__name__}; a loop may carry only "
                                 f"kernel values and numbers")
            init_ts.append(to_tensor(x))
        iv = Value(TileType(idt, ()), "")
        args = [Value(t.type) for t in init_ts]
        self.regions.append([])
        try:
            out = body(tensor(iv, iv.type), *[tensor(a, a.type) for a in args])
        finally:
            ops = self.regions.pop()
        yields = []
        self.regions.append(list(ops))
        try:
            for name, init, y in zip(names, init_ts, out):
                y = core._unwrap(y)
                if isinstance(y, numbers.Number) and not isinstance(y, bool) and not init.type.shape:
                    y = core.cast(to_tensor(y, init), init.dtype)
                core.check_carried(name, init, y)
                yields.append(y.handle)
        finally:
            ops = self.regions.pop()
        region = Region((iv,) + tuple(args), tuple(ops), tuple(yields))
        results = self.emit("for", [v.handle for v in vals] + [t.handle for t in init_ts],
                            [t.type for t in init_ts], (("names", tuple(names)),), region)
        return tuple(tensor(r, r.type) for r in results)


def trace(make, name: str, params: list, constexprs: dict, kwarg_names=()) -> ir.Function:
    """Trace the rewritten kernel `make` (frontend.rewrite's result): params is a list of (name,
    signature) for the runtime arguments: ("ptr", DType) | ("scalar", DType) | ("const", value)
    (an argument specialized to its value, e.g. an int equal to 1)."""
    tracer = Tracer()
    prev = getattr(core._state, "builder", None)
    core._state.builder = tracer
    try:
        fn = make(tracer.for_loop)
        kwargs, fparams = dict(constexprs), []
        for pname, (kind, what) in params:
            if kind == "ptr":
                v = Value(TileType(ir.PointerType(what), ()), pname)
                fparams.append(Param(pname, v, "pointer"))
                kwargs[pname] = tensor(v, v.type)
            elif kind == "scalar":
                v = Value(TileType(what, ()), pname)
                fparams.append(Param(pname, v, "scalar"))
                kwargs[pname] = tensor(v, v.type)
            else:
                kwargs[pname] = what
        fn(**kwargs)
    finally:
        core._state.builder = prev
    body = Region((), tuple(tracer.regions[0]), ())
    return ir.Function(name, tuple(fparams), body, tuple(sorted(constexprs.items())), tracer.grid_rank)

__all__ = ["Tracer", "trace", "KernelError"]
