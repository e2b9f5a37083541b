"""quantize: an fp32 CNN graph -> an int8 graph, VTA's way (power-of-two scales, requantize by shift).

    qgraph = quantize(graph, params, calibration=[{"input": x0}, {"input": x1}, ...])
    exe = tessera.compile(qgraph)           # the int8 model on the CPU
    plan = partition_for_vdla(qgraph)        # or its convolutions on VDLA (tessera/executor/hetero.py)

Every scale is a power of two, so every rescaling is a shift:
- activations per tensor: the exponent a with real ~ int8 * 2**-a is the largest keeping the largest
  |value| seen on the calibration inputs within 127;
- conv2d weights per output channel, symmetric: exponent b_c from the channel's largest |weight|,
  weights rounded to [-127, 127];
- a conv2d (+ the bias batch norm folding leaves, + relu) becomes int8 conv2d accumulating in int32,
  + the bias in the accumulator's scale (2**-(a + b_c), int32), >> (a + b_c - a_out) per channel,
  clip to [0 or -128, 127], int8 — the ops VDLA's GEMM core and ALU run;
- a residual add of two int8 tensors aligns them to the finer scale by a left shift in int32, adds,
  shifts to the output's scale, clips (relu folded in);
- a dense layer (x @ W, + bias) runs int8 x int8 -> int32 and is dequantized per output channel
  for its (fp32) consumers;
- max pooling and relu stay on int8; anything else (global average pooling, a softmax) runs in fp32
  on dequantized inputs (int8 * 2**-a), as does a graph output.
The graph is first bound to `params` and optimized at opt_level 1 (batch norm folded into the conv
weights and a bias add). Calibration runs that float graph with its intermediates as outputs.

`from_qlinear(graph, params)` brings an ONNX QLinearConv model with power-of-two multipliers into the
same form (see its docstring).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import TesseraError
from ..builder import Builder
from ...runtime.graph_executor import GraphExecutor
from ..lowering import compile_graph
from ..const_eval import bind_params
from ..ir import Graph, Value
from . import optimize


# the VTA form is built from the float (or QLinear) graph: the integer ops of QDQ groups are not its ops
_VTA_FORM = ("fake_quantization_to_integer",)


class QuantizeError(TesseraError):
    """A graph or calibration the quantizer cannot use (names the value or input)."""


def single_consumer(consumers: dict, v: Value, op: str, outputs):
    """The one consumer of v (in `consumers`, Graph.consumers()) when it is an `op` node and v is
    not among the graph's `outputs`, else None."""
    c = [n for n, _ in consumers.get(v, [])]
    return c[0] if len(c) == 1 and c[0].op == op and v not in outputs else None


def _rounding_bias(bias, shift) -> np.ndarray:
    """An int32 bias (in the accumulator's scale) plus half of each channel's `shift` step, so that
    the `>> shift` after it rounds to nearest; clipped to int32."""
    shift = np.asarray(shift, np.int64)
    half = np.where(shift > 0, 1 << np.maximum(shift - 1, 0), 0)
    return np.clip(np.asarray(bias, np.int64) + half, -2**31, 2**31 - 1).astype(np.int32)


def _exponent(maxabs: float, limit: int = 127) -> int:
    """The largest a with maxabs * 2**a <= limit (0 for an all-zero tensor), within [-30, 30]."""
    if not maxabs > 0 or not math.isfinite(maxabs):
        return 0
    return int(max(-30, min(30, math.floor(math.log2(limit / maxabs)))))


def calibrate(graph: Graph, calibration, target="c") -> dict:
    """{Value: largest |value| over the calibration inputs} for every float value of graph."""
    if isinstance(calibration, dict):
        calibration = [calibration]
    calibration = list(calibration)
    if not calibration:
        raise QuantizeError("quantize needs at least one calibration input ({input name: array})")
    wanted = [o for n in graph.nodes for o in n.outputs if o.dtype.is_float() and o not in graph.outputs]
    outs = list(graph.outputs) + wanted
    names = list(graph.output_names) + [f"calib_{i}" for i in range(len(wanted))]
    g = Graph(graph.inputs, outs, graph.nodes, graph.constants, graph.name, graph.input_names, names)
    compiled = compile_graph(optimize(g, 2, target), target)
    exe = GraphExecutor(compiled.plan, compiled.kernels)
    stats = {}
    for feed in calibration:
        missing = [n for n in graph.input_names if n not in feed]
        if missing:
            raise QuantizeError(f"calibration input lacks {missing} (the graph's inputs: {list(graph.input_names)})")
        res = exe.run({n: feed[n] for n in graph.input_names})
        for v, arr in zip(outs, res):
            m = float(np.max(np.abs(arr))) if np.size(arr) else 0.0
            stats[v] = max(stats.get(v, 0.0), m)
        for v, n in zip(graph.inputs, graph.input_names):
            if v.dtype.is_float():
                stats[v] = max(stats.get(v, 0.0), float(np.max(np.abs(feed[n]))))
    return stats


class _Quantizer:
    def __init__(self, g: Graph, stats: dict):
        self.g, self.stats = g, stats
        self.b = Builder(g.name)
        self.consumers = g.consumers()
        self.outputs = set(g.outputs)
        self.fv: dict = {}      # old Value -> new float Value
        self.qv: dict = {}      # old Value -> (new int8 Value, exponent)
        for v, n in zip(g.inputs, g.input_names):
            self.fv[v] = self.b.input(n, v.shape, str(v.dtype))
        self.const = dict(g.constants)

    # ---- value forms -----------------------------------------------------------------------------
    def floatv(self, v: Value) -> Value:
        if v in self.fv:
            return self.fv[v]
        if v in self.const:
            self.fv[v] = self.b.const(np.asarray(self.const[v]), v.name)
            return self.fv[v]
        q, a = self.qv[v]
        f = self.b.op("cast", q, dtype="float32", name=f"{v.name}_dq")
        f = self.b.op("multiply", f, self.b.const(np.float32(2.0 ** -a), f"{v.name}_scale"), name=f"{v.name}_deq")
        self.fv[v] = f
        return f

    def quant(self, v: Value):
        if v in self.qv:
            return self.qv[v]
        if v in self.const:
            raise QuantizeError(f"%{v.name} is a constant where an activation was expected")
        a = _exponent(self.stats.get(v, 0.0))
        f = self.floatv(v)
        x = self.b.op("multiply", f, self.b.const(np.float32(2.0 ** a), f"{v.name}_qscale"), name=f"{v.name}_qs")
        x = self.b.op("round", x, name=f"{v.name}_qr")
        x = self.b.op("clip", x, a_min=-128.0, a_max=127.0, name=f"{v.name}_qc")
        x = self.b.op("cast", x, dtype="int8", name=f"{v.name}_q")
        self.qv[v] = (x, a)
        return self.qv[v]

    def _single(self, v: Value, op: str):
        return single_consumer(self.consumers, v, op, self.outputs)

    def _bias(self, out: Value, channels: int, used: set):
        """`out` + a constant of `channels` values as its only use: (the add's output, the bias as
        float64), the add joining `used`; else (out, None)."""
        add = self._single(out, "add")
        if add is not None:
            other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
            if other in self.const and np.asarray(self.const[other]).size == channels:
                used.add(id(add))
                return add.outputs[0], np.asarray(self.const[other], np.float64).reshape(-1)
        return out, None

    def _requant(self, x32, shift, lo, name):
        """int32 x32 >> shift (array per channel or int), clip to [lo, 127], int8."""
        b = self.b
        if isinstance(shift, np.ndarray) or shift:
            x32 = b.op("right_shift", x32, b.const(np.asarray(shift, np.int32), f"{name}_shift"), name=f"{name}_shr")
        x = b.op("clip", x32, a_min=lo, a_max=127, name=f"{name}_clip")
        return b.op("cast", x, dtype="int8", name=f"{name}_i8")

    # ---- units ------------------------------------------------------------------------------------
    def run(self) -> Graph:
        done = set()
        for n in self.g.nodes:
            if id(n) in done:
                continue
            if n.op == "nn.conv2d" and n.inputs[1] in self.const and n.inputs[0].dtype.is_float():
                done |= self.conv(n)
            elif self._is_dense(n):
                done |= self.dense(n)
            elif n.op == "add" and all(i in self.qv for i in n.inputs):
                done |= self.residual(n)
            elif n.op in ("nn.relu", "nn.max_pool2d") and n.inputs[0] in self.qv:
                q, a = self.qv[n.inputs[0]]
                if n.op == "nn.relu":
                    out = self.b.op("clip", q, a_min=0, a_max=127, name=n.name)
                else:
                    out = self.b.node(n.op, [q], dict(n.attrs), name=n.name).outputs[0]
                self.qv[n.outputs[0]] = (out, a)
            else:
                ins = [self.floatv(v) for v in n.inputs]
                outs = self.b.node(n.op, ins, dict(n.attrs), name=n.name).outputs
                for o, new in zip(n.outputs, outs):
                    self.fv[o] = new
        self.b.output(*[self.floatv(v) for v in self.g.outputs])
        g = self.b.finish()
        return Graph(g.inputs, g.outputs, g.nodes, g.constants, self.g.name, self.g.input_names,
                     self.g.output_names)

    def conv(self, n) -> set:
        used = {id(n)}
        w = np.asarray(self.const[n.inputs[1]], np.float64)
        out, bias = self._bias(n.outputs[0], w.shape[0], used)
        relu = self._single(out, "nn.relu")
        if relu is not None:
            out = relu.outputs[0]
            used.add(id(relu))
        xq, ax = self.quant(n.inputs[0])
        o = w.shape[0]
        wmax = np.abs(w.reshape(o, -1)).max(1)
        bexp = np.array([_exponent(m) for m in wmax])
        wq = np.clip(np.rint(w * (2.0 ** bexp)[:, None, None, None]), -127, 127).astype(np.int8)
        ay = min(_exponent(self.stats.get(out, 0.0)), ax + int(bexp.min()))
        shift = np.clip(ax + bexp - ay, 0, 31).astype(np.int32)
        b = self.b
        attrs = dict(n.attrs)
        attrs["out_dtype"] = "int32"
        acc = b.node("nn.conv2d", [xq, b.const(wq, f"{n.name}_wq")], attrs, name=f"{n.name}_q").outputs[0]
        # the bias in the accumulator's scale, plus half of the shift's step: >> then rounds to nearest
        bq = _rounding_bias(np.rint((bias if bias is not None else 0.0) * 2.0 ** (ax + bexp)), shift)
        if bias is not None or shift.any():
            acc = b.op("add", acc, b.const(bq.reshape(1, o, 1, 1), f"{n.name}_bq"), name=f"{n.name}_bias")
        y = self._requant(acc, shift.reshape(1, o, 1, 1), 0 if relu is not None else -128, n.name)
        self.qv[out] = (y, ay)
        return used

    def _is_dense(self, n) -> bool:
        """x @ W with a constant 2-D W (nn.matmul untransposed, or nn.dense) on a float x."""
        if n.op not in ("nn.matmul", "nn.dense") or n.inputs[1] not in self.const or not n.inputs[0].dtype.is_float():
            return False
        if n.op == "nn.matmul" and (n.attrs.get("transpose_a") or n.attrs.get("transpose_b")
                                    or n.attrs.get("b_panel")):
            return False
        return np.asarray(self.const[n.inputs[1]]).ndim == 2 and n.inputs[0].type.ndim == 2

    def dense(self, n) -> set:
        """A dense layer: int8 x int8 -> int32 (+ bias in the accumulator's scale), dequantized per
        output channel: its consumers (a classifier head) read fp32."""
        used = {id(n)}
        w = np.asarray(self.const[n.inputs[1]], np.float64)
        w = w.T if n.op == "nn.matmul" else w               # (out, in)
        out, bias = self._bias(n.outputs[0], w.shape[0], used)
        xq, ax = self.quant(n.inputs[0])
        bexp = np.array([_exponent(m) for m in np.abs(w).max(1)])
        wq = np.clip(np.rint(w * (2.0 ** bexp)[:, None]), -127, 127).astype(np.int8)
        b = self.b
        acc = b.op("nn.dense", xq, b.const(wq, f"{n.name}_wq"), out_dtype="int32", name=f"{n.name}_q")
        if bias is not None:
            bq = np.clip(np.rint(bias * 2.0 ** (ax + bexp)), -2**31, 2**31 - 1).astype(np.int32)
            acc = b.op("add", acc, b.const(bq, f"{n.name}_bq"), name=f"{n.name}_bias")
        f = b.op("cast", acc, dtype="float32", name=f"{n.name}_dq")
        scale = (2.0 ** -(ax + bexp)).astype(np.float32)
        self.fv[out] = b.op("multiply", f, b.const(scale, f"{n.name}_scale"), name=f"{n.name}_deq")
        return used

    def residual(self, n) -> set:
        used = {id(n)}
        out = n.outputs[0]
        relu = self._single(out, "nn.relu")
        if relu is not None:
            out = relu.outputs[0]
            used.add(id(relu))
        (p, ap), (q, aq) = self.qv[n.inputs[0]], self.qv[n.inputs[1]]
        m = max(ap, aq)
        b = self.b
        terms = []
        for x, a, tag in ((p, ap, "a"), (q, aq, "b")):
            x32 = b.op("cast", x, dtype="int32", name=f"{n.name}_{tag}32")
            if m > a:
                x32 = b.op("left_shift", x32, b.const(np.int32(m - a), f"{n.name}_{tag}shl"), name=f"{n.name}_{tag}shl")
            terms.append(x32)
        s = b.op("add", terms[0], terms[1], name=f"{n.name}_q")
        ao = min(_exponent(self.stats.get(out, 0.0)), m)
        sh = int(min(m - ao, 31))
        if sh:   # round to nearest: add half of the shift's step first
            s = b.op("add", s, b.const(np.int32(1 << (sh - 1)), f"{n.name}_half"), name=f"{n.name}_round")
        y = self._requant(s, sh, 0 if relu is not None else -128, n.name)
        self.qv[out] = (y, ao)
        return used


def quantize(graph: Graph, params=None, calibration=(), target="c") -> Graph:
    """The int8 graph of an fp32 CNN graph (see the module docstring); `calibration` is one or a
    list of {input name: array} feeds."""
    if not isinstance(graph, Graph):
        raise QuantizeError(f"quantize takes a tessera.graph.Graph, got {type(graph).__name__}")
    g = optimize(bind_params(graph, params), 1, target, _VTA_FORM)
    stats = calibrate(g, calibration, target)
    return _Quantizer(g, stats).run()


def _pow2_exponents(m: np.ndarray):
    """k with m == 2**-k elementwise (0 <= k <= 31), or None when some m is no such power of two."""
    m = np.asarray(m, np.float64)
    if m.size == 0 or not (m > 0).all():
        return None
    k = -np.log2(m)
    ki = np.rint(k)
    if not np.array_equal(k, ki) or ki.min() < 0 or ki.max() > 31:
        return None
    return ki.astype(np.int32)


def from_qlinear(graph: Graph, params=None, target="c") -> Graph:
    """An ONNX QLinearConv model (int8, zero points 0, power-of-two requantization multipliers
    x_scale * w_scale / y_scale) in the form `quantize` gives: ConvInteger becomes an int32 nn.conv2d
    and `qnn.requantize` (+ the bias add before it) becomes add(bias + half step) -> right_shift ->
    clip -> int8, which partition_for_vdla puts on VDLA. The shift rounds ties up where ONNX's
    requantize rounds them to even (VTA's semantics). A QLinearConv whose multiplier is not a power of
    two, or with nonzero zero points, stays as it is (on the CPU)."""
    if not isinstance(graph, Graph):
        raise QuantizeError(f"from_qlinear takes a tessera.graph.Graph, got {type(graph).__name__}")
    g = optimize(bind_params(graph, params), 1, target, _VTA_FORM)
    const = dict(g.constants)
    cons = g.consumers()
    b = Builder(g.name)
    vmap = {v: b.input(n, v.shape, str(v.dtype)) for v, n in zip(g.inputs, g.input_names)}

    def val(v):
        if v not in vmap:
            vmap[v] = b.const(np.asarray(const[v]), v.name)
        return vmap[v]

    def zero(v):
        return v in const and not np.asarray(const[v]).any()

    def single(v, op):
        return single_consumer(cons, v, op, g.outputs)

    convs = {}      # conv_integer node -> (requantize node, bias add node or None, shift k)
    for n in g.nodes:
        if n.op != "nn.conv_integer" or str(n.inputs[0].dtype) != "int8" or n.inputs[1] not in const \
                or str(n.inputs[1].dtype) != "int8" or not (zero(n.inputs[2]) and zero(n.inputs[3])):
            continue
        out, add = n.outputs[0], single(n.outputs[0], "add")
        if add is not None:
            other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
            if other not in const or np.asarray(const[other]).dtype != np.int32:
                continue
            out = add.outputs[0]
        rq = single(out, "qnn.requantize")
        if rq is None or rq.inputs[1] not in const or not zero(rq.inputs[2]) or str(rq.outputs[0].dtype) != "int8":
            continue
        k = _pow2_exponents(const[rq.inputs[1]])
        if k is not None:
            convs[id(n)] = (rq, add, k)
    skip = set()
    for n in g.nodes:
        if id(n) in skip:
            continue
        if id(n) in convs:
            rq, add, k = convs[id(n)]
            o = n.outputs[0].shape[1]
            attrs = {key: n.attrs[key] for key in ("strides", "padding", "dilation", "groups")}
            acc = b.node("nn.conv2d", [val(n.inputs[0]), val(n.inputs[1])], dict(attrs, out_dtype="int32"),
                         name=f"{n.name}_q").outputs[0]
            kk = np.broadcast_to(k.reshape(-1), (o,)).astype(np.int64)
            bias = np.zeros(o, np.int64)
            if add is not None:
                other = add.inputs[1] if add.inputs[0] is n.outputs[0] else add.inputs[0]
                bias = np.broadcast_to(np.asarray(const[other], np.int64).reshape(-1), (o,)).copy()
                skip.add(id(add))
            acc = b.op("add", acc, b.const(_rounding_bias(bias, kk).reshape(1, o, 1, 1), f"{n.name}_bq"),
                       name=f"{n.name}_bias")
            acc = b.op("right_shift", acc, b.const(kk.astype(np.int32).reshape(1, o, 1, 1), f"{n.name}_shift"),
                       name=f"{n.name}_shr")
            acc = b.op("clip", acc, a_min=-128, a_max=127, name=f"{n.name}_clip")
            vmap[rq.outputs[0]] = b.op("cast", acc, dtype="int8", name=f"{n.name}_i8")
            skip.add(id(rq))
            continue
        new = b.node(n.op, [val(v) for v in n.inputs], dict(n.attrs), name=n.name)
        vmap.update(zip(n.outputs, new.outputs))
    b.output(*[val(v) for v in g.outputs])
    out = b.finish()
    return Graph(out.inputs, out.outputs, out.nodes, out.constants, g.name, g.input_names, g.output_names)
