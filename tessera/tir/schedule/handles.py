"""Handles (TVM's "random variables") a Schedule hands out: BlockRV, LoopRV, ExprRV.

A handle is an identity object, meaningless on its own: the schedule's symbol table maps it to a
stable key (a block's name, a loop's Var, an integer), which is re-resolved against the current IR
on every use. Primitives carry block names and surviving loop Vars over, so a handle stays valid
while the program changes; a loop a primitive removes (split, fuse) is retired with a reason, and
using its handle afterwards raises a ScheduleError that names the loop and what happened to it.

`sch.copy()` shares the handle objects: the same handle is valid in the original and the copy.
"""
from __future__ import annotations


class RV:
    """Base of the handle types; `_hint` is only for repr (the symbol table is what counts)."""

    __slots__ = ("_hint",)
    prefix = "?"

    def __init__(self, hint: str = ""):
        self._hint = hint

    def __repr__(self):
        return f"{type(self).__name__}({self._hint!r})" if self._hint else f"{type(self).__name__}()"

    def __reduce__(self):
        raise TypeError("schedule handles are not pickled; serialize the trace with as_json()")


class BlockRV(RV):
    """A handle to a block (printed as b0, b1, ... in traces)."""

    __slots__ = ()
    prefix = "b"


class LoopRV(RV):
    """A handle to a loop (printed as l0, l1, ...); may also be the root or inline mark that
    sample_compute_location returns (TVM's location -1 and -2)."""

    __slots__ = ()
    prefix = "l"


class ExprRV(RV):
    """A handle to an integer drawn by a sampling instruction (printed as v0, v1, ...).

    Pass it where an integer is expected (a split factor, an annotation value); `sch.get(v)` is
    its value."""

    __slots__ = ()
    prefix = "v"


RV_TYPES = (BlockRV, LoopRV, ExprRV)
RV_OF_PREFIX = {cls.prefix: cls for cls in RV_TYPES}


class LocationMark:
    """The special compute locations: ROOT (-1, leave the block where it is) and INLINE (-2)."""

    __slots__ = ("name", "index")

    def __init__(self, name, index):
        self.name, self.index = name, index

    def __repr__(self):
        return f"<compute location {self.name}>"


ROOT_MARK = LocationMark("root", -1)
INLINE_MARK = LocationMark("inline", -2)

__all__ = ["BlockRV", "LoopRV", "ExprRV", "RV_TYPES", "RV_OF_PREFIX", "LocationMark", "ROOT_MARK",
           "INLINE_MARK"]
