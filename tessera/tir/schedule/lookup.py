"""Lookup primitives: get_block, get_loops, get_child_blocks, get_producers, get_consumers.

They change nothing (pure instructions) but are traced, since later instructions use the
handles they return.
"""
from __future__ import annotations

import difflib

from ...errors import ScheduleError
from ...ir import BlockRealize
from .analysis import consumers, producers
from .handles import BlockRV, LoopRV
from .instruction import instruction_kind
from .state import child_realizes


@instruction_kind("GetBlock", outputs="one", output_type=BlockRV, pure=True)
def get_block(self, name, func_name="main"):
    """The block called `name` in function `func_name` (the default "main" also finds the only
    function of a module whose function has another name)."""
    if not isinstance(name, str):
        raise ScheduleError(f"get_block: the block name must be a string, got {name!r}")
    if not isinstance(func_name, str):
        raise ScheduleError(f"get_block: func_name must be a string, got {func_name!r}")
    funcs = self._state.funcs
    if func_name not in funcs and func_name == "main" and len(funcs) == 1:
        func_name = next(iter(funcs))  # the only function, whatever its name (TVM's default)
    idx = self._state.index(func_name)
    if name not in idx.blocks:
        names = [n for n in idx.blocks if n != "root"] or list(idx.blocks)
        close = [n for n in names if n.lower() == name.lower()] or \
            difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ScheduleError(f"get_block: function {func_name!r} has no block {name!r}{hint} "
                            f"(blocks: {', '.join(names)})")
    return self._new_block_rv(func_name, name)


@instruction_kind("GetLoops", inputs=("block",), outputs="list", output_type=LoopRV, pure=True)
def get_loops(self, block):
    """The loops around the block inside its scope, outermost first."""
    fname, idx, realize = self._block(block, "get_loops")
    return [self._new_loop_rv(fname, lp.loop_var) for lp in idx.loops_above(realize)]


@instruction_kind("GetChildBlocks", inputs=("block_or_loop",), outputs="list", output_type=BlockRV, pure=True)
def get_child_blocks(self, block_or_loop):
    """The blocks directly under a block or a loop (not those nested in them), in order."""
    fname, idx, node = self._block_or_loop(block_or_loop, "get_child_blocks")
    body = node.block.body if type(node) is BlockRealize else node.body
    return [self._new_block_rv(fname, r.block.name_hint) for r in child_realizes(body)]


@instruction_kind("GetProducers", inputs=("block",), outputs="list", output_type=BlockRV, pure=True)
def get_producers(self, block):
    """The blocks of the same scope this block depends on (they write what it reads or writes)."""
    fname, idx, realize = self._block(block, "get_producers")
    return [self._new_block_rv(fname, r.block.name_hint) for r in producers(idx, realize)]


@instruction_kind("GetConsumers", inputs=("block",), outputs="list", output_type=BlockRV, pure=True)
def get_consumers(self, block):
    """The blocks of the same scope that depend on this block (they read or write what it writes)."""
    fname, idx, realize = self._block(block, "get_consumers")
    return [self._new_block_rv(fname, r.block.name_hint) for r in consumers(idx, realize)]


__all__ = ["get_block", "get_loops", "get_child_blocks", "get_producers", "get_consumers"]


def has_block(sch, name: str) -> bool:
    """Whether the schedule's function has a block called `name`. It asks get_block, so a block that
    is there is looked up as the primitive does it (and traced)."""
    try:
        sch.get_block(name)
        return True
    except ScheduleError:
        return False
