"""What a tensor intrinsic offers the lowering pass fuse_intrin_epilogue (tir/transform): its output
tile, and a variant of its call that starts the tile at zero and/or computes an elementwise epilogue
in registers before its one store, instead of a separate pass over the tile.

An intrinsic registered with `epilogue=EpilogueHook(tile, fuse)`:
- `tile(call)` -> Tile or None: where the call writes its output (a flat buffer, the index of the
  first element, and (stride, extent) of each tile axis; a point of the tile is `lanes` contiguous
  elements at origin + sum(axis index * stride));
- `fuse(call, epilogue)` -> (the new Call, the C functions its source defines, the C source), or None
  where the intrinsic cannot take that epilogue.

The epilogue is `expr`, a tree over the accumulated tile value: ("acc",), ("in", j) (input j at the
point), ("add", x, y), ("max", x, c) and ("min", x, c) with c a float constant that is not NaN (x's
NaN is kept, as numpy's maximum does). Input j and the output are Accesses: a flat buffer, the index
of the tile origin's element, and a stride per tile axis (0 where the value does not change along
it, such as a bias along the pixels).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tile:
    """An intrinsic call's output tile: `buffer` (flat) from index `origin`, axes ((stride, extent), ...)."""

    buffer: object
    origin: object
    axes: tuple
    lanes: int
    dtype: str


@dataclass(frozen=True)
class Access:
    """Elements of a flat buffer along the tile: index origin + sum(axis index * strides[axis])."""

    buffer: object
    origin: object
    strides: tuple


@dataclass(frozen=True)
class Epilogue:
    """What to fold into the call: zero_init (the tile starts at zero: the init before the call is
    dropped), out (the store of the epilogue, or None: the call writes its tile as before), expr and
    inputs (see the module docstring); first / last: where the call is one of several over the
    reduction (a loop around it), int expressions saying whether this call is the first / the last
    (None: the call is the whole reduction)."""

    zero_init: bool
    out: Access | None = None
    expr: tuple = ("acc",)
    inputs: tuple = ()
    first: object = None
    last: object = None


@dataclass(frozen=True)
class EpilogueHook:
    """An intrinsic's two functions for fuse_intrin_epilogue: tile(call) and fuse(call, Epilogue).
    global_tile: the zero start may also fold in where the tile is in a buffer allocated elsewhere (a
    parameter: a GPU block's tile of the output), not only in a local one; an epilogue never does there."""

    tile: object
    fuse: object
    global_tile: bool = False


__all__ = ["Tile", "Access", "Epilogue", "EpilogueHook"]
