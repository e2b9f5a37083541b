"""tessera.tir: the schedulable loop-level IR (TVM's `tir` names), its schedule and lowering passes."""
from ..ir import (Block, BlockRealize, Broadcast, Buffer, BufferLoad, BufferStore, Call, Cast, FloatImm,
                  For, IntImm, IRModule, IterVar, PrimFunc, Ramp, Range, Select, SizeVar, Var,
                  call_intrin, const, floordiv, floormod, truncdiv, truncmod)
from ..ir import max_expr as max  # noqa: A001 - TVM's tir.max
from ..ir import min_expr as min  # noqa: A001 - TVM's tir.min
from . import schedule, tensor_intrin, transform
from .schedule import BlockRV, ExprRV, LoopRV, Schedule
from .tensor_intrin import TensorIntrin
