"""Tensors and the operations that define them: placeholder, compute, reduce_axis.

A Tensor owns one `ir.Buffer` (same name, shape, dtype); indexing it builds `ir.BufferLoad`s on
that buffer, so compute bodies are ordinary IR expressions. A ComputeOp remembers the tensors its
body reads (`input_tensors`), which is what `create_prim_func` walks.
"""
from __future__ import annotations

import inspect
import threading
import weakref

from ..errors import DTypeError, ShapeError, TesseraError
from ..ir import expr as E
from ..ir.buffer import Buffer
from ..ir.functor import Visitor
from ..ir.structural import structural_equal
from ..ir.dtype import DataType

# buffer -> the Tensor that owns it (weak: a tensor nobody holds may go)
_TENSOR_OF_BUFFER: "weakref.WeakValueDictionary[Buffer, Tensor]" = weakref.WeakValueDictionary()

class _Indexed(threading.local):
    """Per thread, while an fcompute runs: the tensors it indexes (keeps temporaries alive)."""

    def __init__(self):
        self.stack: list[list] = []


_INDEXED = _Indexed()


class Tensor:
    """The value_index-th output of an operation: shape (PrimExprs), dtype, name, and its Buffer."""

    __slots__ = ("shape", "dtype", "name", "op", "value_index", "buffer", "__weakref__")

    def __init__(self, shape, dtype, name, op, value_index=0):
        buf = Buffer(shape, dtype, name)
        self.buffer = buf
        self.shape = buf.shape
        self.dtype = buf.dtype
        self.name = buf.name
        self.op = op
        self.value_index = value_index
        _TENSOR_OF_BUFFER[buf] = self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> E.BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise ShapeError(f"tensor {self.name!r} has {len(self.shape)} dimensions "
                             f"{_fmt_shape(self.shape)}, indexed with {len(indices)} indices")
        for i in indices:
            if not isinstance(i, (E.PrimExpr, E.IterVar, int)) and not hasattr(i, "__index__"):
                raise TesseraError(f"tensor {self.name!r}: index {i!r} is not an integer expression; te "
                                   f"tensors take one scalar index per dimension (no slices)")
        stack = _INDEXED.stack
        if stack:
            stack[-1].append(self)
        return E.BufferLoad(self.buffer, indices)

    def __call__(self, *indices) -> E.BufferLoad:
        return self[indices]

    def __iter__(self):
        raise TesseraError(f"tensor {self.name!r} is not iterable; index it with A[i, j]")

    def __bool__(self):
        return True

    def __repr__(self):
        return f"Tensor(name={self.name!r}, shape={_fmt_shape(self.shape)}, dtype={self.dtype!r})"


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(s.value) if isinstance(s, E.IntImm) else s.script() for s in shape) + \
        ("," if len(shape) == 1 else "") + ")"


class PlaceholderOp:
    """An input: data supplied by the caller."""

    __slots__ = ("name", "shape", "dtype", "outputs", "__weakref__")
    input_tensors = ()
    num_outputs = 1

    def __init__(self, name, shape, dtype):
        self.name = name
        self.outputs = (Tensor(shape, dtype, name, self, 0),)
        self.shape, self.dtype = self.outputs[0].shape, self.outputs[0].dtype

    def output(self, i: int = 0) -> Tensor:
        return self.outputs[i]

    def __repr__(self):
        return f"PlaceholderOp({self.name!r})"


class ComputeOp:
    """A tensor defined pointwise: body[k] gives output k at the point of `axis`.

    A reduction's body is one Reduce per output (all over `reduce_axis`); `reduce_groups` lists, per
    reducer call, the output positions it produces (several for a multi-value reducer as argmax).
    """

    __slots__ = ("name", "tag", "attrs", "axis", "reduce_axis", "body", "input_tensors",
                 "reduce_groups", "outputs", "__weakref__")

    def __init__(self, name, tag, attrs, axis, reduce_axis, body, input_tensors, reduce_groups):
        self.name, self.tag, self.attrs = name, tag, dict(attrs or {})
        self.axis, self.reduce_axis = tuple(axis), tuple(reduce_axis)
        self.body = tuple(body)
        self.input_tensors = tuple(input_tensors)
        self.reduce_groups = tuple(reduce_groups)
        self.outputs = ()

    @property
    def num_outputs(self) -> int:
        return len(self.body)

    def output(self, i: int = 0) -> Tensor:
        return self.outputs[i]

    def __repr__(self):
        return f"ComputeOp({self.name!r})"


# ---------------------------------------------------------------------------------------------
# user-facing constructors
# ---------------------------------------------------------------------------------------------
def _shape_tuple(shape, what):
    if isinstance(shape, (list, tuple)):
        items = tuple(shape)
    else:
        items = (shape,)
    out = []
    for s in items:
        if isinstance(s, E.IterVar):
            s = s.var
        if isinstance(s, bool) or not isinstance(s, (E.PrimExpr, int)) and not hasattr(s, "__index__"):
            raise ShapeError(f"{what}: shape entry {s!r} is not an integer or integer expression")
        s = E.convert(s if isinstance(s, E.PrimExpr) else int(s))
        if not s.dtype.is_integer() or s.dtype.lanes != 1:
            raise ShapeError(f"{what}: shape entry {s.script()} is {s.dtype}, not a scalar integer")
        if isinstance(s, E.IntImm) and s.value < 0:
            raise ShapeError(f"{what}: negative extent {s.value} in shape")
        out.append(s)
    return tuple(out)


def placeholder(shape, dtype="float32", name="placeholder") -> Tensor:
    """An input tensor of the given shape (ints or symbolic te.var extents) and dtype."""
    dt = DataType(dtype)
    if dt.lanes != 1 or dt.is_handle():
        raise DTypeError(f"placeholder {name!r}: dtype must be a scalar number type, got {dt}")
    return PlaceholderOp(str(name), _shape_tuple(shape, f"placeholder {name!r}"), dt).outputs[0]


def reduce_axis(dom, name="rv") -> E.IterVar:
    """A reduction axis over dom, a (begin, end) tuple or an ir.Range."""
    if isinstance(dom, E.Range):
        rng = dom
    elif isinstance(dom, (tuple, list)) and len(dom) == 2:
        begin, end = (E.convert(d) for d in dom)
        for d in (begin, end):
            if not d.dtype.is_integer() or d.dtype.lanes != 1:
                raise ShapeError(f"reduce_axis {name!r}: bound {d.script()} is not a scalar integer")
        if begin.dtype != end.dtype:
            begin, end = E.binary_operands(begin, end, "reduce_axis")
        rng = E.Range(begin, end)
    else:
        raise TesseraError(f"reduce_axis {name!r}: dom must be a (begin, end) tuple or a Range, got {dom!r}")
    if isinstance(rng.extent, E.IntImm) and rng.extent.value < 0:
        raise ShapeError(f"reduce_axis {name!r}: empty-or-negative range of extent {rng.extent.value}")
    return E.IterVar(rng, E.Var(str(name), rng.extent.dtype), "reduce")


def _axis_names(fcompute, ndim, opname, shape):
    try:
        params = inspect.signature(fcompute).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature
        return [f"i{k}" for k in range(ndim)]
    pos, varargs = [], False
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            pos.append(p)
        elif p.kind == p.VAR_POSITIONAL:
            varargs = True
        elif p.kind == p.KEYWORD_ONLY and p.default is p.empty:
            raise TesseraError(f"compute {opname!r}: fcompute has a required keyword-only argument "
                               f"{p.name!r}; it must take only the index variables")
    required = sum(1 for p in pos if p.default is p.empty)
    if varargs:
        if required > ndim:
            raise ShapeError(f"compute {opname!r}: fcompute needs at least {required} indices but the "
                             f"shape {_fmt_shape(shape)} has {ndim} dimensions")
        named = [p.name for p in pos[:ndim]]
        return named + [f"i{k}" for k in range(len(named), ndim)]
    if not required <= ndim <= len(pos):
        raise ShapeError(f"compute {opname!r}: fcompute takes {len(pos)} index arguments but the shape "
                         f"{_fmt_shape(shape)} has {ndim} dimensions")
    return [p.name for p in pos[:ndim]]


def _body_expr(value, opname):
    if isinstance(value, Tensor):
        raise TesseraError(f"compute {opname!r}: fcompute returned tensor {value.name!r} itself; "
                           f"return an element of it, e.g. {value.name}[i, j]")
    try:
        value = E.convert(value)
    except TesseraError:
        raise TesseraError(f"compute {opname!r}: fcompute returned {value!r}, which is not an expression") from None
    if value.dtype.lanes != 1 or value.dtype.is_handle():
        raise DTypeError(f"compute {opname!r}: the body must be a scalar number, got {value.dtype}")
    return value


class _BodyScan(Visitor):
    """Collects the buffers a body reads and refuses reductions that are not at its top."""

    def __init__(self, opname):
        super().__init__()
        self.opname = opname
        self.buffers = {}

    def visit_BufferLoad(self, node):
        self.buffers.setdefault(node.buffer, None)
        for i in node.indices:
            self.visit(i)

    def visit_Reduce(self, node):
        name = node.combiner.name
        raise TesseraError(f"compute {self.opname!r}: te.{name} must be the outermost expression of the "
                           f"compute body; compute the reduction in its own te.compute")


def _same_reduction(a: E.Reduce, b: E.Reduce) -> bool:
    return (a.combiner is b.combiner and len(a.source) == len(b.source)
            and all(x is y for x, y in zip(a.source, b.source))
            and (a.condition is b.condition or structural_equal(a.condition, b.condition))
            and len(a.init) == len(b.init) and all(x is y for x, y in zip(a.init, b.init)))


def _reduction_groups(opname, body):
    is_red = [isinstance(b, E.Reduce) for b in body]
    if not any(is_red):
        return (), ()
    if not all(is_red):
        raise TesseraError(f"compute {opname!r}: a multi-output compute must be all reductions or none; "
                           f"output {is_red.index(False)} is not a reduction")
    axes = body[0].axis
    groups = []
    for k, r in enumerate(body):
        if len(r.axis) != len(axes) or any(a is not b for a, b in zip(r.axis, axes)):
            raise TesseraError(f"compute {opname!r}: all reductions of one compute must reduce over the "
                               f"same axes; output {k} reduces over "
                               f"{[a.var.name for a in r.axis]}, output 0 over {[a.var.name for a in axes]}")
        for g in groups:
            if _same_reduction(body[g[0]], r):
                g.append(k)
                break
        else:
            groups.append([k])
    for g in groups:
        r = body[g[0]]
        n = len(r.combiner.result)
        got = sorted(body[k].value_index for k in g)
        if got != list(range(n)):
            raise TesseraError(f"compute {opname!r}: reducer {r.combiner.name!r} produces {n} values; the "
                               f"compute must return all of them (it returns value indices {got})")
    return axes, tuple(tuple(g) for g in groups)


def compute(shape, fcompute, name="compute", tag="", attrs=None):
    """A tensor whose element at index (i, j, ...) is fcompute(i, j, ...).

    fcompute returns an expression (or a Python scalar), or a tuple/list of them for several
    outputs of one shape; a reduction (te.sum, ...) must be the whole of an output's expression.
    Returns a Tensor, or a tuple of Tensors named `<name>_v0`, `<name>_v1`, ... for several outputs.
    """
    name = str(name)
    shape = _shape_tuple(shape, f"compute {name!r}")
    names = _axis_names(fcompute, len(shape), name, shape)
    axis = tuple(E.IterVar(E.Range.from_min_extent(E.const(0, s.dtype), s), E.Var(n, s.dtype), "data_par")
                 for n, s in zip(names, shape))
    indexed = []
    _INDEXED.stack.append(indexed)
    try:
        result = fcompute(*[iv.var for iv in axis])
    finally:
        _INDEXED.stack.pop()
    if isinstance(result, (tuple, list)):
        if not result:
            raise TesseraError(f"compute {name!r}: fcompute returned an empty {type(result).__name__}")
        body = tuple(_body_expr(r, name) for r in result)
    else:
        body = (_body_expr(result, name),)
    red_axes, groups = _reduction_groups(name, body)

    scan = _BodyScan(name)
    for b in body:
        if isinstance(b, E.Reduce):
            for part in b.source + b.init + (b.condition,):
                scan.visit(part)
        else:
            scan.visit(b)
    local = {id(t.buffer): t for t in indexed}
    inputs = []
    for buf in scan.buffers:
        t = local.get(id(buf)) or _TENSOR_OF_BUFFER.get(buf)
        if t is None:
            raise TesseraError(f"compute {name!r} reads buffer {buf.name!r}, which is not a te tensor; "
                               f"read te.placeholder/te.compute tensors only")
        inputs.append(t)

    op = ComputeOp(name, tag, attrs, axis, red_axes, body, inputs, groups)
    if len(body) == 1:
        op.outputs = (Tensor(shape, body[0].dtype, name, op, 0),)
        return op.outputs[0]
    op.outputs = tuple(Tensor(shape, b.dtype, f"{name}_v{k}", op, k) for k, b in enumerate(body))
    return op.outputs
