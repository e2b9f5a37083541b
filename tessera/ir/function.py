"""PrimFunc (one kernel) and IRModule (a named set of them)."""
from __future__ import annotations

from ..errors import ShapeError, TesseraError
from .buffer import Buffer
from .expr import BinaryOp, IntImm, PrimExpr, Var, const, convert, eval_const
from .functor import Mutator, Visitor
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

    def free_vars(self) -> list:
        """The function's symbolic extents and scalar parameters: the Vars of its parameters' shapes
        and strides, and its Var parameters, in parameter order (what `specialize` binds)."""
        found = _ShapeVars()
        for p in self.params:
            found.visit(p)
        return list(found.vars)

    def specialize(self, param_map) -> "PrimFunc":
        """This function with some symbolic extents (or scalar parameters) bound to values, as TVM's
        PrimFunc.specialize: `func.specialize({n: 1024})` makes the buffers of shape (n, 64) static
        (1024, 64) everywhere in the program, so it can be tuned, and the built kernel checks the
        argument shapes against them. Keys are the Vars of `free_vars()` (or their names); values
        ints (non-negative where the Var is an extent) or expressions over the other free Vars.
        A bound scalar parameter leaves the parameter list."""
        if not hasattr(param_map, "items"):
            raise TesseraError(f"specialize takes a dict {{var: value}}, got {type(param_map).__name__}")
        free = self.free_vars()
        by_name = {}
        for v in free:
            by_name.setdefault(v.name, v)
        extents = _ShapeVars(strides=False)
        for p in self.buffer_params:
            extents.visit(p)
        vmap = {}
        for key, value in param_map.items():
            var = by_name.get(key) if isinstance(key, str) else key
            if not isinstance(var, Var) or not any(var is v for v in free):
                raise TesseraError(f"specialize: {key!r} is not a symbolic extent or scalar parameter of "
                                   f"{self.name!r} (those are: {', '.join(v.name for v in free) or 'none'})")
            if isinstance(value, bool) or not isinstance(value, (int, PrimExpr)):
                raise TesseraError(f"specialize: {var.name} = {value!r}: expected an int or an expression")
            if isinstance(value, int):
                if value < 0 and any(var is v for v in extents.vars):
                    raise ShapeError(f"specialize: {var.name} is an extent of {self.name!r}; got {value}")
                value = const(value, var.dtype)
            vmap[var] = convert(value)
        out = _Specializer(vmap).visit(self)
        params = tuple(p for p in out.params if not (isinstance(p, Var) and p in vmap))
        return out.replace(params=params)


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


class _ShapeVars(Visitor):
    """The Vars of parameters' shapes (and strides), and Var parameters, in the order first seen."""

    visit_buffers = True

    def __init__(self, strides: bool = True):
        super().__init__()
        self.vars: dict = {}
        self.strides = strides

    def visit_Var(self, v):
        self.vars.setdefault(v, None)

    def visit_Buffer(self, b):
        for e in b.shape + (b.strides + (b.elem_offset,) if self.strides else ()):
            self.visit(e)


class _Specializer(Mutator):
    """Vars replaced by values everywhere, buffers included (one new Buffer per old one, so buffers
    keep their identity across the program); integer arithmetic of two constants folded."""

    mutate_buffers = True

    def __init__(self, vmap: dict):
        super().__init__()
        self.vmap = vmap
        self.buffers: dict = {}

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    def visit_Buffer(self, b):
        hit = self.buffers.get(id(b))
        if hit is None:
            hit = self.buffers[id(b)] = (b, self.generic_visit(b))
        return hit[1]

    def visit_BinaryOp(self, e):
        e = self.generic_visit(e)
        if isinstance(e, BinaryOp) and isinstance(e.a, IntImm) and isinstance(e.b, IntImm):
            v = eval_const(type(e), e.a.value, e.b.value, e.dtype)
            if v is not None:
                return const(v, e.dtype)
        return e
