"""Lowering the tile IR to a `tir.PrimFunc` (the machine-dependent half of the tile compiler).

The grid becomes the loop over programs: one OpenMP-parallel loop on CPU (`lower_cpu`), blockIdx
loops on GPU (`lower_gpu`, each work-group walking programs grid-stride). Inside a program:

- Cheap values (integer index arithmetic, splats, broadcasts, aranges, pointer offsets) and every
  value used once are *lazy*: an element function of the tile's indices, inlined where it is used,
  so a chain of elementwise ops, the loads feeding it and the store reading it are one loop nest.
- Other values are *materialized* (`plan`): written once by a loop nest into a tile buffer (a
  per-program local array on CPU, shared memory on GPU) and read from it. Reductions, dot products
  and loop-carried values always are.
- A loop nest runs over its tile row-major; on CPU its last axis is vectorized, on GPU its
  elements are spread over the work-group's threads, consecutive threads on consecutive elements
  (coalesced where the last axis is contiguous).
- A masked access whose mask is an affine comparison (`offs < n`) gets a *peeled* fast path: when
  the whole tile is inside (a condition computed from the affine forms: the largest offset < n),
  the nest runs without masks (vector loads and stores), else with them (predicated accesses).
- `dot` stages its operands in packed row-major tiles (in fp32 for fp16/bf16) and, on CPU targets
  with AVX2/AVX-512, calls tessera's register-tiled GEMM micro-kernels
  (tir/tensor_intrin/x86.py) over them; elsewhere it is a loop nest (i, k, vectorized j).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import TesseraError
from ..ir import (Allocate, AttrStmt, Broadcast, Buffer, BufferStore, Call, Cast, Evaluate, For, IfThenElse, IntImm,
                  LetStmt, PrimExpr, PrimFunc, Select, StringImm, Var, all_of, const, max_expr, min_expr, seq,
                  structural_equal)
from ..ir import expr as E
from ..target import Target
from ..tir.tensor_intrin import TensorIntrin, x86
from . import ir
from .core import KernelError
from .ir import Function, Op, Region, Value

CHEAP_KINDS = frozenset({"constant", "program_id", "num_programs", "arange", "splat", "broadcast", "expand_dims",
                         "reshape", "trans", "hint"})
INDEX_KINDS = frozenset({"binary", "cast", "addptr", "where", "unary"})
ALWAYS = frozenset({"reduce", "dot", "for", "atomic_add"})


# ---------------------------------------------------------------------------------------------
# the materialization plan
# ---------------------------------------------------------------------------------------------
def _cheap(op: Op, defs: dict, memo: dict) -> bool:
    """Index arithmetic: worth recomputing wherever it is used (a C compiler folds it)."""
    if op in memo:
        return memo[op]
    memo[op] = False
    el = op.results[0].type.element if op.results else None
    if op.kind in CHEAP_KINDS:
        ok = True
    elif op.kind in INDEX_KINDS and el is not None and (el.is_int() or el.is_bool() or el.is_ptr()):
        ok = True
    else:
        ok = False
    if ok:
        for o in op.operands:
            d = defs.get(o)
            if d is not None and not _cheap(d, defs, memo) and o.type.shape:
                ok = False
    memo[op] = ok
    return ok


def _root_param(v: Value, defs: dict):
    """The pointer parameter a pointer value derives from (None if unknown)."""
    while True:
        d = defs.get(v)
        if d is None:
            return v
        if d.kind in ("addptr", "splat", "broadcast", "expand_dims", "reshape", "trans", "hint"):
            v = d.operands[0]
        else:
            return None


def plan(func: Function, reread_loads: bool = False) -> set:
    """The values to materialize (module docstring): results of reductions, dots, loops and atomics;
    non-cheap values used more than once or inside a loop they are not defined in; a load whose
    lazy consumer would run after a store to the same tensor. reread_loads (CPU): a load used more
    than once in its own region stays lazy, read again by each consumer (from the cache: cheaper
    than a copy into a tile buffer and a read of that)."""
    defs, uses, where, order = {}, {}, {}, {}

    def visit(r: Region, depth_key):
        for op in r.ops:
            order[op] = len(order)
            for res in op.results:
                defs[res] = op
                where[res] = depth_key
            for o in op.operands:
                uses.setdefault(o, []).append((op, depth_key))
            if op.region is not None:
                visit(op.region, op)
        for y in r.yields:
            uses.setdefault(y, []).append((None, depth_key))

    visit(func.body, None)
    memo: dict = {}
    out = set()
    for v, op in defs.items():
        if op.kind in ALWAYS:
            out.add(v)
            continue
        if _cheap(op, defs, memo):
            continue
        us = uses.get(v, [])
        if any(d is not where[v] for _, d in us) or any(u is None for u, _ in us):
            out.add(v)
        elif len(us) > 1 and not (reread_loads and op.kind == "load"):
            out.add(v)
    # loads: a store to the same tensor between the load and where its value is consumed
    stores = [(order[op], _root_param(op.operands[0], defs), op) for op in order if op.kind in ("store", "atomic_add")]
    for v, op in defs.items():
        if op.kind != "load" or v in out:
            continue
        param = _root_param(op.operands[0], defs)
        consumers = _consumers(v, uses, out)
        if consumers is None:
            out.add(v)
            continue
        lo = order[op]
        for consumer in consumers:
            hi = order[consumer]
            if any((lo < pos < hi and (p is None or param is None or p is param))
                   or (s is consumer and (p is None or param is None or p is param)
                       and s.operands[0] is not op.operands[0])   # a store reading it through other offsets
                   for pos, p, s in stores):
                out.add(v)
                break
    return out


def _consumers(v: Value, uses: dict, materialized: set):
    """The ops whose nests evaluate lazy value v (following its lazy users), or None if one is a
    loop's yield."""
    found, stack, seen = [], [v], set()
    while stack:
        x = stack.pop()
        for op, _ in uses.get(x, []):
            if op is None:
                return None
            if id(op) in seen:
                continue
            seen.add(id(op))
            if not op.results or op.kind in ALWAYS or op.results[0] in materialized:
                found.append(op)
            else:
                stack.extend(op.results)
    return found


# ---------------------------------------------------------------------------------------------
# lowered values
# ---------------------------------------------------------------------------------------------
@dataclass
class Affine:
    """base + sum(coefs[d] * idx[d]): an integer tile linear in its indices (coefs loop-invariant)."""

    base: PrimExpr
    coefs: tuple

    def at(self, idx):
        e = self.base
        for c, i in zip(self.coefs, idx):
            if not E.is_const_int(c, 0):
                e = e + (i if E.is_const_int(c, 1) else c * i)
        return e


@dataclass
class Ctx:
    """A loop nest being generated: masked (conditions of a peeled fast path collected) or not."""

    unmasked: bool = False
    conds: list = field(default_factory=list)
    peelable: bool = True


@dataclass
class Tile:
    """A lowered value: `at(idx, ctx)` its element; `affine` for integer tiles linear in the
    indices; `all_true` for a boolean tile, the condition that every element holds; `buffer` the
    tensor parameter a pointer tile points into (its elements are offsets); `reads` the tile
    buffers its elements read, `remaps` those read at other positions than its own."""

    at: object
    affine: Affine | None = None
    all_true: PrimExpr | None = None
    buffer: Buffer | None = None
    reads: frozenset = frozenset()
    remaps: frozenset = frozenset()
    param_reads: frozenset = frozenset()
    source: tuple | None = None     # a load's (tensor, pointer tile, mask tile)


def _c(v, dtype="int32"):
    return v if isinstance(v, PrimExpr) else const(v, dtype)


def _ident(kind: str, el: ir.DType):
    if kind == "sum":
        return const(0, el.ir)
    big = kind in ("min", "argmin")
    if el.is_floating():
        return const(math.inf if big else -math.inf, el.ir)
    if el.is_bool():
        return const(big, "bool")
    bits = el.bits
    if el.is_signed():
        return const((2 ** (bits - 1) - 1) if big else -(2 ** (bits - 1)), el.ir)
    return const((2 ** bits - 1) if big else 0, el.ir)


_CMP = {"lt": E.LT, "le": E.LE, "gt": E.GT, "ge": E.GE, "eq": E.EQ, "ne": E.NE}
_UNARY_CALLS = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "erf", "sin", "cos", "tanh", "floor",
                "ceil", "abs"}


def binary_expr(op: str, a: PrimExpr, b: PrimExpr, el: ir.DType) -> PrimExpr:
    """One binary op of the language on scalar or vector expressions (C's integer division)."""
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "truediv":
        return a / b
    if op == "floordiv":
        return E.Call(a.dtype, "floor", [a / b]) if el.is_floating() else E.truncdiv(a, b)
    if op == "mod":
        return E.Call(a.dtype, "fmod", [a, b]) if el.is_floating() else E.truncmod(a, b)
    if op == "max":
        return max_expr(a, b)
    if op == "min":
        return min_expr(a, b)
    if op == "and":
        return a & b
    if op == "or":
        return a | b
    if op == "xor":
        return a ^ b
    if op == "shl":
        return a << b
    if op == "shr":
        return a >> b
    return _CMP[op](a, b)


# ---------------------------------------------------------------------------------------------
# the lowering
# ---------------------------------------------------------------------------------------------
class Lowering:
    """Tile IR -> PrimFunc; subclasses say how programs and loop nests map onto the machine."""

    scope = "global"
    peel = True      # masked nests get an unmasked copy for whole tiles (vector code on CPU)
    reread_loads = True   # a load used twice is read twice (plan's docstring)

    def __init__(self, func: Function, target: Target, static: dict | None = None):
        self.func, self.target = func, target
        # static: runtime values bound as constants (a program with static extents, for the cost
        # model's features): {"args": {name: value}, "numel": {name: elements}, "grid": (x, y, z)}
        self.static = static or {}
        self.values: dict = {}
        self.allocs: list = []
        self.stmts: list = []
        self.names: dict = {}
        self.materialize = plan(func, self.reread_loads)
        self.defs = {r: op for op in ir.walk(func.body) for r in op.results}
        self.use_count: dict = {}
        for op in ir.walk(func.body):
            for o in op.operands:
                self.use_count[o] = self.use_count.get(o, 0) + 1
        for op in ir.walk(func.body):
            if op.region is not None:
                for y in op.region.yields:
                    self.use_count[y] = self.use_count.get(y, 0) + 1
        self.op = None

    # errors and names ---------------------------------------------------------------------
    def error(self, message: str) -> KernelError:
        return KernelError(message, self.op.loc if self.op is not None else None)

    def fresh(self, base: str) -> str:
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def new_buffer(self, shape, el: ir.DType, base: str) -> Buffer:
        """A tile buffer (booleans stored as int8: OpenCL keeps no bool arrays)."""
        shape = tuple(shape) or (1,)
        b = Buffer(shape, "int8" if el.is_bool() else el.ir, self.fresh(base), scope=self.scope)
        self.allocs.append(b)
        return b

    def emit(self, s):
        self.stmts.append(s)

    # the entry -----------------------------------------------------------------------------
    def run(self) -> PrimFunc:
        params, self.param_buffers = [], {}
        for p in self.func.params:
            if p.kind == "pointer":
                buf = self.param_buffer(p)
                self.param_buffers[p.value] = buf
                params.append(buf)
                self.values[p.value] = Tile(lambda idx, cx: const(0, "int32"), Affine(const(0, "int32"), ()),
                                            buffer=buf)
            elif p.name in self.static.get("args", {}):
                el = p.value.type.element
                self.values[p.value] = self.scalar_tile(const(self.static["args"][p.name], el.ir), el)
            else:
                v = Var(p.name, p.value.type.element.ir)
                params.append(v)
                self.values[p.value] = self.scalar_tile(v, p.value.type.element)
        grid_params, body = self.programs(lambda: self.region_stmts(self.func.body))
        return PrimFunc(params + grid_params, body, attrs=self.written_attr(params), name=self.func.name)

    def written_attr(self, params) -> dict | None:
        """{"written_params": the positions of the tensors the kernel stores to}: known from the tile
        IR, so a micro-kernel reading an input by address does not make it an output."""
        written = set()
        for op in ir.walk(self.func.body):
            if op.kind in ("store", "atomic_add"):
                root = _root_param(op.operands[0], self.defs)
                if root is None:
                    return None
                written.add(root)
        index = {p.value: i for i, p in enumerate(self.func.params)}
        buffers = [self.param_buffers[v] for v in written if v in self.param_buffers]
        return {"written_params": tuple(sorted(i for i, b in enumerate(params) if any(b is x for x in buffers)))} \
            if len(buffers) == len(written) and index else None

    def grid_vars(self):
        """The grid extents: parameters, or the static ones as constants."""
        if "grid" in self.static:
            return [], tuple(const(g) for g in self.static["grid"])
        g = tuple(Var(f"grid_{a}") for a in "xyz")
        return list(g), g

    def param_buffer(self, p) -> Buffer:
        n = self.static.get("numel", {}).get(p.name)
        return Buffer((max(1, n) if n is not None else Var(f"{p.name}_numel", "int64"),),
                      p.value.type.element.element_ty.ir, p.name)

    def scalar_tile(self, e: PrimExpr, el) -> Tile:
        aff = Affine(e, ()) if el.is_int() else None
        return Tile(lambda idx, cx: e, aff, all_true=e if el.is_bool() else None)

    def region_stmts(self, region: Region):
        saved, self.stmts = self.stmts, []
        try:
            for op in region.ops:
                self.op = op
                self.lower_op(op)
            return self.stmts
        finally:
            self.stmts = saved

    def wrap_allocs(self, body):
        for b in reversed(self.allocs):
            body = Allocate(b, body)
        return body

    # ops ---------------------------------------------------------------------------------
    def lower_op(self, op: Op):
        fn = getattr(self, "op_" + op.kind, None)
        if fn is None:
            raise self.error(f"the tile compiler cannot lower op {op.kind!r}")
        out = fn(op, *[self.values[o] for o in op.operands])
        if out is None:
            return
        if isinstance(out, Tile):
            out = [out]
        for res, t in zip(op.results, out):
            if res in self.materialize and op.kind not in ALWAYS:
                t = self.store_tile(t, res, res.type)
            self.values[res] = t

    def store_tile(self, t: Tile, v: Value, ty: ir.TileType, base="t") -> Tile:
        """Write tile t into a new buffer (one loop nest) and return the buffer as a tile."""
        el = ty.element
        if el.is_ptr():
            # a pointer tile is its offsets: materialize those
            buf = self.new_buffer(ty.shape, ir.int64 if self.offset_is_64(t, len(ty.shape)) else ir.int32,
                                  base + "_off")
            self.emit(self.nest(ty.shape, lambda idx, cx: BufferStore(buf, self.as_dtype(t.at(idx, cx), buf.dtype),
                                                                        self.bidx(buf, idx))))
            return self.buffer_tile(buf, ty, pointer_to=t.buffer, affine=None)
        buf = self.new_buffer(ty.shape, el, base)
        self.emit(self.nest(ty.shape, lambda idx, cx: BufferStore(buf, self.as_dtype(t.at(idx, cx), buf.dtype),
                                                                    self.bidx(buf, idx))))
        return self.buffer_tile(buf, ty, affine=None)

    def offset_is_64(self, t: Tile, nd: int) -> bool:
        probe = t.at(tuple(Var(f"p{i}") for i in range(nd)), Ctx())
        return probe.dtype.bits == 64

    @staticmethod
    def as_dtype(e: PrimExpr, dtype) -> PrimExpr:
        return e if e.dtype == dtype else Cast(dtype, e)

    def bidx(self, buf: Buffer, idx):
        return tuple(idx) if idx else (0,)

    def buffer_tile(self, buf: Buffer, ty: ir.TileType, pointer_to=None, affine=None) -> Tile:
        el = ty.element
        shape = ty.shape

        def at(idx, cx):
            v = buf[tuple(idx) if shape else (0,)]
            return v != E._const_like(0, v.dtype) if el.is_bool() else v

        scalar = not shape
        return Tile(at, Affine(buf[0], ()) if scalar and (el.is_int()) else affine,
                    all_true=at((), Ctx()) if scalar and el.is_bool() else None, buffer=pointer_to,
                    reads=frozenset([buf]))

    def op_constant(self, op, *_):
        el = op.result.type.element
        c = const(op.attr("value"), el.ir)
        return self.scalar_tile(c, el)

    def op_program_id(self, op):
        return self.scalar_tile(self.pids[op.attr("axis")], ir.int32)

    def op_num_programs(self, op):
        return self.scalar_tile(self.grid[op.attr("axis")], ir.int32)

    def op_arange(self, op):
        start = op.attr("start")
        return Tile(lambda idx, cx: idx[0] + start if start else idx[0], Affine(const(start, "int32"), (const(1),)))

    def op_splat(self, op, x: Tile):
        nd = len(op.result.type.shape)
        aff = Affine(x.affine.base, (const(0),) * nd) if x.affine is not None else None
        return Tile(lambda idx, cx: x.at((), cx), aff, x.all_true, x.buffer, x.reads, x.remaps, x.param_reads)

    def op_broadcast(self, op, x: Tile):
        src = op.operands[0].type.shape
        dst = op.result.type.shape
        keep = [s == d for s, d in zip(src, dst)]

        def at(idx, cx):
            return x.at(tuple(i if k else const(0) for i, k in zip(idx, keep)), cx)

        aff = None
        if x.affine is not None:
            aff = Affine(x.affine.base, tuple(c if k else const(0) for c, k in zip(x.affine.coefs, keep)))
        return Tile(at, aff, x.all_true, x.buffer, x.reads, x.remaps, x.param_reads)

    def op_expand_dims(self, op, x: Tile):
        a = op.attr("axis")

        def at(idx, cx):
            return x.at(tuple(idx[:a]) + tuple(idx[a + 1:]), cx)

        aff = None
        if x.affine is not None:
            coefs = list(x.affine.coefs)
            coefs.insert(a, const(0))
            aff = Affine(x.affine.base, tuple(coefs))
        return Tile(at, aff, x.all_true, x.buffer, x.reads, x.remaps, x.param_reads)

    def op_trans(self, op, x: Tile):
        perm = op.attr("perm")
        inv = [perm.index(i) for i in range(len(perm))]

        def at(idx, cx):
            return x.at(tuple(idx[inv[d]] for d in range(len(perm))), cx)

        aff = Affine(x.affine.base, tuple(x.affine.coefs[p] for p in perm)) if x.affine is not None else None
        return Tile(at, aff, x.all_true, x.buffer, x.reads, x.reads, x.param_reads)

    def op_reshape(self, op, x: Tile):
        src, dst = op.operands[0].type.shape, op.result.type.shape

        def at(idx, cx):
            flat = const(0)
            for i, s in zip(idx, dst):
                flat = flat * s + i
            out = []
            for s in reversed(src):
                out.append(flat % s if s > 1 else const(0))
                flat = flat // s
            return x.at(tuple(reversed(out)), cx)

        return Tile(at, None, x.all_true, x.buffer, x.reads, x.reads, x.param_reads)

    def op_hint(self, op, x: Tile):
        return x

    def op_cast(self, op, x: Tile):
        el = op.result.type.element

        def at(idx, cx):
            v = x.at(idx, cx)
            if el.is_bool():
                return v != E._const_like(0, v.dtype) if not v.dtype.is_bool() else v
            return Cast(el.ir if v.dtype.lanes == 1 else E.DataType(el.ir).with_lanes(v.dtype.lanes), v)

        aff = None
        if x.affine is not None and el.is_int():
            aff = Affine(Cast(el.ir, x.affine.base), tuple(Cast(el.ir, c) if not isinstance(c, IntImm) else
                                                             const(c.value, el.ir) for c in x.affine.coefs))
        return Tile(at, aff, None, None, x.reads, x.remaps, x.param_reads)

    def _merge(self, *ts):
        return (frozenset().union(*[t.reads for t in ts]), frozenset().union(*[t.remaps for t in ts]),
                frozenset().union(*[t.param_reads for t in ts]))

    def op_binary(self, op, a: Tile, b: Tile):
        kind = op.attr("op")
        el = op.operands[0].type.element
        reads, remaps, preads = self._merge(a, b)

        def at(idx, cx):
            return binary_expr(kind, a.at(idx, cx), b.at(idx, cx), el)

        divisor = self.defs.get(op.operands[1])
        if kind == "truediv" and el.is_floating() and op.result.type.shape and divisor is not None \
                and divisor.kind == "splat":
            # a block divided by one value: multiplied by its reciprocal, computed once (a division
            # per element costs several multiplies; like Triton's fp32 `/`, within 1 ulp of it)
            s = self.values[divisor.operands[0]]

            def at(idx, cx):  # noqa: F811
                x = a.at(idx, cx)
                return x * (E._const_like(1.0, x.dtype) / s.at((), cx))

        aff, all_true = None, None
        if a.affine is not None and b.affine is not None and el.is_int():
            if kind in ("add", "sub"):
                sign = 1 if kind == "add" else -1
                coefs = tuple(self._lin(x, y, sign) for x, y in zip(self._pad(a.affine, b.affine), self._pad(b.affine, a.affine)))
                aff = Affine(a.affine.base + b.affine.base if sign > 0 else a.affine.base - b.affine.base, coefs)
            elif kind == "mul":
                if all(E.is_const_int(c, 0) for c in b.affine.coefs):
                    s = b.affine.base
                    aff = Affine(a.affine.base * s, tuple(self._scale(c, s) for c in a.affine.coefs))
                elif all(E.is_const_int(c, 0) for c in a.affine.coefs):
                    s = a.affine.base
                    aff = Affine(b.affine.base * s, tuple(self._scale(c, s) for c in b.affine.coefs))
            elif kind in _CMP:
                all_true = self._cmp_all(kind, a.affine, b.affine, op.operands[0].type.shape)
        if kind == "and" and a.all_true is not None and b.all_true is not None:
            all_true = E.And(a.all_true, b.all_true)
        if not op.result.type.shape and op.result.type.element.is_bool():
            all_true = None     # a scalar condition: its own value (scalar_tile's rule) below
            t = Tile(at, None, None, None, reads, remaps, preads)
            t.all_true = at((), Ctx())
            return t
        return Tile(at, aff, all_true, None, reads, remaps, preads)

    @staticmethod
    def _pad(x: Affine, y: Affine):
        n = max(len(x.coefs), len(y.coefs))
        return tuple(x.coefs) + (const(0),) * (n - len(x.coefs))

    @staticmethod
    def _lin(x, y, sign):
        if E.is_const_int(y, 0):
            return x
        if E.is_const_int(x, 0):
            return y if sign > 0 else -y
        if isinstance(x, IntImm) and isinstance(y, IntImm):
            return const(x.value + sign * y.value, x.dtype)
        return x + y if sign > 0 else x - y

    @staticmethod
    def _scale(c, s):
        if E.is_const_int(c, 0):
            return c
        if isinstance(c, IntImm) and isinstance(s, IntImm):
            return const(c.value * s.value, c.dtype)
        return c * s

    def _cmp_all(self, kind, a: Affine, b: Affine, shape):
        """The condition that a `kind` b holds at every index of the tile (None if not affine)."""
        n = max(len(a.coefs), len(b.coefs))
        if n != len(shape):
            shape = tuple(shape) or (1,) * n
        coefs = [self._lin(x, y, -1) for x, y in zip(self._pad(a, b), self._pad(b, a))]
        diff_hi, diff_lo = a.base - b.base, a.base - b.base
        for c, s in zip(coefs, shape):
            if E.is_const_int(c, 0) or s == 1:
                continue
            if isinstance(c, IntImm):
                span = c.value * (s - 1)
                if span > 0:
                    diff_hi = diff_hi + span
                else:
                    diff_lo = diff_lo + span
            else:
                diff_hi = diff_hi + max_expr(c * (s - 1), const(0, c.dtype))
                diff_lo = diff_lo + min_expr(c * (s - 1), const(0, c.dtype))
        zero = E._const_like(0, diff_hi.dtype)
        if kind == "lt":
            return diff_hi < zero
        if kind == "le":
            return diff_hi <= zero
        if kind == "gt":
            return diff_lo > zero
        if kind == "ge":
            return diff_lo >= zero
        if all(E.is_const_int(c, 0) for c in coefs):
            return E.EQ(diff_hi, zero) if kind == "eq" else E.NE(diff_hi, zero)
        return None

    def op_unary(self, op, x: Tile):
        kind = op.attr("op")
        el = op.result.type.element

        def at(idx, cx):
            v = x.at(idx, cx)
            if kind == "not":
                return ~v
            return E.Call(v.dtype, kind, [v])

        return Tile(at, None, None, None, x.reads, x.remaps, x.param_reads)

    def op_fma(self, op, a, b, c):
        def at(idx, cx):
            x, y, z = a.at(idx, cx), b.at(idx, cx), c.at(idx, cx)
            return E.Call(x.dtype, "fma", [x, y, z])

        return Tile(at, None, None, None, *self._merge(a, b, c))

    def op_where(self, op, c: Tile, a: Tile, b: Tile):
        if a.buffer is not None or b.buffer is not None:
            if a.buffer is not b.buffer:
                raise self.error("where: the two pointers point into different tensors; a pointer block must "
                                 "stay within one kernel argument")

        def at(idx, cx):
            return Select(c.at(idx, cx), a.at(idx, cx), b.at(idx, cx))

        return Tile(at, None, None, a.buffer, *self._merge(c, a, b))

    def op_addptr(self, op, p: Tile, off: Tile):
        def at(idx, cx):
            x, y = p.at(idx, cx), off.at(idx, cx)
            if x.dtype != y.dtype:
                wide = "int64" if 64 in (x.dtype.bits, y.dtype.bits) else "int32"
                x, y = self.as_dtype(x, wide), self.as_dtype(y, wide)
            return y if E.is_const_int(x, 0) else x + y

        aff = None
        if p.affine is not None and off.affine is not None:
            n = len(op.result.type.shape)
            pa = p.affine if len(p.affine.coefs) == n else Affine(p.affine.base, (const(0),) * n)
            coefs = tuple(self._lin(x, y, 1) for x, y in zip(self._pad(pa, off.affine), self._pad(off.affine, pa)))
            base = off.affine.base if E.is_const_int(pa.base, 0) else pa.base + off.affine.base
            aff = Affine(base, coefs)
        reads, remaps, preads = self._merge(p, off)
        return Tile(at, aff, None, p.buffer, reads, remaps, preads)

    # memory ------------------------------------------------------------------------------
    def _pointer(self, p: Tile) -> Buffer:
        if p.buffer is None:
            raise self.error("the pointer does not derive from one tensor argument of the kernel")
        return p.buffer

    def op_load(self, op, p: Tile, mask: Tile | None = None, other: Tile | None = None):
        buf = self._pointer(p)

        def at(idx, cx):
            off = p.at(idx, cx)
            if mask is None or cx.unmasked:
                return buf[off]
            if mask.all_true is None:
                cx.peelable = False
            else:
                cx.conds.append(mask.all_true)
            m = mask.at(idx, cx)
            if isinstance(m, IntImm):
                return buf[off] if m.value else other.at(idx, cx)
            return E.Call(buf.dtype, "if_then_else", [m, buf[off], other.at(idx, cx)])

        extra = [t for t in (mask, other) if t is not None]
        reads, remaps, preads = self._merge(p, *extra)
        return Tile(at, None, None, None, reads, remaps, preads | {buf}, source=(buf, p, mask))

    def op_store(self, op, p: Tile, v: Tile, mask: Tile | None = None):
        buf = self._pointer(p)
        shape = op.operands[0].type.shape

        def body(idx, cx):
            s = BufferStore(buf, self.as_dtype(v.at(idx, cx), buf.dtype), [p.at(idx, cx)])
            if mask is None or cx.unmasked:
                return s
            if mask.all_true is None:
                cx.peelable = False
            else:
                cx.conds.append(mask.all_true)
            return IfThenElse(mask.at(idx, cx), s)

        self.emit(self.nest(shape, body))

    def op_atomic_add(self, op, p: Tile, v: Tile, mask: Tile | None = None):
        """Each element added by one atomic read-modify-write (a helper function of the target's
        atomics); the result tile holds the values the memory held before."""
        buf = self._pointer(p)
        el = op.result.type.element
        fn, source = self.atomic_helper(el)
        out = self.new_buffer(op.result.type.shape, el, "old")
        shape = op.result.type.shape

        def body(idx, cx):
            o = self.bidx(out, idx)
            call = Call(el.ir, fn, [Call("handle", "address_of", [buf[p.at(idx, cx)]]), self.as_dtype(v.at(idx, cx), el.ir)])
            s = BufferStore(out, call, o)
            if mask is None:
                return s
            return IfThenElse(mask.at(idx, cx), s, BufferStore(out, const(0, el.ir), o))

        self.emit(AttrStmt(StringImm(fn), "pragma_import_c", StringImm(source), self.nest(shape, body, vector=False)))
        return self.buffer_tile(out, op.result.type)

    def atomic_helper(self, el: ir.DType):
        """(name, C source) of `T name(T* p, T v)`: *p += v atomically, returning the old value."""
        t = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t", "uint32": "uint32_t",
             "uint64": "uint64_t"}[el.ir]
        name = f"tl_atomic_add_{el.name}"
        if el.is_int():
            body = "  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);"
        else:
            u = "uint32_t" if el.bits == 32 else "uint64_t"
            body = (f"  {u} old = __atomic_load_n(({u}*)p, __ATOMIC_RELAXED), nxt;\n  {t} f;\n"
                    f"  do {{ memcpy(&f, &old, sizeof f); f += v; memcpy(&nxt, &f, sizeof f); }}\n"
                    f"  while (!__atomic_compare_exchange_n(({u}*)p, &old, nxt, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));\n"
                    f"  memcpy(&f, &old, sizeof f);\n  return f;")
        src = (f"#include <string.h>\n/* *p += v atomically; the old value (tl.atomic_add) */\n"
               f"static inline {t} {name}({t}* p, {t} v) {{\n{body}\n}}")
        return name, src

    # loops -------------------------------------------------------------------------------
    def op_for(self, op, lb: Tile, ub: Tile, step: Tile, *inits: Tile):
        region = op.region
        names = op.attr("names")
        lbe, ube, ste = lb.at((), Ctx()), ub.at((), Ctx()), step.at((), Ctx())
        bufs = []
        for i, (v, init) in enumerate(zip(region.args[1:], inits)):
            ty = v.type
            name = names[i] if i < len(names) else "carry"
            el = ir.int64 if ty.element.is_ptr() else ty.element
            if ty.element.is_ptr():
                el = ir.int64 if self.offset_is_64(init, len(ty.shape)) else ir.int32
            buf = self.new_buffer(ty.shape, el, name)
            bufs.append(buf)
            if init.reads and buf in init.reads:
                raise self.error("internal: a loop-carried buffer read by its own initial value")
            self.emit(self.nest(ty.shape, lambda idx, cx, b=buf, t=init: BufferStore(
                b, self.as_dtype(t.at(idx, cx), b.dtype), self.bidx(b, idx))))
            tile = self.buffer_tile(buf, ty, pointer_to=init.buffer if ty.element.is_ptr() else None)
            self.values[v] = tile
        k = Var(self.fresh("k"), lbe.dtype)
        iv = Var(self.fresh("iv"), lbe.dtype)
        self.values[region.args[0]] = self.scalar_tile(iv, region.args[0].type.element)
        body = self.region_stmts(region)
        # next values: computed into temporaries first when they read a carried buffer (every
        # yield must see the old values), then copied
        saved, self.stmts = self.stmts, list(body)
        try:
            pending = []
            carried = set(bufs)
            for buf, y, v in zip(bufs, region.yields, region.args[1:]):
                t = self.values[y]
                if t.reads == frozenset([buf]) and self._is_buffer_itself(t, buf, v.type):
                    continue
                if t.reads & carried:
                    t = self.store_tile(t, y, y.type, base=buf.name + "_next")
                pending.append((buf, t, v.type))
            for buf, t, ty in pending:
                self.emit(self.nest(ty.shape, lambda idx, cx, b=buf, tt=t: BufferStore(
                    b, self.as_dtype(tt.at(idx, cx), b.dtype), self.bidx(b, idx))))
            body = self.stmts
        finally:
            self.stmts = saved
        step_c = ste.value if isinstance(ste, IntImm) else None
        if step_c is not None and step_c < 0:
            extent = max_expr((lbe - ube + (-step_c - 1)) // (-step_c), E._const_like(0, lbe.dtype))
        elif step_c == 1:
            extent = max_expr(ube - lbe, E._const_like(0, lbe.dtype))
        else:
            extent = max_expr((ube - lbe + ste - 1) // ste, E._const_like(0, lbe.dtype))
        loop = For(k, 0, extent, "serial", LetStmt(iv, lbe + k * ste if step_c != 1 else lbe + k, seq(*body)))
        self.emit(loop)
        return [self.buffer_tile(b, v.type, pointer_to=i.buffer if v.type.element.is_ptr() else None)
                for b, v, i in zip(bufs, region.args[1:], inits)]

    def _is_buffer_itself(self, t: Tile, buf: Buffer, ty) -> bool:
        probe = tuple(Var(f"q{i}") for i in range(len(ty.shape)))
        e = t.at(probe, Ctx())
        return isinstance(e, E.BufferLoad) and e.buffer is buf and all(
            a is b for a, b in zip(e.indices, probe if probe else (e.indices[0],)))

    # reductions --------------------------------------------------------------------------
    def op_reduce(self, op, *xs: Tile):
        kind = op.attr("kind")
        axis = op.attr("axis")
        if kind == "combine":
            return self.reduce_combine(op, xs, axis)
        x = xs[0]
        in_ty = op.operands[0].type
        out_ty = op.result.type
        el = in_ty.element
        out = self.new_buffer(out_ty.shape, out_ty.element, f"{kind}")
        keep = len(out_ty.shape) == len(in_ty.shape)

        def out_idx(idx):
            rest = list(idx[:axis]) + list(idx[axis + 1:])
            if keep:
                rest.insert(axis, const(0))
            return rest

        if kind in ("argmax", "argmin"):
            best = self.new_buffer(out_ty.shape, el, f"{kind}_value")
            rshape = tuple(s for d, s in enumerate(in_ty.shape) if d != axis)
            self.emit(self.nest(rshape, lambda idx, cx: seq(
                BufferStore(best, _ident(kind[3:], el), self.bidx(best, self._reinsert(idx, axis, keep))),
                BufferStore(out, const(0, "int32"), self.bidx(out, self._reinsert(idx, axis, keep)))), vector=False))
            cmp = E.GT if kind == "argmax" else E.LT

            def step(idx, cx):
                o = self.bidx(out, out_idx(idx))
                v = x.at(idx, cx)
                better = cmp(v, best[o])
                return IfThenElse(better, seq(BufferStore(best, v, o), BufferStore(out, Cast("int32", idx[axis])
                                                                                   if idx[axis].dtype != "int32"
                                                                                   else idx[axis], o)))

            self.emit(self.nest(in_ty.shape, step, vector=False, reduce_axis=axis))
            return self.buffer_tile(out, out_ty)
        combine = {"sum": lambda a, b: a + b, "max": max_expr, "min": min_expr}[kind]
        self.emit_reduction(x, in_ty, out, lambda ridx: self.bidx(out, self._reinsert(ridx, axis, keep)), axis, kind,
                            combine, el)
        return self.buffer_tile(out, out_ty)

    @staticmethod
    def _reinsert(idx, axis, keep):
        idx = list(idx)
        if keep:
            idx.insert(axis, const(0))
        return idx

    def emit_reduction(self, x: Tile, in_ty, out: Buffer, out_of_r, axis, kind, combine, el):
        """out = reduce(x) along axis (out_of_r: the output index from the kept axes' indices); on
        CPU a reduction along the last axis keeps partial results per vector lane (a vectorizable
        loop; four vectors of them on long rows), combined at the end."""
        shape = in_ty.shape
        lanes = self.reduction_lanes(el)
        n = shape[axis]
        if lanes > 1 and n >= 8 * lanes:
            lanes *= 4    # four vectors of partials: independent chains hide the add's / max's latency
        rshape = tuple(s for d, s in enumerate(shape) if d != axis)
        init = _ident(kind, el)
        if axis == len(shape) - 1 and lanes > 1 and n >= 2 * lanes:
            part = self.new_buffer(rshape + (lanes,), el, f"{kind}_part")
            self.emit(self.nest(rshape + (lanes,), lambda idx, cx: BufferStore(part, init, idx)))

            def acc(idx, cx):
                r, ko, lane = idx[:-2], idx[-2], idx[-1]
                pi = tuple(r) + (lane,)
                return BufferStore(part, combine(part[pi], x.at(tuple(r) + (ko * lanes + lane,), cx)), pi)

            self.emit(self.nest(rshape + (n // lanes, lanes), acc, reduce_axis=len(rshape)))
            lane = Var(self.fresh("lane"))

            def fin(idx, cx):
                o = out_of_r(idx)
                return seq(BufferStore(out, init, o),
                           For(lane, 0, lanes, "serial", BufferStore(out, combine(out[o], part[tuple(idx) + (lane,)]), o)))

            self.emit(self.nest(rshape, fin, vector=False))
            return
        self.emit(self.nest(rshape, lambda idx, cx: BufferStore(out, init, out_of_r(idx))))

        def step(idx, cx):
            o = out_of_r(tuple(idx[:axis]) + tuple(idx[axis + 1:]))
            return BufferStore(out, combine(out[o], x.at(idx, cx)), o)

        self.emit(self.nest(shape, step, reduce_axis=axis))

    def reduction_lanes(self, el) -> int:
        return 1

    def reduce_combine(self, op, xs, axis):
        region = op.region
        n = len(xs)
        in_ty = op.operands[0].type
        outs = [self.new_buffer(r.type.shape, r.type.element, "reduce") for r in op.results]
        keep = len(op.results[0].type.shape) == len(in_ty.shape)
        first = Var(self.fresh("first"), "bool")

        def out_idx(idx):
            rest = list(idx[:axis]) + list(idx[axis + 1:])
            if keep:
                rest.insert(axis, const(0))
            return self.bidx(outs[0], rest)

        def step(idx, cx):
            o = out_idx(idx)
            new = [x.at(idx, cx) for x in xs]
            olds = [b[o] for b in outs]
            combined = self.inline_region(region, olds + new)
            lets = [Var(self.fresh("c"), b.dtype) for b in outs]
            stores = seq(*[BufferStore(b, l, o) for b, l in zip(outs, lets)])
            firsts = seq(*[BufferStore(b, v, o) for b, v in zip(outs, new)])
            body = stores
            for l, c in reversed(list(zip(lets, combined))):
                body = LetStmt(l, c, body)
            return IfThenElse(E.EQ(idx[axis], const(0, idx[axis].dtype)), firsts, body)

        self.emit(self.nest(in_ty.shape, step, vector=False, reduce_axis=axis))
        return [self.buffer_tile(b, r.type) for b, r in zip(outs, op.results)]

    def inline_region(self, region: Region, args):
        """The yields of a scalar region (a combine function) as expressions of args."""
        saved = dict(self.values)
        try:
            for a, e in zip(region.args, args):
                self.values[a] = self.scalar_tile(e, a.type.element)
            for op in region.ops:
                if op.kind in ALWAYS or op.kind in ("load", "store"):
                    raise self.error(f"a reduce combine function may only compute on its scalars, not {op.kind}")
                out = getattr(self, "op_" + op.kind)(op, *[self.values[o] for o in op.operands])
                for res, t in zip(op.results, [out] if isinstance(out, Tile) else out):
                    self.values[res] = t
            return [self.values[y].at((), Ctx()) for y in region.yields]
        finally:
            self.values = saved

    # dot ---------------------------------------------------------------------------------
    def op_dot(self, op, a: Tile, b: Tile, acc: Tile):
        (m, k), (_, n) = op.operands[0].type.shape, op.operands[1].type.shape
        in_el = op.operands[0].type.element
        out_el = op.result.type.element
        staged_el = out_el if in_el.is_floating() else in_el     # fp16/bf16 staged as the fp32 they add into
        a_buf = self.staged(a, op.operands[0], staged_el, "a_tile")
        b_buf = self.staged(b, op.operands[1], staged_el, "b_tile")
        c_buf = self.accumulator(acc, op.operands[2], op.result.type)
        self.emit(self.matmul(a_buf, b_buf, c_buf, m, n, k, out_el))
        return self.buffer_tile(c_buf, op.result.type)

    def staged(self, t: Tile, v: Value, el: ir.DType, base: str) -> Buffer:
        """A row-major buffer holding tile t in el (packs and converts a dot operand)."""
        e = t.at(tuple(Var(f"s{i}") for i in range(2)), Ctx())
        if isinstance(e, E.BufferLoad) and e.buffer.dtype == el.ir and e.buffer in t.reads and not t.remaps \
                and len(e.indices) == 2 and e.buffer.shape == tuple(const(s) for s in v.type.shape):
            if all(isinstance(i, Var) and i.name == f"s{d}" for d, i in enumerate(e.indices)):
                return e.buffer
        buf = self.new_buffer(v.type.shape, el, base)
        self.emit(self.nest(v.type.shape, lambda idx, cx: BufferStore(buf, self.as_dtype(t.at(idx, cx), buf.dtype),
                                                                        idx)))
        return buf

    def accumulator(self, acc: Tile, v: Value, ty) -> Buffer:
        """The buffer the product accumulates into: acc's own when this dot is its only use."""
        e = acc.at(tuple(Var(f"s{i}") for i in range(2)), Ctx())
        if self.use_count.get(v, 0) == 1 and isinstance(e, E.BufferLoad) and e.buffer.dtype == ty.element.ir \
                and not acc.remaps and all(isinstance(i, Var) and i.name == f"s{d}" for d, i in enumerate(e.indices)):
            return e.buffer
        buf = self.new_buffer(ty.shape, ty.element, "acc")
        self.emit(self.nest(ty.shape, lambda idx, cx: BufferStore(buf, self.as_dtype(acc.at(idx, cx), buf.dtype), idx)))
        return buf

    def matmul(self, A: Buffer, B: Buffer, C: Buffer, m, n, k, out_el):
        """C += A @ B over the staged tiles: a loop nest (i, k, vectorized j)."""
        i, kk, j = Var(self.fresh("mi")), Var(self.fresh("mk")), Var(self.fresh("mj"))
        a = A[i, kk] if A.dtype == C.dtype else Cast(C.dtype, A[i, kk])
        b = B[kk, j] if B.dtype == C.dtype else Cast(C.dtype, B[kk, j])
        return self.matmul_nest(i, kk, j, m, n, k, BufferStore(C, C[i, j] + a * b, [i, j]))

    def matmul_nest(self, i, kk, j, m, n, k, store):
        return For(i, 0, m, "serial", For(kk, 0, k, "serial", For(j, 0, n, "vectorized", store)))

    # nests -------------------------------------------------------------------------------
    def nest(self, shape, body, vector=True, reduce_axis=None):
        """A loop nest over shape running body(idx, ctx) -> Stmt, with a peeled unmasked copy when
        its masks allow one."""
        cx = Ctx()
        slow = self.loops(shape, body, cx, vector, reduce_axis)
        if not self.peel or not cx.conds or not cx.peelable:
            return slow
        fast = self.loops(shape, body, Ctx(unmasked=True), vector, reduce_axis)
        conds = []
        for c in cx.conds:
            if not any(structural_equal(c, d) for d in conds):
                conds.append(c)
        return IfThenElse(all_of(*conds), fast, slow)

    def loops(self, shape, body, cx, vector, reduce_axis):
        raise NotImplementedError


class CPULowering(Lowering):
    """Programs on the OpenMP-parallel loop; nests vectorized along their last axis."""

    scope = "global"

    def programs(self, make_body):
        grid_params, self.grid = self.grid_vars()
        gx, gy, gz = self.grid
        p = Var("program")
        self.pids = tuple(Var(f"pid_{a}") for a in "xyz")
        stmts = make_body()
        body = self.wrap_allocs(seq(*stmts))
        body = LetStmt(self.pids[0], p % gx, LetStmt(self.pids[1], (p // gx) % gy,
                                                     LetStmt(self.pids[2], p // (gx * gy), body)))
        return grid_params, For(p, 0, gx * gy * gz, "parallel", body)

    def loops(self, shape, body, cx, vector, reduce_axis):
        idx = tuple(Var(self.fresh(f"i{d}")) for d in range(len(shape)))
        s = body(idx, cx)
        nd = len(shape)
        for d in reversed(range(nd)):
            inner = d == nd - 1
            kind = "vectorized" if (inner and vector and shape[d] > 1 and reduce_axis != d) else "serial"
            s = For(idx[d], 0, shape[d], kind, s)
        return s

    def reduction_lanes(self, el) -> int:
        bits = 32 if el.bits <= 32 else 64
        return max(1, self.target.vector_bits // bits)

    def op_dot(self, op, a: Tile, b: Tile, acc: Tile):
        """With an fp32 micro-kernel for the tile: A packed in k-major panels of mr rows, B in panels of
        nr columns (BLIS's layout: each micro-kernel call reads both contiguously), fp16/bf16 converted
        to fp32 as they are packed; then the calls, nr-column panels outer (a panel of B stays in L1
        while the row panels of A go past it)."""
        (m, k), (_, n) = op.operands[0].type.shape, op.operands[1].type.shape
        in_el, out_el = op.operands[0].type.element, op.result.type.element
        intrin = self.micro_kernel(in_el, out_el, m, n)
        if intrin is None:
            return super().op_dot(op, a, b, acc)
        name, mr, nr, c_source, features = intrin
        B = self.new_buffer((n // nr, k, nr), out_el, "b_panels")
        self.emit(self.nest((n // nr, k, nr), lambda idx, cx: BufferStore(
            B, self.as_dtype(b.at((idx[1], idx[0] * nr + idx[2]), cx), B.dtype), idx)))
        C = self.accumulator(acc, op.operands[2], op.result.type)
        fn = self.intrin_fn(name)
        i0, j0 = Var(self.fresh("ti")), Var(self.fresh("tj"))
        r, c = i0 * mr, j0 * nr
        k1 = 1 if k > 1 else 0

        def addr(x):
            return Call("handle", "address_of", [x])

        def calls(a_at, a_region):
            """The micro-kernel calls with A's element (row, k) at a_at(row, k)."""
            call = Evaluate(Call("handle", fn, [const(k), addr(a_at(r, 0)), addr(a_at(r + 1, 0)), addr(a_at(r, k1)),
                                                addr(B[j0, 0, 0]), addr(B[j0, k1, 0]), addr(C[r, c]),
                                                addr(C[r + 1, c])]))
            for buf, mins, exts in ([a_region] if a_region else []) + [(B, (j0, 0, 0), (1, k, nr)),
                                                                      (C, (r, c), (mr, nr))]:
                region = Call("handle", "tsr.region", [_c(x) for x in mins] + [const(x) for x in exts])
                call = AttrStmt(buf, "tsr.access_region", region, call)
            call = AttrStmt(StringImm(fn), "pragma_import_c", StringImm(c_source), call)
            call = AttrStmt(StringImm(name), "tensor_intrin", StringImm(",".join(features)), call)
            return For(j0, 0, n // nr, "serial", For(i0, 0, m // mr, "serial", call))

        def packed():
            A = self.new_buffer((m // mr, k, mr), out_el, "a_panels")
            pack = self.nest((m // mr, k, mr), lambda idx, cx: BufferStore(
                A, self.as_dtype(a.at((idx[0] * mr + idx[2], idx[1]), cx), A.dtype), idx))
            return seq(pack, calls(lambda row, kk: A[row // mr, kk, row % mr], (A, (i0, 0, 0), (1, k, mr))))

        direct = self.direct_operand(a, in_el, out_el)
        if direct is None:
            self.emit(packed())
        else:
            tensor, offset, whole = direct
            fast = calls(lambda row, kk: tensor[offset((row, kk))], None)
            self.emit(fast if whole is None else IfThenElse(whole, fast, packed()))
        return self.buffer_tile(C, op.result.type)

    def direct_operand(self, a: Tile, in_el, out_el):
        """(tensor, offset(idx), condition) when A can be read in place: a load of fp32 rows
        contiguous along k (its rows any distance apart); the condition (None: always) that its mask
        holds on the whole tile, where the packed path runs otherwise."""
        if a.source is None or in_el != out_el:
            return None
        tensor, p, mask = a.source
        if p.affine is None or len(p.affine.coefs) != 2 or not E.is_const_int(p.affine.coefs[1], 1):
            return None
        if mask is not None and mask.all_true is None:
            return None
        return tensor, p.affine.at, (mask.all_true if mask is not None else None)

    @staticmethod
    def intrin_fn(name: str) -> str:
        impl = TensorIntrin.get(name).impl
        calls = []

        def find(s):
            if isinstance(s, Evaluate) and isinstance(s.value, Call):
                calls.append(s.value.op)
            for f in getattr(s, "_fields", ()):
                x = getattr(s, f)
                if hasattr(x, "_fields") and not isinstance(x, PrimExpr):
                    find(x)

        find(impl.body)
        return calls[0]

    def micro_kernel(self, in_el, out_el, m, n):
        """(intrinsic name, mr, nr, C source, features) of the x86 fp32 micro-kernel for an m x n
        product of in_el operands (fp32, or fp16/bf16 packed as fp32), or None."""
        if out_el != ir.float32 or in_el not in (ir.float32, ir.float16, ir.bfloat16):
            return None
        tiles = [t for t in self.preferred_tiles() if m % t[0] == 0 and n % t[1] == 0]
        if not tiles:
            return None
        try:
            name = x86.gemm_intrin_for(self.target, "float32", tiles=tiles)
        except TesseraError:
            return None
        _, mr, nr = x86.fp32_gemm_parts(name)
        intrin = TensorIntrin.get(name)
        return name, mr, nr, intrin.c_source, intrin.features

    def preferred_tiles(self):
        avx512 = self.target.has_feature("avx512f")
        order = [(8, 32), (4, 64), (14, 32), (6, 64)] if avx512 else [(4, 24), (6, 16), (4, 16), (8, 8)]
        isa = "avx512" if avx512 else "avx2"
        return [t for t in order if t in x86.FP32_GEMM[isa]]


def lower_cpu(func: Function, target, static: dict | None = None) -> PrimFunc:
    """The tile function as a PrimFunc for a CPU target (kind "c"); static binds runtime values
    (Lowering's docstring)."""
    return CPULowering(func, Target(target), static).run()
