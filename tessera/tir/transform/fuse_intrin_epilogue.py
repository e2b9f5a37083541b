"""fuse_intrin_epilogue: fold the zero init before a tensor intrinsic's call and the elementwise epilogue
after it into the call, where the intrinsic offers such variants (TensorIntrin.epilogue).

A scheduled micro-kernel writes its output tile into a local buffer that an init nest zeroes first, and
the fused epilogue (bias, residual add, ReLU or clip) reads the tile back in a nest of its own:

    T[tile] = 0                                      (init nest)
    intrinsic(..., &T[origin], ...)                  (accumulates into T)
    Out[f(k, r, i)] = max(T[tile(k, r, i)] + bias[g(k)] + res[h(k, r, i)], 0)    (epilogue nest)

becomes one call of a variant that starts its accumulators at zero and applies the epilogue in
registers before its single store to Out: no zeroing pass, no load of the zeroed tile, no second pass
over it. The nests must cover the tile exactly (each loop one tile axis of the same extent, the
indices affine in the loops), the epilogue must be adds of the tile and of inputs read at the tile's
points (or constant along the pixels, as a bias), then min/max with constants that are not NaN, and
the tile buffer must be local (allocated around the call) and read nowhere else (an intrinsic whose hook says
global_tile may also take the zero start on a tile of a parameter: a GPU block's tile). A call in a loop over
the reduction (the input channels in slices: one call a slice, the same tile) is fused too, each call
told whether it is the first and the last. Anything else stays as it was; an intrinsic whose hook
declines keeps its separate nests.
"""
from __future__ import annotations

from ...arith import can_prove_equal, simplify
from ...ir import AttrStmt, Evaluate, For, Mutator, SeqStmt, StringImm
from ...ir import expr as E
from ...ir.stmt import BufferStore
from ..analysis import NotAffine, accesses, linear_form, uses_vars
from ..tensor_intrin import TensorIntrin
from ..tensor_intrin.epilogue import Access, Epilogue


def _affine(e, loop_vars):
    """({loop var: int coefficient}, rest) with e == sum(coef * var) + rest (linear_form's, rest 0
    where it has none); NotAffine where e is not affine in the loop variables."""
    coef, rest = linear_form(e, loop_vars)
    return coef, rest if rest is not None else E.IntImm(e.dtype, 0)


def _nest(stmt):
    """(loops [(var, extent)], the innermost BufferStore) of a perfect nest of For loops from 0, or None."""
    loops = []
    while type(stmt) is For:
        if type(stmt.min) is not E.IntImm or stmt.min.value != 0 or type(stmt.extent) is not E.IntImm:
            return None
        if stmt.kind not in ("serial", "unrolled"):
            return None
        loops.append((stmt.loop_var, stmt.extent.value))
        stmt = stmt.body
    return (loops, stmt) if type(stmt) is BufferStore else None


def _vector_index(indices, lanes):
    """The base of a flat index Ramp(base, 1, lanes) (a scalar index itself where lanes is 1), or None."""
    if len(indices) != 1:
        return None
    ix = indices[0]
    if lanes == 1 and ix.dtype.lanes == 1:
        return ix
    if type(ix) is E.Ramp and type(ix.stride) is E.IntImm and ix.stride.value == 1 and ix.lanes == lanes:
        return ix.base
    return None


def _axes_of(loops, index, tile):
    """{loop var: tile axis} where `index` (a vector's base) walks the tile's points exactly once over
    the loops (each loop one axis of the same extent, every axis of extent > 1 once), from its origin;
    else None."""
    lv = {v for v, _ in loops}
    try:
        coef, rest = _affine(index, lv)
    except NotAffine:
        return None
    if not can_prove_equal(rest, tile.origin):
        return None
    got = {}
    for v, ext in loops:
        c = coef.get(v, 0)
        if ext == 1:
            continue
        axis = next((a for a, (st, n) in enumerate(tile.axes) if st == c and n == ext and a not in got.values()),
                    None)
        if axis is None:
            return None
        got[v] = axis
    if sorted(got.values()) != [a for a, (_, n) in enumerate(tile.axes) if n > 1]:
        return None
    return got


def _access(buffer, index, loops, axes, n_axes):
    """The Access of a vector read or write at `index` over the loops (mapped to tile axes), or None."""
    lv = {v for v, _ in loops}
    try:
        coef, rest = _affine(index, lv)
    except NotAffine:
        return None
    strides = [0] * n_axes
    for v, ext in loops:
        c = coef.get(v, 0)
        if ext == 1:
            continue
        strides[axes[v]] = c
    return Access(buffer, simplify(rest), tuple(strides))


def _is_const(e):
    return type(e) is E.Broadcast and type(e.value) is E.FloatImm and e.value.value == e.value.value


def _template(e, tile, loops, axes, inputs):
    """The epilogue's expression tree (tensor_intrin/epilogue.py) from the stored value, or None."""
    t = type(e)
    if t is E.BufferLoad:
        base = _vector_index(e.indices, tile.lanes)
        if base is None:
            return None
        if e.buffer is tile.buffer:
            return ("acc",) if _axes_of(loops, base, tile) == axes else None
        if str(e.buffer.dtype) != tile.dtype:
            return None
        acc = _access(e.buffer, base, loops, axes, len(tile.axes))
        if acc is None:
            return None
        inputs.append(acc)
        return ("in", len(inputs) - 1)
    if t is E.Add:
        a = _template(e.a, tile, loops, axes, inputs)
        b = _template(e.b, tile, loops, axes, inputs) if a is not None else None
        return None if b is None else ("add", a, b)
    if t is E.Max or t is E.Min:
        kind = "max" if t is E.Max else "min"
        for x, c in ((e.a, e.b), (e.b, e.a)):
            if _is_const(c):
                inner = _template(x, tile, loops, axes, inputs)
                return None if inner is None else (kind, inner, float(c.value.value))
    return None


def _count_acc(tree) -> int:
    if tree[0] == "acc":
        return 1
    return sum(_count_acc(x) for x in tree[1:] if isinstance(x, tuple))


def _launch_attrs(stmt):
    """([the tsr.* AttrStmts around the call: how a GPU launches it], the statement inside them)."""
    attrs = []
    while type(stmt) is AttrStmt and stmt.attr_key.startswith("tsr."):
        attrs.append(stmt)
        stmt = stmt.body
    return attrs, stmt


def _intrin_call(stmt):
    """(TensorIntrin, Call) of `AttrStmt(tensor_intrin) > AttrStmt(pragma_import_c) > Evaluate(Call)`
    for an intrinsic with an epilogue hook, or None."""
    if type(stmt) is not AttrStmt or stmt.attr_key != "tensor_intrin" or type(stmt.node) is not StringImm:
        return None
    inner = stmt.body
    if type(inner) is not AttrStmt or inner.attr_key != "pragma_import_c":
        return None
    ev = _launch_attrs(inner.body)[1]
    if type(ev) is not Evaluate or type(ev.value) is not E.Call:
        return None
    intrin = TensorIntrin.get(stmt.node.value, allow_missing=True)
    if intrin is None or intrin.epilogue is None:
        return None
    return intrin, ev.value


class _Fuser(Mutator):
    def __init__(self):
        super().__init__()
        self.local = []          # buffers allocated around the statement being visited

    def visit_BufferStore(self, s):       # leaf statements: no pattern inside, their expressions not walked
        return s

    visit_Evaluate = visit_BufferStore

    def visit_Allocate(self, s):
        self.local.append(s.buffer)
        try:
            return self.generic_visit(s)
        finally:
            self.local.pop()

    def visit_SeqStmt(self, s):
        seq = [self.visit(x) for x in s.seq]
        k = 0
        while k < len(seq):
            got = _intrin_call(seq[k])
            if got is None and type(seq[k]) is For:
                got = _intrin_call(seq[k].body)         # one call of several over the reduction
            if got is not None:
                fused = self._fuse(seq, k, *got)
                if fused is not None:
                    start, stop, stmt = fused
                    seq[start:stop] = [stmt]
                    k = start
            k += 1
        if len(seq) == 1:
            return seq[0]
        if all(a is b for a, b in zip(seq, s.seq)) and len(seq) == len(s.seq):
            return s
        return SeqStmt(seq)

    def _fuse(self, seq, k, intrin, call):
        tile = intrin.epilogue.tile(call)
        if tile is None:
            return None
        local = any(tile.buffer is b for b in self.local)
        if not local and not intrin.epilogue.global_tile:
            return None
        loop = seq[k] if type(seq[k]) is For else None
        first = last = None
        if loop is not None:
            # calls over the reduction in a loop (their tile the same each time): each is told whether it
            # is the first (zero start) and the last (the epilogue)
            if (loop.kind != "serial" or type(loop.min) is not E.IntImm or loop.min.value != 0
                    or type(loop.extent) is not E.IntImm or uses_vars(tile.origin, {loop.loop_var})):
                return None
            first = E.EQ(loop.loop_var, E.IntImm(loop.loop_var.dtype, 0))
            last = E.EQ(loop.loop_var, E.IntImm(loop.loop_var.dtype, loop.extent.value - 1))
        start, stop = k, k + 1
        zero = False
        if k > 0:
            nest = _nest(seq[k - 1])
            if nest is not None:
                loops, store = nest
                base = _vector_index(store.indices, tile.lanes)
                v = store.value
                zero_value = (_is_const(v) and v.value.value == 0.0 and v.lanes == tile.lanes) or (
                    tile.lanes == 1 and type(v) is E.FloatImm and v.value == 0.0)
                if (store.buffer is tile.buffer and base is not None and zero_value
                        and _axes_of(loops, base, tile) is not None):
                    zero, start = True, k - 1
        out, expr, inputs = None, ("acc",), []
        if k + 1 < len(seq) and local:     # (a tile in a parameter is the result: it is stored in full)
            nest = _nest(seq[k + 1])
            if nest is not None:
                loops, store = nest
                base = _vector_index(store.indices, tile.lanes)
                axes = None if base is None else _axes_from_acc(store.value, loops, tile)
                if axes is not None and str(store.buffer.dtype) == tile.dtype and store.buffer is not tile.buffer:
                    ins = []
                    tree = _template(store.value, tile, loops, axes, ins)
                    o = _access(store.buffer, base, loops, axes, len(tile.axes))
                    if tree is not None and o is not None and _count_acc(tree) == 1:
                        out, expr, inputs, stop = o, tree, tuple(ins), k + 2
        if not zero and out is None:
            return None
        # the tile must be read by nothing but the fused statements (it is no longer written in full)
        if out is not None and any(accesses(x, tile.buffer) for i, x in enumerate(seq) if not start <= i < stop):
            return None
        made = intrin.epilogue.fuse(call, Epilogue(zero, out, expr, tuple(inputs), first, last))
        if made is None:
            return None
        new_call, functions, source = made
        at = loop.body if loop is not None else seq[k]   # AttrStmt(tensor_intrin) > AttrStmt(pragma_import_c)
        call_stmt = Evaluate(new_call)
        for attr in reversed(_launch_attrs(at.body.body)[0]):
            call_stmt = attr.replace(body=call_stmt)
        stmt = at.replace(body=AttrStmt(StringImm(",".join(functions)), "pragma_import_c", StringImm(source),
                                        call_stmt))
        return start, stop, (loop.replace(body=stmt) if loop is not None else stmt)


def _axes_from_acc(value, loops, tile):
    """The loops' tile axes as the epilogue's (first) read of the tile gives them."""
    for _, _, indices in accesses(value, tile.buffer):
        base = _vector_index(indices, tile.lanes)
        return None if base is None else _axes_of(loops, base, tile)
    return None


def fuse_intrin_epilogue(func):
    """The pass (module docstring): PrimFunc -> PrimFunc."""
    body = _Fuser().visit(func.body)
    return func if body is func.body else func.replace(body=body)


__all__ = ["fuse_intrin_epilogue"]
