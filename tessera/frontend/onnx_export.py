"""ONNX export: a tessera Graph -> an onnx.ModelProto that ONNX Runtime (or any ONNX runtime) reads.

    qdq = tessera.quantize(graph, params, calibration=feeds, form="qdq")
    model = to_onnx(qdq)                     # opset 17 by default; onnx.save(model, "model_int8.onnx")
    export_onnx(qdq, "model_int8.onnx")      # the same, written (external data past 2 GB)

It writes the float graph of operator nodes that the ONNX frontend makes (tessera/frontend/onnx_ops), one
ONNX op per tessera op where the frontend maps that ONNX op to it (Relu <- nn.relu, Gather <- take, Conv
<- nn.conv2d, QuantizeLinear <- qnn.quantize, ...), so that from_onnx reads the file back into the
same graph. What `tessera.quantize(..., form="qdq")` leaves is written as a QDQ model, the form
onnxruntime.quantization.quantize_static writes:

- a weight `qnn.dequantize(int8 constant, scale, zero point)` is an int8 initializer feeding a
  DequantizeLinear (per tensor, or per channel with `axis`): the file holds the integers, about a
  quarter of the fp32 model's bytes;
- a convolution's bias add (a constant of one value per output channel) is the Conv's bias input; when
  the convolution reads DequantizeLinear'd activations (per tensor) and int8 weights, the bias is
  written as ONNX Runtime's quantizer writes it: int32 at the scale x_scale * w_scale behind a
  DequantizeLinear (the integers graph/passes/fake_quantization_to_integer computes with, so runtimes
  fuse the group into one integer convolution); a 2-d matmul and its bias likewise become a Gemm;
- activations keep their QuantizeLinear -> DequantizeLinear pairs.

Graph input and output names are the graph's public names (input_names / output_names); other tensor
names come from the tessera values' names, made unique. Constants are initializers. Symbolic
dimensions are written as dim_params. An op this module cannot write raises UnsupportedOpError naming
the op and the node (a fused graph, as tessera.compile leaves it, is refused: export the graph before
compiling it). Opsets 13 to the installed onnx's newest; ops newer than the chosen opset
(LayerNormalization: 17, Gelu: 20, blocked quantization: 21) are refused, except Gelu, written as its
Erf / Tanh formula below opset 20.
"""
from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from ..errors import DTypeError, TesseraError, UnsupportedOpError
from ..graph.const_eval import bind_params
from ..graph.ir import FUSED_OP, Graph, Node, Value
from ..ir.dtype import numpy_dtype
from ..ir.names import fresh_name
from .onnx import _contiguous, onnx_dtype_of
from .onnx_ops.broadcast import _BINARY
from .onnx_ops.elemwise import _UNARY, _WITH_ATTRS

MIN_OPSET = 13          # per-axis DequantizeLinear, Softmax on one axis, axes as inputs
DEFAULT_OPSET = 17      # LayerNormalization; read by ONNX Runtime 1.13+ and TensorRT 8.6+
_EXTERNAL_DATA_BYTES = 1 << 30     # initializers past this are written beside the model (protobuf's 2 GB)

# ONNX ops that need an opset newer than MIN_OPSET
_SINCE = {"HardSwish": 14, "Mish": 18, "LayerNormalization": 17, "Gelu": 20}


class _Writer:
    """One export: names, initializers and nodes of the ONNX graph being written."""

    def __init__(self, graph: Graph, opset: int):
        import onnx

        self.onnx = onnx
        self.g = graph
        self.opset = opset
        self.consts = dict(graph.constants)
        self.cons = graph.consumers()
        self.graph_outputs = set(graph.outputs)
        self.names: dict = {}            # Value -> ONNX tensor name
        self.taken: set = set()          # every tensor name used or reserved
        self.node_names: set = set()
        self.nodes: list = []            # NodeProto
        self.inits: list = []            # TensorProto
        self.skipped: set = set()        # ids of nodes written as part of another (a folded bias add)
        self.current: Node | None = None

    # ------------------------------------------------------------------ names and tensors
    def fresh(self, base: str) -> str:
        name = fresh_name(str(base) or "t", self.taken)
        self.taken.add(name)
        return name

    def name(self, v: Value) -> str:
        """v's tensor name (a constant becomes an initializer the first time it is named)."""
        if v not in self.names:
            self.names[v] = self.fresh(v.name)
            if v in self.consts:
                self.inits.append(self.tensor(self.consts[v], self.names[v]))
        return self.names[v]

    def tensor(self, arr, name: str):
        arr = _contiguous(arr)
        from onnx import numpy_helper

        if arr.dtype.name in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                              "float16", "float32", "float64"):
            return numpy_helper.from_array(arr, name)
        try:
            elem = onnx_dtype_of(arr.dtype.name)
        except DTypeError:
            raise TesseraError(f"constant {name!r}: dtype {arr.dtype} has no ONNX tensor type") from None
        if elem in (21, 22, 23, 25, 26):       # sub-byte types are packed two (four) to a byte in ONNX
            raise TesseraError(f"constant {name!r}: writing {arr.dtype} tensors (packed sub-byte) is not "
                               f"supported by the ONNX export")
        return self.onnx.helper.make_tensor(name, elem, arr.shape, arr.tobytes(), raw=True)

    def const(self, arr, base: str) -> str:
        """A new initializer holding arr; its name."""
        name = self.fresh(base)
        self.inits.append(self.tensor(arr, name))
        return name

    def ints(self, values, base: str) -> str:
        return self.const(np.asarray([int(x) for x in values], np.int64), base)

    def tmp(self, base: str) -> str:
        return self.fresh(base)

    def emit(self, op_type: str, inputs, outputs, **attrs) -> None:
        need = _SINCE.get(op_type, MIN_OPSET)
        if self.opset < need:
            self.refuse(f"it is written as ONNX {op_type}, which needs opset {need} (exporting at opset {self.opset})")
        name = fresh_name(self.current.name if self.current is not None else op_type, self.node_names)
        self.node_names.add(name)
        attrs = {key: v for key, v in attrs.items() if v is not None}
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs))

    def refuse(self, why: str):
        n = self.current
        raise UnsupportedOpError(n.op if n is not None else "?", n.name if n is not None else None,
                                 f"cannot write it to ONNX: {why}")

    # ------------------------------------------------------------------ graph structure
    def const_of(self, v: Value):
        return np.asarray(self.consts[v]) if v in self.consts else None

    def single_consumer(self, v: Value, ops):
        c = self.cons.get(v, [])
        if len(c) != 1 or v in self.graph_outputs or c[0][0].op not in ops:
            return None
        return c[0][0]

    def static_shape(self, v: Value, what: str) -> tuple:
        if not v.type.is_static:
            self.refuse(f"{what} {v.type} has a symbolic dimension")
        return tuple(int(d) for d in v.type.shape)

    def value_info(self, v: Value, name: str):
        try:
            elem = onnx_dtype_of(v.dtype)
        except DTypeError as e:
            raise TesseraError(f"graph {self.g.name!r}: {name!r} is {v.type}, which ONNX cannot type: {e}") from None
        dims = [d if isinstance(d, str) else int(d) for d in v.type.shape]
        return self.onnx.helper.make_tensor_value_info(name, elem, dims)


# ---------------------------------------------------------------------------------------------
# op writers: fn(w, node, input names, output names)
# ---------------------------------------------------------------------------------------------
_WRITERS: dict = {}


def _writes(*ops):
    def deco(fn):
        for op in ops:
            _WRITERS[op] = fn
        return fn

    return deco


def _simple(onnx_op, **fixed):
    def write(w, n, ins, outs):
        w.emit(onnx_op, ins, outs, **fixed)

    return write


for _onnx_op, _op in _UNARY.items():
    _WRITERS.setdefault(_op, _simple(_onnx_op))
for _onnx_op, _op in _BINARY.items():
    _WRITERS.setdefault(_op, _simple(_onnx_op))
_WRITERS["copy"] = _simple("Identity")
_WRITERS["maximum"] = _simple("Max")
_WRITERS["minimum"] = _simple("Min")
_WRITERS["where"] = _simple("Where")
_WRITERS["nn.prelu"] = _simple("PRelu")
_WRITERS["mod"] = _simple("Mod", fmod=0)
_WRITERS["fmod"] = _simple("Mod", fmod=1)


def _with_attrs_writer(onnx_op, amap):
    def write(w, n, ins, outs):
        attrs = {}
        for onnx_name, (name, default) in amap.items():
            v = n.attrs.get(name, default)
            attrs[onnx_name] = int(v) if isinstance(v, bool) else v
        w.emit(onnx_op, ins, outs, **attrs)

    return write


for _onnx_op, (_op, _amap) in _WITH_ATTRS.items():
    if _op != "nn.gelu":
        _WRITERS.setdefault(_op, _with_attrs_writer(_onnx_op, _amap))


@_writes("nn.gelu")
def _gelu(w, n, ins, outs):
    approx = n.attrs.get("approximate", "none")
    if approx not in ("none", "tanh"):
        w.refuse(f"approximate={approx!r}")
    if w.opset >= 20:
        return w.emit("Gelu", ins, outs, approximate=approx)
    # below opset 20: x * (1 + erf(x / sqrt(2))) * 0.5  or  x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) * 0.5
    dt = numpy_dtype(n.inputs[0].dtype)
    x = ins[0]
    c = lambda value, base: w.const(np.array(value, dt), f"{n.name}_{base}")  # noqa: E731
    if approx == "none":
        t = w.tmp(f"{n.name}_scaled")
        w.emit("Div", [x, c(math.sqrt(2.0), "sqrt2")], [t])
        e = w.tmp(f"{n.name}_erf")
        w.emit("Erf", [t], [e])
    else:
        x3 = w.tmp(f"{n.name}_cube")
        w.emit("Pow", [x, c(3.0, "three")], [x3])
        m = w.tmp(f"{n.name}_cube_scaled")
        w.emit("Mul", [x3, c(0.044715, "coef")], [m])
        s = w.tmp(f"{n.name}_inner")
        w.emit("Add", [x, m], [s])
        t = w.tmp(f"{n.name}_scaled")
        w.emit("Mul", [s, c(math.sqrt(2.0 / math.pi), "sqrt_2_pi")], [t])
        e = w.tmp(f"{n.name}_tanh")
        w.emit("Tanh", [t], [e])
    one = w.tmp(f"{n.name}_one_plus")
    w.emit("Add", [e, c(1.0, "one")], [one])
    xe = w.tmp(f"{n.name}_x_one_plus")
    w.emit("Mul", [x, one], [xe])
    w.emit("Mul", [xe, c(0.5, "half")], outs)          # (x * (1 + ...)) * 0.5: torch.onnx's form, which
                                                        # ONNX Runtime's Gelu fusions match


@_writes("clip")
def _clip(w, n, ins, outs):
    dt = numpy_dtype(n.inputs[0].dtype)
    lo, hi = n.attrs.get("a_min"), n.attrs.get("a_max")
    args = [ins[0], "" if lo is None else w.const(np.array(lo, dt), f"{n.name}_min"),
            "" if hi is None else w.const(np.array(hi, dt), f"{n.name}_max")]
    while args[-1] == "":
        args.pop()
    w.emit("Clip", args, outs)


@_writes("cast")
def _cast(w, n, ins, outs):
    w.emit("Cast", ins, outs, to=onnx_dtype_of(n.outputs[0].dtype))


@_writes("nn.softmax", "nn.log_softmax", "nn.hardmax")
def _softmax(w, n, ins, outs):
    op = {"nn.softmax": "Softmax", "nn.log_softmax": "LogSoftmax", "nn.hardmax": "Hardmax"}[n.op]
    w.emit(op, ins, outs, axis=int(n.attrs.get("axis", -1)))


def _spatial(w, n, x: Value, layout=None):
    nd = x.type.ndim - 2
    if nd < 1:
        w.refuse(f"input {x.type} is not (N, C, spatial...)")
    if layout not in (None, "", "NC" + "DHW"[3 - nd:]):
        w.refuse(f"layout {layout!r} (ONNX pools NCHW)")
    return nd


def _window(n, nd, pad_key="padding"):
    strides = tuple(int(s) for s in n.attrs.get("strides") or (1,) * nd)
    dil = tuple(int(d) for d in n.attrs.get("dilation") or (1,) * nd)
    pads = tuple(int(p) for p in n.attrs.get(pad_key) or (0,) * (2 * nd))
    if len(pads) == nd:
        pads = pads + pads
    return strides, dil, pads


@_writes("nn.conv1d", "nn.conv2d", "nn.conv3d")
def _conv(w, n, ins, outs):
    x, wt = n.inputs
    nd = _spatial(w, n, x)
    _same_out_dtype(w, n)
    if not wt.type.is_static:
        w.refuse(f"weight {wt.type} has a symbolic shape")
    strides, dil, pads = _window(n, nd)
    args = list(ins)
    bias = _conv_bias(w, n)
    if bias is not None:
        args.append(bias[0])
        outs = [w.name(bias[1])]
    w.emit("Conv", args, outs, kernel_shape=[int(d) for d in wt.type.shape[2:]], strides=list(strides),
           pads=list(pads), dilations=list(dil), group=int(n.attrs.get("groups", 1)))


def _same_out_dtype(w, n):
    """Refuse an out_dtype attribute other than the output's own (ONNX Conv / MatMul / Gemm have none)."""
    if n.attrs.get("out_dtype") not in (None, "", str(n.outputs[0].dtype)):
        w.refuse(f"out_dtype {n.attrs['out_dtype']}")


def _per_tensor_dq(w, v: Value):
    """The scale (float32 scalar) of v = DequantizeLinear(uint8/int8 activation, constant per-tensor scale,
    zero point), else None."""
    p = v.producer
    if p is None or p.op != "qnn.dequantize" or str(p.inputs[0].dtype) not in ("uint8", "int8"):
        return None
    s = w.const_of(p.inputs[1])
    if s is None or s.size != 1 or s.dtype != np.float32 or p.attrs.get("block_size"):
        return None
    return np.float32(s.reshape(()))


def _int8_weight_dq(w, v: Value, axis: int):
    """The (channels,) or scalar float32 scale of v = DequantizeLinear(constant int8, scale, zero point 0)
    quantized per tensor or along `axis`, else None."""
    p = v.producer
    if p is None or p.op != "qnn.dequantize" or p.inputs[0] not in w.consts or str(p.inputs[0].dtype) != "int8":
        return None
    s = w.const_of(p.inputs[1])
    z = w.const_of(p.inputs[2]) if len(p.inputs) > 2 else np.zeros((), np.int8)
    if s is None or z is None or s.dtype != np.float32 or np.any(z != 0) or p.attrs.get("block_size"):
        return None
    if s.size != 1 and (s.ndim != 1 or int(p.attrs.get("axis", 1)) % v.type.ndim != axis):
        return None
    return s.reshape(()) if s.size == 1 else s


def _bias_input(w, n, x: Value, weight: Value, out: Value, channels: int, axis: int, shapes):
    """(bias tensor name, the value the op then defines) when `out`'s one consumer adds a constant bias
    (one value per output channel, of one of `shapes`), else None. A bias of an op that reads a
    DequantizeLinear'd activation (per tensor) and int8 weights is written as int32 at x_scale * w_scale
    behind a DequantizeLinear (ONNX Runtime's form), while its integers fit (|bias| < 2**31)."""
    add = w.single_consumer(out, ("add",))
    if add is None:
        return None
    other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
    b = w.const_of(other)
    if b is None or b.size != channels or tuple(b.shape) not in shapes or b.dtype != np.dtype(numpy_dtype(out.dtype)):
        return None
    if tuple(add.outputs[0].type.shape) != tuple(out.type.shape):
        return None
    w.skipped.add(id(add))
    b = b.reshape(channels)
    sx, sw = _per_tensor_dq(w, x), _int8_weight_dq(w, weight, axis)
    if sx is not None and sw is not None and b.dtype == np.float32:
        acc = (np.float32(sx) * sw).astype(np.float32)
        bi = np.rint(b.astype(np.float64) / acc.astype(np.float64))
        if np.all(np.abs(bi) < 2 ** 31 - 1):
            base = f"{n.name}_bias"
            q = w.const(bi.astype(np.int32), f"{base}_int32")
            s = w.const(acc, f"{base}_scale")
            z = w.const(np.zeros(acc.shape, np.int32), f"{base}_zero_point")
            name = w.tmp(f"{base}_dq")
            w.emit("DequantizeLinear", [q, s, z], [name], axis=0 if acc.ndim else None)
            return name, add.outputs[0]
    return w.const(b, f"{n.name}_bias"), add.outputs[0]


def _conv_bias(w, n):
    x, wt = n.inputs
    out = n.outputs[0]
    c = int(wt.type.shape[0])
    nd = x.type.ndim - 2
    return _bias_input(w, n, x, wt, out, c, 0, {(c,), (c,) + (1,) * nd})


def _transpose_last2(w, n, name: str, v: Value, which: str) -> str:
    nd = v.type.ndim
    if nd < 2:
        w.refuse(f"transpose_{which} of a {nd}-d operand")
    t = w.tmp(f"{name}_T")
    w.emit("Transpose", [name], [t], perm=list(range(nd - 2)) + [nd - 1, nd - 2])
    return t


@_writes("nn.matmul")
def _matmul(w, n, ins, outs):
    if n.attrs.get("b_panel") or n.attrs.get("b_cols"):
        w.refuse("its weight is packed in panels (a graph after tessera.compile's pack_matmul_weights)")
    _same_out_dtype(w, n)
    a, b = n.inputs
    ta, tb = bool(n.attrs.get("transpose_a")), bool(n.attrs.get("transpose_b"))
    if a.type.ndim == 2 and b.type.ndim == 2 and b.type.is_static:
        nout = int(b.type.shape[0] if tb else b.type.shape[1])
        bias = _bias_input(w, n, a, b, n.outputs[0], nout, 0 if tb else 1, {(nout,), (1, nout)})
        if bias is not None:
            return w.emit("Gemm", [ins[0], ins[1], bias[0]], [w.name(bias[1])], transA=int(ta) or None,
                          transB=int(tb) or None)
    x, y = ins
    if ta:
        x = _transpose_last2(w, n, x, a, "a")
    if tb:
        y = _transpose_last2(w, n, y, b, "b")
    w.emit("MatMul", [x, y], outs)


@_writes("nn.dense")
def _dense(w, n, ins, outs):
    _same_out_dtype(w, n)
    a, b = n.inputs
    if a.type.ndim == 2:
        return w.emit("Gemm", ins, outs, transB=1)
    w.emit("MatMul", [ins[0], _transpose_last2(w, n, ins[1], b, "b")], outs)


@_writes("nn.max_pool1d", "nn.max_pool2d", "nn.max_pool3d", "nn.avg_pool1d", "nn.avg_pool2d", "nn.avg_pool3d")
def _pool(w, n, ins, outs):
    nd = _spatial(w, n, n.inputs[0], n.attrs.get("layout"))
    strides, dil, pads = _window(n, nd)
    attrs = dict(kernel_shape=[int(k) for k in n.attrs["pool_size"]], strides=list(strides), pads=list(pads),
                 ceil_mode=int(bool(n.attrs.get("ceil_mode"))) or None)
    if any(d != 1 for d in dil):
        if "avg" in n.op and w.opset < 19:
            w.refuse(f"dilation {dil} of an AveragePool needs opset 19")
        attrs["dilations"] = list(dil)
    if "avg" in n.op:
        attrs["count_include_pad"] = int(bool(n.attrs.get("count_include_pad"))) or None
    w.emit("MaxPool" if "max" in n.op else "AveragePool", ins, outs, **attrs)


@_writes("nn.global_avg_pool", "nn.global_max_pool")
def _global_pool(w, n, ins, outs):
    _spatial(w, n, n.inputs[0], n.attrs.get("layout"))
    w.emit("GlobalAveragePool" if "avg" in n.op else "GlobalMaxPool", ins, outs)


@_writes("nn.batch_norm")
def _batch_norm(w, n, ins, outs):
    if int(n.attrs.get("axis", 1)) not in (1, 1 - n.inputs[0].type.ndim):
        w.refuse(f"axis {n.attrs.get('axis')} (ONNX normalizes axis 1)")
    w.emit("BatchNormalization", ins, outs, epsilon=float(n.attrs.get("epsilon", 1e-5)))


@_writes("nn.layer_norm")
def _layer_norm(w, n, ins, outs):
    if n.attrs.get("return_stats"):
        w.refuse("return_stats (the mean and inverse deviation outputs)")
    w.emit("LayerNormalization", ins, outs, axis=int(n.attrs.get("axis", -1)),
           epsilon=float(n.attrs.get("epsilon", 1e-5)))


@_writes("nn.instance_norm")
def _instance_norm(w, n, ins, outs):
    w.emit("InstanceNormalization", ins, outs, epsilon=float(n.attrs.get("epsilon", 1e-5)))


@_writes("nn.pad")
def _pad(w, n, ins, outs):
    mode = n.attrs.get("pad_mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        w.refuse(f"pad_mode {mode!r}")
    if mode == "wrap" and w.opset < 19:
        w.refuse("pad_mode 'wrap' needs opset 19")
    width = [tuple(int(p) for p in pw) for pw in n.attrs["pad_width"]]
    pads = [a for a, _ in width] + [b for _, b in width]
    args = [ins[0], w.ints(pads, f"{n.name}_pads")]
    if mode == "constant":
        args.append(w.const(np.array(n.attrs.get("pad_value", 0), numpy_dtype(n.inputs[0].dtype)), f"{n.name}_value"))
    w.emit("Pad", args, outs, mode=mode)


@_writes("reshape")
def _reshape(w, n, ins, outs):
    x, y = n.inputs[0], n.outputs[0]
    attrs = {}
    if y.type.is_static:
        shape = [int(d) for d in y.type.shape]
        if 0 in shape:                      # an empty result: 0 is a literal extent, not "copy"
            if w.opset < 14:
                w.refuse("an empty result shape needs Reshape's allowzero (opset 14)")
            attrs["allowzero"] = 1
    else:
        shape, infer = [], 0
        for k, s in enumerate(n.attrs["newshape"]):
            if isinstance(s, str) and k < x.type.ndim and x.type.shape[k] == s:
                shape.append(0)             # the input's symbolic extent at the same position
            elif isinstance(s, str):
                shape.append(-1)
                infer += 1
            else:
                shape.append(int(s))
                infer += int(s) == -1
        if infer > 1:
            w.refuse(f"newshape {tuple(n.attrs['newshape'])} leaves more than one symbolic dimension to infer")
    w.emit("Reshape", [ins[0], w.ints(shape, f"{n.name}_shape")], outs, **attrs)


@_writes("transpose")
def _transpose(w, n, ins, outs):
    axes = n.attrs.get("axes")
    nd = n.inputs[0].type.ndim
    perm = list(reversed(range(nd))) if axes is None else [int(a) % nd if nd else int(a) for a in axes]
    w.emit("Transpose", ins, outs, perm=perm)


@_writes("expand_dims")
def _expand_dims(w, n, ins, outs):
    nd = n.inputs[0].type.ndim
    axis, k = int(n.attrs["axis"]), int(n.attrs.get("num_newaxis", 1))
    if k == 0:
        return w.emit("Identity", ins, outs)
    axis = axis + nd + 1 if axis < 0 else axis
    w.emit("Unsqueeze", [ins[0], w.ints(range(axis, axis + k), f"{n.name}_axes")], outs)


@_writes("squeeze")
def _squeeze(w, n, ins, outs):
    x = n.inputs[0]
    axes = n.attrs.get("axes")
    if axes is None:
        if any(isinstance(d, str) for d in x.type.shape):
            w.refuse(f"squeezing every unit axis of {x.type}, which has symbolic dimensions")
        axes = [k for k, d in enumerate(x.type.shape) if d == 1]
    if not len(axes):
        return w.emit("Identity", ins, outs)
    w.emit("Squeeze", [ins[0], w.ints(axes, f"{n.name}_axes")], outs)


@_writes("concatenate")
def _concatenate(w, n, ins, outs):
    w.emit("Concat", ins, outs, axis=int(n.attrs.get("axis", 0)))


@_writes("split")
def _split(w, n, ins, outs):
    axis = int(n.attrs.get("axis", 0))
    sizes = []
    for o in n.outputs:
        d = o.type.shape[axis]
        if isinstance(d, str):
            w.refuse(f"an output {o.type} with a symbolic extent on the split axis")
        sizes.append(int(d))
    w.emit("Split", [ins[0], w.ints(sizes, f"{n.name}_split")], outs, axis=axis)


@_writes("strided_slice")
def _strided_slice(w, n, ins, outs):
    begin, end = n.attrs["begin"], n.attrs["end"]
    if any(isinstance(v, str) for v in tuple(begin) + tuple(end)):
        w.refuse("symbolic slice bounds")
    args = [ins[0], w.ints(begin, f"{n.name}_starts"), w.ints(end, f"{n.name}_ends")]
    axes, strides = n.attrs.get("axes"), n.attrs.get("strides")
    if axes is not None or strides is not None:
        args.append(w.ints(axes if axes is not None else range(len(begin)), f"{n.name}_axes"))
    if strides is not None:
        args.append(w.ints(strides, f"{n.name}_steps"))
    w.emit("Slice", args, outs)


@_writes("take")
def _take(w, n, ins, outs):
    if n.attrs.get("mode", "wrap") not in ("wrap", "fast"):
        w.refuse(f"mode {n.attrs.get('mode')!r}")
    w.emit("Gather", ins, outs, axis=int(n.attrs.get("axis", 0)))


@_writes("tile")
def _tile(w, n, ins, outs):
    w.emit("Tile", [ins[0], w.ints(n.attrs["reps"], f"{n.name}_repeats")], outs)


@_writes("shape_of", "ndarray_size")
def _shape_of(w, n, ins, outs):
    dt = str(n.outputs[0].dtype)
    y = outs[0] if dt == "int64" else w.tmp(f"{n.name}_int64")
    if n.op == "ndarray_size":
        w.emit("Size", ins, [y])
    else:
        start, end = int(n.attrs.get("start", 0) or 0), n.attrs.get("end")
        if (start or end is not None) and w.opset < 15:
            w.refuse("a part of the shape (start / end) needs opset 15")
        w.emit("Shape", ins, [y], start=start or None, end=None if end is None else int(end))
    if dt != "int64":
        w.emit("Cast", [y], outs, to=onnx_dtype_of(dt))


@_writes("broadcast_to")
def _broadcast_to(w, n, ins, outs):
    shape = w.static_shape(n.outputs[0], "the output")
    w.emit("Expand", [ins[0], w.ints(shape, f"{n.name}_shape")], outs)


_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin", "prod": "ReduceProd"}


@_writes(*_REDUCE)
def _reduce(w, n, ins, outs):
    op = _REDUCE[n.op]
    axis = n.attrs.get("axis")
    keep = int(bool(n.attrs.get("keepdims", False)))
    axes = None if axis is None else ([int(axis)] if isinstance(axis, int) else [int(a) for a in axis])
    if axes is not None and not axes:       # reduce over no axes: the identity
        return w.emit("Identity", ins, outs)
    if axes is None:
        return w.emit(op, ins, outs, keepdims=keep)
    if op == "ReduceSum" or w.opset >= 18:
        return w.emit(op, [ins[0], w.ints(axes, f"{n.name}_axes")], outs, keepdims=keep)
    w.emit(op, ins, outs, axes=axes, keepdims=keep)


@_writes("qnn.quantize")
def _quantize(w, n, ins, outs):
    s, z = n.inputs[1], (n.inputs[2] if len(n.inputs) > 2 else None)
    out = str(n.outputs[0].dtype)
    if n.attrs.get("precision"):
        w.refuse(f"precision {n.attrs['precision']!r}")
    args = list(ins)
    if z is None and out != "uint8":
        args.append(w.const(np.zeros(s.type.shape, numpy_dtype(out)), f"{n.name}_zero_point"))
    elif z is not None and str(z.dtype) != out:
        w.refuse(f"zero point {z.type} for output {n.outputs[0].type}")
    attrs = _axis_attrs(w, n, s)
    if out.startswith("float8") and not n.attrs.get("saturate", True):
        if w.opset < 19:
            w.refuse("saturate=False needs opset 19")
        attrs["saturate"] = 0
    w.emit("QuantizeLinear", args, outs, **attrs)


@_writes("qnn.dequantize")
def _dequantize(w, n, ins, outs):
    s = n.inputs[1]
    if str(n.outputs[0].dtype) != str(s.dtype):
        w.refuse(f"an output of {n.outputs[0].dtype} from a scale of {s.dtype} (DequantizeLinear returns the "
                 f"scale's type)")
    w.emit("DequantizeLinear", ins, outs, **_axis_attrs(w, n, s))


def _axis_attrs(w, n, s: Value) -> dict:
    attrs = {}
    if s.type.ndim >= 1:
        attrs["axis"] = int(n.attrs.get("axis", 1))
    bs = int(n.attrs.get("block_size", 0) or 0)
    if bs:
        if w.opset < 21:
            w.refuse(f"blocked quantization (block_size {bs}) needs opset 21")
        attrs["block_size"] = bs
    return attrs


def writable_ops() -> list:
    """The tessera ops the export writes."""
    return sorted(_WRITERS)


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------
def to_onnx(graph: Graph, params=None, opset: int = DEFAULT_OPSET, doc_string: str = ""):
    """The onnx.ModelProto of `graph` (module docstring); `params`: {input name: array} bound first."""
    try:
        import onnx
    except ImportError:
        raise TesseraError("exporting to ONNX needs the onnx package: pip install onnx") from None
    if not isinstance(graph, Graph):
        raise TesseraError(f"to_onnx takes a tessera.graph.Graph, got {type(graph).__name__}")
    newest = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= newest:
        raise TesseraError(f"opset {opset!r}: the ONNX export writes opsets {MIN_OPSET} to {newest} "
                           f"(the installed onnx's newest)")
    g = bind_params(graph, params)
    w = _Writer(g, opset)
    # public names first: inputs, then outputs (an output that is an input, a constant or an output
    # already becomes an Identity of it)
    for v, name in zip(g.inputs, g.input_names):
        if name in w.taken:
            raise TesseraError(f"graph {g.name!r} has two inputs named {name!r}")
        w.taken.add(name)
        w.names[v] = name
    identities, out_names = [], []
    for v, name in zip(g.outputs, g.output_names):
        if name in w.taken:
            name = w.fresh(name)
        else:
            w.taken.add(name)
        if v in w.names or v in w.consts or v.producer is None:
            identities.append((v, name))
        else:
            w.names[v] = name
        out_names.append(name)
    for n in g.nodes:
        if id(n) in w.skipped:
            continue
        w.current = n
        if n.op == FUSED_OP:
            w.refuse("a fused group (tessera.compile fuses the graph): export the graph before compiling it")
        fn = _WRITERS.get(n.op)
        if fn is None:
            w.refuse("no ONNX form is written for it (tessera.frontend.onnx_export.writable_ops() lists the "
                     "ops it writes)")
        ins = [w.name(v) for v in n.inputs]
        outs = [w.name(v) for v in n.outputs]
        fn(w, n, ins, outs)
    w.current = None
    for v, name in identities:
        w.emit("Identity", [w.name(v)], [name])
    inputs = [w.value_info(v, w.names[v]) for v in g.inputs]
    outputs = [w.value_info(v, name) for v, name in zip(g.outputs, out_names)]
    og = onnx.helper.make_graph(w.nodes, g.name or "main", inputs, outputs, initializer=w.inits)
    ops = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(og, opset_imports=ops, producer_name="tessera",
                                   ir_version=onnx.helper.find_min_ir_version_for(ops), doc_string=doc_string)
    return model


def export_onnx(graph: Graph, path, params=None, opset: int = DEFAULT_OPSET, doc_string: str = "") -> str:
    """Write to_onnx(graph, ...) to `path` (initializers to `path`.data beside it when they pass 1 GB);
    returns the path."""
    import onnx

    model = to_onnx(graph, params, opset, doc_string)
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    size = sum(len(t.raw_data) for t in model.graph.initializer)
    # written in a temporary folder beside it, then moved into place: a write that fails (a full disk)
    # leaves an earlier file at `path` as it was, not half overwritten
    with tempfile.TemporaryDirectory(dir=folder, prefix=".tessera-export-") as tmp:
        staged = os.path.join(tmp, os.path.basename(path))
        if size > _EXTERNAL_DATA_BYTES:
            onnx.save_model(model, staged, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=os.path.basename(path) + ".data")
            os.replace(staged + ".data", path + ".data")
        else:
            onnx.save_model(model, staged)
        os.replace(staged, path)
    return path


__all__ = ["to_onnx", "export_onnx", "writable_ops", "DEFAULT_OPSET", "MIN_OPSET"]
