"""The arithmetic work of a PrimFunc: the operations of its stores, times the iterations that run
them. A tuner divides it by a candidate's time to print GFLOPS (GEMM M x N x K: 2 M N K)."""
from __future__ import annotations

from ..errors import TesseraError
from ..ir import (BinaryOp, Block, BlockRealize, BufferStore, Call, For, IntImm, PrimExpr, PrimFunc, Reduce,
                  Select)
from ..ir.expr import CmpOp
from ..ir.functor import children

_NOT_ARITH = ("FloorDiv", "FloorMod", "Mod")  # index arithmetic, not work


def _ops(e) -> int:
    """Arithmetic operations in one evaluation of expression e (index arithmetic not counted)."""
    n = 0
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, (BinaryOp, CmpOp)) and type(x).__name__ not in _NOT_ARITH:
            n += 1
        elif isinstance(x, (Call, Select, Reduce)):
            n += 1
        if isinstance(x, PrimExpr) and type(x).__name__ == "BufferLoad":
            continue  # indices are addressing
        stack.extend(children(x))
    return n


def _extent(loop: For, where: str) -> int:
    if type(loop.extent) is not IntImm:
        raise TesseraError(f"flops: loop {loop.loop_var.name!r} of {where} has the symbolic extent "
                           f"{loop.extent.script()}; the work of a program is counted for constant extents")
    return loop.extent.value


def flop_count(func: PrimFunc) -> int:
    """Operations executed by func: per block, the operations of its body's stores times the product
    of the extents of the loops around it (a reduction's init counts nothing)."""
    total = 0
    stack = [(func.body, 1)]
    while stack:
        node, trips = stack.pop()
        if isinstance(node, For):
            stack.append((node.body, trips * _extent(node, func.name)))
        elif isinstance(node, BlockRealize):
            stack.append((node.block, trips))
        elif isinstance(node, Block):
            stack.append((node.body, trips))  # the init's stores are not work
        elif isinstance(node, BufferStore):
            total += trips * _ops(node.value)
        else:
            for c in children(node):
                if not isinstance(c, PrimExpr):
                    stack.append((c, trips))
    return total


__all__ = ["flop_count"]
