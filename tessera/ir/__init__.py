"""tessera's IR: immutable expression and statement nodes, dtypes, buffers, functions."""
from .buffer import Buffer, BufferRegion, decl_buffer
from .dtype import DataType, dtype_of_numpy, numpy_dtype
from .expr import (EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, Broadcast, BufferLoad, Call, Cast,
                   CmpOp, CommReducer, Div, FloatImm, FloorDiv, FloorMod, IntImm, IterVar, Let, Max,
                   Min, Mod, Mul, Not, Or, PrimExpr, Ramp, Range, Reduce, Select, SizeVar, StringImm,
                   Sub, Var, all_of, any_of, call_intrin, cast, const, convert, floordiv, floormod,
                   max_expr, min_expr, truncdiv, truncmod)
from .function import IRModule, PrimFunc
from .functor import Mutator, Visitor, collect_vars, post_order_visit, substitute, uses_var
from .node import Node
from .printer import script
from .stmt import (NOP, Allocate, AssertStmt, AttrStmt, Block, BlockRealize, BufferStore, Evaluate,
                   For, ForKind, IfThenElse, LetStmt, SeqStmt, Stmt, seq)
from .serialize import from_json, load_json, save_json, to_json
from .structural import structural_equal, structural_hash
from .tensor_type import TensorType
