"""The PyTorch frontend: a `torch.export` program -> (tessera.graph.Graph, params).

    B = torch.export.Dim("batch", max=64)
    ep = torch.export.export(model.eval(), (x,), dynamic_shapes={"x": {0: B}})
    graph, params = tessera.frontend.from_exported_program(ep)
    exe = tessera.compile(graph, params)          # or tessera.compile(ep) directly

The program is lowered to core ATen (`ep.run_decompositions` with torch's core table, less the ops
tessera converts whole: linear, matmul, scaled_dot_product_attention, which become one dense, matmul
or attention op instead of views around bmm and a softmax written out); then each `call_function`
node goes through the converter registered for its ATen overload (tessera/frontend/torch_ops, one
family a file), which sees it through `_Context`. Parameters, buffers and lifted constants are
numpy views of the torch tensors' memory (DLPack: no copy): graph constants by default, graph inputs
with their arrays in `params` when keep_params_as_input=True.

Symbolic sizes: a `torch.export.Dim` is a sympy symbol in torch's graph (s0, s77); it becomes the
tessera symbolic dimension of that name, so one compile serves every size. Core ATen flattens (B, T,
C) to (B*T, C) around matrix products and (B, H, T, D) to (B*H, T, D) around bmm; tessera's
dimensions are ints or single symbols, so such a tensor is kept unflattened: a `TorchTensor` holds
the tessera Value with the torch dimensions' factors as its own dimensions (`parts`), and the
converters that meet it (views, elementwise ops, matrix products, softmax, layer norm, reductions,
permutes, expands) work on the factors. An op that needs such a product as one dimension refuses,
naming it.

Every converter's result is checked against the shape and dtype torch gives the node (a converter
that disagrees with torch is refused, never a wrong result). Nodes that cannot be converted are
all collected before one UnsupportedOpError lists them, each overload with its nodes, and says how
to pass a converter (`converters={"aten.foo.default": fn}`); the conversion goes on past such a
node with a stand-in of its type (the torch.compile backend runs those nodes in eager).
"""
from __future__ import annotations

import io
import json
import math
import operator
import os
import re
import sys
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ..errors import DTypeError, ShapeError, TesseraError, UnsupportedOpError, resource_errors
from ..graph.builder import Builder
from ..graph.ir import Graph, Value
from ..ir.dtype import DataType
from ..ir.names import fresh_name, identifier
from .torch_ops import TorchContext, TorchTensor, find_converter
from .torch_ops.sizes import factors, size_expr, size_expr_of, size_key

# ATen ops torch's core table decomposes that tessera converts whole (one op instead of many)
KEPT_WHOLE = ("aten.linear.default", "aten.matmul.default", "aten.scaled_dot_product_attention.default")
# nodes that check torch's own assumptions at run time and make nothing (tessera's kernels check
# extents themselves): skipped
_ASSERTIONS = ("aten._assert_scalar.default", "aten._assert_tensor_metadata.default",
               "aten.sym_constrain_range.default", "aten.sym_constrain_range_for_size.default",
               "aten._assert_async.msg", "aten._assert_async.default")
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.]")


def _torch():
    try:
        import torch
    except ImportError:
        raise TesseraError("the PyTorch frontend needs PyTorch: pip install 'tessera[torch]' (torch==2.13.0, "
                           "the CPU build)") from None
    return torch


def is_exported_program(obj) -> bool:
    """Whether obj is a torch.export.ExportedProgram (without importing torch when it is not loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.export.ExportedProgram)


def target_name(target) -> str:
    """The name a converter is registered under: 'aten.add.Tensor' for an ATen overload,
    'operator.mul' for a Python operator on sizes."""
    if getattr(target, "__module__", None) in ("_operator", "operator"):
        return f"operator.{target.__name__}"
    name = str(target)
    if name.startswith("<"):
        mod = getattr(target, "__module__", "") or ""
        return f"{mod}.{getattr(target, '__name__', name)}".lstrip(".")
    return name


def decomposition_table():
    """torch.export's core-ATen decomposition table, less the ops tessera converts whole (KEPT_WHOLE)."""
    torch = _torch()
    table = torch.export.default_decompositions()
    for name in KEPT_WHOLE:
        op = _overload(torch, name)
        if op in table:
            del table[op]
    return table


def _overload(torch, name: str):
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


# ---------------------------------------------------------------------------------------------
# dtypes, sizes and arrays
# ---------------------------------------------------------------------------------------------
def tessera_dtype(torch_dtype, where: str = "") -> str:
    """The tessera dtype of a torch.dtype; DTypeError for those tessera lacks (complex, quantized)."""
    name = str(torch_dtype).replace("torch.", "")
    try:
        dt = DataType(name)
    except TesseraError:
        dt = None
    if dt is None or dt.lanes != 1 or dt.is_handle():
        raise DTypeError(f"{where + ': ' if where else ''}torch dtype {torch_dtype} has no tessera dtype (tessera has "
                         f"bool, int8-64, uint8-64, float16, bfloat16, float32, float64, float8)")
    return str(dt)


def tensor_array(t) -> np.ndarray:
    """A read-only numpy view of torch tensor t's memory (DLPack: no copy; bfloat16 through its
    bits). A non-contiguous tensor is copied to a contiguous array."""
    torch = _torch()
    t = t.detach()
    if t.device.type != "cpu":
        raise TesseraError(f"a tensor on {t.device} : tessera's PyTorch frontend reads CPU tensors (call .cpu() "
                           f"or export the model on the CPU)")
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        a = np.from_dlpack(t.view(torch.int16)).view(ml_dtypes.bfloat16)
    elif t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        import ml_dtypes

        a = np.from_dlpack(t.view(torch.uint8)).view(getattr(ml_dtypes, str(t.dtype).replace("torch.", "")))
    else:
        tessera_dtype(t.dtype)
        a = np.from_dlpack(t)
    v = a.view()
    v.flags.writeable = False
    return v


# ---------------------------------------------------------------------------------------------
# the converter context
# ---------------------------------------------------------------------------------------------
class _Failed:
    """The entry of a node that was not converted (its consumers are skipped, not reported), or of
    an input tessera cannot type (`reason`: its consumers are reported, with it)."""

    def __init__(self, node_name: str, reason: str | None = None):
        self.node_name = node_name
        self.reason = reason


class _Context(TorchContext):
    """The TorchContext of one node (see tessera/frontend/torch_ops/__init__.py)."""

    def __init__(self, imp: "_Importer", node, target: str):
        self._imp = imp
        self.node = node
        self.target = target
        self.name = node.name
        self._args = _bind_args(node)
        self._val = node.meta.get("val")

    # arguments ---------------------------------------------------------------------------
    def _raw(self, name: str):
        if name not in self._args:
            raise self._error(f"the converter asked for argument {name!r}, which {self.target} does not have "
                              f"(it has {sorted(self._args)})")
        return self._args[name]

    def arg(self, name: str):
        return self._imp.resolve(self._raw(name))

    def has_arg(self, name: str) -> bool:
        return self._args.get(name) is not None

    def tensor(self, name: str) -> TorchTensor:
        """Tensor argument `name` as it is converted: a TorchTensor (whose value may hold a symbolic
        product unflattened: `parts`)."""
        x = self.arg(name)
        if not isinstance(x, TorchTensor):
            raise self._error(f"argument {name!r} is {type(x).__name__}, not a tensor")
        return x

    def input(self, name: str, dtype: str | None = None):
        x = self.arg(name)
        if isinstance(x, TorchTensor):
            v = self.flat(x, f"argument {name!r}")
        elif isinstance(x, (bool, int, float, np.number, np.bool_)):
            v = self.scalar(x, dtype or self.out_dtype())
        else:
            raise self._error(f"argument {name!r} is {type(x).__name__}, not a tensor")
        return self.cast(v, dtype) if dtype is not None else v

    def inputs(self, name: str) -> list:
        xs = self.arg(name)
        return [self.flat(x, f"argument {name!r}[{i}]") for i, x in enumerate(xs)]

    def shape(self, name: str) -> tuple:
        meta = _meta_of(self._raw(name))
        if meta is None:
            raise self._error(f"argument {name!r} carries no shape (no meta['val'] on its node)")
        return tuple(self._imp.size(d) for d in meta.shape)

    def arg_dtype(self, name: str):
        """The tessera dtype of tensor argument `name` (None for a Python number)."""
        meta = _meta_of(self._raw(name))
        return None if meta is None else self.dtype(meta.dtype)

    def dim(self, expr, why: str = ""):
        fs = [expr] if isinstance(expr, str) else factors(expr)
        if fs is None or len(fs) != 1:
            self.unsupported(f"{why + ': ' if why else ''}size {expr} is "
                             f"{'a product of symbolic sizes' if fs else 'an expression of symbolic sizes'}; "
                             f"tessera's dimensions are ints or single symbols")
        d = fs[0]
        if isinstance(d, str) and d not in self._imp.bound:
            self.unsupported(f"{why + ': ' if why else ''}the size {d} is not a dimension of the graph's tensor "
                             f"inputs (a data-dependent size?), so tessera cannot know it at run time")
        return d

    def out_meta(self, k: int = 0):
        val = self._val
        if isinstance(val, (list, tuple)):
            val = val[k]
        if val is None or not hasattr(val, "shape"):
            raise self._error(f"output {k} has no tensor type in the graph (meta['val'])")
        return val

    def out_sizes(self, k: int = 0) -> tuple:
        """The shape of output k as torch gives it: ints and sympy expressions."""
        return tuple(self._imp.size(d) for d in self.out_meta(k).shape)

    def out_shape(self, k: int = 0) -> tuple:
        return tuple(self.dim(d, f"output {k}") for d in self.out_sizes(k))

    def out_dtype(self, k: int = 0) -> str:
        return self.dtype(self.out_meta(k).dtype)

    def dtype(self, torch_dtype) -> str:
        try:
            return tessera_dtype(torch_dtype)
        except DTypeError as e:
            self.unsupported(str(e))

    def used(self, k: int) -> bool:
        return self._imp.used(self.node, k)

    # building ----------------------------------------------------------------------------
    def op(self, op_name: str, *inputs, **attrs):
        vals = [x if isinstance(x, Value) else self.scalar(x, None) for x in inputs]
        node = self._imp.builder.node(op_name, vals, attrs, name=self._imp.node_name(self.name))
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def const(self, array, name: str = "const"):
        return self._imp.const(np.asarray(array), f"{self.name}.{name}")

    def scalar(self, x, dtype):
        """A 0-d constant holding the Python number x (of `dtype`; None: numpy's)."""
        if isinstance(x, Value):
            return x
        if dtype is not None:
            return self.const(np.asarray(x).astype(DataType(dtype).numpy()), "scalar")
        return self.const(np.asarray(x), "scalar")

    def cast(self, v, dtype: str):
        return v if str(v.dtype) == dtype else self.op("cast", v, dtype=dtype)

    def const_value(self, name: str):
        x = self.arg(name)
        if isinstance(x, TorchTensor) and x.parts is None:
            return self._imp.consts.get(x.value)
        return None

    def flat(self, t: TorchTensor, what: str = "a tensor") -> Value:
        """t as a Value of the torch tensor's own shape (a static product of factors merged); refused
        where a torch dimension is a product of symbolic sizes."""
        if t.parts is None:
            return t.value
        shape = []
        for i, g in enumerate(t.groups()):
            dims = [t.value.shape[a] for a in g]
            if len(dims) == 1:
                shape.append(dims[0])
            elif all(isinstance(d, int) for d in dims):
                shape.append(math.prod(dims))
            else:
                self.unsupported(f"{what}: its dimension {i} is {' * '.join(map(str, dims))}, a product of symbolic "
                                 f"sizes, which {self.target} needs as one dimension (tessera's dimensions are "
                                 f"ints or single symbols)")
        return self.op("reshape", t.value, newshape=tuple(shape))

    def unsupported(self, detail: str):
        raise UnsupportedOpError(self.target, self.name, detail)

    def _error(self, detail: str) -> TesseraError:
        return UnsupportedOpError(self.target, self.name, detail)


def _meta_of(raw):
    """The FakeTensor (meta['val']) of an FX node argument, or None."""
    val = getattr(raw, "meta", {}).get("val") if hasattr(raw, "meta") else None
    return val if hasattr(val, "shape") else None


def _bind_args(node) -> dict:
    """{schema argument name: raw FX argument} of a call, defaults filled in from the schema."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        out = {f"arg{i}": a for i, a in enumerate(node.args)}
        out.update(node.kwargs)
        return out
    out = {}
    pos = list(node.args)
    for i, a in enumerate(schema.arguments):
        if not a.kwarg_only and i < len(pos):
            out[a.name] = pos[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


# ---------------------------------------------------------------------------------------------
# the importer
# ---------------------------------------------------------------------------------------------
@dataclass
class Missing:
    """The nodes of one ATen overload tessera could not convert, and why (per node)."""

    target: str
    nodes: list = field(default_factory=list)      # [(node name, reason)]


class _Importer:
    """Converts the nodes of one FX graph onto a graph.Builder."""

    def __init__(self, name: str, converters=None, sizes=None):
        self.sizes = {str(k): int(v) for k, v in (sizes or {}).items()}   # symbol -> value, to specialize
        self.builder = Builder(identifier(name, "main"))
        self.env: dict = {}            # fx node -> TorchTensor | size | tuple | _Failed
        self.consts: dict = {}         # Value -> array, for const_value
        self.bound: set = set()        # symbol names that a tensor input's dimension gives
        self.converters = dict(converters or {})
        self.missing: dict = {}        # target -> Missing
        self.failed_nodes: list = []   # fx nodes not converted, in graph order
        self.stand_ins: list = []      # inputs standing in for their outputs
        self.input_names: list = []    # public names of the builder's inputs, in order
        self._node_names: set = set()

    def size(self, x):
        """A torch size as an int or a sympy expression (size_expr), with the symbols this conversion
        specializes to (`sizes`) put in."""
        e = size_expr(x)
        if self.sizes and hasattr(e, "free_symbols") and not isinstance(e, (bool, int, float)):
            e = size_expr_of(e.subs({s: self.sizes[str(s)] for s in e.free_symbols if str(s) in self.sizes}))
        return e

    def value_of(self, val):
        """A node's non-tensor meta value (sizes, lists of them) as ints and sympy expressions."""
        if isinstance(val, (list, tuple)):
            return type(val)(self.value_of(v) for v in val)
        return self.size(val)

    # names ------------------------------------------------------------------------------
    def node_name(self, hint: str) -> str:
        return _NAME_BAD.sub("_", hint) or "node"

    def new_input(self, hint: str, shape, dtype) -> Value:
        """A builder input named `hint`, or `hint_1`, ... where that name is taken."""
        tried: set = set()
        while True:
            name = fresh_name(self.node_name(hint), tried)
            try:
                return self.builder.input(name, tuple(shape), dtype)
            except TesseraError:
                tried.add(name)

    # inputs -----------------------------------------------------------------------------
    def add_input(self, node, public: str, meta=None) -> None:
        """A tensor graph input for placeholder `node` (its type from meta['val'])."""
        meta = meta if meta is not None else node.meta.get("val")
        where = f"input {public!r}"
        dtype = tessera_dtype(meta.dtype, where)
        shape = []
        for k, d in enumerate(meta.shape):
            fs = factors(self.size(d))
            if fs is None or len(fs) != 1:
                raise TesseraError(f"{where}: dimension {k} is {self.size(d)}, a size derived from others; tessera's "
                                   f"inputs take ints and single symbolic dimensions (torch.export.Dim)")
            shape.append(fs[0])
            if isinstance(fs[0], str):
                self.bound.add(fs[0])
        v = self.new_input(node.name, shape, dtype)
        self.input_names.append(public)
        self.env[node] = TorchTensor(v)

    def add_const(self, node, array: np.ndarray, name: str) -> None:
        self.env[node] = TorchTensor(self.const(array, name))

    def const(self, array: np.ndarray, name: str) -> Value:
        v = self.builder.const(array, self.node_name(name))
        self.consts[v] = array
        return v

    # walking ----------------------------------------------------------------------------
    def resolve(self, raw):
        """An FX argument with nodes replaced by their entries (sizes as ints / sympy expressions)."""
        if hasattr(raw, "op") and hasattr(raw, "meta"):
            e = self.env.get(raw)
            if isinstance(e, _Failed):
                raise _Skip(e.node_name, e.reason)
            if raw not in self.env:
                raise TesseraError(f"node {raw.name!r} is read before it is converted")
            return e
        if isinstance(raw, (list, tuple)):
            return type(raw)(self.resolve(a) for a in raw)
        return self.size(raw)

    def used(self, node, k: int) -> bool:
        for u in node.users:
            if u.op == "call_function" and u.target is operator.getitem:
                if u.args[1] == k:
                    return True
            else:
                return True
        return False

    def run(self, graph) -> None:
        """Convert every call_function node of `graph` (placeholders and get_attr already in env)."""
        for node in graph.nodes:
            if node.op in ("placeholder", "output") or node in self.env:
                continue
            if node.op != "call_function":
                self._fail(node, f"{node.op} {node.target}", f"FX {node.op} nodes are not converted (the graph must "
                                                              f"be lowered to ATen calls)")
                continue
            self.convert(node)

    def convert(self, node) -> None:
        name = target_name(node.target)
        if name in _ASSERTIONS:
            self.env[node] = None
            return
        val = node.meta.get("val")
        if node.target is operator.getitem:
            try:
                seq = self.resolve(node.args[0])
            except _Skip as s:
                self.env[node] = _Failed(s.node_name, s.reason)
                return
            item = seq[node.args[1]]
            if item is None:
                raise TesseraError(f"node {node.name!r} reads output {node.args[1]} of {node.args[0].name!r}, which "
                                   f"its converter did not make (it said the output was unused)")
            self.env[node] = item
            return
        if not _holds_tensor(val) and name not in self.converters:
            # arithmetic on sizes (sym_size, operator.mul, ...): torch's own value of it
            self.env[node] = self.value_of(val)
            return
        fn = find_converter(name, self.converters)
        if fn is None:
            self._fail(node, name, "no converter")
            return
        ctx = _Context(self, node, name)
        try:
            out = fn(ctx)
            self.env[node] = self._check(ctx, out)
        except _Skip as s:
            if s.reason is not None:
                self._fail(node, name, f"it reads {s.node_name!r}: {s.reason}")
            else:
                self.env[node] = _Failed(s.node_name)
        except UnsupportedOpError as e:
            self._fail(node, name, _detail(e, name, node.name))
        except (ShapeError, DTypeError) as e:
            self._fail(node, name, f"{type(e).__name__}: {e}")
        except TypeError as e:      # an argument of a kind the converter does not handle (a symbolic float)
            self._fail(node, name, f"the converter failed on its arguments: TypeError: {e}")

    def _fail(self, node, target: str, reason: str) -> None:
        """Record node as not converted and stand in for its outputs with fresh inputs of their types
        (so the nodes after it are converted and checked too)."""
        self.missing.setdefault(target, Missing(target)).nodes.append((node.name, reason))
        self.failed_nodes.append(node)
        val = node.meta.get("val")
        self.env[node] = tuple(self._stand_in(node, v) for v in val) if isinstance(val, (list, tuple)) else \
            self._stand_in(node, val)

    def _stand_in(self, node, val):
        """A fresh input of the type torch gives `val` (a _Failed marker where tessera has no such type)."""
        if not hasattr(val, "shape"):
            return _Failed(node.name) if _holds_tensor(val) else self.value_of(val)
        dims, parts = [], []
        for d in val.shape:
            fs = factors(self.size(d))
            if fs is None or any(isinstance(f, str) and f not in self.bound for f in fs):
                return _Failed(node.name)
            dims += fs
            parts.append(len(fs))
        try:
            dtype = tessera_dtype(val.dtype)
        except DTypeError:
            return _Failed(node.name)
        v = self.new_input(f"{node.name}_eager", dims, dtype)
        self.input_names.append(v.name)
        self.stand_ins.append(v)
        return TorchTensor(v, tuple(parts))

    def _check(self, ctx: _Context, out):
        """The converter's result as entries, each checked against torch's type of that output."""
        val = ctx._val
        if isinstance(val, (list, tuple)):
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            if len(outs) != len(val):
                ctx.unsupported(f"the converter gave {len(outs)} outputs, torch's op has {len(val)}")
            return tuple(self._check_one(ctx, k, o, v) for k, (o, v) in enumerate(zip(outs, val)))
        if isinstance(out, (list, tuple)):
            ctx.unsupported(f"the converter gave {len(out)} outputs, torch's op has one")
        return self._check_one(ctx, 0, out, val)

    def _check_one(self, ctx: _Context, k: int, out, val):
        if out is None:
            if val is not None and self.used(ctx.node, k) and hasattr(val, "shape"):
                ctx.unsupported(f"the converter did not make output {k}, which the graph reads")
            return None
        if not hasattr(val, "shape"):
            return out if not isinstance(out, Value) else TorchTensor(out)
        t = out if isinstance(out, TorchTensor) else TorchTensor(out) if isinstance(out, Value) else None
        if t is None:
            ctx.unsupported(f"the converter returned {type(out).__name__} for output {k}, not a tessera Value")
        want_dtype = ctx.dtype(val.dtype)
        if str(t.value.dtype) != want_dtype:
            ctx.unsupported(f"the converter made output {k} {t.value.dtype}, torch makes it {want_dtype}")
        sizes = [self.size(d) for d in val.shape]
        groups = t.groups()
        ok = len(groups) == len(sizes)
        for d, g in zip(sizes, groups) if ok else ():
            fs = factors(d)
            got = [t.value.shape[a] for a in g]
            if fs is None or size_key(fs) != size_key(got):
                ok = False
        if not ok:
            have = [" * ".join(str(t.value.shape[a]) for a in g) or "1" for g in groups]
            ctx.unsupported(f"the converter made output {k} of shape ({', '.join(have)}), torch's is "
                            f"({', '.join(map(str, sizes))})")
        return t

    def error(self, what: str) -> UnsupportedOpError:
        """One UnsupportedOpError listing every overload not converted, with its nodes."""
        lines = []
        for m in self.missing.values():
            reasons = {}
            for n, r in m.nodes:
                reasons.setdefault(r, []).append(n)
            for r, names in reasons.items():
                shown = ", ".join(map(repr, names[:8])) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
                lines.append(f"  {m.target} (node{'s' if len(names) > 1 else ''} {shown}): {r}")
        targets = list(self.missing)
        e = UnsupportedOpError(", ".join(targets), None,
                               f"{what} has {len(targets)} ATen op{'s' if len(targets) > 1 else ''} tessera cannot "
                               f"convert:\n" + "\n".join(lines) +
                               f"\nPass a converter for each: from_exported_program(ep, converters={{"
                               f"{targets[0]!r}: fn}}), fn(ctx) reading the node's arguments by their schema names "
                               f"(ctx.input('self'), ctx.arg('dim')) and returning tessera Values made with ctx.op "
                               f"(see tessera/frontend/torch_ops/__init__.py)")
        e.missing = {t: [n for n, _ in m.nodes] for t, m in self.missing.items()}
        return e

    def output(self, entry, where: str) -> Value:
        if isinstance(entry, _Failed):
            raise TesseraError(f"{where} is computed by node {entry.node_name!r}, which was not converted")
        if not isinstance(entry, TorchTensor):
            raise TesseraError(f"{where} is {type(entry).__name__} ({entry!r}), not a tensor; tessera's graphs "
                               f"return tensors")
        if entry.parts is None:
            return entry.value
        ctx = _OutputContext(self, where)
        return ctx.flat(entry, where)


class _Skip(Exception):
    """A node reads a node that was not converted: it is left out too (reported where the node
    read is an input that has a `reason`)."""

    def __init__(self, node_name: str, reason: str | None = None):
        self.node_name = node_name
        self.reason = reason


class _OutputContext(_Context):
    """A context for the reshape that flattens a graph output (it has no node of its own, so the
    base class's constructor, which reads one, is not called)."""

    def __init__(self, imp: _Importer, where: str):  # pylint: disable=super-init-not-called
        self._imp = imp
        self.target = "graph output"
        self.name = where
        self._args = {}
        self._val = None


def _holds_tensor(val) -> bool:
    if isinstance(val, (list, tuple)):
        return any(_holds_tensor(v) for v in val)
    return hasattr(val, "shape") and hasattr(val, "dtype")


def _detail(e: UnsupportedOpError, target: str, node: str) -> str:
    """The reason of an UnsupportedOpError raised while converting `node`, without its own prefix."""
    text = str(e)
    prefix = f"unsupported op {target!r} (node {node!r}): "
    return text[len(prefix):] if text.startswith(prefix) else text


# ---------------------------------------------------------------------------------------------
# from_exported_program
# ---------------------------------------------------------------------------------------------
def from_exported_program(ep, keep_params_as_input: bool = False, converters=None, name: str | None = None):
    """Convert a torch.export ExportedProgram to (tessera Graph, params).

    The program is lowered to core ATen first (`decomposition_table()`: torch's core table less
    linear, matmul and scaled_dot_product_attention, which tessera converts whole). The graph's
    inputs are the program's user inputs, in order, named as torch names them (its public names);
    its outputs the user outputs. Parameters, buffers and lifted constants are bound without a copy
    (read-only numpy views of the tensors' memory, DLPack): as constants of the graph, params = {}
    (default), or with keep_params_as_input=True as graph inputs after the user inputs, named by
    their state-dict names, with params = {name: array} (tessera.compile(graph, params) folds them
    in; tessera.compile(graph) keeps them inputs of the compiled model). The arrays share the
    module's memory: a change to the weights before tessera.compile binds them is seen.

    Symbolic sizes (torch.export.Dim) become tessera symbolic dimensions named as torch names the
    symbols (s0, s77), so one compile serves every size. Their ranges (`ep.range_constraints`) are not
    checked by tessera: a size outside them runs wherever tessera's kernels accept it (a slice past
    a buffer's extent, say, is refused by the kernel's own bound check).
    converters: {"aten.foo.default": fn} adds or replaces converters (fn(ctx), see
    tessera/frontend/torch_ops). Every op tessera cannot convert is listed in one UnsupportedOpError
    (its `missing`: {overload: [node names]}). A program that mutates a buffer (a module in training
    mode: batch norm's running statistics) or an input is refused: call model.eval() before export.
    """
    torch = _torch()
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TesseraError(f"from_exported_program takes a torch.export.ExportedProgram, got {type(ep).__name__}")
    with resource_errors("from_exported_program"):
        return _from_ep(torch, ep, keep_params_as_input, converters, name)


def _from_ep(torch, ep, keep_params_as_input, converters, name):
    from torch.export.graph_signature import InputKind, OutputKind

    try:
        ep = ep.run_decompositions(decomposition_table())
    except Exception as e:  # noqa: BLE001 - torch's tracer raises many kinds
        raise TesseraError(f"from_exported_program: torch's decomposition to core ATen failed: "
                           f"{type(e).__name__}: {e}") from None
    sig = ep.graph_signature
    mutations = [s for s in sig.output_specs if s.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION,
                                                            OutputKind.PARAMETER_MUTATION)]
    if mutations:
        what = ", ".join(f"{s.kind.name.lower().replace('_', ' ')} of {s.target!r}" for s in mutations)
        raise TesseraError(f"from_exported_program: the program writes its state ({what}); tessera compiles "
                           f"inference, where nothing is written back: export the model in eval mode "
                           f"(model.eval(): batch norm then reads its running statistics instead of updating them)")
    imp = _Importer(name or "exported_program", converters)
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(sig.input_specs):
        raise TesseraError(f"from_exported_program: {len(placeholders)} placeholders for {len(sig.input_specs)} "
                           f"input specs")
    state = {}
    user, weights = [], []
    for node, spec in zip(placeholders, sig.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            user.append((node, spec))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            t = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else ep.constants.get(spec.target)
            if t is None:
                raise TesseraError(f"from_exported_program: {spec.kind.name.lower()} {spec.target!r} has no tensor "
                                   f"in the program")
            if not isinstance(t, torch.Tensor):
                raise TesseraError(f"from_exported_program: {spec.kind.name.lower()} {spec.target!r} is "
                                   f"{type(t).__name__}, not a tensor")
            weights.append((node, spec, t))
        elif spec.kind == InputKind.TOKEN:
            imp.env[node] = None
        else:
            raise TesseraError(f"from_exported_program: input {node.name!r} is a {spec.kind.name.lower()}, which "
                               f"tessera does not take (tensors, parameters, buffers and constants only)")
    for node, spec in user:
        val = node.meta.get("val")
        if hasattr(val, "shape"):
            imp.add_input(node, node.name)
        else:
            # a Python value the program was specialized to
            imp.env[node] = size_expr(val)
    for node, spec, t in weights:
        arr = tensor_array(t)
        if keep_params_as_input:
            imp.add_input(node, spec.target)
            state[imp.builder.inputs[-1].name] = arr
        else:
            imp.add_const(node, arr, spec.target)
    imp.run(ep.graph)
    if imp.missing:
        raise imp.error(f"exported program {imp.builder.name!r}")
    out_node = ep.graph.output_node()
    results = out_node.args[0]
    outputs, names = [], []
    for k, (spec, r) in enumerate(zip(sig.output_specs, results)):
        if spec.kind not in (OutputKind.USER_OUTPUT, OutputKind.TOKEN):
            raise TesseraError(f"from_exported_program: output {k} is a {spec.kind.name.lower()}, which tessera "
                               f"does not return")
        if spec.kind == OutputKind.TOKEN:
            continue
        where = f"output {k} ({getattr(r, 'name', r)!r})"
        if not hasattr(r, "op"):
            raise TesseraError(f"from_exported_program: {where} is the constant {r!r}, not a tensor; tessera's graphs "
                               f"return tensors")
        outputs.append(imp.output(imp.env[r], where))
        names.append(fresh_name(r.name, names))
    graph = finish(imp, outputs, names)
    return graph, state


def finish(imp: _Importer, outputs: list, output_names: list) -> Graph:
    """The Graph of an importer's builder with these outputs (public input names kept)."""
    b = imp.builder
    if imp.stand_ins:
        raise TesseraError(f"graph {b.name!r}: nodes {[n.name for n in imp.failed_nodes]} were not converted")
    if not outputs:
        raise TesseraError(f"graph {b.name!r} has no tensor outputs")
    return Graph(b.inputs, outputs, b.nodes, b.constants, b.name, imp.input_names, output_names)


# ---------------------------------------------------------------------------------------------
# an ATen FX graph (the torch.compile backend's)
# ---------------------------------------------------------------------------------------------
@dataclass
class FxImport:
    """An ATen FX graph converted (`import_fx_graph`).

    graph: the tessera Graph (None when some nodes were not converted: `failed` names them,
    `error` lists them); tensor_inputs: the placeholder positions the graph's inputs are, in order;
    outputs: per output of the FX graph, ("tensor", k) for the graph's output k, ("size", expr) for
    a size torch computes from the inputs' sizes (a sympy expression), ("value", v) for a constant;
    bindings: {symbol name: (placeholder position, axis)} giving each symbol from an input's shape."""

    graph: Graph | None
    failed: list
    error: UnsupportedOpError | None
    tensor_inputs: list
    outputs: list
    bindings: dict


def import_fx_graph(gm, constants=None, converters=None, name: str = "fx_graph", sizes=None) -> FxImport:
    """Convert an ATen FX GraphModule (placeholders typed by meta['val']: FakeTensors or SymInts)
    to a tessera Graph. constants: {placeholder position: torch tensor} bound as graph constants
    (no copy: DLPack) instead of inputs; a SymInt placeholder is a size the graph knows from its
    inputs' shapes. sizes: {symbol: int} specializes the graph to those values of torch's symbols.
    Nodes that cannot be converted are listed (`failed`, `error`) instead of raised; so are the
    nodes reading an input whose shape tessera cannot type (a size such as s0 // 8)."""
    _torch()
    constants = constants or {}
    with resource_errors(f"converting FX graph {name!r}"):
        imp = _Importer(name, converters, sizes)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        tensor_inputs, bindings = [], {}
        for i, node in enumerate(placeholders):
            val = node.meta.get("val")
            if i in constants:
                imp.add_const(node, tensor_array(constants[i]), node.name)
            elif hasattr(val, "shape"):
                try:
                    imp.add_input(node, node.name)
                except TesseraError as e:
                    imp.env[node] = _Failed(node.name, str(e))
                    continue
                tensor_inputs.append(i)
                for axis, d in enumerate(val.shape):
                    fs = factors(imp.size(d))
                    if fs and isinstance(fs[0], str):
                        bindings.setdefault(fs[0], (i, axis))
            else:
                imp.env[node] = imp.size(val)
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                t = _attr(gm, node.target)
                if hasattr(t, "shape"):
                    imp.add_const(node, tensor_array(t), node.target)
                else:
                    imp.env[node] = t
        imp.run(gm.graph)
        results = gm.graph.output_node().args[0]
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        outputs, graph_outputs, names = [], [], []
        failed_out = False
        for k, r in enumerate(results):
            if not hasattr(r, "op"):
                outputs.append(("value", r))
                continue
            entry = imp.env.get(r)
            if isinstance(entry, TorchTensor):
                try:
                    graph_outputs.append(imp.output(entry, f"output {k}"))
                except UnsupportedOpError as e:
                    imp.missing.setdefault("graph output", Missing("graph output")).nodes.append((r.name, str(e)))
                    imp.failed_nodes.append(r)
                    failed_out = True
                    continue
                names.append(fresh_name(f"output_{k}", names))
                outputs.append(("tensor", len(graph_outputs) - 1))
            elif isinstance(entry, _Failed) or entry is None and r.op == "call_function":
                failed_out = True
                outputs.append(("failed", r.name))
            else:
                outputs.append(("size", entry))
        if imp.missing or failed_out:
            return FxImport(None, [n.name for n in imp.failed_nodes], imp.error(f"FX graph {name!r}"),
                            tensor_inputs, outputs, bindings)
        graph = finish(imp, graph_outputs, names) if graph_outputs else None
        return FxImport(graph, [], None, tensor_inputs, outputs, bindings)


def _attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------------------------------------
# saved programs
# ---------------------------------------------------------------------------------------------
def load_program(path):
    """A program saved by torch.export.save (.pt2) as an ExportedProgram, checked first so that
    nothing in it is unpickled: torch.export.load unpickles weights or constants an archive marks
    `use_pickle`, custom and opaque objects, sample inputs that its safe loader refuses, and files of
    the old zip format; an archive holding any of those (or an AOTInductor package) is refused."""
    torch = _torch()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TesseraError(f"no such file: {path}")
    # read once: what is checked is what torch.export.load reads (the file may change on disk between two
    # reads of it: another user's process swapping in an archive that the checks would refuse)
    with open(path, "rb") as f:
        blob = f.read()
    try:
        z = zipfile.ZipFile(io.BytesIO(blob))
    except (zipfile.BadZipFile, OSError) as e:
        raise TesseraError(f"{path} is not a program saved by torch.export.save (not a zip archive: {e})") from None
    with z:
        names = z.namelist()
        roots = {n.split("/", 1)[0] for n in names if n.endswith("/archive_format")}
        if len(roots) != 1:
            raise TesseraError(f"{path} is not a torch.export.save archive of this format (no archive_format record); "
                               f"older formats are read with pickle, which tessera does not do: save it again with "
                               f"torch {torch.__version__}")
        (root,) = roots
        for n in names:
            rel = n[len(root) + 1:]
            if rel.startswith("data/aotinductor/"):
                raise TesseraError(f"{path} is an AOTInductor package, not an exported program")
            if rel.startswith(("data/weights/", "data/constants/")) and rel.endswith("_config.json"):
                _check_payloads(path, rel, z.read(n))
            if rel.startswith("data/sample_inputs/"):
                try:
                    torch.load(io.BytesIO(z.read(n)), weights_only=True)
                except Exception as e:  # noqa: BLE001 - torch's safe unpickler raises many kinds
                    raise TesseraError(f"{path}: its sample inputs ({rel}) are not plain tensors ({type(e).__name__}); "
                                       f"torch.export.load would unpickle them") from None
    try:
        return torch.export.load(io.BytesIO(blob))
    except Exception as e:  # noqa: BLE001
        raise TesseraError(f"{path}: torch.export.load failed: {type(e).__name__}: {e}") from None


def _check_payloads(path: str, rel: str, data: bytes) -> None:
    try:
        config = json.loads(data)
        entries = list((config.get("config") or {}).items())
        if not all(isinstance(e, dict) for _, e in entries):
            raise TypeError("an entry is not an object")
    except (ValueError, AttributeError, TypeError) as e:
        raise TesseraError(f"{path}: {rel} is not a weights record torch.export.save writes ({e})") from None
    for fqn, entry in entries:
        name = str(entry.get("path_name", ""))
        if entry.get("use_pickle") or not name.startswith(("weight_", "tensor_")):
            raise TesseraError(f"{path}: {rel} stores {fqn!r} as {'a pickle' if entry.get('use_pickle') else name!r} "
                               f"(a tensor subclass or a custom object); tessera reads plain tensors only, since "
                               f"torch.export.load would unpickle it")
