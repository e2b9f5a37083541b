"""Memory primitives: cache_read, cache_write, set_scope, storage_align.

cache_read(block, i, scope) copies the buffer the block reads (its i-th read region) into a new
buffer `<buffer>_<scope>` by a new block of the same name, placed after the buffer's writer (or
first in the scope for a function input), and makes the consumers read the copy; cache_write(block,
i, scope) makes the block write `<buffer>_<scope>` and adds a block copying it back after it. The
new buffers are allocated by the scope's root block; compute_at / reverse_compute_at then move the
copy under a loop, and lowering shrinks (compacts) each buffer to what one iteration of the loop
around its uses touches, so a "local" cache under a tile loop is a small per-tile array.
set_scope changes the storage scope of an allocated buffer; storage_align pads the strides of an
allocated buffer (stride[axis] = k * factor + offset) when it is lowered.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir.names import fresh_name
from ...ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, ForKind, IterVar, Range,
                   Var, const, max_expr, min_expr)
from ...ir.buffer import SCOPES
from ...ir.node import frozen_map
from ..analysis import edit, shape_var_analyzer
from .analysis import lowest_common_sref, consumers, scope_children
from .handles import BlockRV
from .instruction import instruction_kind
from .region import (BufferReplacer, analyzer_for, block_box, buffer_names,
                     fresh_block_name, insert_into, item_position, point_region)
from .state import child_realizes


def _check_scope(prim, storage_scope):
    if not isinstance(storage_scope, str) or storage_scope not in SCOPES:
        raise ScheduleError(f"{prim}: storage_scope must be one of {', '.join(repr(s) for s in SCOPES)}, "
                            f"got {storage_scope!r}")


def _buffer_index(prim, block, index, writes):
    regions = block.writes if writes else block.reads
    what = "write" if writes else "read"
    if isinstance(index, bool) or not isinstance(index, int):
        raise ScheduleError(f"{prim}: {what}_buffer_index must be an int, got {index!r}")
    if not -len(regions) <= index < len(regions):
        listing = ", ".join(f"{k}: {r.buffer.name}" for k, r in enumerate(regions)) or "none"
        raise ScheduleError(f"{prim}: block {block.name_hint!r} has {len(regions)} {what} regions ({listing}); "
                            f"{what}_buffer_index {index} is out of range")
    return regions[index].buffer


def _writers(idx, scope, buf) -> list:
    return [c for c in _all_blocks(idx, scope) if any(w.buffer is buf for w in c.block.writes)]


def _all_blocks(idx, scope) -> list:
    """Every block under the scope (at any depth), in program order."""
    out = []
    stack = list(reversed(scope_children(idx, scope)))
    while stack:
        r = stack.pop()
        out.append(r)

        stack.extend(reversed(child_realizes(r.block.body)))
    return out


def _cache_stage(buf, new_buf, lo_hi, read_from, write_to, name, ana):
    """The copy block `write_to[v] = read_from[v]` over the region [(lo, hi)] and its loops."""
    ivs, loops, values = [], [], []
    for d, (extent, (lo, hi)) in enumerate(zip(buf.shape, lo_hi)):
        dt = extent.dtype
        ivs.append(IterVar(Range.from_min_extent(const(0, dt), extent), Var(f"v{d}", dt), "data_par"))
        ext = ana.simplify(hi - lo + 1)
        ax = Var(f"ax{d}", dt)
        loops.append((ax, ext))
        values.append(ana.simplify(lo + ax) if not (type(lo).__name__ == "IntImm" and lo.value == 0) else ax)
    idx_vars = [iv.var for iv in ivs]
    body = BufferStore(write_to, BufferLoad(read_from, idx_vars), idx_vars)
    block = Block(ivs, (point_region(read_from, idx_vars),), (point_region(write_to, idx_vars),), name, body)
    stmt = BlockRealize(values, True, block)
    for ax, ext in reversed(loops):
        stmt = For(ax, const(0, ax.dtype), ext, ForKind.SERIAL, stmt)
    return stmt


def _clip(bounds, buf, ana):
    """Relaxed bounds clipped to the buffer's shape (an unbounded side becomes the buffer's end)."""
    out = []
    for (lo, hi), extent in zip(bounds, buf.shape):
        zero = const(0, extent.dtype)
        end = ana.simplify(extent - 1)
        lo = zero if lo is None else (lo if ana.can_prove(lo >= 0) else ana.simplify(max_expr(lo, zero)))
        hi = end if hi is None else (hi if ana.can_prove(hi <= end) else ana.simplify(min_expr(hi, end)))
        out.append((lo, hi))
    return out


def _place_after(idx, writer, related, scope):
    """(container, position): after the subtree holding `writer` in the lowest loop (or the scope)
    holding it and the related blocks."""
    lca = lowest_common_sref(idx, [writer] + list(related)) if related else None
    if type(lca) is not For:
        lca = scope
    body = lca.body if type(lca) is For else (lca.block.body if lca is not None else idx.func.body)
    container = lca if type(lca) is For else (lca.block if lca is not None else None)
    pos = item_position(idx, body, container, writer) + 1
    return lca, container, pos


def _nearest_readers(idx, writer, readers) -> list:
    """The readers a copy placed after `writer` must precede: a reader inside a loop with the
    writer reads the copy in the same iteration, so the copy goes right after the writer in the
    innermost loop it shares with a reader (each iteration copies its part; readers after that
    loop see the whole copy); with no shared loop, all of them (the copy goes after the writer's
    subtree in their common scope)."""
    shared = [(lp, r) for r in readers for lp in [lowest_common_sref(idx, [writer, r])] if type(lp) is For]
    if shared:
        return [max(shared, key=lambda p: len(idx.loops_above(p[0])))[1]]
    return list(readers)


def _analyzer_at(idx, lca):
    """An analyzer knowing the loops down to lca (a For), or only the shape variables."""
    if type(lca) is For:
        return analyzer_for(idx, lca, include=lca)

    return shape_var_analyzer(idx.func)


def _new_cache_buffer(idx, buf, storage_scope):
    name = fresh_name(f"{buf.name}_{storage_scope}", buffer_names(idx.func))
    return Buffer(buf.shape, buf.dtype, name, scope=storage_scope, data_alignment=buf.data_alignment)


def _commit(self, fname, idx, scope, edits, container, pos, stage, new_buf):
    """Apply block edits, insert the stage into container (a For, or the scope's Block) and
    allocate new_buf in the scope's root block."""
    prev = edits.get(id(container))
    root = scope.block

    def put(node, prev=prev):
        node = prev(node) if prev is not None else node
        return node.replace(body=insert_into(node.body, pos, stage))

    edits[id(container)] = put
    prev_root = edits.get(id(root))

    def alloc(node, prev=prev_root):
        node = prev(node) if prev is not None else node
        return node.replace(alloc_buffers=node.alloc_buffers + (new_buf,))

    edits[id(root)] = alloc
    func = idx.func
    self._state.set_func(fname, func.with_body(edit(func.body, edits)))


def _resolve_consumers(self, prim, fname, consumer_blocks, buf, candidates):
    if consumer_blocks is None:
        return candidates
    if not isinstance(consumer_blocks, (list, tuple)):
        raise ScheduleError(f"{prim}: consumer_blocks must be a list of BlockRVs, got {consumer_blocks!r}")
    out = []
    for rv in consumer_blocks:
        if isinstance(rv, str):  # a block name (TVM accepts names too)
            r = self._state.index(fname).blocks.get(rv)
            if r is None:
                raise ScheduleError(f"{prim}: consumer_blocks names block {rv!r}, which function {fname!r} "
                                    f"does not have")
        else:
            _, _, r = self._block(rv, prim, func=fname)
        if not any(x is r for x in candidates):
            raise ScheduleError(f"{prim}: block {r.block.name_hint!r} in consumer_blocks does not read "
                                f"{buf.name!r}")
        if not any(x is r for x in out):
            out.append(r)
    return out


@instruction_kind("CacheRead", inputs=("block", "consumer_blocks"), outputs="one", output_type=BlockRV)
def cache_read(self, block, read_buffer_index, storage_scope, consumer_blocks=None):
    """A block `<buffer>_<scope>` copying the buffer that `block` reads (its read_buffer_index-th
    read region) into a new buffer of the given scope; the consumers (all readers, or only
    consumer_blocks) read the copy. Returns the copy block."""
    prim = "cache_read"
    _check_scope(prim, storage_scope)
    fname, idx, realize = self._block(block, prim)
    buf = _buffer_index(prim, realize.block, read_buffer_index, False)
    scope = idx.scope_of(realize)
    if scope is None:
        raise ScheduleError(f"{prim}: block {realize.block.name_hint!r} is not inside a root block to "
                            f"allocate the cache in")
    writers = _writers(idx, scope, buf)
    if len(writers) > 1:
        raise ScheduleError(f"{prim}: buffer {buf.name!r} is written by {len(writers)} blocks "
                            f"({', '.join(repr(w.block.name_hint) for w in writers)}); cache_read needs at most one "
                            f"writer")
    readers = [r for r in _all_blocks(idx, scope)
               if not any(r is w for w in writers) and any(x.buffer is buf for x in r.block.reads)]
    users = _resolve_consumers(self, prim, fname, consumer_blocks, buf, readers)
    new_buf = _new_cache_buffer(idx, buf, storage_scope)
    name = fresh_block_name(idx, f"{buf.name}_{storage_scope}")
    if writers:
        w = writers[0]
        top = [r for r in scope_children(idx, scope) if r is w or idx.encloses(r, w)]
        anchor = top[0] if top else w
        related = _nearest_readers(idx, anchor, [_top_level(idx, scope, u) for u in users if u is not anchor])
        lca, container, pos = _place_after(idx, anchor, related, scope)
        ana = _analyzer_at(idx, lca)
        inner = [lp for lp in idx.loops_above(anchor) if type(lca) is not For or idx.encloses(lca, lp)]
        box = block_box(anchor, buf, inner, ana, writes=True)
        bounds = _clip(box, buf, ana)
    else:
        container, pos = scope.block, 0

        ana = shape_var_analyzer(idx.func)
        bounds = [(const(0, e.dtype), ana.simplify(e - 1)) for e in buf.shape]
    stage = _cache_stage(buf, new_buf, bounds, buf, new_buf, name, ana)
    rep = BufferReplacer({buf: new_buf})
    edits = {}
    for u in users:
        blk = u.block
        edits[id(blk)] = lambda b: rep.visit(b)
    _commit(self, fname, idx, scope, edits, container, pos, stage, new_buf)
    return self._new_block_rv(fname, name)


def _top_level(idx, scope, r):
    """The child block of the scope that holds r (r itself when it is one)."""
    p = r
    while True:
        s = idx.scope_of(p)
        if s is scope:
            return p
        p = s


@instruction_kind("CacheWrite", inputs=("block", "consumer_blocks"), outputs="one", output_type=BlockRV)
def cache_write(self, block, write_buffer_index, storage_scope, consumer_blocks=None):
    """Make `block` write a new buffer `<buffer>_<scope>` and add a block of that name copying it
    back to the buffer right after it; consumer_blocks (optional) read the cache directly.
    Returns the copy block."""
    prim = "cache_write"
    _check_scope(prim, storage_scope)
    fname, idx, realize = self._block(block, prim)
    bname = realize.block.name_hint
    buf = _buffer_index(prim, realize.block, write_buffer_index, True)
    scope = idx.scope_of(realize)
    if scope is None:
        raise ScheduleError(f"{prim}: block {bname!r} is not inside a root block to allocate the cache in")
    if scope_children(idx, scope) and not any(r is realize for r in scope_children(idx, scope)):
        raise ScheduleError(f"{prim}: block {bname!r} is nested inside another block; cache_write the outer block")
    writers = _writers(idx, scope, buf)
    if len(writers) != 1:
        raise ScheduleError(f"{prim}: buffer {buf.name!r} is written by {len(writers)} blocks "
                            f"({', '.join(repr(w.block.name_hint) for w in writers)}); cache_write needs the "
                            f"block to be its only writer")
    readers = [r for r in _all_blocks(idx, scope) if r is not realize and any(x.buffer is buf for x in r.block.reads)]
    direct = _resolve_consumers(self, prim, fname, consumer_blocks, buf, readers) if consumer_blocks else []
    new_buf = _new_cache_buffer(idx, buf, storage_scope)
    name = fresh_block_name(idx, f"{buf.name}_{storage_scope}")
    related = _nearest_readers(idx, realize, consumers(idx, realize))
    lca, container, pos = _place_after(idx, realize, related, scope)
    ana = _analyzer_at(idx, lca)
    inner = [lp for lp in idx.loops_above(realize) if type(lca) is not For or idx.encloses(lca, lp)]
    box = block_box(realize, buf, inner, ana, writes=True)
    bounds = _clip(box, buf, ana)
    stage = _cache_stage(buf, new_buf, bounds, new_buf, buf, name, ana)
    rep = BufferReplacer({buf: new_buf})
    edits = {id(realize.block): lambda b: rep.visit(b)}
    for u in direct:
        edits[id(u.block)] = lambda b: rep.visit(b)
    _commit(self, fname, idx, scope, edits, container, pos, stage, new_buf)
    return self._new_block_rv(fname, name)


def _allocated_buffer(self, prim, block, buffer_index):
    fname, idx, realize = self._block(block, prim)
    buf = _buffer_index(prim, realize.block, buffer_index, True)
    owner = None
    for r in idx.realizes:
        if buf in r.block.alloc_buffers:
            owner = r
            break
    if owner is None:
        raise ScheduleError(f"{prim}: buffer {buf.name!r} written by block {realize.block.name_hint!r} is a "
                            f"parameter of the function; only buffers the function allocates can be changed")
    return fname, idx, realize, buf


@instruction_kind("SetScope", inputs=("block",))
def set_scope(self, block, buffer_index, storage_scope):
    """Set the storage scope of the buffer the block writes (its buffer_index-th write region)."""
    prim = "set_scope"
    _check_scope(prim, storage_scope)
    fname, idx, realize, buf = _allocated_buffer(self, prim, block, buffer_index)
    if buf.scope == storage_scope:
        return None
    new = buf.replace(scope=storage_scope)
    rep = BufferReplacer({buf: new})
    func = idx.func
    self._state.set_func(fname, func.with_body(rep.visit(func.body)))
    return None


DIM_ALIGN = "buffer_dim_align"


@instruction_kind("StorageAlign", inputs=("block",))
def storage_align(self, block, buffer_index, axis, factor, offset):
    """Pad the strides of the buffer the block writes so that stride[axis] = k * factor + offset
    (applied when the buffer is lowered; recorded as the block annotation "buffer_dim_align")."""
    prim = "storage_align"
    fname, idx, realize, buf = _allocated_buffer(self, prim, block, buffer_index)
    for what, v in (("axis", axis), ("factor", factor), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ScheduleError(f"{prim}: {what} must be an int, got {v!r}")
    ndim = buf.ndim
    if not -ndim <= axis < ndim:
        raise ScheduleError(f"{prim}: buffer {buf.name!r} has {ndim} dimensions; axis {axis} is out of range")
    axis %= ndim
    if factor < 1:
        raise ScheduleError(f"{prim}: factor must be >= 1, got {factor}")
    if not 0 <= offset < factor:
        raise ScheduleError(f"{prim}: offset must be in [0, factor) = [0, {factor}), got {offset}")
    blk = realize.block
    index = buffer_index % len(blk.writes)
    entries = [e for e in blk.annotations.get(DIM_ALIGN, ()) if not (e[0].value == index and e[1].value == axis)]
    entries.append(tuple(const(x) for x in (index, axis, factor, offset)))
    anns = dict(blk.annotations)
    anns[DIM_ALIGN] = tuple(entries)
    self._replace(fname, {blk: blk.replace(annotations=frozen_map(anns))})
    return None


__all__ = ["cache_read", "cache_write", "set_scope", "storage_align", "DIM_ALIGN"]
