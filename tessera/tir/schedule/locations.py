"""Where a block could be computed (`compute_locations`, `can_compute_at`, `can_compute_inline`),
which sample_compute_location draws from. compute_at / compute_inline must accept every location
these return, so they end with the primitives' own checks (placement.compute_at_problem /
compute_inline_problem); they are written from TVM's CollectComputeLocation and the structural
preconditions of ComputeAt / ComputeInline.
"""
from __future__ import annotations

from ...ir import BufferStore, For, IntImm, SeqStmt, Var
from .analysis import complete_or_reduction, consumers, is_output_block, loop_iter_type, lowest_common_sref, producers
from .handles import INLINE_MARK, ROOT_MARK
from .placement import compute_at_problem, compute_inline_problem
from .state import FuncIndex


def can_compute_inline(idx: FuncIndex, realize) -> bool:
    """TVM's preconditions of compute_inline: a complete, non-output block whose body is one
    store `B[v0, v1, ...] = expr` indexed by its distinct iterators (and not reading B)."""
    b = realize.block
    if not b.iter_vars or b.init is not None or b.alloc_buffers or b.match_buffers:
        return False
    if any(iv.iter_type != "data_par" for iv in b.iter_vars):
        return False
    if type(b.body) is not BufferStore or is_output_block(idx, realize):
        return False
    store = b.body
    ivars = {iv.var for iv in b.iter_vars}
    seen = set()
    for i in store.indices:
        if not isinstance(i, Var) or i not in ivars or i in seen:
            return False
        seen.add(i)
    if any(r.buffer is store.buffer for r in b.reads):
        return False
    if complete_or_reduction(idx, realize) is not None:
        return False
    return compute_inline_problem(idx, realize) is None


def _subtree_position(idx: FuncIndex, loop: For, realize) -> int:
    """Index of the statement of loop.body (a sequence, or one statement) that holds realize."""
    body = loop.body
    node = realize
    p = idx.parent_of(node)
    while p is not None and p is not loop and p is not body:
        node, p = p, idx.parent_of(p)
    if type(body) is SeqStmt and p is body:
        for k, s in enumerate(body.seq):
            if s is node:
                return k
    return 0


def can_compute_at(idx: FuncIndex, realize, loop: For) -> str | None:
    """None when the block could be computed at the loop (compute_at's structural preconditions),
    else the reason it cannot."""
    name, lname = realize.block.name_hint, loop.loop_var.name
    scope = idx.scope_of(realize)
    if idx.scope_of(loop) is not scope:
        return f"loop {lname!r} is not in the scope of block {name!r}"
    if idx.encloses(loop, realize):
        return f"loop {lname!r} already encloses block {name!r}"
    why = complete_or_reduction(idx, realize)
    if why is not None:
        return why
    if is_output_block(idx, realize):
        return f"block {name!r} writes an output of the function"
    cons, prods = consumers(idx, realize), producers(idx, realize)
    if not cons:
        return f"block {name!r} has no consumer"
    for c in cons:
        if not idx.encloses(loop, c):
            return f"consumer {c.block.name_hint!r} of block {name!r} is not under loop {lname!r}"
    first_consumer = min(_subtree_position(idx, loop, c) for c in cons)
    inside = [p for p in prods if idx.encloses(loop, p)]
    if inside and max(_subtree_position(idx, loop, p) for p in inside) >= first_consumer:
        return (f"under loop {lname!r} a producer of block {name!r} comes after its first consumer: "
                f"there is no place to insert it")
    return compute_at_problem(idx, realize, loop)


def location_is_legal(idx: FuncIndex, realize, loc) -> bool:
    """Whether the block can be computed at a location of compute_locations(check=False)."""
    if loc is ROOT_MARK:
        return True
    if loc is INLINE_MARK:
        return can_compute_inline(idx, realize)
    return can_compute_at(idx, realize, loc) is None


def compute_locations(idx: FuncIndex, realize, check: bool = True) -> list:
    """(decision index, location) pairs where the block may be computed, in TVM's order: -2 and
    INLINE_MARK when it can be inlined, -1 and ROOT_MARK, then (i, loop) with i the position of
    the loop among the loops of the block's first consumer. check=False: the structural
    candidates only, each to be confirmed by location_is_legal (the costly part, which a sampler
    needs for the one location it draws)."""
    out = []
    if not check or can_compute_inline(idx, realize):
        out.append((-2, INLINE_MARK))
    out.append((-1, ROOT_MARK))
    cons = consumers(idx, realize)
    if not cons:
        return out
    boundary = lowest_common_sref(idx, cons) if len(cons) > 1 else idx.sref_parent(cons[0])
    if type(boundary) is not For:
        return out
    loops = idx.loops_above(cons[0])
    pos = next((k for k, lp in enumerate(loops) if lp is boundary), None)
    if pos is None:
        return out
    n = pos + 1
    types = [loop_iter_type(loops[k]) for k in range(n)]
    last_dp = max((k for k in range(n) if types[k] == "data_par"), default=-1)
    visited_reduce = False
    for k in range(n):
        lp = loops[k]
        if type(lp.extent) is IntImm and lp.extent.value == 1:
            continue
        if types[k] == "data_par":
            if visited_reduce:
                break
        else:
            visited_reduce = True
            if k > last_dp:
                break
        if not check or can_compute_at(idx, realize, lp) is None:
            out.append((k, lp))
    return out


__all__ = ["can_compute_inline", "can_compute_at", "compute_locations", "location_is_legal"]
