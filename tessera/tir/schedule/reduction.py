"""Reduction primitives: decompose_reduction, rfactor.

decompose_reduction(block, loop) splits a reduction block into `<name>_init`, which runs the init
over the spatial iterators in copies of the loops (`i_init`, ...) placed right before `loop`, and
`<name>_update` (the block renamed, without init), so the init no longer sits inside the
reduction loops. rfactor(loop, factor_axis) turns `B[v] = B[v] (+) f(v, k)` into a partial
reduction `<name>_rf` into `B_rf` (the rfactor loop as a new data-parallel dimension at
factor_axis), computed in copies of the block's loops placed first, and a write-back block (the
original name) combining B_rf over that dimension, in the original loops without the other
reduction loops, so the factored axis can be parallelized or vectorized.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir.names import fresh_name
from ...ir import (Add, And, Block, BlockRealize, Buffer, BufferLoad, BufferStore, FloatImm, ForKind,
                   IntImm, IterVar, Max, Min, Mul, Range, Select, Var, collect_vars, const, seq,
                   structural_equal, substitute)
from ..analysis import accesses, edit
from .analysis import complete_or_reduction
from .handles import BlockRV
from .instruction import instruction_kind
from .region import analyzer_for, buffer_names, dedup_regions, fresh_block_name, point_region
from .state import child_realizes
from ...ir import IfThenElse, all_of
from ...te.intrin import max_value, min_value


def _conjuncts(e) -> list:
    if type(e) is And:
        return _conjuncts(e.a) + _conjuncts(e.b)
    if type(e) is IntImm and e.dtype.is_bool() and e.value == 1:
        return []
    return [e]


def _rename_block(self, fname, old, new):
    for rv, key in list(self._sym.items()):
        if isinstance(key, tuple) and key[0] == "b" and key[1] == fname and key[2] == old:
            self._sym[rv] = ("b", fname, new)


def _reads_of(stmt):
    regions = []
    for kind, buf, indices in accesses(stmt):
        if kind == "read":
            regions.append(point_region(buf, indices))
    return regions


# ---------------------------------------------------------------------------------------------
# decompose_reduction
# ---------------------------------------------------------------------------------------------
@instruction_kind("DecomposeReduction", inputs=("block", "loop"), outputs="one", output_type=BlockRV)
def decompose_reduction(self, block, loop):
    """Split a reduction block into an init block placed before `loop` and an update block
    (`<name>_update`); returns the init block (`<name>_init`)."""
    prim = "decompose_reduction"
    fname, idx, realize = self._block(block, prim)
    _, _, node = self._loop(loop, prim, func=fname)
    blk = realize.block
    name, lname = blk.name_hint, node.loop_var.name
    loops = idx.loops_above(realize)
    if not any(lp is node for lp in loops):
        raise ScheduleError(f"{prim}: loop {lname!r} is not a loop around block {name!r}")
    if blk.init is None or not any(iv.iter_type == "reduce" for iv in blk.iter_vars):
        raise ScheduleError(f"{prim}: block {name!r} is not a reduction block with an init")
    why = complete_or_reduction(idx, realize)
    if why is not None:
        raise ScheduleError(f"{prim}: block {name!r} is not a reduction block ({why})")
    pos = next(k for k, lp in enumerate(loops) if lp is node)
    for iv, v in zip(blk.iter_vars, realize.iter_values):
        if iv.iter_type != "reduce":
            continue
        for lp in loops[:pos]:
            if lp.loop_var in set(collect_vars(v)):
                raise ScheduleError(f"{prim}: loop {lp.loop_var.name!r} outside loop {lname!r} drives the "
                                    f"reduction iterator {iv.var.name!r} of block {name!r}; decompose at a loop "
                                    f"outside every reduction loop")
    # the init block: the spatial iterators, fresh variables
    vmap, ivs, values = {}, [], []
    for iv, v in zip(blk.iter_vars, realize.iter_values):
        if iv.iter_type != "data_par":
            continue
        nv = Var(iv.var.name, iv.var.dtype)
        vmap[iv.var] = nv
        ivs.append(IterVar(iv.dom, nv, "data_par", iv.thread_tag))
        values.append(v)
    init_body = substitute(blk.init, vmap)
    writes = tuple(r.replace(region=tuple(Range.from_min_extent(substitute(x.min, vmap), substitute(x.extent, vmap))
                                          for x in r.region)) for r in blk.writes)
    init_name = fresh_block_name(idx, f"{name}_init")
    init_block = Block(ivs, dedup_regions(_reads_of(init_body)), writes, init_name, init_body,
                       annotations=blk.annotations or None)
    # the loops from `loop` down that the spatial bindings use are copied; the others dropped
    used = set()
    for v in values:
        used.update(collect_vars(v))
    chosen = [lp for lp in loops[pos:] if lp.loop_var in used]
    dropped = {lp.loop_var: lp.min for lp in loops[pos:] if lp.loop_var not in used}
    pred = _split_predicate(realize.predicate, dropped, analyzer_for(idx, realize))
    lmap = {lp.loop_var: Var(f"{lp.loop_var.name}_init", lp.loop_var.dtype) for lp in chosen}
    stmt = BlockRealize([substitute(v, lmap) for v in values], substitute(pred, lmap), init_block)
    for lp in reversed(chosen):
        stmt = lp.replace(loop_var=lmap[lp.loop_var], min=substitute(lp.min, lmap),
                          extent=substitute(lp.extent, lmap), body=stmt)
    # the update block: no init, reads what it writes, renamed
    update_name = fresh_block_name(idx, f"{name}_update")
    reads = tuple(r for r in blk.writes if not any(x.buffer is r.buffer for x in blk.reads)) + blk.reads
    update = blk.replace(init=None, name_hint=update_name, reads=reads)
    edits = {id(blk): lambda b: update, id(node): lambda n: seq(stmt, n)}
    func = idx.func
    self._state.set_func(fname, func.with_body(edit(func.body, edits)))
    _rename_block(self, fname, name, update_name)
    return self._new_block_rv(fname, init_name)


def _without_loops(pred, loops: set):
    """The conjuncts of pred that use none of the given loop variables."""
    kept = [c for c in _conjuncts(pred) if not (set(collect_vars(c)) & loops)]
    return all_of(*kept)


def _split_predicate(pred, dropped: dict, ana):
    """The predicate for a block that no longer runs inside the dropped loops (var -> its min):
    the original block ran its init when those loops were at their minimum, so each conjunct
    is taken there (conjuncts that become true disappear)."""
    kept = []
    for c in _conjuncts(pred):
        vs = set(collect_vars(c))
        if vs & set(dropped):
            c = ana.simplify(substitute(c, {v: m for v, m in dropped.items() if v in vs}))
            if type(c) is IntImm and c.value == 1:
                continue
        kept.append(c)
    return all_of(*kept)


# ---------------------------------------------------------------------------------------------
# rfactor
# ---------------------------------------------------------------------------------------------
def _match_reducer(blk, prim):
    """(combine(lhs, rhs) -> expr, rhs of the update, init value) of a single-store reduction
    `B[v] = combine(B[v], rhs)` (also `Select(cond, combine(B[v], x), B[v])`)."""
    name = blk.name_hint
    body, init = blk.body, blk.init
    if type(body) is not BufferStore or type(init) is not BufferStore:
        raise ScheduleError(f"{prim}: block {name!r} must be one store `B[v] = combine(B[v], x)` with a one-store "
                            f"init (multi-value reductions such as argmax are not supported)")
    if init.buffer is not body.buffer or not all(structural_equal(a, b) for a, b in zip(init.indices, body.indices)):
        raise ScheduleError(f"{prim}: the init of block {name!r} does not write what its update writes")
    buf = body.buffer

    def is_lhs(e):
        return type(e) is BufferLoad and e.buffer is buf and all(
            structural_equal(a, b) for a, b in zip(e.indices, body.indices))

    value = body.value
    cond = None
    if type(value) is Select and is_lhs(value.false_value):
        cond, value = value.condition, value.true_value
    kinds = {Add: "sum", Mul: "prod", Min: "min", Max: "max"}
    kind = kinds.get(type(value))
    if kind is None:
        raise ScheduleError(f"{prim}: the update of block {name!r} ({value.script()}) is not a sum, product, "
                            f"min or max of {buf.name!r} and a value")
    if is_lhs(value.a) and not _uses_buffer(value.b, buf):
        rhs = value.b
    elif is_lhs(value.b) and not _uses_buffer(value.a, buf):
        rhs = value.a
    else:
        raise ScheduleError(f"{prim}: the update of block {name!r} ({value.script()}) does not combine "
                            f"{buf.name!r}[...] with a value that leaves it out")
    ident = {"sum": 0, "prod": 1}.get(kind)
    iv = init.value
    if ident is not None and not (type(iv) in (IntImm, FloatImm) and iv.value == ident):
        raise ScheduleError(f"{prim}: block {name!r} is a {kind} starting from {iv.script()}, not {ident}; "
                            f"partial {kind}s would each include it")
    cls = type(value)

    def combine(a, b):
        return cls(a, b)

    if cond is not None:
        identity = init.value if ident is None else const(ident, buf.dtype)
        if ident is None:  # min/max: a neutral element of the same dtype

            identity = min_value(buf.dtype) if kind == "max" else max_value(buf.dtype)
        rhs = Select(cond, rhs, identity)
    return combine, rhs, body, init


def _uses_buffer(e, buf) -> bool:
    return any(b is buf for _, b, _ in accesses(e))


@instruction_kind("RFactor", inputs=("loop",), outputs="one", output_type=BlockRV)
def rfactor(self, loop, factor_axis):
    """Factor the reduction over `loop` into a partial-reduction block `<name>_rf` writing
    `<buffer>_rf` (the loop's axis inserted at factor_axis) and a write-back block; returns the
    rfactor block."""
    prim = "rfactor"
    fname, idx, node = self._loop(loop, prim)
    lname = node.loop_var.name
    kids = child_realizes(node.body)
    if len(kids) != 1:
        raise ScheduleError(f"{prim}: loop {lname!r} must hold exactly one block, it holds {len(kids)}")
    realize = kids[0]
    blk = realize.block
    name = blk.name_hint
    if blk.init is None or not any(iv.iter_type == "reduce" for iv in blk.iter_vars):
        raise ScheduleError(f"{prim}: block {name!r} under loop {lname!r} is not a reduction block")
    why = complete_or_reduction(idx, realize)
    if why is not None:
        raise ScheduleError(f"{prim}: block {name!r} is not a reduction block ({why})")
    if node.kind != ForKind.SERIAL or node.annotations:
        raise ScheduleError(f"{prim}: loop {lname!r} is {node.kind}{' with annotations' if node.annotations else ''}; "
                            f"rfactor needs a plain serial loop")
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, int):
        raise ScheduleError(f"{prim}: factor_axis must be an int, got {factor_axis!r}")
    combine, rhs, update, init = _match_reducer(blk, prim)
    buf = update.buffer
    ndim = buf.ndim
    if not -(ndim + 1) <= factor_axis <= ndim:
        raise ScheduleError(f"{prim}: {buf.name!r} has {ndim} dimensions, so factor_axis must be in "
                            f"[{-(ndim + 1)}, {ndim}], got {factor_axis}")
    if factor_axis < 0:
        factor_axis += ndim + 1
    loops = idx.loops_above(realize)
    dp_vars, red_vars = set(), set()
    for iv, v in zip(blk.iter_vars, realize.iter_values):
        (dp_vars if iv.iter_type == "data_par" else red_vars).update(collect_vars(v))
    if node.loop_var in dp_vars:
        raise ScheduleError(f"{prim}: loop {lname!r} drives a data-parallel iterator of block {name!r}; "
                            f"rfactor factors a reduction loop")
    if node.loop_var not in red_vars:
        raise ScheduleError(f"{prim}: loop {lname!r} drives no reduction iterator of block {name!r}")
    first = child_realizes(loops[0].body)
    if not first or first[0] is not realize:
        raise ScheduleError(f"{prim}: block {name!r} must be the first block under its outermost loop "
                            f"{loops[0].loop_var.name!r}")
    met_reduce = False
    for lp in loops:
        v = lp.loop_var
        if v in dp_vars and v in red_vars:
            raise ScheduleError(f"{prim}: loop {v.name!r} drives both data-parallel and reduction iterators of "
                                f"block {name!r}")
        if v in red_vars:
            if not met_reduce:
                met_reduce = True
                if len(child_realizes(lp.body)) != 1:
                    raise ScheduleError(f"{prim}: the outermost reduction loop {v.name!r} of block {name!r} must "
                                        f"hold only that block")
        elif v not in dp_vars and met_reduce and not (type(lp.extent) is IntImm and lp.extent.value == 1):
            raise ScheduleError(f"{prim}: loop {v.name!r} under a reduction loop of block {name!r} drives no "
                                f"iterator of it")
    # the rfactor buffer and block
    rf_shape = list(buf.shape)
    rf_shape.insert(factor_axis, node.extent)
    rf_buf = Buffer(rf_shape, buf.dtype, fresh_name(f"{buf.name}_rf", buffer_names(idx.func)),
                    scope=buf.scope, data_alignment=buf.data_alignment)
    rf_iv = IterVar(Range.from_min_extent(node.min, node.extent), Var(f"v{lname}", node.loop_var.dtype), "data_par")
    ivs, values = [rf_iv], [node.loop_var]
    var_map, loop_iv = {}, {node.loop_var: rf_iv.var}
    loop_of = {lp.loop_var: lp for lp in loops}
    for iv, v in zip(blk.iter_vars, realize.iter_values):
        if iv.iter_type == "data_par" or node.loop_var not in set(collect_vars(v)):
            ivs.append(iv)
            values.append(v)
            continue
        for x in collect_vars(v):
            lp = loop_of.get(x)
            if lp is None or x in loop_iv:
                continue
            niv = IterVar(Range.from_min_extent(lp.min, lp.extent), Var(f"v{x.name}", x.dtype), "reduce")
            loop_iv[x] = niv.var
            ivs.append(niv)
            values.append(x)
        var_map[iv.var] = substitute(v, loop_iv)
    rf_indices = list(update.indices)
    rf_indices.insert(factor_axis, rf_iv.var)
    rf_load = BufferLoad(rf_buf, rf_indices)
    rf_update = substitute(BufferStore(rf_buf, combine(rf_load, rhs), rf_indices), var_map)
    rf_init = substitute(BufferStore(rf_buf, init.value, rf_indices), var_map)
    # The loop-level predicate on the reduction loops stands for "each replaced reduction iterator
    # is in its domain". It moves into the block as a guard on the update in terms of the new
    # iterators, so that every partial is initialized (the write-back reads them all) and the
    # block stays correct wherever compute_at regenerates its loops.
    ana = analyzer_for(idx, realize)
    for x in ivs:
        ana.bind(x.var, x.dom)
    guards = []
    iv_of = {iv.var: iv for iv in blk.iter_vars}
    for var, expr in var_map.items():
        dom = iv_of[var].dom
        lo_ok, hi_ok = expr >= dom.min, expr < dom.min + dom.extent
        for c in (lo_ok, hi_ok):
            if not ana.can_prove(c):
                guards.append(c)
    if guards:

        rf_update = IfThenElse(all_of(*guards), rf_update)
    replaced_loops = set()
    for iv, v in zip(blk.iter_vars, realize.iter_values):
        if iv.var in var_map:
            replaced_loops.update(collect_vars(v))
    rf_pred = _without_loops(realize.predicate, replaced_loops)

    def rf_regions(regions):
        out = []
        for r in regions:
            if r.buffer is buf:
                region = list(r.region)
                region.insert(factor_axis, Range.from_min_extent(rf_iv.var, const(1, rf_iv.var.dtype)))
                out.append(point_region(rf_buf, [substitute(x.min, var_map) for x in region]))
            else:
                out.append(r.replace(region=tuple(Range.from_min_extent(substitute(x.min, var_map),
                                                                        substitute(x.extent, var_map))
                                                  for x in r.region)))
        return tuple(out)

    rf_name = fresh_block_name(idx, f"{name}_rf")
    rf_block = Block(ivs, rf_regions(blk.reads), rf_regions(blk.writes), rf_name, rf_update, rf_init,
                     annotations=blk.annotations or None)
    new_vars = {lp.loop_var: Var(lp.loop_var.name, lp.loop_var.dtype) for lp in loops}
    rf_stmt = BlockRealize([substitute(v, new_vars) for v in values], substitute(rf_pred, new_vars),
                           rf_block)
    for lp in reversed(loops):
        rf_stmt = lp.replace(loop_var=new_vars[lp.loop_var], min=substitute(lp.min, new_vars),
                             extent=substitute(lp.extent, new_vars), body=rf_stmt)
    # the write-back block
    wb_iv = IterVar(Range.from_min_extent(node.min, node.extent), Var(f"v{lname}", node.loop_var.dtype), "reduce")
    wb_ivs, wb_values, wb_map = [wb_iv], [node.loop_var], {rf_iv.var: wb_iv.var}
    for iv, v in zip(blk.iter_vars, realize.iter_values):
        if iv.iter_type == "data_par":
            nv = Var(iv.var.name, iv.var.dtype)
            wb_ivs.append(IterVar(iv.dom, nv, "data_par", iv.thread_tag))
            wb_values.append(v)
            wb_map[iv.var] = nv
    wb_indices = [substitute(i, wb_map) for i in update.indices]
    lhs = BufferLoad(buf, wb_indices)
    rhs_load = BufferLoad(rf_buf, [substitute(i, wb_map) for i in rf_indices])
    wb_update = BufferStore(buf, combine(lhs, rhs_load), wb_indices)
    wb_init = BufferStore(buf, substitute(init.value, wb_map), wb_indices)
    wb_reads = (point_region(rf_buf, rhs_load.indices),) + tuple(_reads_of(wb_init))
    wb_block = Block(wb_ivs, dedup_regions(wb_reads), (point_region(buf, wb_indices),), name, wb_update,
                     wb_init, annotations=blk.annotations or None)
    removed = {lp.loop_var: lp.min for lp in loops if lp.loop_var in red_vars and lp is not node}
    wb_pred = _without_loops(realize.predicate, red_vars)   # it reads every (initialized) partial
    wb_realize = BlockRealize(wb_values, wb_pred, wb_block)
    edits = {id(realize): lambda r: wb_realize}
    for lp in loops:
        if lp.loop_var in removed:
            edits[id(lp)] = lambda n: n.body
    prev = edits.get(id(loops[0]))

    def put_rf(n, prev=prev):
        n = prev(n) if prev is not None else n
        return seq(rf_stmt, n)

    edits[id(loops[0])] = put_rf
    root = idx.scope_of(realize)
    if root is None:
        raise ScheduleError(f"{prim}: block {name!r} is not inside a root block to allocate {rf_buf.name!r} in")
    edits[id(root.block)] = lambda b: b.replace(alloc_buffers=b.alloc_buffers + (rf_buf,))
    func = idx.func
    self._state.set_func(fname, func.with_body(edit(func.body, edits)))
    for v in removed:
        self._retire_loop(fname, v, f"rfactor of loop {lname!r} moved its reduction into block {rf_name!r}")
    return self._new_block_rv(fname, rf_name)


__all__ = ["decompose_reduction", "rfactor"]
