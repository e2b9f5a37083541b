"""tessera.quantize: post-training int8 quantization of an fp32 graph for the CPU's integer kernels.

    qgraph = tessera.quantize(graph, params, calibration=[{"input": x0}, ...], method="entropy",
                              per_channel=True, skip=["fc"])
    exe = tessera.compile(qgraph)

The graph is bound to `params` and optimized at opt_level 1 (batch norm folded into the convolution
weights and a bias add). Then, as onnxruntime.quantization.quantize_static writes a QDQ model, the
float graph gets a QuantizeLinear -> DequantizeLinear pair (qnn.quantize / qnn.dequantize) on every
activation an integer op reads or writes, and its weights are replaced by the DequantizeLinear of their
int8 quantization; graph/passes/fake_quantization_to_integer then makes each `Q(op(DQ(x), DQ(w)))`
group one integer op (qnn.conv2d, qnn.dense, qnn.add, qnn.global_avg_pool, max pooling on uint8), and
alter_layout on x86 the blocked int8 convolutions. The ops quantized:

- nn.conv2d (constant weight; depthwise included) and nn.matmul (constant 2-D weight): the input and
  the output after the bias add and relu / clip that follow (the group's end) quantized;
- add of two activations (a residual), with the relu / clip after it; concatenate; global average
  pooling: inputs and output quantized;
- max pooling: its input quantized, its output in the same quantization (the integers move as they are).

Activations: uint8, asymmetric, per tensor, the range from the calibration method (graph/calibration.py:
"minmax", "percentile", "entropy") over the `calibration` feeds. Weights: int8, symmetric ([-127, 127],
zero point 0), per output channel (per_channel=True) or per tensor. `skip`: names of nodes or ops left
in float (their inputs are still quantized where another quantized op reads them). form="qdq" returns
the QDQ float graph before the integer pass (what an ONNX QDQ export writes), form="integer" (the
default) the graph of integer ops.
"""
from __future__ import annotations

import numpy as np

from ..errors import TesseraError
from .builder import Builder
from .calibration import METHODS, CalibrationError, RangeCollector, collect, quant_params
from .const_eval import bind_params
from .ir import Graph, Node, Value
from .passes import fake_quantization_to_integer, optimize

ANCHORS = ("nn.conv2d", "nn.matmul", "add", "concatenate", "nn.global_avg_pool", "nn.max_pool2d")
_TAIL = ("nn.relu", "clip")


class QuantizeError(TesseraError):
    """A graph, calibration or setting tessera.quantize cannot use."""


class _Plan:
    """Which values get a Q -> DQ pair and which weights are quantized (module docstring)."""

    def __init__(self, g: Graph, skip):
        self.g = g
        self.consts = dict(g.constants)
        self.cons = g.consumers()
        self.outputs = set(g.outputs)
        self.skip = set(skip)
        self.calibrated: list = []       # activation Values whose range is calibrated, in order
        self.same_as: dict = {}          # Value -> Value whose quantization it shares (max pool)
        self.weights: dict = {}          # (id(node), input index) -> quantization axis
        self.biases: dict = {}           # (id(node), input index) -> the constant of its group's bias add
        for n in g.nodes:
            if n.op in ANCHORS and n.name not in self.skip and n.op not in self.skip:
                self.anchor(n)

    def single(self, v: Value, ops):
        c = self.cons.get(v, [])
        if len(c) != 1 or v in self.outputs or c[0][0].op not in ops:
            return None
        return c[0][0]

    def activation(self, v: Value) -> bool:
        return v not in self.consts and v.dtype.is_float() and str(v.dtype) == "float32"

    def quantized(self, v: Value) -> bool:
        return v in self.same_as or v in self.calibrated

    def want(self, v: Value) -> None:
        if not self.quantized(v):
            self.calibrated.append(v)

    def bias(self, v: Value, channels: int):
        """(the add, its constant) of the bias add of `channels` values that alone reads v, or (None, None)."""
        add = self.single(v, ("add",))
        if add is not None:
            other = add.inputs[1] if add.inputs[0] is v else add.inputs[0]
            if other in self.consts and np.asarray(self.consts[other]).size == channels:
                return add, other
        return None, None

    def end(self, v: Value, bias_channels=None) -> Value:
        """The group's last value: v, then a constant bias add (`bias_channels` values), then relu / clip."""
        if bias_channels is not None:
            add, _ = self.bias(v, bias_channels)
            if add is not None:
                v = add.outputs[0]
        n = self.single(v, _TAIL)
        while n is not None:
            v = n.outputs[0]
            n = self.single(v, _TAIL)
        return v

    def anchor(self, n: Node) -> None:
        ins = n.inputs
        if n.op in ("nn.conv2d", "nn.matmul"):
            if len(ins) != 2 or not self.activation(ins[0]) or ins[1] not in self.consts:
                return
            w = np.asarray(self.consts[ins[1]])
            if w.dtype != np.float32:
                return
            if n.op == "nn.conv2d":
                if w.ndim != 4 or n.attrs.get("out_dtype") not in (None, "", "float32"):
                    return
                axis = 0
            else:
                if w.ndim != 2 or any(n.attrs.get(k) for k in ("transpose_a", "transpose_b", "b_panel")):
                    return
                axis = 1
            self.want(ins[0])
            self.weights[(id(n), 1)] = axis
            _, b = self.bias(n.outputs[0], w.shape[axis])
            if b is not None:
                self.biases[(id(n), 1)] = b
            self.want(self.end(n.outputs[0], w.shape[axis]))
        elif n.op in ("add", "concatenate"):
            if len(ins) < 2 or not all(self.activation(v) for v in ins):
                return
            if n.op == "add" and tuple(ins[0].type.shape) != tuple(ins[1].type.shape):
                return
            for v in ins:
                self.want(v)
            self.want(self.end(n.outputs[0]) if n.op == "add" else n.outputs[0])
        elif self.activation(ins[0]) and len(n.outputs) == 1:
            self.want(ins[0])
            if n.op == "nn.max_pool2d":
                out = n.outputs[0]
                if not self.quantized(out):
                    self.same_as[out] = ins[0]
            else:
                self.want(n.outputs[0])


def _weight(w: np.ndarray, axis: int, per_channel: bool, bias=None, x_scale=None):
    """(int8 weights, float32 scales) symmetric in [-127, 127], per index of `axis` or per tensor.

    With the group's `bias` (float, one value per index of `axis`) and the input's scale `x_scale`,
    a scale is raised where the integer op's int32 bias (bias / (x_scale * scale), ORT's bias scale)
    would not fit in an int32, as onnxruntime.quantization does (_adjust_weight_scale_for_int32_bias):
    a channel of (nearly) zero weights, after batch norm folded a tiny gamma into them, keeps its bias
    instead of clipping it (a scale of 1e-41 made a bias of 1e42 steps). Every scale is also kept at
    least 2 * float32's smallest normal / x_scale, so x_scale * scale stays a normal float32."""
    w = np.asarray(w, np.float32)
    if per_channel:
        red = tuple(d for d in range(w.ndim) if d != axis)
        m = np.abs(w).max(axis=red) if w.size else np.zeros(w.shape[axis], np.float32)
    else:
        m = np.array(np.abs(w).max() if w.size else 0.0)
    s = np.where(m > 0, m / 127.0, 1.0).astype(np.float64)
    if x_scale is not None and float(x_scale) > 0:
        x_scale = float(np.float32(x_scale))
        floor = 2.0 * float(np.finfo(np.float32).tiny) / x_scale
        if bias is not None and w.size:
            # the bias in steps and the channel's largest accumulation, |b| / (x_s s) + 2 * 255 * sum |w_q|,
            # within int32: the bound fake_quantization_to_integer._int32_bias holds the group to (w_q
            # rounds up by at most a half a weight)
            red = tuple(d for d in range(w.ndim) if d != axis)
            n = w.size // w.shape[axis]
            b = np.abs(np.asarray(bias, np.float64).reshape(-1))
            need = (b / x_scale + 510.0 * np.abs(w.astype(np.float64)).sum(axis=red)) / (2.0 ** 31 - 1 - 255.0 * n - 1)
            floor = np.maximum(floor, 1.0001 * (need if per_channel else need.max()))
        s = np.maximum(s, floor)
    s = s.astype(np.float32)
    shape = [1] * w.ndim
    if per_channel:
        shape[axis] = -1
    q = np.clip(np.rint(w / s.reshape(shape)), -127, 127).astype(np.int8)
    return q, s


def _qdq_graph(g: Graph, plan: _Plan, params: dict, per_channel: bool) -> Graph:
    b = Builder(g.name)
    vmap: dict = {}
    consts = plan.consts

    def qdq(old: Value, new: Value) -> Value:
        src = old
        while src in plan.same_as:
            src = plan.same_as[src]
        if src not in params:
            return new
        s, z = params[src]
        sv, zv = b.const(np.float32(s), f"{old.name}_scale"), b.const(np.uint8(z), f"{old.name}_zero_point")
        q = b.op("qnn.quantize", new, sv, zv, out_dtype="uint8", name=f"{old.name}_q")
        return b.op("qnn.dequantize", q, sv, zv, name=f"{old.name}_dq")

    def get(v: Value) -> Value:
        if v not in vmap:
            vmap[v] = b.const(np.asarray(consts[v]), v.name)
        return vmap[v]

    for v, name in zip(g.inputs, g.input_names):
        vmap[v] = qdq(v, b.input(name, v.shape, str(v.dtype)))
    for n in g.nodes:
        ins = []
        for i, v in enumerate(n.inputs):
            axis = plan.weights.get((id(n), i))
            if axis is None:
                ins.append(get(v))
                continue
            x = n.inputs[0]
            while x in plan.same_as:
                x = plan.same_as[x]
            bias = plan.biases.get((id(n), i))
            wq, ws = _weight(consts[v], axis, per_channel, None if bias is None else consts[bias],
                             params[x][0] if x in params else None)
            zero = np.zeros(ws.shape, np.int8)
            ins.append(b.op("qnn.dequantize", b.const(wq, f"{v.name}_int8"), b.const(ws, f"{v.name}_scale"),
                            b.const(zero, f"{v.name}_zero_point"), axis=axis, name=f"{v.name}_dq"))
        new = b.node(n.op, ins, dict(n.attrs), name=n.name).outputs
        for old, nv in zip(n.outputs, new):
            vmap[old] = qdq(old, nv) if plan.quantized(old) else nv
    b.output(*[get(v) for v in g.outputs])
    out = b.finish()
    return Graph(out.inputs, out.outputs, out.nodes, out.constants, g.name, g.input_names, g.output_names)


def quantize(graph: Graph, params=None, calibration=(), method: str = "minmax", per_channel: bool = True,
             skip=(), target="c", percentile: float = 99.99, form: str = "integer") -> Graph:
    """The int8 graph of fp32 `graph` (module docstring). calibration: {input name: array} feeds (one
    or a list); method: "minmax", "percentile" (at `percentile` per cent) or "entropy"."""
    if not isinstance(graph, Graph):
        raise QuantizeError(f"quantize takes a tessera.graph.Graph, got {type(graph).__name__}")
    if method not in METHODS:
        raise QuantizeError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
    if form not in ("integer", "qdq"):
        raise QuantizeError(f"form must be 'integer' or 'qdq', got {form!r}")
    if isinstance(skip, str):
        skip = [skip]
    g = optimize(bind_params(graph, params), 1, target, ("fake_quantization_to_integer",))
    if any(n.op.startswith("qnn.") for n in g.nodes):
        raise QuantizeError(f"graph {g.name!r} is quantized already (it has qnn ops); tessera.quantize takes an "
                            f"fp32 graph")
    plan = _Plan(g, skip)
    names = {n.name for n in g.nodes} | {n.op for n in g.nodes}
    unknown = sorted(set(skip) - names)
    if unknown:
        raise QuantizeError(f"skip names {unknown}, which are neither nodes nor ops of the optimized graph "
                            f"(its quantizable nodes: {[n.name for n in g.nodes if n.op in ANCHORS][:20]})")
    ranges = {v: RangeCollector(method, percentile) for v in plan.calibrated}
    try:
        passes = [lambda v, a: ranges[v].observe(a)]
        if method != "minmax":
            passes.append(lambda v, a: ranges[v].observe_histogram(a))
        collect(g, plan.calibrated, calibration, passes, target)
        qparams = {v: quant_params(*ranges[v].range()) for v in plan.calibrated}
    except CalibrationError as e:
        raise QuantizeError(str(e)) from None
    out = _qdq_graph(g, plan, qparams, per_channel)
    return out if form == "qdq" else fake_quantization_to_integer(out, target)


__all__ = ["quantize", "QuantizeError", "ANCHORS"]
