"""tessera.tir.schedule: the TensorIR schedule (TVM's tvm.tir.Schedule names and arguments).

    from tessera import tir
    sch = tir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 8]); sch.parallel(io)

schedule.py holds the Schedule class and the `primitive` decorator (its docstring explains how
a family of primitives is added: one file here, imported below); state.py the IR and its index;
trace.py / instruction.py the trace; handles.py the BlockRV/LoopRV/ExprRV handles.
"""
from .handles import INLINE_MARK, ROOT_MARK, BlockRV, ExprRV, LoopRV
from .instruction import INSTRUCTION_KINDS, Instruction, InstructionKind
from .schedule import Schedule, primitive
from .state import ScheduleState
from .trace import Trace

# primitive families: importing a file adds its methods to Schedule and its instruction kinds
from . import lookup, loops, annotate, sampling  # noqa: E402,F401  (order: the trace kinds' registry)
from . import placement, memory, reduction, layout  # noqa: E402,F401
from .layout import IndexMap  # noqa: E402
from . import blockize, tensorize  # noqa: E402,F401

from ...errors import ScheduleError  # noqa: E402

__all__ = ["Schedule", "BlockRV", "LoopRV", "ExprRV", "Trace", "Instruction", "InstructionKind",
           "INSTRUCTION_KINDS", "ScheduleState", "ScheduleError", "primitive", "ROOT_MARK", "INLINE_MARK", "IndexMap"]
