"""The ONNX frontend: an ONNX model -> (tessera.graph.Graph, params).

    graph, params = from_onnx("model.onnx", shape_dict={"input": (1, 3, 224, 224)})
    exe = tessera.compile(graph, params)

Initializers become `params` (graph inputs bound by name, as in TVM; `tessera.compile` binds
them); the remaining graph inputs are the runtime inputs, with ONNX's symbolic dimensions
(`dim_param`) kept as symbolic dimensions (one symbol per name, however it sanitizes). An initializer
that is also a graph input (IR version >= 4) is that input's default: `params` (a
graph.deferred.Params) names it in `defaults`, and the compiled model takes the input too
(exe.defaults), as ONNX Runtime's overridable initializers. A model is refused when it defines a
tensor name twice or imports an opset newer than the installed onnx knows; external data is read
only from the model file's folder or a `base_dir` the caller names; tessera.limits bounds what
unrolling loops and making constants may cost. Each node goes through the converter registered for
its op type and opset (`tessera/frontend/onnx_ops`), which sees it through `OnnxContext`.
Converters that need an input's value (a shape, axes) get it from `const_input`: initializers,
Constant nodes, and subgraphs computed only from those (evaluated with tessera's own kernels).
When such a value comes from a runtime input, the error carries `needs_constant` = that input's
name, so a caller can retry with `const_inputs={name: value}`.

Sequences and optionals (onnx_ops/sequence.py) are host-side values while converting: a list of
tensor Values, or an empty-optional marker; the graph stays tensor-only. A sequence-typed model input
becomes one graph input per element, named 'name[0]', 'name[1]', ... (its length and element shapes
given by shape_dict, or, by default, by the value of each run: a DeferredGraph); a sequence-typed
output, one graph output per element, regrouped into a list by the DeferredGraph's executor.

`check_model(model)` lists every unsupported node at once (what `tessera check` prints).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import DTypeError, ShapeError, TesseraError, UnsupportedOpError, resource_errors
from ..graph.builder import Builder
from ..limits import Limits, resolve as resolve_limits, size_text
from ..graph.ir import Graph, Node, TensorType, Value
from .onnx_ops import ConvertContext, find_converter
from .onnx_ops.sequence import EmptyOptional, SequenceValue, kind_of
from ..graph.deferred import DeferredGraph, OptionalType, Params, SequenceType, flat_name
from ..ir.dtype import numpy_dtype
from ..ir.dtype import dtype_of_numpy
from ..graph.transform import topo_nodes
from ..graph.const_eval import NotConstantError, evaluate_constants
from ..ops._common import dim_sum
from ..ops.shape import shape_range
from ..ops.transform import slice_plan

# ONNX TensorProto element type -> tessera dtype (the types tessera has)
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
                9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
                17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
                21: "uint4", 22: "int4", 23: "float4_e2m1fn", 25: "uint2", 26: "int2"}
_ONNX_DTYPE_NAMES = {1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
                     8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
                     14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN",
                     18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
                     23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2", 27: "FLOAT6E2M3",
                     28: "FLOAT6E3M2"}
_CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}   # for the message when a converter is missing
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.]")
_IDENT_BAD = re.compile(r"[^A-Za-z0-9_]")


def onnx_dtype_name(elem_type: int) -> str:
    return _ONNX_DTYPE_NAMES.get(int(elem_type), f"type {int(elem_type)}")


def dtype_of_onnx(elem_type: int, where: str = "") -> str:
    """The tessera dtype of an ONNX element type; DTypeError for those tessera lacks."""
    dt = _ONNX_DTYPES.get(int(elem_type))
    if dt is None:
        raise DTypeError(f"{where + ': ' if where else ''}ONNX dtype {onnx_dtype_name(elem_type)} is not "
                         f"supported by tessera (it has bool, int2-64, uint2-64, float16, bfloat16, float32, "
                         f"float64, float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, float4 e2m1)")
    return dt


def onnx_dtype_of(dtype) -> int:
    """The ONNX element type of a tessera dtype."""
    for k, v in _ONNX_DTYPES.items():
        if v == str(dtype):
            return k
    raise DTypeError(f"tessera dtype {dtype} has no ONNX element type")


def _contiguous(a) -> np.ndarray:
    """a as a C-contiguous array, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy(order="C")


def sanitize_name(name: str) -> str:
    """An ONNX tensor name as a tessera value name: [A-Za-z0-9_.] only ('/a/b:0' -> 'a_b_0')."""
    s = _NAME_BAD.sub("_", str(name)).strip("_")
    return s or "t"


_SUM_DIM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\s*\+\s*([A-Za-z_][A-Za-z0-9_]*|[0-9]+))+\s*$")


def _symbol(name: str) -> str:
    s = _IDENT_BAD.sub("_", str(name)).strip("_") or "dim"
    return s if not s[0].isdigit() else "d_" + s


@dataclass(frozen=True)
class UnsupportedNode:
    """One entry of check_model: an ONNX node tessera cannot convert, and why."""

    op_type: str
    node: str
    opset: int
    reason: str

    def __str__(self):
        return f"{self.op_type} (node {self.node!r}, opset {self.opset}): {self.reason}"


def _unsupported(op_type, node, opset, detail, needs_constant=None) -> UnsupportedOpError:
    e = UnsupportedOpError(op_type, node, f"opset {opset}: {detail}" if opset is not None else detail)
    e.opset = opset
    e.detail = detail
    e.needs_constant = needs_constant
    return e


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------
def load_model(model, base_dir=None):
    """A ModelProto from a ModelProto, a path or serialized bytes.

    External data (tensors whose bytes sit in another file) is read only from a folder the caller
    names: a path's own folder (onnx.load reads it there), or `base_dir` (then a path's tensors
    are read from there instead, as tensor_to_array reads those of bytes and ModelProtos); never
    the working directory. Locations that leave that folder (absolute, '..', symbolic links out of
    it) are refused by onnx's own checks."""
    import onnx

    base_dir = _base_dir(base_dir)
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            m = onnx.load_from_string(bytes(model))
        except Exception as e:  # noqa: BLE001 - protobuf raises its own errors
            raise TesseraError(f"from_onnx: the bytes are not an ONNX model: {e}") from None
        return _with_graph(m, "the bytes")
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise TesseraError(f"from_onnx: no such file {path!r}")
        try:
            m = onnx.load(path, load_external_data=base_dir is None)
        except Exception as e:  # noqa: BLE001
            raise TesseraError(f"from_onnx: cannot read {path!r} as an ONNX model: {e}") from None
        return _with_graph(m, repr(path))
    raise TesseraError(f"from_onnx takes an onnx.ModelProto, a path or bytes, got {type(model).__name__}")


def _with_graph(m, what: str):
    """The parsed ModelProto `m` of `what`, refused when it holds no graph: protobuf reads an empty file
    (or one of many other formats) as an empty model without complaint."""
    if not m.HasField("graph"):
        raise TesseraError(f"from_onnx: no graph in {what}{' (empty)' if m.ByteSize() == 0 else ''}: not an "
                           f"ONNX model")
    return m


def _base_dir(base_dir):
    """base_dir as an absolute path of an existing folder (None stays None)."""
    if base_dir is None:
        return None
    path = os.path.abspath(os.fspath(base_dir))
    if not os.path.isdir(path):
        raise TesseraError(f"from_onnx: base_dir {os.fspath(base_dir)!r} is not a folder (external data is read "
                           f"from there)")
    return path


def tensor_to_array(t, where: str = "", base_dir: str | None = None) -> np.ndarray:
    """A TensorProto (or SparseTensorProto) as a numpy array of a tessera dtype. A tensor whose data
    is external is read from `base_dir` (load_model), refused without one."""
    import onnx

    if isinstance(t, onnx.SparseTensorProto):
        values = tensor_to_array(t.values, where, base_dir)
        idx = _tensor_data(t.indices, where, base_dir).astype(np.int64)
        dense = np.zeros(tuple(t.dims), values.dtype)
        if idx.ndim == 1:
            dense.reshape(-1)[idx] = values
        else:
            dense[tuple(idx.T)] = values
        return dense
    dtype_of_onnx(t.data_type, where or f"tensor {t.name!r}")
    return _contiguous(_tensor_data(t, where, base_dir))


def _tensor_data(t, where: str, base_dir: str | None) -> np.ndarray:
    """t's array (malformed data refused), its data read, when external, from a file inside base_dir:
    onnx's own reader checks the location (relative, inside the folder, no symbolic link out of it,
    offset and length within the file)."""
    from onnx import external_data_helper, numpy_helper

    what = where or f"tensor {t.name!r}"
    if external_data_helper.uses_external_data(t):
        location = {e.key: e.value for e in t.external_data}.get("location", "")
        if base_dir is None:
            raise TesseraError(f"{what} keeps its data in the external file {location!r}; a model "
                               f"given as bytes or as a ModelProto loaded without its external data reads it only "
                               f"from a folder you name: from_onnx(model, base_dir=...) (a model loaded from a path "
                               f"reads it beside the file), never from the working directory")
        try:
            return numpy_helper.to_array(t, base_dir)
        except Exception as e:  # noqa: BLE001 - onnx's checker raises ValidationError, files OSError
            raise TesseraError(f"{what}: cannot read its external data ({location!r} in base_dir {base_dir!r}): "
                               f"{e}") from None
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - malformed tensors
        raise TesseraError(f"{what}: cannot read the tensor data: {e}") from None


def _attr_value(a, base_dir: str | None = None):
    """An AttributeProto's Python value: str for STRING, numpy for TENSOR, lists for repeated (tensors
    with external data read from base_dir: tensor_to_array)."""
    import onnx
    from onnx import helper

    T = onnx.AttributeProto
    if a.type == T.STRING:
        return a.s.decode("utf-8", "replace")
    if a.type == T.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if a.type == T.TENSOR:
        return tensor_to_array(a.t, f"attribute {a.name!r}", base_dir)
    if a.type == T.TENSORS:
        return [tensor_to_array(t, f"attribute {a.name!r}", base_dir) for t in a.tensors]
    if a.type == T.SPARSE_TENSOR:
        return tensor_to_array(a.sparse_tensor, f"attribute {a.name!r}", base_dir)
    if a.type == T.INTS:
        return [int(x) for x in a.ints]
    if a.type == T.FLOATS:
        return [float(x) for x in a.floats]
    if a.type == T.INT:
        return int(a.i)
    if a.type == T.FLOAT:
        return float(a.f)
    return helper.get_attribute_value(a)   # graphs, type protos: the proto itself


# ---------------------------------------------------------------------------------------------
# the converter context
# ---------------------------------------------------------------------------------------------
class OnnxContext(ConvertContext):
    """The ConvertContext of one ONNX node (see tessera/frontend/onnx_ops/__init__.py)."""

    def __init__(self, conv: "_Converter", node, opset: int, node_name: str):
        self._conv, self._node = conv, node
        self.node_name = node_name
        self.op_type = node.op_type
        self.domain = node.domain
        self.opset = opset
        self.num_inputs = len(node.input)
        self.num_outputs = len(node.output)
        self._attrs = {a.name: a for a in node.attribute}

    # inputs -----------------------------------------------------------------------------
    def has_input(self, i: int) -> bool:
        return 0 <= i < len(self._node.input) and self._node.input[i] != ""

    def input_name(self, i: int) -> str:
        """The ONNX name of input i ('' when omitted)."""
        return self._node.input[i] if 0 <= i < len(self._node.input) else ""

    def input(self, i: int, optional: bool = False):
        v = self.any_input(i, optional)
        if v is not None and not isinstance(v, Value):
            raise self._unsup(f"input {i} ({self.input_name(i)!r}) is {kind_of(v)}; {self.op_type} takes a "
                              f"tensor there")
        return v

    def any_input(self, i: int, optional: bool = True):
        """Input i as it is: a Value, a SequenceValue, an EmptyOptional, or None when omitted."""
        if not self.has_input(i):
            if optional:
                return None
            raise self._error(f"input {i} is required but the node does not give it "
                              f"({self.num_inputs} inputs)")
        return self._conv.lookup(self._node.input[i], self)

    def sequence_input(self, i: int) -> SequenceValue:
        """Input i, which must be a sequence (a SequenceValue)."""
        v = self.any_input(i, optional=False)
        if not isinstance(v, SequenceValue):
            raise self._unsup(f"input {i} ({self.input_name(i)!r}) is {kind_of(v)}; {self.op_type} takes a "
                              f"sequence there")
        return v

    def needs_static_dim(self, dim, why: str):
        """Refuse because symbolic dimension `dim` must be known here; the error's `needs_shape` names
        the runtime inputs whose shapes hold it (so from_onnx specializes per shape)."""
        shaped = tuple(sorted({name for v, name in self._conv.model_input.items() if dim in v.type.shape}))
        err = self._unsup(f"{why}; it must be known here"
                          + (f" (fix the shape of {', '.join(map(repr, shaped))} with shape_dict)" if shaped else ""))
        if shaped:
            err.needs_shape = shaped
        raise err

    def inputs(self) -> list:
        """All inputs as Values (None for omitted optional ones)."""
        return [self.input(i, optional=True) for i in range(self.num_inputs)]

    def is_const(self, i: int) -> bool:
        if not self.has_input(i):
            return False
        return self._conv.is_const(self.input(i))

    def const_input(self, i: int, optional: bool = False):
        if not self.has_input(i):
            if optional:
                return None
            raise self._error(f"input {i} is required but the node does not give it")
        return self._conv.const_value(self.input(i), self, i)

    def shape_input(self, i: int) -> tuple:
        """Input i, a 1-D integer tensor holding a shape, as a tuple of ints and symbolic dimension
        names (e.g. (N, 128, 12, 64) from a Shape -> Gather -> Concat subgraph on a tensor with
        a symbolic batch). Constant shapes give plain ints; UnsupportedOpError when neither."""
        try:
            arr = self.const_input(i)
        except UnsupportedOpError:
            v = self.input(i)
            sym = self._conv.sym_value(v)
            if sym is None or sym.ndim != 1:
                raise
            return tuple(e if isinstance(e, str) else int(e) for e in sym)
        arr = np.asarray(arr)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise self._unsup(f"input {i} must be a 1-D integer shape, got {arr.dtype}{list(arr.shape)}")
        return tuple(int(e) for e in arr)

    def sym_input(self, i: int):
        """Input i's elements as an object array of ints and symbolic dimension names (a value
        computed from shapes with dynamic axes), or None when they are not tracked."""
        if not self.has_input(i):
            return None
        v = self.input(i)
        self._conv._fold_shape_values(v)
        return self._conv.sym_value(v)

    def input_type(self, i: int) -> TensorType:
        return self.input(i).type

    # outputs ----------------------------------------------------------------------------
    def has_output(self, i: int) -> bool:
        """Whether output i is asked for (ONNX marks omitted optional outputs with '')."""
        return 0 <= i < len(self._node.output) and self._node.output[i] != ""

    # attributes -------------------------------------------------------------------------
    def attr(self, name: str, default=None):
        a = self._attrs.get(name)
        if a is None:
            return default
        if a.ref_attr_name:
            raise self._unsup(f"attribute {name!r} refers to a function attribute")
        try:
            return _attr_value(a, self._conv.base_dir)
        except TesseraError as e:
            raise self._unsup(str(e)) from None

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def attr_names(self) -> list:
        return list(self._attrs)

    # building ---------------------------------------------------------------------------
    def op(self, op_name: str, *inputs, **attrs):
        vals = []
        for x in inputs:
            if x is None:
                raise self._error(f"{op_name}: an input is None (an omitted optional input?)")
            vals.append(x if isinstance(x, Value) else self.const(np.asarray(x)))
        node = self._conv.builder.node(op_name, vals, attrs, name=self._conv.node_hint(self.node_name))
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def const(self, array, name: str = "const"):
        arr = _contiguous(np.asarray(array))
        try:
            dtype_of_numpy(arr.dtype)
        except DTypeError:
            raise self._unsup(f"a constant of dtype {arr.dtype}: tessera has no such tensors") from None
        v = self._conv.builder.const(arr, self._conv.node_hint(f"{self.node_name}.{name}" if name else self.node_name))
        self._conv.known[v] = self._conv.builder.constants[v]
        return v

    def subgraph(self, graph, inputs=()) -> list:
        """Convert an ONNX subgraph (an If branch, a Loop or Scan body) inline, here: its inputs
        read `inputs`, names of the enclosing graphs stay visible; returns its outputs (Values, or
        SequenceValues / EmptyOptionals)."""
        return self._conv.convert_subgraph(graph, list(inputs), self)

    def unroll(self, body, inputs, step: int, steps: int | None) -> list:
        """Iteration `step` of a Loop or Scan of `steps` iterations (None: a condition ends it) converted
        inline (as subgraph). Refused when the nodes converted from loop bodies in this model (inner
        loops' iterations counted) pass Limits.max_unrolled_nodes, or would when the iterations left
        cost as much as this one: a small model must not unroll for minutes."""
        conv = self._conv
        before = conv.unrolled_nodes
        conv.unrolling += 1
        try:
            outs = conv.convert_subgraph(body, list(inputs), self)
        finally:
            conv.unrolling -= 1
        cost = conv.unrolled_nodes - before
        total = conv.unrolled_nodes + (cost * (steps - step - 1) if steps is not None else 0)
        limit = conv.limits.max_unrolled_nodes
        if total > limit:
            plan = f"its {steps} iterations of {cost:,} nodes each" if steps is not None else \
                f"{step + 1} iterations so far"
            raise self._unsup(f"unrolling {plan} (loops inside counted) makes {total:,} nodes converted from loop "
                              f"bodies, more than the limit of {limit:,} ({conv.limits.where('max_unrolled_nodes')})")
        return outs

    @property
    def limits(self) -> Limits:
        """The conversion's limits (tessera.limits.Limits)."""
        return self._conv.limits

    def check_constant_size(self, shape, dtype, what: str = "the output") -> None:
        """Refuse, before it is made, a constant of `shape` and numpy `dtype` larger than
        Limits.max_constant_bytes (a shape read from the model: ConstantOfShape, Range)."""
        nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
        self._conv.check_bytes(nbytes, lambda: f"{what} {list(shape)} {np.dtype(dtype)}", self)

    def value_const(self, v: Value, what: str = "a value"):
        """The numpy value of Value v when it is constant (as const_input, for values a converter
        made itself, e.g. a Loop body's condition); UnsupportedOpError otherwise."""
        return self._conv.const_value(v, self, None, what)

    def dtype(self, elem_type: int) -> str:
        """The tessera dtype of an ONNX element type (attribute `to`, `dtype`), or unsupported."""
        try:
            return dtype_of_onnx(elem_type)
        except DTypeError as e:
            raise self._unsup(str(e)) from None

    # errors -----------------------------------------------------------------------------
    def unsupported(self, detail: str):
        raise self._unsup(detail)

    def _unsup(self, detail, needs_constant=None):
        return _unsupported(self.op_type, self.node_name, self.opset, detail, needs_constant)

    def _error(self, detail):
        return TesseraError(f"ONNX node {self.node_name!r} ({self.op_type}, opset {self.opset}): {detail}")


# ---------------------------------------------------------------------------------------------
# the conversion
# ---------------------------------------------------------------------------------------------
class _Converter:
    def __init__(self, model, shape_dict=None, const_inputs=None, opset=None, target="c",
                 defer_structure: bool = False, base_dir: str | None = None, limits: Limits | None = None):
        import onnx

        self.model = model
        self.base_dir = base_dir                  # where external data is read (load_model); None: refused
        self.limits = resolve_limits(limits)
        self.graph_proto = model.graph
        self.target = target
        self.builder = Builder(sanitize_name(model.graph.name) if model.graph.name else "main")
        self.builder.name = _symbol(self.builder.name) if model.graph.name else "main"
        self.env: dict[str, Value] = {}          # ONNX tensor name -> Value
        self.known: dict[Value, np.ndarray] = {}  # constant values (initializers, Constants, folded)
        self.sym: dict = {}                       # Value -> object array of ints / symbol names, or None
        self.params: dict[Value, np.ndarray] = {}
        self.param_values: list[Value] = []
        self.onnx_name: dict[Value, str] = {}    # Value -> the ONNX name it first got
        self.input_of_value: dict[Value, str] = {}  # runtime input Value -> ONNX input name ('s[0]': a sequence's)
        self.runtime_names: set = set()      # the model's runtime inputs (ONNX names; what deferral may ask for)
        self.model_input: dict[Value, str] = {}   # runtime input Value -> the model input it is (or is part of)
        self.interface: list = []            # (public name, type) of every runtime input, in order
        self.pending: list = []              # sequence/optional inputs whose structure a run decides
        self.defer_structure = defer_structure   # an optional input not in shape_dict: pending (else a tensor)
        self.problems: list | None = None    # check_model collects UnsupportedNode entries here
        self._node_names: set = set()
        self._depth = 0               # nesting of subgraphs being converted inline
        self.unrolling = 0            # nesting of Loop/Scan iterations being converted (OnnxContext.unroll)
        self.unrolled_nodes = 0       # nodes converted from Loop/Scan bodies so far
        self._subgraph_count = 0
        self.opsets = {}
        for imp in model.opset_import:
            dom = "" if imp.domain in ("", "ai.onnx") else imp.domain
            self.opsets[dom] = int(imp.version)
        if opset is not None:
            self.opsets[""] = int(opset)
        if "" not in self.opsets:
            self.opsets[""] = onnx.defs.onnx_opset_version()
        for dom, latest in (("", onnx.defs.onnx_opset_version()), ("ai.onnx.ml", onnx.defs.onnx_ml_opset_version())):
            v = self.opsets.get(dom)
            if v is not None and not 1 <= v <= latest:
                # a newer opset may change what an op means: converting it by an older definition is a guess
                domain = "default ONNX" if not dom else repr(dom)
                raise TesseraError(f"from_onnx: the model uses opset {v} of the {domain} domain; the installed onnx "
                                   f"{onnx.__version__} knows opsets up to {latest}"
                                   + (" (a newer onnx package may know it)" if v > latest else ""))
        self.functions = {(f.domain, f.name) for f in model.functions}
        self.shape_dict = dict(shape_dict or {})
        self.const_inputs = dict(const_inputs or {})
        self._inferred = None
        # initializers that are also graph inputs: from IR version 4 on, defaults a run may override
        inits = {t.name for t in model.graph.initializer} | {t.values.name for t in model.graph.sparse_initializer}
        self.overridable = {vi.name for vi in model.graph.input if vi.name in inits and vi.name not in
                            self.const_inputs} if model.ir_version >= 4 else set()
        self._symbols: dict = {}          # dim_param (or shape_dict name) or (input, axis) -> its symbol
        self.definer: dict[str, str] = {}     # ONNX name -> what defines it (for duplicate definitions)

    # ------------------------------------------------------------------ names
    def dim_symbol(self, key) -> str:
        """The symbol of a dim_param or shape_dict name (a str: one name, one symbol), or of an unnamed
        dimension (key (input name, axis): a symbol of its own). Names that sanitize alike ('a-b', 'a_b')
        get distinct symbols."""
        sym = self._symbols.get(key)
        if sym is None and isinstance(key, str) and _SUM_DIM.match(key):
            # an exporter's sum of dims ("past_sequence_length + sequence_length"): the symbol a
            # concatenation of those extents gets (ops dim_sum), so the two are one dimension
            terms = [t.strip() for t in key.split("+")]
            sym = self._symbols[key] = dim_sum([int(t) if t.isdigit() else self.dim_symbol(t) for t in terms])
        if sym is None:
            base = sym = _symbol(key if isinstance(key, str) else f"{key[0]}_d{key[1]}")
            taken = set(self._symbols.values())
            k = 0
            while sym in taken:
                k += 1
                sym = f"{base}_{k}"
            self._symbols[key] = sym
        return sym

    def define(self, name: str, what: str, outer=None) -> None:
        """Record that `what` defines ONNX name `name`; refused when something defines it already, in
        this graph or, for a subgraph, among the names its enclosing graphs define before it (`outer`:
        (their names in scope, what defines each)): an ONNX graph is in SSA form."""
        first = self.definer.get(name)
        if first is None and outer is not None and name in outer[0]:
            first = outer[1].get(name, "an enclosing graph")
        if first is not None:
            raise TesseraError(f"from_onnx: tensor {name!r} is defined twice: by {first} and by {what} (an ONNX "
                               f"graph defines each name once)")
        self.definer[name] = what

    def _define_graph(self, g, where: str = "", outer=None) -> None:
        """Record the definitions of graph g (its inputs and initializers, an input given by an
        initializer being one definition, and its nodes' outputs), refusing a name defined twice. A
        subgraph's inputs may shadow names of the enclosing graphs (`outer`), its nodes may not (as
        onnx's checker and onnxruntime hold)."""
        inputs = {vi.name for vi in g.input}
        for vi in g.input:
            self.define(vi.name, f"a graph input{where}")
        for t in list(g.initializer) + [t.values for t in g.sparse_initializer]:
            if t.name in inputs:
                inputs.discard(t.name)         # the input's default value (ONNX IR >= 4)
                continue
            self.define(t.name, f"an initializer{where}", outer)
        for i, node in enumerate(g.node):
            what = f"node {node.name or f'{node.op_type}_{i}'!r} ({node.op_type}){where}"
            for out in node.output:
                if out:
                    self.define(out, what, outer)

    def node_hint(self, hint: str) -> str:
        return sanitize_name(hint)

    # ------------------------------------------------------------------ inputs
    def _read_inputs(self):
        g = self.graph_proto
        self._define_graph(g)
        init_names = set()
        for t in g.initializer:
            init_names.add(t.name)
        for t in g.sparse_initializer:
            init_names.add(t.values.name)
        graph_inputs = [vi for vi in g.input]
        names = {vi.name for vi in graph_inputs}
        unknown = sorted(set(self.shape_dict) - names)
        if unknown:
            raise TesseraError(f"from_onnx: shape_dict names {unknown}, which are not inputs of the model "
                               f"(inputs: {[vi.name for vi in graph_inputs if vi.name not in init_names]})")
        unknown = sorted(set(self.const_inputs) - names)
        if unknown:
            raise TesseraError(f"from_onnx: const_inputs names {unknown}, which are not inputs of the model")
        for vi in graph_inputs:
            if vi.name in init_names and vi.name not in self.const_inputs:
                continue        # its initializer is its value (a default: self.overridable)
            if not vi.type.HasField("tensor_type") and self._structured_input(vi):
                continue
            if vi.name in self.const_inputs:
                arr = self._const_input_array(vi)
                v = self.builder.const(arr, sanitize_name(vi.name))
                self.known[v] = arr
                self._bind(vi.name, v)
                continue
            try:
                t = self._input_type(vi)
            except UnsupportedOpError as e:
                if self.problems is None:
                    raise
                self.problems.append(UnsupportedNode("graph input", vi.name, 0, e.detail))
                self.env[vi.name] = _Missing("graph input", vi.name, None, 0, vi.name, reason=e.detail)
                continue
            self._bind(vi.name, self._runtime_input(vi.name, t, vi.name))
        inits = [(t.name, t) for t in g.initializer] + [(t.values.name, t) for t in g.sparse_initializer]
        for name, t in inits:
            if name in self.const_inputs:
                continue        # an input whose default the caller froze to another value
            try:
                arr = tensor_to_array(t, f"initializer {name!r}", self.base_dir)
            except DTypeError as e:
                # refused only if a node reads it
                self.env[name] = _Missing("initializer", name, None, 0, name,
                                          reason=f"initializer {name!r}: {e}", unsupported=True)
                continue
            v = Value(self._fresh_value_name(name), TensorType.of(arr))
            self.known[v] = arr
            self.params[v] = arr
            self.param_values.append(v)
            self._bind(name, v)

    def _runtime_input(self, public: str, t: TensorType, model_input: str) -> Value:
        v = self.builder.input(self._free_name(public), t.shape, t.dtype)
        self.input_of_value[v] = public
        self.model_input[v] = model_input
        self.runtime_names.add(model_input)
        self.interface.append((public, t))
        return v

    # sequence- and optional-typed inputs ---------------------------------------------------
    def _structured_input(self, vi) -> bool:
        """Bind sequence/optional input vi: frozen (const_inputs), fixed (shape_dict: a list of element
        shapes, None for an empty optional) or pending (its structure is decided per run); False for
        an optional tensor taken as a tensor that is given (the caller reads it as one)."""
        name = vi.name
        try:
            t = self._structured_type(vi.type, name)
            if isinstance(t, OptionalType) and t.elem is None and name not in self.shape_dict and \
                    name not in self.const_inputs and not self.defer_structure:
                raise _unsupported("graph input", name, None, f"model input {name!r} is an optional tensor of "
                                   f"unknown rank; give its shape with shape_dict (None: empty)")
        except UnsupportedOpError as e:
            if self.problems is None:
                raise
            self.problems.append(UnsupportedNode("graph input", name, 0, e.detail))
            self.env[name] = _Missing("graph input", name, None, 0, name, reason=e.detail)
            return True
        if name in self.const_inputs:
            self._bind(name, self._frozen_structure(name, self.const_inputs[name], t))
            return True
        if name in self.shape_dict:
            self._bind(name, self._fixed_structure(name, self.shape_dict[name], t, name))
            return True
        if isinstance(t, OptionalType) and isinstance(t.elem, TensorType) and not self.defer_structure:
            return False
        self.runtime_names.add(name)
        self.interface.append((name, t))
        self.pending.append(name)
        self.env[name] = _Missing("graph input", name, None, 0, name, reason="its structure is decided per run")
        return True

    def _structured_type(self, ty, name: str):
        """The SequenceType / OptionalType of model input `name`, of a sequence- or optional-typed ONNX
        TypeProto (sequences of tensors and optionals of those; maps and nested sequences refused)."""
        kind = ty.WhichOneof("value")
        inner = ty.sequence_type.elem_type if kind == "sequence_type" else \
            ty.optional_type.elem_type if kind == "optional_type" else None
        inner_kind = inner.WhichOneof("value") if inner is not None else None
        if inner_kind == "tensor_type":
            dtype, elem = self._elem_type(inner.tensor_type, name)
            return SequenceType(dtype, elem) if kind == "sequence_type" else OptionalType(elem, dtype)
        if kind == "optional_type" and inner_kind == "sequence_type":
            return OptionalType(self._structured_type(inner, name))
        words = {"tensor_type": "tensors", "sequence_type": "sequences", "map_type": "maps",
                 "optional_type": "optionals", "sparse_tensor_type": "sparse tensors"}
        what = {"sequence_type": f"sequence of {words.get(inner_kind, inner_kind)}", "map_type": "map",
                "optional_type": f"optional of {words.get(inner_kind, inner_kind)}",
                "sparse_tensor_type": "sparse tensor"}.get(kind, str(kind))
        raise _unsupported("graph input", name, None, f"model input {name!r} is a {what} (tessera takes tensors, "
                                                     f"sequences of tensors and optionals of those)")

    def _elem_type(self, tt, name):
        """(dtype, TensorType or None when the shape is left open) of a sequence's or optional's tensor;
        a dimension without a value or a name gets a symbol of its own."""
        try:
            dtype = dtype_of_onnx(tt.elem_type, f"model input {name!r}")
        except DTypeError as e:
            raise _unsupported("graph input", name, None, str(e)) from None
        if not tt.HasField("shape"):
            return dtype, None
        return dtype, TensorType([d.dim_value if d.HasField("dim_value") else
                                  self.dim_symbol(d.dim_param or (f"{name}_elem", k))
                                  for k, d in enumerate(tt.shape.dim)],
                                 dtype)

    def _frozen_structure(self, name, value, t):
        """A const_inputs value of a sequence/optional input: a list of arrays, None (empty), an array."""
        if isinstance(t, OptionalType):
            return EmptyOptional(_what(t)) if value is None else self._frozen_structure(name, value, _elem(t))
        if isinstance(t, SequenceType):
            if not isinstance(value, (list, tuple)):
                raise TesseraError(f"from_onnx: const_inputs[{name!r}] must be a list of arrays (the input is a {t})")
            items = []
            for i, a in enumerate(value):
                a = _contiguous(np.asarray(a))
                if str(TensorType.of(a).dtype) != str(t.dtype):
                    raise DTypeError(f"from_onnx: const_inputs[{name!r}][{i}] is {a.dtype}, the sequence holds "
                                     f"{t.dtype}")
                v = self.builder.const(a, sanitize_name(flat_name(name, i)))
                self.known[v] = a
                items.append(v)
            return SequenceValue(items, t.dtype)
        a = _contiguous(np.asarray(value))
        if str(TensorType.of(a).dtype) != str(t.dtype):
            raise DTypeError(f"from_onnx: const_inputs[{name!r}] is {a.dtype}, the input is {t.dtype}")
        v = self.builder.const(a, sanitize_name(name))
        self.known[v] = a
        return v

    def _fixed_structure(self, name, spec, t, model_input):
        """A shape_dict entry of a sequence/optional input: element shapes, None for an empty optional."""
        if isinstance(t, OptionalType):
            return EmptyOptional(_what(t)) if spec is None else self._fixed_structure(name, spec, _elem(t),
                                                                                    model_input)
        if isinstance(t, SequenceType):
            if not isinstance(spec, (list, tuple)) or not all(isinstance(e, (list, tuple)) for e in spec):
                raise TesseraError(f"from_onnx: shape_dict[{name!r}] must be a list of element shapes (the input "
                                   f"is a {t}), got {spec!r}")
            items = []
            for i, shape in enumerate(spec):
                public = flat_name(name, i)
                et = TensorType(self._shape_of(public, shape), t.dtype)
                if t.elem is not None and (et.ndim != t.elem.ndim or any(
                        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(et.shape, t.elem.shape))):
                    raise ShapeError(f"from_onnx: shape_dict[{name!r}][{i}] is {list(shape)}, the model's sequence "
                                     f"elements are {t.elem}")
                items.append(self._runtime_input(public, et, model_input))
            return SequenceValue(items, t.dtype)
        return self._runtime_input(name, TensorType(self._shape_of(name, spec), t.dtype), model_input)

    def _shape_of(self, name, spec) -> list:
        """A shape_dict shape: ints, symbol names, -1/None for a fresh symbol per dimension."""
        shape = []
        for d, s in enumerate(spec):
            if s is None or (isinstance(s, (int, np.integer)) and s < 0):
                shape.append(self.dim_symbol((name, d)))
            elif isinstance(s, str):
                shape.append(self.dim_symbol(s))
            else:
                shape.append(int(s))
        return shape

    def _free_name(self, onnx_name: str) -> str:
        """A sanitized name no value has yet (not reserved: Builder.input reserves it)."""
        base = name = sanitize_name(onnx_name)
        k = 0
        while name in self.builder._names:
            k += 1
            name = f"{base}_{k}"
        return name

    def _fresh_value_name(self, onnx_name: str) -> str:
        return self.builder.unique_name(sanitize_name(onnx_name))

    def _const_input_array(self, vi) -> np.ndarray:
        want = None
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type:
            want = dtype_of_onnx(tt.elem_type, f"input {vi.name!r}")
        arr = np.asarray(self.const_inputs[vi.name])
        if want is not None and str(TensorType.of(arr).dtype) != want:
            if arr.dtype.kind in "biuf" and np.can_cast(arr.dtype, np.dtype(_np(want)), "same_kind"):
                arr = arr.astype(_np(want))
            else:
                raise DTypeError(f"from_onnx: const_inputs[{vi.name!r}] is {arr.dtype}, the input is {want}")
        return _contiguous(arr)

    def _input_type(self, vi) -> TensorType:
        where = f"model input {vi.name!r}"
        ty = vi.type
        if ty.HasField("optional_type") and ty.optional_type.elem_type.HasField("tensor_type"):
            ty = ty.optional_type.elem_type      # an optional tensor: taken as a tensor that is given
        if not ty.HasField("tensor_type"):
            kind = {"sequence_type": "sequence", "map_type": "map", "optional_type": "optional sequence",
                    "sparse_tensor_type": "sparse tensor"}.get(ty.WhichOneof("value"), str(ty.WhichOneof("value")))
            raise _unsupported("graph input", vi.name, None,
                               f"{where} is a {kind} (sequence, map and optional-sequence inputs are not "
                               f"supported; tessera takes tensors)")
        tt = ty.tensor_type
        try:
            dtype = dtype_of_onnx(tt.elem_type, where)
        except DTypeError as e:
            raise _unsupported("graph input", vi.name, None, str(e)) from None
        if vi.name in self.shape_dict:
            return TensorType(self._shape_of(vi.name, self.shape_dict[vi.name]), dtype)
        if not tt.HasField("shape"):
            raise ShapeError(f"{where} has no shape (unknown rank); give it with shape_dict={{{vi.name!r}: (...)}}")
        shape = []
        for d, dim in enumerate(tt.shape.dim):
            if dim.HasField("dim_value"):
                if dim.dim_value < 0:
                    raise ShapeError(f"{where}: dimension {d} is {dim.dim_value}")
                shape.append(int(dim.dim_value))
            elif dim.HasField("dim_param") and dim.dim_param:
                shape.append(self.dim_symbol(dim.dim_param))
            else:
                shape.append(self.dim_symbol((vi.name, d)))
        return TensorType(shape, dtype)

    def _bind(self, onnx_name: str, v):
        self.env[onnx_name] = v
        if isinstance(v, Value):
            self.onnx_name.setdefault(v, onnx_name)

    # ------------------------------------------------------------------ values
    def lookup(self, name: str, ctx: OnnxContext):
        """The Value (or SequenceValue / EmptyOptional) bound to ONNX name `name`."""
        v = self.env.get(name)
        if v is None:
            raise ctx._error(f"input {name!r} is not defined by any earlier node, initializer or graph input")
        if isinstance(v, _Missing):
            raise v.error(ctx)
        return v

    def is_const(self, v: Value) -> bool:
        seen, stack = set(), [v]
        while stack:
            x = stack.pop()
            if x in self.known or x in seen:
                continue
            seen.add(x)
            if x.producer is None:
                return False
            stack.extend(x.producer.inputs)
        return True

    # ------------------------------------------------------------------ shape values
    # Shape subgraphs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) on tensors with symbolic
    # dimensions: their small integer values are tracked element by element (an int, or the name
    # of a symbolic dimension) through the structural ops, so a static dimension of a tensor with
    # a symbolic batch folds to a constant, and a shape like [N, 128, 12, 64] reaches the
    # converters that take symbolic shapes (ctx.shape_input). Arithmetic stays with the kernels.
    _SYM_OPS = frozenset({"shape_of", "copy", "cast", "take", "expand_dims", "squeeze", "concatenate",
                          "reshape", "strided_slice", "add", "subtract", "multiply"})
    _SYM_MAX = 64

    def sym_value(self, v: Value):
        """v's elements as an object array of ints and symbol names, or None when not tracked."""
        if v in self.sym:
            return self.sym[v]
        t = v.type
        if not t.is_static or t.numel() > self._SYM_MAX or not (t.dtype.is_integer()):
            return None
        known = self.known.get(v)
        if known is not None:
            out = np.empty(known.shape, object)
            out.reshape(-1)[:] = [int(x) for x in known.reshape(-1)]
            self.sym[v] = out
            return out
        p = v.producer
        out = None
        if p is not None and p.op in self._SYM_OPS:
            try:
                out = self._sym_apply(p, v)
                if out is not None and not isinstance(out, np.ndarray):   # numpy gave an element
                    box = np.empty((), object)
                    box[()] = out
                    out = box
                if out is not None and out.shape != v.type.shape:
                    out = None
            except (TesseraError, ValueError, IndexError, TypeError):
                out = None
        self.sym[v] = out
        if out is not None and all(isinstance(x, int) for x in out.reshape(-1)):
            self.known[v] = np.array(out.reshape(-1).tolist(), dtype=t.dtype.numpy()).reshape(out.shape)
        return out

    def _sym_apply(self, p: Node, v: Value):
        a = p.attrs
        if p.op == "shape_of":
            src = p.inputs[0].type
            lo, hi = shape_range(src.ndim, a["start"], a["end"])
            out = np.empty(hi - lo, object)
            out[:] = list(src.shape[lo:hi])
            return out
        ins = [self.sym_value(x) for x in p.inputs]
        if any(x is None for x in ins):
            return None
        x = ins[0]
        if p.op == "copy":
            return x
        if p.op == "cast":
            if not v.type.dtype.is_integer():
                return None
            dt = v.type.dtype.numpy()
            return _obj([e if isinstance(e, str) else int(np.array(e).astype(dt)) for e in x.reshape(-1)], x.shape)
        if p.op == "take":
            idx = ins[1]
            if any(isinstance(e, str) for e in idx.reshape(-1)):
                return None
            axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
            n = x.shape[axis]
            ii = np.array([int(e) + n if int(e) < 0 else int(e) for e in idx.reshape(-1)], np.int64)
            return np.take(x, ii.reshape(idx.shape), axis=axis)
        if p.op == "expand_dims":
            axis = a["axis"] + x.ndim + 1 if a["axis"] < 0 else a["axis"]
            for _ in range(a["num_newaxis"]):
                x = np.expand_dims(x, axis)
            return x
        if p.op == "squeeze":
            return np.squeeze(x) if a["axes"] is None else np.squeeze(x, axis=tuple(a["axes"]))
        if p.op == "concatenate":
            return np.concatenate(ins, axis=a["axis"])
        if p.op == "reshape":
            return x.reshape(v.type.shape)
        if p.op in ("add", "subtract", "multiply"):
            # ints combine; a symbol survives + 0, - 0 and * 1, and s - s is 0; anything else is untracked
            a_, b_ = np.broadcast_arrays(x, ins[1])
            out = []
            for u, w in zip(a_.reshape(-1), b_.reshape(-1)):
                if isinstance(u, int) and isinstance(w, int):
                    out.append(u + w if p.op == "add" else u - w if p.op == "subtract" else u * w)
                elif p.op == "subtract" and u == w:
                    out.append(0)
                elif w == (1 if p.op == "multiply" else 0):
                    out.append(u)
                elif p.op != "subtract" and u == (1 if p.op == "multiply" else 0):
                    out.append(w)
                else:
                    return None
            return _obj(out, a_.shape)
        if p.op == "strided_slice":
            plan = slice_plan(x.shape, a)
            for ax, step in enumerate(plan):
                if step is not None:
                    b, st, length = step
                    x = np.take(x, np.array([b + st * k for k in range(length)], np.int64), axis=ax)
            return x
        return None

    def _fold_shape_values(self, v: Value) -> None:
        """Track the shape values v is computed from; those fully known become constants."""
        for n in topo_nodes([v], stop=self.known):
            for o in n.outputs:
                self.sym_value(o)

    def const_value(self, v: Value, ctx: OnnxContext, i, what: str | None = None) -> np.ndarray:
        arr = self.known.get(v)
        if arr is not None:
            return arr
        self._fold_shape_values(v)
        arr = self.known.get(v)
        if arr is not None:
            return arr

        label = what or f"input {i} ({ctx.input_name(i)!r})"
        for n in topo_nodes([v], stop=self.known):
            for o in n.outputs:
                if o.type.is_static:
                    self.check_bytes(o.type.nbytes(), lambda: f"{label} is computed here from constants, and "
                                     f"on its way node {n.name!r} ({n.op}) makes {o.type}", ctx)
        try:
            (arr,) = evaluate_constants([v], self.known, self.target)
        except NotConstantError as e:
            blocker = e.input
            data_dep = self._data_dependency(v)
            if data_dep is None:
                shaped = sorted({self.model_input.get(x, x.name) for x in self._shape_dependencies(v)})
                if not shaped:
                    raise ctx._unsup(f"{label} must be a constant here, but it has a symbolic extent "
                                     f"(a Range or Slice to a dynamic axis)") from None
                types = ", ".join(f"{n!r}: {self.env[n].type}" for n in shaped if n in self.env)
                err = ctx._unsup(f"{label} must be a constant here, but it is computed "
                                 f"from the symbolic shape of {types}; fix the shape with shape_dict="
                                 f"{{{shaped[0]!r}: (...)}} (the CLI's --shape)")
                err.needs_shape = tuple(shaped)
                raise err from None
            blocker = data_dep
            onnx_in = self.model_input.get(blocker)
            if onnx_in is None:
                raise ctx._unsup(f"{label} must be a constant, but it depends on "
                                 f"%{blocker.name}, which could not be converted") from None
            dep = "is" if blocker is v else "depends on"
            part = self.input_of_value[blocker]
            what = repr(onnx_in) if part == onnx_in else f"{onnx_in!r} (its element {part!r})"
            raise ctx._unsup(f"{label} must be a constant here, but it {dep} the "
                             f"runtime input {what}; pass const_inputs={{{onnx_in!r}: value}} to "
                             f"from_onnx to freeze it", needs_constant=onnx_in) from None
        self.known[v] = arr
        return arr

    def check_bytes(self, nbytes: int, what, ctx: OnnxContext) -> None:
        """Refuse a constant of nbytes above Limits.max_constant_bytes; what() describes it."""
        limit = self.limits.max_constant_bytes
        if nbytes > limit:
            raise ctx._unsup(f"{what()}: {size_text(nbytes)} ({nbytes:,} bytes), more than the {size_text(limit)} "
                             f"one constant may take while converting ({self.limits.where('max_constant_bytes')})")

    _SHAPE_ONLY = ("shape_of", "ndarray_size")

    def _data_dependency(self, v: Value):
        """The first runtime input whose values (not only its shape) v depends on, or None."""
        seen, stack = set(), [v]
        while stack:
            x = stack.pop()
            if x in seen or x in self.known:
                continue
            seen.add(x)
            if x.producer is None:
                return x
            if x.producer.op not in self._SHAPE_ONLY:
                stack.extend(x.producer.inputs)
        return None

    def _shape_dependencies(self, v: Value) -> list:
        """The values whose shapes v is computed from (inputs of shape_of/ndarray_size on its way)."""
        seen, stack, out = set(), [v], []
        while stack:
            x = stack.pop()
            if x in seen or x in self.known or x.producer is None:
                continue
            seen.add(x)
            if x.producer.op in self._SHAPE_ONLY:
                src = x.producer.inputs[0]
                out.append(src if src in self.input_of_value else self._first_input(src) or src)
            else:
                stack.extend(x.producer.inputs)
        return out

    def _first_input(self, v: Value):
        """A runtime input v's shape derives from (the first met walking back), for messages."""
        seen, stack = set(), [v]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            if x in self.input_of_value:
                return x
            if x.producer is not None:
                stack.extend(x.producer.inputs)
        return None

    # ------------------------------------------------------------------ nodes
    def node_name(self, node, index: int, prefix: str = "") -> str:
        base = prefix + (node.name or f"{node.op_type}_{index}")
        name, k = base, 0
        while name in self._node_names:
            k += 1
            name = f"{base}_{k}"
        self._node_names.add(name)
        return name

    def convert_subgraph(self, g, inputs: list, ctx: OnnxContext) -> list:
        """Convert GraphProto g inline (see OnnxContext.subgraph); names it defines stay local."""
        if len(inputs) != len(g.input):
            raise ctx._error(f"subgraph {g.name!r} takes {len(g.input)} inputs, given {len(inputs)}")
        saved, saved_definer = self.env, self.definer
        self.definer = {}
        self._define_graph(g, f" of subgraph {g.name!r} (in node {ctx.node_name!r})", (saved, saved_definer))
        self.env = dict(saved)
        self._depth += 1
        try:
            for vi, v in zip(g.input, inputs):
                self._bind(vi.name, v)
            for t in g.initializer:
                arr = tensor_to_array(t, f"initializer {t.name!r} of subgraph {g.name!r}", self.base_dir)
                self._bind(t.name, ctx.const(arr, sanitize_name(t.name)))
            if len(g.sparse_initializer):
                raise ctx._unsup("sparse initializers in a subgraph")
            self._subgraph_count += 1
            prefix = f"{ctx.node_name}/{g.name or 'body'}{self._subgraph_count}/"
            for i, node in enumerate(g.node):
                self.convert_node(node, i, prefix)
            return [self.lookup(o.name, ctx) for o in g.output]     # tensors, sequences, optionals
        finally:
            self.env, self.definer = saved, saved_definer
            self._depth -= 1

    def convert_node(self, node, index: int, prefix: str = ""):
        if self.unrolling:
            self.unrolled_nodes += 1
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        name = self.node_name(node, index, prefix)
        opset = self.opsets.get(domain)
        if opset is None:
            raise _unsupported(node.op_type, name, None,
                               f"domain {node.domain!r} is not imported by the model (opset_import)")
        if (node.domain, node.op_type) in self.functions:   # only when inlining left it (it should not)
            raise _unsupported(node.op_type, name, opset, "a call of a model-local function that was not inlined")
        fn = find_converter(node.op_type, opset, domain)
        if fn is None:
            if node.op_type in _CONTROL_FLOW and not domain:
                detail = "control flow with subgraphs (If/Loop/Scan) is not supported yet"
            elif domain:
                detail = f"no converter for {node.op_type} in domain {node.domain!r}"
            else:
                detail = "no converter for this op" + (
                    " at this opset" if find_converter(node.op_type, 10**6, domain) else "")
            raise _unsupported(node.op_type, name, opset, detail)
        ctx = OnnxContext(self, node, opset, name)
        try:
            result = fn(ctx)
        except UnsupportedOpError as e:
            if getattr(e, "opset", None) is None:
                raise _unsupported(node.op_type, name, opset, _detail_of(e),
                                   getattr(e, "needs_constant", None)) from None
            raise
        except TesseraError as e:
            if name not in str(e):
                raise type(e)(f"ONNX node {name!r} ({node.op_type}, opset {opset}): {e}") \
                    if type(e) in (TesseraError, ShapeError, DTypeError) else e
            raise
        except Exception as e:  # noqa: BLE001 - a converter bug must still name the node
            raise TesseraError(f"ONNX node {name!r} ({node.op_type}, opset {opset}): the converter failed: "
                               f"{type(e).__name__}: {e}") from e
        self._bind_results(node, name, opset, result)

    def _bind_results(self, node, name, opset, result):
        if isinstance(result, (Value, SequenceValue, EmptyOptional)) or result is None:
            result = [result]
        result = list(result)
        for k, out in enumerate(node.output):
            if out == "":
                continue
            v = result[k] if k < len(result) else None
            if v is None:
                self.env[out] = _Missing(node.op_type, name, opset, k, out)
                continue
            if not isinstance(v, (Value, SequenceValue, EmptyOptional)):
                raise TesseraError(f"ONNX node {name!r} ({node.op_type}): the converter returned "
                                   f"{type(v).__name__} for output {k}, not a Value")
            self._bind(out, v)

    def mark_failed(self, node, name, opset, reason):
        for k, out in enumerate(node.output):
            if out:
                self.env[out] = _Missing(node.op_type, name, opset, k, out, reason)

    # ------------------------------------------------------------------ the whole model
    def run(self):
        self._read_inputs()
        if self.pending:
            kinds = ", ".join(f"{n!r} ({t})" for n, t in self.interface if n in self.pending)
            err = _unsupported("graph input", self.pending[0], None,
                               f"the structure of model inputs {kinds} (a sequence's length and element shapes, "
                               f"whether an optional is empty) decides the graph; give it with shape_dict (a "
                               f"list of element shapes; None for an empty optional)")
            err.needs_shape = tuple(self.pending)
            raise err
        for i, node in enumerate(self.graph_proto.node):
            self.convert_node(node, i)

    def finish(self) -> tuple:
        """(graph, params, layout): the graph's outputs are the model's tensors, each sequence output
        flattened to its elements ('name[i]'); layout (deferred.regroup) regroups them, None when
        every model output is a tensor."""
        outs, names, layout = [], [], []
        for vi in self.graph_proto.output:
            v = self.env.get(vi.name)
            if v is None:
                raise TesseraError(f"from_onnx: graph output {vi.name!r} is not produced by any node")
            if isinstance(v, _Missing):
                if v.unsupported:
                    raise _unsupported("graph output", vi.name, None, v.reason)
                raise TesseraError(f"from_onnx: graph output {vi.name!r} ({v.describe()}) was not produced")
            # what the model computes, whatever the output's declared type (a Loop that runs no iteration
            # gives its initial value: an empty optional where the body makes a sequence), as onnxruntime does
            if isinstance(v, SequenceValue):
                layout.append(list(range(len(outs), len(outs) + len(v))))
                outs.extend(v.items)
                names.extend(flat_name(vi.name, i) for i in range(len(v)))
            elif isinstance(v, EmptyOptional):
                layout.append(None)
            else:
                layout.append(len(outs))
                outs.append(v)
                names.append(vi.name)
        if not len(self.graph_proto.output):
            raise TesseraError("from_onnx: the model has no outputs")
        plain = all(isinstance(x, int) for x in layout)
        graph, params = self._final_graph(outs, names)
        return graph, params, None if plain else layout

    def _final_graph(self, outs, output_names):
        """The graph with dead nodes dropped, Values named after their ONNX tensors, and the params."""
        b = self.builder
        nodes = topo_nodes(outs)
        live = set(nodes)
        nodes = [n for n in b.nodes if n in live]
        used = set(outs)
        for n in nodes:
            used.update(n.inputs)
        # names: ONNX-named values first, then the converters' internal values
        taken = {v.name for v in b.inputs}
        want: dict[Value, str] = {}
        for n in nodes:
            for o in n.outputs:
                if o in self.onnx_name:
                    want[o] = sanitize_name(self.onnx_name[o])
        for v in list(b.constants) + self.param_values:
            if v in used and v in self.onnx_name:
                want[v] = sanitize_name(self.onnx_name[v])
        final: dict[Value, str] = {}
        last_suffix: dict[str, int] = {}     # base -> its last suffix given: an unrolled loop repeats a name

        def claim(v, name):
            if name in taken:       # fresh_name's rule, resumed where it stopped (taken only grows)
                k = last_suffix.get(name, 0) + 1
                while f"{name}_{k}" in taken:
                    k += 1
                last_suffix[name] = k
                name = f"{name}_{k}"
            taken.add(name)
            final[v] = name

        for v in [v for v in self.param_values if v in used]:
            claim(v, want.get(v, v.name))
        for v, name in want.items():
            if v not in final:
                claim(v, name)
        for n in nodes:
            for o in n.outputs:
                if o not in final:
                    claim(o, o.name)
        for v in b.constants:
            if v in used and v not in final:
                claim(v, v.name)
        vmap: dict[Value, Value] = {v: v for v in b.inputs}
        consts = {}
        for v, arr in b.constants.items():
            if v in used:
                nv = v if final[v] == v.name else Value(final[v], v.type)
                vmap[v] = nv
                consts[nv] = arr
        params, param_inputs, param_public, defaults = {}, [], [], []
        for v in self.param_values:
            if v in used:
                nv = Value(final[v], v.type)
                vmap[v] = nv
                param_inputs.append(nv)
                param_public.append(self.onnx_name.get(v, nv.name))
                params[nv.name] = self.params[v]
                if self.onnx_name.get(v) in self.overridable:
                    defaults.append(nv.name)
        new_nodes = []
        for n in nodes:
            ins = [vmap[v] for v in n.inputs]
            names = [final[o] for o in n.outputs]
            if all(a is c for a, c in zip(ins, n.inputs)) and names == [o.name for o in n.outputs]:
                nn = n
            else:
                nn = Node(n.op, ins, n.attrs, n.name, [o.type for o in n.outputs], names)
            for o, no in zip(n.outputs, nn.outputs):
                vmap[o] = no
            new_nodes.append(nn)
        # the public names: the model's own input and output names (the Values keep sanitized ones)
        input_names = [self.input_of_value.get(v, v.name) for v in b.inputs] + param_public
        graph = Graph(list(b.inputs) + param_inputs, [vmap[v] for v in outs], new_nodes, consts, b.name,
                      input_names, output_names)
        return graph, Params(params, defaults)


class _Blocked(TesseraError):
    pass


class _Missing:
    """Stands for an ONNX tensor that is not available: an output a converter did not produce, the
    output of a node that failed (check_model), or an initializer of a dtype tessera lacks."""

    def __init__(self, op_type, node, opset, index, name, reason=None, unsupported=False):
        self.op_type, self.node, self.opset, self.index, self.name, self.reason = \
            op_type, node, opset, index, name, reason
        self.unsupported = unsupported

    def describe(self) -> str:
        return f"output {self.index} of node {self.node!r} ({self.op_type})"

    def error(self, ctx):
        if self.unsupported:
            return ctx._unsup(f"input {self.name!r}: {self.reason}")
        if self.reason is not None:
            return _Blocked(f"input {self.name!r} comes from node {self.node!r}, which was not converted")
        return ctx._error(f"input {self.name!r} is {self.describe()}, which the converter did not produce")


def _what(t: OptionalType) -> str:
    """What an optional of type t would hold, for messages."""
    return "a sequence" if isinstance(t.elem, SequenceType) else "a tensor"


def _elem(t: OptionalType):
    """The type of what an optional holds (a tensor of open shape: a rank-0 stand-in, only its dtype read)."""
    return t.elem if t.elem is not None else TensorType((), t.dtype)


def _obj(items, shape) -> np.ndarray:
    out = np.empty(len(items), object)
    out[:] = list(items)
    return out.reshape(shape)


def _detail_of(e: UnsupportedOpError) -> str:
    """The message of an UnsupportedOpError raised without the frontend's opset context."""
    text = str(e)
    if e.op and not getattr(e, "detail", None):
        where = f" (node {e.node!r})" if e.node else ""
        prefix = f"unsupported op {e.op!r}{where}"
        if text.startswith(prefix):
            rest = text[len(prefix):].lstrip(": ")
            return f"tessera op {e.op!r}: {rest}" if rest else f"tessera op {e.op!r} is not supported"
    return getattr(e, "detail", None) or text


def _np(dtype: str):
    return numpy_dtype(dtype)


# ---------------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------------
def inline_functions(m):
    """The model with its model-local functions inlined (onnx.inliner); refused when that fails."""
    if not len(m.functions):
        return m
    try:
        from onnx import inliner

        out = inliner.inline_local_functions(m, convert_version=True)
    except Exception as e:  # noqa: BLE001 - the inliner raises its own errors
        names = ", ".join(f"{f.domain}::{f.name}" if f.domain else f.name for f in m.functions)
        raise _unsupported("model-local function", names, None,
                           f"the functions could not be inlined ({type(e).__name__}: {e})") from None
    return out


@resource_errors("tessera.frontend.from_onnx")
def from_onnx(model, shape_dict=None, const_inputs=None, opset=None, target="c", specialize: bool = True,
              base_dir=None, limits: Limits | None = None):
    """Convert an ONNX model (ModelProto, path or bytes) to (tessera Graph, params).

    shape_dict: {input name: shape} fixes or overrides input shapes (an int, a symbol name, or
    -1/None for a fresh symbol per dimension). const_inputs: {input name: array} freezes runtime
    inputs as constants (TVM's freeze_params for one input). opset: overrides the default domain's
    opset version. target: where constant subgraphs are evaluated.

    base_dir: the folder external data (tensors whose bytes sit in another file) is read from, for a
    model given as bytes or as a ModelProto loaded without it; a path reads it beside the file unless
    base_dir is given. Such a model without one is refused: the working directory is never searched,
    and locations that leave the folder are refused. limits: a tessera.limits.Limits (unrolled loop
    work, constant sizes); None takes the defaults or the environment's (TESSERA_MAX_*).

    When a converter needs the value of a runtime input (axes, a shape, scales, a condition: the
    value decides the graph's structure), or a value computed from a dynamic axis that is not
    tracked symbolically, the result is (tessera.graph.DeferredGraph, {}) with specialize=True (the
    default): tessera.compile builds and compiles the graph per distinct value (or shape) of such
    inputs on first use. specialize=False refuses instead (UnsupportedOpError whose
    `needs_constant` names the input to freeze with const_inputs, or `needs_shape` the inputs to fix
    with shape_dict).

    Sequences and optionals: a sequence-typed input takes, in shape_dict, a list of element shapes
    (it becomes one graph input per element, 'name[0]', 'name[1]', ...) and, in const_inputs, a list
    of arrays; an optional-typed input None there for an empty optional. An input of such a type that
    neither gives, and a sequence or optional output, make the result a DeferredGraph (with
    specialize=True): its executor takes a list (None) and returns lists (None), compiling per
    distinct structure (element shapes, emptiness). specialize=False refuses sequence outputs and
    takes an optional tensor input as a tensor that is given.

    The graph's inputs and outputs keep the model's own names as their public names
    (graph.input_names / output_names: what the compiled model takes and reports); its Values get
    sanitized, unique names (sanitize_name), and params is keyed by those value names.
    """
    base_dir = _base_dir(base_dir)
    m = inline_functions(load_model(model, base_dir))
    graph, params, layout, conv = _convert(m, shape_dict, const_inputs, opset, target, specialize, base_dir,
                                           resolve_limits(limits))
    if layout is None or isinstance(graph, DeferredGraph):
        return graph, params
    if not specialize:
        names = [vi.name for vi in m.graph.output]
        seq = [n for n, item in zip(names, layout) if not isinstance(item, int)]
        raise _unsupported("graph output", seq[0], None,
                           f"model outputs {seq} are sequences or optionals; a Graph's outputs are tensors: "
                           f"from_onnx(specialize=True) gives a model whose executor returns them as lists "
                           f"(None for an empty optional)")
    first = (graph, params, layout)
    return _deferred(m, conv, [], [], "its outputs hold sequences or optionals, returned as lists",
                     shape_dict, const_inputs, opset, target, first), {}


def _convert(m, shape_dict, const_inputs, opset, target, specialize, base_dir=None, limits=None) -> tuple:
    """(graph, params, layout, converter) of ModelProto m (see _Converter.finish), or (DeferredGraph,
    {}, None, converter) when the conversion needs runtime values or structures and `specialize`."""
    conv = _Converter(m, shape_dict, const_inputs, opset, target=target, defer_structure=specialize,
                      base_dir=base_dir, limits=limits)
    try:
        conv.run()
    except UnsupportedOpError as e:
        runtime = conv.runtime_names
        need = getattr(e, "needs_constant", None)
        shaped = getattr(e, "needs_shape", None) or ()
        if specialize and need in runtime:
            values, shapes = [need], []
        elif specialize and shaped and set(shaped) <= runtime:
            values, shapes = [], list(shaped)
        else:
            raise
        return _deferred(m, conv, values, shapes, str(e), shape_dict, const_inputs, opset, target), {}, None, conv
    return (*conv.finish(), conv)


def _deferred(m, conv: "_Converter", values_needed, shapes_needed, reason: str, shape_dict, const_inputs,
              opset, target, first=None):
    """The DeferredGraph of model m, whose conversion needs the values of runtime inputs
    `values_needed` or the shapes of `shapes_needed` (a value computed from a dynamic axis that
    tessera does not track symbolically, or the structure of a sequence or optional input), or whose
    outputs are sequences or optionals (first: the conversion already made, for the build with
    nothing more given). conv: the converter that read the model's inputs (the interface)."""
    frozen = dict(const_inputs or {})
    fixed = dict(shape_dict or {})

    def build(values, shapes):
        if first is not None and not values and not shapes:
            return first
        return _convert(m, {**fixed, **shapes}, {**frozen, **values}, opset, target, False, conv.base_dir,
                        conv.limits)[:3]

    names = [n for n, _ in conv.interface]
    types = [t for _, t in conv.interface]
    shapes_needed = list(dict.fromkeys(list(shapes_needed) + list(conv.pending) + _sharing_symbols(conv)))
    return DeferredGraph(conv.builder.name, names, types, [vi.name for vi in m.graph.output], values_needed, build,
                         reason, shapes_needed)


def _sharing_symbols(conv: "_Converter") -> list:
    """Tensor inputs with a symbolic dimension that a pending sequence's declared element type names:
    a run fixes the elements' shapes, so it fixes those inputs' shapes too (element [N] + input [N])."""
    symbols = set()
    for n, t in conv.interface:
        elem = t.elem if isinstance(t, OptionalType) else t
        if n in conv.pending and isinstance(elem, SequenceType) and elem.elem is not None:
            symbols.update(elem.elem.symbols)
    return [n for n, t in conv.interface if isinstance(t, TensorType) and symbols & set(t.symbols)]


def check_model(model, shape_dict=None, const_inputs=None, opset=None, base_dir=None,
                limits: Limits | None = None) -> list:
    """Every node tessera cannot convert, as UnsupportedNode(op_type, node, opset, reason), at once.

    Nodes whose inputs come from an unconvertible node are skipped (not reported twice). A model
    input tessera cannot take (a map, a string tensor) is reported as op 'graph input'; nodes that
    read a sequence input whose length shape_dict does not give are not checked (a run decides it).
    base_dir and limits as from_onnx's.
    """
    base_dir = _base_dir(base_dir)
    m = load_model(model, base_dir)
    try:
        m = inline_functions(m)
    except UnsupportedOpError as e:
        return [UnsupportedNode("model-local function", str(e.node), 0, e.detail)]
    conv = _Converter(m, shape_dict, const_inputs, opset, base_dir=base_dir, limits=limits)
    conv.problems = []
    conv._read_inputs()
    g = m.graph
    for i, node in enumerate(g.node):
        try:
            conv.convert_node(node, i)
        except _Blocked:
            conv.mark_failed(node, node.name, None, "blocked")
        except UnsupportedOpError as e:
            opset_v = getattr(e, "opset", None)
            if opset_v is None:
                opset_v = conv.opsets.get("" if node.domain in ("", "ai.onnx") else node.domain, 0)
            conv.problems.append(UnsupportedNode(node.op_type, e.node or node.name or node.op_type, opset_v,
                                                 getattr(e, "detail", None) or str(e)))
            conv.mark_failed(node, node.name, None, str(e))
        except TesseraError as e:
            opset_v = conv.opsets.get("" if node.domain in ("", "ai.onnx") else node.domain, 0)
            conv.problems.append(UnsupportedNode(node.op_type, node.name or f"{node.op_type}_{i}", opset_v,
                                                 f"conversion failed: {e}"))
            conv.mark_failed(node, node.name, None, str(e))
    return conv.problems
