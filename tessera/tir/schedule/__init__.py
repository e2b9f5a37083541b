"""tessera.tir.schedule: the TensorIR schedule (TVM's tvm.tir.Schedule names and arguments).

    from tessera import tir
    sch = tir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 8]); sch.parallel(io)

schedule.py holds the Schedule class, every primitive written out as a method of it (its docstring
explains how a family of primitives is added: one file here, e.g. loops.py, placement.py, whose
functions the methods apply); state.py the IR and its index; trace.py / instruction.py the trace;
handles.py the BlockRV/LoopRV/ExprRV handles.
"""
from ...errors import ScheduleError
from .handles import INLINE_MARK, ROOT_MARK, BlockRV, ExprRV, LoopRV
from .instruction import INSTRUCTION_KINDS, Instruction, InstructionKind
from .layout import IndexMap
from .lookup import has_block
from .schedule import Schedule, primitive
from .state import ScheduleState
from .trace import Trace

__all__ = ["Schedule", "BlockRV", "LoopRV", "ExprRV", "Trace", "Instruction", "InstructionKind",
           "INSTRUCTION_KINDS", "ScheduleState", "ScheduleError", "primitive", "ROOT_MARK", "INLINE_MARK", "IndexMap",
           "has_block"]
