"""Lowering: passes PrimFunc -> PrimFunc that turn a scheduled program into a flat loop program.

`lower(func)` runs PIPELINE in order; each pass is also usable on its own.
"""
from __future__ import annotations

import functools

from ...errors import TesseraError
from ...ir import IRModule, PrimFunc
from ...target import Target
from .compact_buffer_allocation import compact_buffer_allocation
from .flatten_buffer import flatten_buffer
from .fuse_intrin_epilogue import fuse_intrin_epilogue
from .lower_blocks import lower_blocks
from .lower_checks import lower_checks
from .lower_vthread import lower_vthread
from .plan_buffer_allocation import plan_buffer_allocation
from .simplify import simplify
from .unroll import unroll_loop
from .vectorize import vectorize_loop

# (name, pass) in the order `lower` runs them; vectorize_loop gets the target's vector width.
PIPELINE = (
    ("lower_vthread", lower_vthread),
    ("plan_buffer_allocation", plan_buffer_allocation),
    ("lower_blocks", lower_blocks),
    ("compact_buffer_allocation", compact_buffer_allocation),
    ("flatten_buffer", flatten_buffer),
    ("simplify", simplify),
    ("lower_checks", lower_checks),
    ("vectorize_loop", vectorize_loop),
    ("unroll_loop", unroll_loop),
    ("simplify", simplify),
    ("fuse_intrin_epilogue", fuse_intrin_epilogue),
)


def pipeline(target=None) -> list:
    """PIPELINE with its passes bound to target (a Target or its text, default "c"): its vector
    width for vectorize_loop, the target for compact_buffer_allocation, whether lower_checks reports
    (a C kernel returns a status; OpenCL and CUDA ones cannot). [(name, PrimFunc -> PrimFunc)]."""
    target = Target(target or "c")
    out = []
    for name, fn in PIPELINE:
        if fn is vectorize_loop:
            fn = functools.partial(vectorize_loop, vector_bits=target.vector_bits)
        elif fn is compact_buffer_allocation:
            fn = functools.partial(compact_buffer_allocation, target=target)
        elif fn is lower_checks:
            fn = functools.partial(lower_checks, report=target.kind == "c")
        out.append((name, fn))
    return out


def lower(func_or_mod, target=None, dump=None):
    """Lower a PrimFunc (or every function of an IRModule) to the flat loop program codegen takes.

    target: a Target or its text (default "c"); its vector width sizes vectors.
    dump: optional callback `dump(pass_name, func)` called after every pass (for debugging).
    """
    if isinstance(func_or_mod, IRModule):
        return IRModule({name: lower(f, target, dump) for name, f in func_or_mod})
    if not isinstance(func_or_mod, PrimFunc):
        raise TesseraError(f"lower takes a PrimFunc or an IRModule, got {type(func_or_mod).__name__}")
    func = func_or_mod
    for name, fn in pipeline(target):
        func = fn(func)
        if dump is not None:
            dump(name, func)
    return func


__all__ = ["PIPELINE", "pipeline", "lower", "lower_vthread", "plan_buffer_allocation", "lower_blocks",
           "compact_buffer_allocation", "flatten_buffer", "simplify", "lower_checks", "vectorize_loop",
           "unroll_loop", "fuse_intrin_epilogue"]
