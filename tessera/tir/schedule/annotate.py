"""annotate / unannotate: key-value annotations on a block or a loop.

Values become IR constants as in TVM: int -> IntImm (int32, int64 when large), float -> FloatImm,
str -> StringImm, bool -> a bool IntImm, an ExprRV -> the IntImm of its value, lists -> tuples.
Lowering honours loop pragmas: `pragma_auto_unroll_max_step` (with `pragma_unroll_explicit`)
unrolls the small loops inside the annotated loop, explicitly (copies) or by `#pragma GCC unroll`.
"""
from __future__ import annotations

import math

from ...errors import ScheduleError
from ...ir import BlockRealize, FloatImm, IntImm, StringImm, const
from ...ir.node import EMPTY_MAP, frozen_map
from .handles import ExprRV
from .instruction import instruction_kind


def _ir_value(self, v, where):
    if isinstance(v, ExprRV):
        return const(self._int(v, "annotate"))
    if isinstance(v, bool):
        return IntImm("bool", v)
    if isinstance(v, int):
        return const(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ScheduleError(f"{where}: annotation value {v} is not finite")
        return FloatImm("float32", v)
    if isinstance(v, str):
        return StringImm(v)
    if isinstance(v, (list, tuple)):
        return tuple(_ir_value(self, x, where) for x in v)
    raise ScheduleError(f"{where}: an annotation value is an int, float, str, bool, ExprRV or a list of "
                        f"them, got {type(v).__name__} {v!r}")


def _target(self, block_or_loop, prim):
    fname, idx, node = self._block_or_loop(block_or_loop, prim)
    if type(node) is BlockRealize:
        return fname, node.block, f"block {node.block.name_hint!r}"
    return fname, node, f"loop {node.loop_var.name!r}"


@instruction_kind("Annotate", inputs=("block_or_loop", "ann_val"))
def annotate(self, block_or_loop, ann_key, ann_val):
    """Set annotation ann_key = ann_val on a block or a loop (replacing an existing value)."""
    if not isinstance(ann_key, str) or not ann_key:
        raise ScheduleError(f"annotate: ann_key must be a non-empty string, got {ann_key!r}")
    fname, node, what = _target(self, block_or_loop, "annotate")
    value = _ir_value(self, ann_val, f"annotate {what}")
    anns = dict(node.annotations)
    anns[ann_key] = value
    self._replace(fname, {node: node.replace(annotations=frozen_map(anns))})
    return None


@instruction_kind("Unannotate", inputs=("block_or_loop",))
def unannotate(self, block_or_loop, ann_key):
    """Remove annotation ann_key from a block or a loop."""
    if not isinstance(ann_key, str):
        raise ScheduleError(f"unannotate: ann_key must be a string, got {ann_key!r}")
    fname, node, what = _target(self, block_or_loop, "unannotate")
    if ann_key not in node.annotations:
        have = ", ".join(repr(k) for k in node.annotations) or "none"
        raise ScheduleError(f"unannotate: {what} has no annotation {ann_key!r} (it has {have})")
    anns = {k: v for k, v in node.annotations.items() if k != ann_key}
    self._replace(fname, {node: node.replace(annotations=frozen_map(anns) if anns else EMPTY_MAP)})
    return None


__all__ = ["annotate", "unannotate"]
