"""Statement nodes: stores, loops, blocks (TensorIR-style), control flow, allocation."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError, TesseraError
from .buffer import Buffer, BufferRegion
from .expr import Broadcast, IterVar, PrimExpr, Var, const, convert
from .node import EMPTY_MAP, Node, frozen_map, set_field


class Stmt(Node):
    __slots__ = ()


class BufferStore(Stmt):
    """`buffer[indices] = value`; Ramp indices make a vector store."""

    __slots__ = ("buffer", "value", "indices")
    _fields = ("buffer", "value", "indices")

    def __init__(self, buffer: Buffer, value, indices):
        value = convert(value)
        indices = tuple(convert(i) for i in indices)
        if len(indices) != buffer.ndim:
            raise ShapeError(f"store to {buffer.name!r}: {len(indices)} indices for {buffer.ndim} dimensions")
        lanes = max([i.dtype.lanes for i in indices] + [1]) * buffer.dtype.lanes
        if value.dtype.element_of() != buffer.dtype.element_of():
            raise DTypeError(f"store to {buffer.name!r} ({buffer.dtype}) of a {value.dtype} value "
                             f"({value.script()}); cast it with .astype('{buffer.dtype}')")
        if value.dtype.lanes != lanes:
            if value.dtype.lanes == 1:
                value = Broadcast(value, lanes)
            else:
                raise DTypeError(f"store to {buffer.name!r}: value has {value.dtype.lanes} lanes, "
                                 f"indices address {lanes}")
        set_field(self, "buffer", buffer)
        set_field(self, "value", value)
        set_field(self, "indices", indices)


class ForKind:
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"
    ALL = (SERIAL, PARALLEL, VECTORIZED, UNROLLED, THREAD_BINDING)


class For(Stmt):
    """`for loop_var in range(min, min + extent)`: kind serial/parallel/vectorized/unrolled/thread_binding."""

    __slots__ = ("loop_var", "min", "extent", "kind", "body", "thread_binding", "annotations")
    _fields = ("loop_var", "min", "extent", "kind", "body", "thread_binding", "annotations")
    _def_fields = ("loop_var",)

    def __init__(self, loop_var: Var, min_value, extent, kind, body, thread_binding=None, annotations=None):
        if kind not in ForKind.ALL:
            raise TesseraError(f"loop kind must be one of {ForKind.ALL}, got {kind!r}")
        if not isinstance(loop_var, Var):
            raise TesseraError(f"a loop variable must be a Var, got {loop_var!r}")
        if not isinstance(body, Stmt):
            raise TesseraError(f"loop body must be a statement, got {type(body).__name__}")
        set_field(self, "loop_var", loop_var)
        set_field(self, "min", convert(min_value))
        set_field(self, "extent", convert(extent))
        set_field(self, "kind", kind)
        set_field(self, "body", body)
        set_field(self, "thread_binding", thread_binding)
        set_field(self, "annotations", frozen_map(annotations) if annotations else EMPTY_MAP)


class SeqStmt(Stmt):
    """Statements in order. Use `seq(...)` to build one flattened, without 1-element sequences."""

    __slots__ = ("seq",)
    _fields = ("seq",)

    def __init__(self, stmts):
        set_field(self, "seq", tuple(stmts))


def seq(*stmts) -> Stmt:
    """A flattened sequence; nested SeqStmts are spliced and no-ops dropped."""
    out = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, (list, tuple)):
            s = seq(*s)
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        elif isinstance(s, Evaluate) and isinstance(s.value, PrimExpr) and type(s.value).__name__ == "IntImm":
            continue
        else:
            out.append(s)
    if not out:
        return Evaluate(0)
    return out[0] if len(out) == 1 else SeqStmt(out)


class IfThenElse(Stmt):
    __slots__ = ("condition", "then_case", "else_case")
    _fields = ("condition", "then_case", "else_case")

    def __init__(self, condition, then_case, else_case=None):
        condition = convert(condition)
        if not condition.dtype.is_bool():
            raise DTypeError(f"if condition must be bool, got {condition.dtype}")
        set_field(self, "condition", condition)
        set_field(self, "then_case", then_case)
        set_field(self, "else_case", else_case)


class Allocate(Stmt):
    """Storage for `buffer` (its scope says where) live within `body`."""

    __slots__ = ("buffer", "body")
    _fields = ("buffer", "body")
    _def_fields = ("buffer",)

    def __init__(self, buffer: Buffer, body: Stmt):
        set_field(self, "buffer", buffer)
        set_field(self, "body", body)


class Evaluate(Stmt):
    """Evaluate an expression for its effect (e.g. an extern call); `Evaluate(0)` is a no-op."""

    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, value):
        set_field(self, "value", convert(value))


class LetStmt(Stmt):
    __slots__ = ("var", "value", "body")
    _fields = ("var", "value", "body")
    _def_fields = ("var",)

    def __init__(self, var: Var, value, body: Stmt):
        value = convert(value)
        if var.dtype != value.dtype:
            raise DTypeError(f"let {var.name}: variable is {var.dtype}, value is {value.dtype}")
        set_field(self, "var", var)
        set_field(self, "value", value)
        set_field(self, "body", body)


class AttrStmt(Stmt):
    """An attribute on a node for the statements in body (pragmas, thread extents)."""

    __slots__ = ("node", "attr_key", "value", "body")
    _fields = ("node", "attr_key", "value", "body")

    def __init__(self, node, attr_key: str, value, body: Stmt):
        set_field(self, "node", node)
        set_field(self, "attr_key", str(attr_key))
        set_field(self, "value", convert(value))
        set_field(self, "body", body)


class AssertStmt(Stmt):
    """Run body if condition holds, else fail with message: the kernel returns a status and the
    message, each `{}` in it replaced by the value of the next of `args` (scalar expressions, e.g.
    the index that was out of range), so a run-time check can say what it saw."""

    __slots__ = ("condition", "message", "body", "args")
    _fields = ("condition", "message", "body", "args")

    def __init__(self, condition, message: str, body: Stmt, args=()):
        message, args = str(message), tuple(convert(a) for a in args)
        if args and message.count("{}") != len(args):
            raise TesseraError(f"assert message {message!r} has {message.count('{}')} '{{}}' placeholders "
                               f"for {len(args)} args")
        set_field(self, "condition", convert(condition))
        set_field(self, "message", message)
        set_field(self, "body", body)
        set_field(self, "args", args)


class Block(Stmt):
    """A TensorIR block: an isolated computation over its iteration variables.

    iter_vars: IterVars (data_par / reduce) with their domains; reads/writes: BufferRegions;
    init: the statement run before the first reduction step (or None); alloc_buffers: buffers
    whose lifetime is this block.
    """

    __slots__ = ("iter_vars", "reads", "writes", "name_hint", "body", "init", "alloc_buffers",
                 "match_buffers", "annotations")
    _fields = ("iter_vars", "reads", "writes", "name_hint", "body", "init", "alloc_buffers",
               "match_buffers", "annotations")
    _def_fields = ("iter_vars", "alloc_buffers")

    def __init__(self, iter_vars, reads, writes, name_hint, body, init=None, alloc_buffers=(),
                 match_buffers=(), annotations=None):
        iter_vars = tuple(iter_vars)
        for iv in iter_vars:
            if not isinstance(iv, IterVar):
                raise TesseraError(f"block {name_hint!r}: iter_vars must be IterVars, got {iv!r}")
        set_field(self, "iter_vars", iter_vars)
        set_field(self, "reads", tuple(reads))
        set_field(self, "writes", tuple(writes))
        set_field(self, "name_hint", str(name_hint))
        set_field(self, "body", body)
        set_field(self, "init", init)
        set_field(self, "alloc_buffers", tuple(alloc_buffers))
        set_field(self, "match_buffers", tuple(match_buffers))
        set_field(self, "annotations", frozen_map(annotations) if annotations else EMPTY_MAP)


class BlockRealize(Stmt):
    """A block instance: its iteration variables bound to `iter_values`, run when `predicate` holds."""

    __slots__ = ("iter_values", "predicate", "block")
    _fields = ("iter_values", "predicate", "block")

    def __init__(self, iter_values, predicate, block: Block):
        iter_values = tuple(convert(v) for v in iter_values)
        if len(iter_values) != len(block.iter_vars):
            raise TesseraError(f"block {block.name_hint!r}: {len(iter_values)} bindings for "
                               f"{len(block.iter_vars)} iteration variables")
        predicate = convert(predicate if predicate is not None else True)
        set_field(self, "iter_values", iter_values)
        set_field(self, "predicate", predicate)
        set_field(self, "block", block)


NOP = Evaluate(const(0))

__all__ = ["Stmt", "BufferStore", "ForKind", "For", "SeqStmt", "seq", "IfThenElse", "Allocate",
           "Evaluate", "LetStmt", "AttrStmt", "AssertStmt", "Block", "BlockRealize", "BufferRegion",
           "Buffer", "NOP"]
