"""Analyses the primitives check their preconditions with.

- which blocks a loop's variable reaches and through which kind of block iterator
  (`loop_iter_type`, `check_parallelizable`);
- the dependences between the child blocks of a scope (`producers`, `consumers`: TVM's RAW and
  WAW edges from the blocks' read/write regions), whether a block is complete or an output.

Where a block could be computed is locations.py (it runs the placement primitives' own checks).
"""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import Block, For
from ..analysis import uses_vars
from .state import FuncIndex, child_realizes, realizes_under

# ---------------------------------------------------------------------------------------------
# loops and the block iterators they drive
# ---------------------------------------------------------------------------------------------
def loop_bindings(loop: For):
    """(realize, IterVar, binding) of every block iterator whose binding uses the loop's var."""
    var = {loop.loop_var}
    for r in realizes_under(loop.body):
        for iv, value in zip(r.block.iter_vars, r.iter_values):
            if uses_vars(value, var):
                yield r, iv, value


def loop_iter_type(loop: For) -> str:
    """TVM's GetLoopIterType: "data_par" when the loop drives only data-parallel iterators,
    "reduce" when only reduction ones, "opaque" when both or an opaque one."""
    spatial = reduce = other = False
    for _, iv, _ in loop_bindings(loop):
        if iv.iter_type == "data_par":
            spatial = True
        elif iv.iter_type == "reduce":
            reduce = True
        else:
            other = True
    if other or (spatial and reduce):
        return "opaque"
    return "reduce" if reduce else "data_par"


def check_parallelizable(loop: For, prim: str, what: str):
    """Raise unless every block iterator the loop drives is data parallel (TVM's check before
    parallel, vectorize and bind)."""
    name = loop.loop_var.name
    for r, iv, value in loop_bindings(loop):
        if iv.iter_type != "data_par":
            kind = {"reduce": "reduction"}.get(iv.iter_type, iv.iter_type)
            raise ScheduleError(
                f"{prim}: loop {name!r} cannot be {what}: block {r.block.name_hint!r} binds its {kind} "
                f"iterator {iv.var.name!r} to {value.script()}, which uses {name!r}; only loops that "
                f"drive data-parallel iterators can be {what}")


# ---------------------------------------------------------------------------------------------
# dependences between the child blocks of a scope
# ---------------------------------------------------------------------------------------------
def scope_children(idx: FuncIndex, scope) -> list:
    """The child blocks of a scope (a BlockRealize, or None for the function body), in order."""
    return child_realizes(scope.block.body if scope is not None else idx.func.body)


def scope_deps(idx: FuncIndex, scope) -> dict:
    """id(child realize) -> (producers, consumers) within the scope, from RAW and WAW edges."""
    key = ("deps", id(scope))
    deps = idx.cache.get(key)
    if deps is not None:
        return deps
    children = scope_children(idx, scope)
    deps = {id(c): ([], []) for c in children}
    writers: dict = {}
    for c in children:
        b = c.block
        srcs = []
        for region in b.reads:
            srcs.extend(writers.get(region.buffer, ()))
        for region in b.writes:
            srcs.extend(writers.get(region.buffer, ()))
        seen = set()
        for w in srcs:
            if id(w) not in seen and w is not c:
                seen.add(id(w))
                deps[id(c)][0].append(w)
                deps[id(w)][1].append(c)
        for region in b.writes:
            lst = writers.setdefault(region.buffer, [])
            if not lst or lst[-1] is not c:
                lst.append(c)
    idx.cache[key] = deps
    return deps


def producers(idx: FuncIndex, realize) -> list:
    return list(scope_deps(idx, idx.scope_of(realize))[id(realize)][0])


def consumers(idx: FuncIndex, realize) -> list:
    return list(scope_deps(idx, idx.scope_of(realize))[id(realize)][1])


def _written(block: Block):
    return [r.buffer for r in block.writes]


def is_output_block(idx: FuncIndex, realize) -> bool:
    """Whether the block writes a buffer its scope does not allocate (a function parameter)."""
    scope = idx.scope_of(realize)
    allocated = set(scope.block.alloc_buffers) if scope is not None else set()
    return any(b not in allocated for b in _written(realize.block))


def complete_or_reduction(idx: FuncIndex, realize) -> str | None:
    """None when the block is a complete or reduction block of its scope, else why not."""
    b = realize.block
    kinds = {iv.iter_type for iv in b.iter_vars}
    if kinds - {"data_par", "reduce"}:
        return f"block {b.name_hint!r} has {sorted(kinds - {'data_par', 'reduce'})} iterators"
    if "reduce" in kinds and b.init is None:
        return f"block {b.name_hint!r} has reduction iterators but no init"
    if "reduce" not in kinds:
        read = {r.buffer for r in b.reads}
        for buf in _written(b):
            if buf in read:
                return f"block {b.name_hint!r} reads {buf.name!r}, which it writes"
    for c in scope_children(idx, idx.scope_of(realize)):
        if c is not realize and any(buf in _written(c.block) for buf in _written(b)):
            return f"block {c.block.name_hint!r} also writes what {b.name_hint!r} writes"
    return None


def lowest_common_sref(idx: FuncIndex, nodes):
    """The deepest sref that is an ancestor of (or is) every one of `nodes`; used by cache_read/write."""
    chains = []
    for n in nodes:
        chain = []
        p = idx.sref_parent(n)
        while p is not None:
            chain.append(p)
            p = idx.sref_parent(p)
        chains.append(chain)
    common = {id(x) for x in chains[0]}
    for chain in chains[1:]:
        common &= {id(x) for x in chain}
    for x in chains[0]:
        if id(x) in common:
            return x
    return None




__all__ = ["loop_bindings", "loop_iter_type", "check_parallelizable", "scope_children", "scope_deps", "producers",
           "consumers", "is_output_block", "complete_or_reduction", "lowest_common_sref"]
