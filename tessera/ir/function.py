"""PrimFunc (one kernel) and IRModule (a named set of them)."""
from __future__ import annotations

from ..errors import TesseraError
from .buffer import Buffer
from .expr import Var
from .node import EMPTY_MAP, Node, frozen_map, set_field
from .stmt import Stmt


class PrimFunc(Node):
    """A kernel: parameters (Buffers for tensors, Vars for scalars), a body, attributes.

    Symbolic extents in the buffers' shapes are bound from the arguments' shapes at call time.
    """

    __slots__ = ("params", "body", "attrs", "name")
    _fields = ("params", "body", "attrs", "name")
    _def_fields = ("params",)
    _ignore_fields = ("name",)

    def __init__(self, params, body: Stmt, attrs=None, name="main"):
        params = tuple(params)
        for p in params:
            if not isinstance(p, (Buffer, Var)):
                raise TesseraError(f"PrimFunc parameters are Buffers or Vars, got {p!r}")
        if not isinstance(body, Stmt):
            raise TesseraError(f"PrimFunc body must be a statement, got {type(body).__name__}")
        set_field(self, "params", params)
        set_field(self, "body", body)
        set_field(self, "attrs", frozen_map(attrs) if attrs else EMPTY_MAP)
        set_field(self, "name", str(name))

    def with_body(self, body: Stmt) -> "PrimFunc":
        return self.replace(body=body)

    def with_attr(self, key, value) -> "PrimFunc":
        attrs = dict(self.attrs)
        attrs[key] = value
        return self.replace(attrs=frozen_map(attrs))

    @property
    def buffer_params(self):
        return [p for p in self.params if isinstance(p, Buffer)]


class IRModule(Node):
    """Named PrimFuncs; `mod["main"]` is the entry of a single-kernel module."""

    __slots__ = ("functions",)
    _fields = ("functions",)

    def __init__(self, functions):
        if isinstance(functions, PrimFunc):
            functions = {functions.name: functions}
        set_field(self, "functions", frozen_map(functions))

    def __getitem__(self, name) -> PrimFunc:
        try:
            return self.functions[name]
        except KeyError:
            raise TesseraError(f"module has no function {name!r}; it has {sorted(self.functions)}") from None

    def __contains__(self, name):
        return name in self.functions

    def __iter__(self):
        return iter(self.functions.items())

    def update_func(self, name, func) -> "IRModule":
        fs = dict(self.functions)
        fs[name] = func
        return IRModule(fs)

    @staticmethod
    def from_expr(func: PrimFunc) -> "IRModule":
        return IRModule({"main": func})
