"""compact_buffer_allocation: shrink each allocated buffer to the region its uses touch.

Runs after plan_buffer_allocation and lower_blocks. For every `Allocate(buf, body)` the indices
of all accesses in body are relaxed over the loops inside body (tir.analysis.relax) into a
box whose corner may depend on the loops outside the allocation: a cache computed under a tile
loop becomes a tile-sized array indexed relative to the tile's corner (TVM's
CompactBufferAllocation). A dimension whose extent is not a constant smaller than before (after
bounding it with the outer loops' ranges) keeps its original extent and offset 0.

A tensorized call reaches its buffers through `T.address_of` of one element; the region it really
touches comes from `AttrStmt(buf, "tsr.access_region", ...)` markers that lower_blocks leaves
around it, counted as accesses here and removed afterwards.

`AttrStmt(buf, "buffer_dim_align", tsr.dim_align(axis, factor, offset))` around the Allocate
(from storage_align) gives the compacted buffer padded strides: stride[axis] is rounded up to
k * factor + offset. On CPU targets the GPU storage scopes "shared" and "warp" become "global"
(plain memory: the allocation's place already makes it per-iteration or per-thread); on GPU
targets a "shared" buffer is also relaxed over the threadIdx loops around its allocation (it
holds the tile of the whole work-group, not one thread's part).
"""
from __future__ import annotations

from ...ir import (
    Allocate,
    AttrStmt,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    IntImm,
    PrimFunc,
    Range,
    collect_vars,
    const,
    max_expr,
    min_expr,
)
from ...ir.functor import Mutator, Visitor, load_with_indices
from ..analysis import relax_range, shape_var_analyzer
from .lower_blocks import ACCESS_REGION

DIM_ALIGN = "buffer_dim_align"
_SYMBOLIC_LIMIT = 1 << 20  # a bounded extent replaces a symbolic one only when at most this
_CPU_SCOPES = {"shared": "global", "warp": "global", "shared.dyn": "global"}
_SHARED_SCOPES = ("shared", "shared.dyn", "warp")


def compact_buffer_allocation(func: PrimFunc, target=None) -> PrimFunc:
    """`func` with every Allocate shrunk to the region its accesses use (see module docstring)."""
    cpu = target is None or getattr(target, "kind", "c") == "c"
    compactor = _Compactor(func, cpu)
    body = compactor.visit(func.body)
    if compactor.regions:           # only tensorized kernels have markers to remove
        body = _StripRegions().visit(body)
    return func if body is func.body else func.with_body(body)


class _StripRegions(Mutator):
    """Removes the access-region markers of tensorized calls once allocations are sized."""

    def visit_AttrStmt(self, s):
        if s.attr_key == ACCESS_REGION:
            return self.visit(s.body)
        return self.generic_visit(s)

    def visit_PrimExpr(self, e):
        return e


class _Accesses(Visitor):
    """The index tuples of every access of buf in a statement with the loops around each."""

    def __init__(self, buf):
        super().__init__()
        self.buf = buf
        self.loops = []
        self.found = []     # (indices, loops)
        self.inner = set()  # variables defined inside (loops, lets)

    def visit_For(self, s):
        self.visit(s.min)
        self.visit(s.extent)
        self.loops.append(s)
        self.inner.add(s.loop_var)
        self.visit(s.body)
        self.loops.pop()

    def visit_LetStmt(self, s):
        self.inner.add(s.var)
        self.generic_visit(s)

    def visit_Let(self, e):
        self.inner.add(e.var)
        self.generic_visit(e)

    def visit_BufferLoad(self, n):
        if n.buffer is self.buf:
            self.found.append((n.indices, list(self.loops)))
        self.generic_visit(n)

    def visit_BufferStore(self, n):
        if n.buffer is self.buf:
            self.found.append((n.indices, list(self.loops)))
        self.generic_visit(n)

    def visit_AttrStmt(self, s):
        if s.attr_key == ACCESS_REGION and s.node is self.buf:
            mins, exts = _region_of(s)
            self.found.append((mins, list(self.loops)))
            self.found.append((tuple(m + e - 1 for m, e in zip(mins, exts)), list(self.loops)))
        self.generic_visit(s)


def _region_of(s):
    """(mins, extents) of an access-region marker."""
    args = s.value.args
    n = len(args) // 2
    return tuple(args[:n]), tuple(args[n:])


class _Shift(Mutator):
    def __init__(self, buf, new, offsets, ana):
        super().__init__()
        self.buf, self.new, self.offsets, self.ana = buf, new, offsets, ana

    def _idx(self, indices):
        return tuple(i if o is None else self.ana.simplify(i - o) for i, o in zip(indices, self.offsets))

    def visit_BufferLoad(self, n):
        indices = tuple(self.visit(i) for i in n.indices)
        if n.buffer is not self.buf:
            return load_with_indices(n, indices)
        return BufferLoad(self.new, self._idx(indices))

    def visit_BufferStore(self, n):
        value = self.visit(n.value)
        indices = tuple(self.visit(i) for i in n.indices)
        if n.buffer is not self.buf:
            if value is n.value and all(a is b for a, b in zip(indices, n.indices)):
                return n
            return BufferStore(n.buffer, value, indices)
        return BufferStore(self.new, value, self._idx(indices))

    def visit_AttrStmt(self, s):
        if s.attr_key == ACCESS_REGION and s.node is self.buf:
            mins, exts = _region_of(s)
            value = Call("handle", "tsr.region", list(self._idx(mins)) + list(exts))
            return AttrStmt(self.new, ACCESS_REGION, value, self.visit(s.body))
        return self.generic_visit(s)


class _Compactor(Mutator):
    def __init__(self, func, cpu):
        super().__init__()
        self.ana = shape_var_analyzer(func)
        self.cpu = cpu
        self.aligns = {}
        self.regions = False        # an access-region marker was seen
        self.thread_loops = []      # threadIdx-bound loops around the statement (GPU targets)

    def visit_For(self, s):
        shared = not self.cpu and s.thread_binding is not None and s.thread_binding.thread_tag.startswith("threadIdx")
        if shared:
            self.thread_loops.append(s)
        with self.ana.scope():
            self.ana.bind(s.loop_var, Range.from_min_extent(s.min, s.extent))
            body = self.visit(s.body)
        if shared:
            self.thread_loops.pop()
        return s if body is s.body else s.replace(body=body)

    def visit_AttrStmt(self, s):
        if s.attr_key == DIM_ALIGN and isinstance(s.node, Buffer):
            axis, factor, offset = (int(a.value) for a in s.value.args)
            self.aligns.setdefault(s.node, {})[axis] = (factor, offset)
            return self.visit(s.body)
        if s.attr_key == ACCESS_REGION:
            self.regions = True
        return self.generic_visit(s)

    def visit_PrimExpr(self, e):
        return e

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        buf = s.buffer
        acc = _Accesses(buf)
        acc.visit(body)
        ana = self.ana
        lows, highs = [None] * buf.ndim, [None] * buf.ndim
        ok = [True] * buf.ndim
        # a "shared" buffer holds the region of every thread of the work-group: relaxed over the
        # threadIdx loops around its allocation as well (GPU targets)
        outer = self.thread_loops if buf.scope in _SHARED_SCOPES else []
        for indices, loops in acc.found:
            triples = [(lp.loop_var, lp.min, lp.extent) for lp in outer + loops]
            for d, i in enumerate(indices):
                if not ok[d]:
                    continue
                e = ana.simplify(i)
                lo, hi = relax_range(e, e, triples, ana)
                if lo is None or hi is None or set(collect_vars(lo)) & acc.inner or set(collect_vars(hi)) & acc.inner:
                    ok[d] = False
                    continue
                lows[d] = lo if lows[d] is None else ana.simplify(_min(lows[d], lo))
                highs[d] = hi if highs[d] is None else ana.simplify(_max(highs[d], hi))
        shape, offsets = [], []
        for d, extent in enumerate(buf.shape):
            if not ok[d] or lows[d] is None:
                shape.append(extent)
                offsets.append(None)
                continue
            ext = ana.simplify(highs[d] - lows[d] + 1)
            if type(ext) is not IntImm:
                top = ana.const_int_bound(ext)[1]
                limit = extent.value if type(extent) is IntImm else _SYMBOLIC_LIMIT
                ext = const(int(top), extent.dtype) if top < limit else None
            if ext is None or (type(extent) is IntImm and ext.value >= extent.value):
                shape.append(extent)
                offsets.append(None)
                continue
            shape.append(const(max(ext.value, 1), extent.dtype))
            offsets.append(lows[d] if not (type(lows[d]) is IntImm and lows[d].value == 0) else None)
        aligns = self.aligns.pop(buf, None)
        scope = _CPU_SCOPES.get(buf.scope, buf.scope) if self.cpu else buf.scope
        if all(o is None for o in offsets) and all(a is b for a, b in zip(shape, buf.shape)) and not aligns \
                and scope == buf.scope:
            return s if body is s.body else s.replace(body=body)
        strides = _strides(shape, aligns) if aligns else ()
        new = Buffer(shape, buf.dtype, buf.name, strides=strides, scope=scope, data_alignment=buf.data_alignment)
        body = _Shift(buf, new, offsets, ana).visit(body)
        return Allocate(new, body)


def _min(a, b):
    return min_expr(a, b)


def _max(a, b):
    return max_expr(a, b)


def _strides(shape, aligns):
    """Row-major strides with stride[axis] rounded up to the next k * factor + offset (TVM's
    storage_align), innermost first."""
    out = [None] * len(shape)
    dtype = shape[0].dtype if shape else "int32"
    stride = const(1, dtype)
    for d in range(len(shape) - 1, -1, -1):
        if d in aligns:
            factor, offset = aligns[d]
            if type(stride) is IntImm:
                stride = const(stride.value + (offset - stride.value) % factor, dtype)
            else:
                stride = ((stride - offset + (factor - 1)) // factor) * factor + offset
        out[d] = stride
        n = shape[d]
        stride = const(stride.value * n.value, dtype) if type(stride) is IntImm and type(n) is IntImm \
            else stride * n
    return tuple(out)


__all__ = ["compact_buffer_allocation"]
