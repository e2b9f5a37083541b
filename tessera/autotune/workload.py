"""Workload: the program a tuning task schedules, keyed by its structural hash.

    wl = Workload(func)        # wl.key: 16 hex digits, the same in every process and session
    wl.flops                   # floating/integer operations of one run (None with symbolic extents)
    Workload.from_json(wl.as_json())

The key is `ir.structural_hash` (blake2b over the program's structure, names ignored), never
Python's salted `hash()`, so records written by one process are found by another.
"""
from __future__ import annotations

from ..errors import TesseraError
from ..ir import (
    BinaryOp,
    BufferLoad,
    BufferStore,
    Call,
    For,
    IfThenElse,
    IntImm,
    IRModule,
    Node,
    PrimFunc,
    Stmt,
    from_json,
    structural_hash,
    to_json,
)


def workload_key(func: PrimFunc) -> str:
    """The database key of func: its structural hash as 16 hex digits."""
    return format(structural_hash(func), "016x")


class Workload:
    """A PrimFunc to tune and its key; immutable. Built from a PrimFunc, a one-function IRModule or
    a tir.Schedule (its module's function, as scheduled so far)."""

    __slots__ = ("func", "key", "_flops")

    def __init__(self, func, key: str | None = None):
        func = _one_func(func)
        object.__setattr__(self, "func", func)
        object.__setattr__(self, "key", key if key is not None else workload_key(func))
        object.__setattr__(self, "_flops", False)

    def __setattr__(self, key, value):
        raise AttributeError("Workload is immutable")

    @property
    def flops(self) -> float | None:
        """Arithmetic operations of one run (both operands' ops counted in stored values, index
        arithmetic not): 2*M*N*K for a GEMM. None when a loop extent is symbolic."""
        if self._flops is False:
            object.__setattr__(self, "_flops", estimate_flops(self.func))
        return self._flops

    def as_json(self) -> dict:
        """{"key": ..., "func": <ir.to_json document>}."""
        return {"key": self.key, "func": to_json(self.func)}

    @staticmethod
    def from_json(obj) -> "Workload":
        """The workload of an as_json document; a TesseraError when the function no longer hashes
        to the stored key (a corrupt document, or a tessera whose structural hash changed)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("key"), str) or "func" not in obj:
            raise TesseraError(f"a workload document is {{'key': str, 'func': ...}}, got {str(obj)[:80]}")
        func = from_json(obj["func"])
        key = workload_key(func)
        if key != obj["key"]:
            raise TesseraError(f"workload document: the function hashes to {key}, but the document says "
                               f"{obj['key']} (corrupt, or written by a tessera with another structural hash)")
        return Workload(func, key)

    def __eq__(self, other):
        return isinstance(other, Workload) and other.key == self.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"Workload({self.func.name}, key={self.key})"


def _one_func(obj) -> PrimFunc:
    if isinstance(obj, PrimFunc):
        return obj
    mod = getattr(obj, "mod", None)   # a tir.Schedule
    if isinstance(mod, IRModule):
        obj = mod
    if isinstance(obj, IRModule):
        funcs = list(obj.functions.values())
        if len(funcs) == 1:
            return funcs[0]
        raise TesseraError(f"a workload is one PrimFunc; the module has {len(funcs)} "
                           f"({', '.join(obj.functions)})")
    raise TesseraError(f"a workload is a PrimFunc (or a one-function IRModule or Schedule), got "
                       f"{type(obj).__name__}")


def _ops(e) -> int:
    """Arithmetic nodes in a value expression, not counting indices of loads."""
    n, todo = 0, [e]
    while todo:
        x = todo.pop()
        if isinstance(x, BufferLoad):
            continue
        if isinstance(x, BinaryOp) or (type(x) is Call and x.op != "address_of"):
            n += 1
        for f in x._fields:
            v = getattr(x, f)
            if isinstance(v, Node):
                todo.append(v)
            elif type(v) is tuple:
                todo.extend(y for y in v if isinstance(y, Node))
    return n


def estimate_flops(func: PrimFunc) -> float | None:
    """Operations of one run of func: per BufferStore, the ops of its value times the trip count of
    the loops around it (both branches of an if counted). None when a loop extent is not constant."""
    total, stack = 0, [(func.body, 1)]
    while stack:
        s, trips = stack.pop()
        if isinstance(s, BufferStore):
            total += _ops(s.value) * trips
            continue
        if isinstance(s, For):
            if type(s.extent) is not IntImm:
                return None
            trips *= s.extent.value
        if isinstance(s, IfThenElse):
            stack.append((s.then_case, trips))
            if s.else_case is not None:
                stack.append((s.else_case, trips))
            continue
        for f in type(s)._fields:
            v = getattr(s, f)
            if type(v) is tuple:
                stack.extend((x, trips) for x in v if _is_stmt(x))
            elif _is_stmt(v):
                stack.append((v, trips))
    return float(total)


def _is_stmt(x) -> bool:
    return isinstance(x, Stmt)


__all__ = ["Workload", "workload_key", "estimate_flops"]
