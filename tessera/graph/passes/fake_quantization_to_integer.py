"""fake_quantization_to_integer: quantized models computed in integers (TVM's FakeQuantizationToInteger).

A QDQ model (onnxruntime.quantization.quantize_static, PyTorch's exporters) says `Q(op(DQ(x), DQ(w)))`:
the op in float between a dequantize and a quantize. This pass replaces each such group by one
integer op of tessera/ops/integer.py that reads the integers behind the DQs and writes the integers of
the Q, the requantization (scale, zero point, ONNX's rounding) in its epilogue; so int8 tensors flow
from layer to layer and a float tensor remains only where a float op needs one. The groups:

| float group                                   | integer op                                      |
| --------------------------------------------- | ----------------------------------------------- |
| Q(conv2d(DQ(x), DQ(w)) [+ bias] [relu/clip])  | qnn.conv2d (bias in int32, clip in the output)  |
| Q(matmul(DQ(x), DQ(w)) [+ bias] [relu/clip])  | qnn.dense                                       |
| Q(add(DQ(a), DQ(b)) [relu/clip])              | qnn.add                                         |
| Q(global_avg_pool(DQ(x)))                     | qnn.global_avg_pool                             |
| Q(max_pool2d(DQ(x))), Q(reshape / transpose / squeeze / expand_dims / copy(DQ(x))) | the op on the integers (+ qnn.rescale where the Q's scale differs) |
| Q(relu / clip(DQ(x))), Q(DQ(x))              | qnn.rescale                                     |
| Q(concatenate(DQ(x0), DQ(x1), ...))           | qnn.rescale of each input + concatenate         |

and the QOperator forms the ONNX frontend makes of QLinearConv and QLinearMatMul (nn.conv_integer /
nn.matmul_integer [+ int32 bias] -> qnn.requantize) become qnn.conv2d / qnn.dense with ONNX's float64
requantization (`precision="float64"`: bit-exact with ONNX's reference), while QDQ groups requantize
in float32 as ONNX Runtime's integer kernels do (its QLinearConv / QLinearMatMul results exactly; a QDQ
group's float result, which ONNX defines, within one quantization step).

Conditions: activations quantized per tensor with constant scale and zero point; weights constant
int8 (or uint8 whose values minus the zero point fit int8), per tensor or per output channel, with a
zero point of 0 after that; a float bias is taken in the accumulator's scale x_scale * w_scale (the
integers an ORT bias DQ holds, exactly while |bias| < 2**23 of them), and must fit there in int32 with
the channel's largest accumulation (a bias over a near-zero weight scale does not). A group that does
not qualify stays in float: it computes what the model says, with its DQ and Q.

Every integer activation inside is uint8: an int8 tensor (zero point z) is held as uint8 with zero
point z + 128 (its values + 128: the same reals), which the u8 x s8 dot products of x86 take; where an
int8 tensor leaves (a graph output, an op that is not folded), a qnn.rescale gives it back as int8.
"""
from __future__ import annotations

import numpy as np

from ...errors import TesseraError
from ..ir import Graph, Node, Value
from ._rewrite import Rewriter
from .context import PassContext

MOVES = ("reshape", "transpose", "squeeze", "expand_dims", "copy", "nn.batch_flatten")
QOPS = ("qnn.conv2d", "qnn.dense", "qnn.add", "qnn.rescale", "qnn.global_avg_pool")


INT32_MAX = 2**31 - 1


def _int32_bias(bias, acc_scale, wi, axis: int):
    """The int32 bias (one per index of wi's `axis`) of a float bias at the accumulator's scale:
    rint(bias / acc_scale), computed in float64; None when it cannot be exact: a value that is not
    finite, or whose size with the largest accumulation of its channel could leave the int32 range
    (|bias| + 2 * 255 * sum |w|: the u8 inputs' products, once more for the input zero point the
    layout passes fold into the bias). A bias over a near-zero weight scale (a QDQ file from another
    quantizer; ORT's quantizer raises such scales, and tessera.quantize) is such a value: its cast is
    undefined, and clipped it is another bias whose sum with the accumulator can wrap. The group then
    stays in float, as ONNX defines it (ONNX Runtime's optimized session folds it into QLinearConv
    all the same, a float bias by its own int32 cast, and its result is far from the model's)."""
    if bias is None:
        return np.zeros(wi.shape[axis], np.int32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b = np.rint(np.asarray(bias, np.float64) / acc_scale.astype(np.float64))
    red = tuple(d for d in range(wi.ndim) if d != axis)
    reach = 2.0 * 255.0 * np.abs(wi.astype(np.int64)).sum(axis=red).astype(np.float64)
    if not np.all(np.isfinite(b)) or np.any(np.abs(b) + reach > INT32_MAX):
        return None
    return b.astype(np.int32)


class _Param:
    """A per-tensor quantization: scale (float32 as a Python float), zero point, dtype."""

    __slots__ = ("scale", "zp", "dtype")

    def __init__(self, scale, zp, dtype):
        self.scale, self.zp, self.dtype = float(np.float32(scale)), int(zp), str(dtype)

    def u8(self) -> "_Param":
        """The same quantization held as uint8 (int8 values + 128)."""
        return self if self.dtype == "uint8" else _Param(self.scale, self.zp + 128, "uint8")

    def same(self, other) -> bool:
        return self.scale == other.scale and self.zp == other.zp and self.dtype == other.dtype

    def quantize(self, real: float) -> int:
        """Q(real) as ONNX's QuantizeLinear computes it (float32 division, rint, saturation)."""
        lo, hi = (0, 255) if self.dtype == "uint8" else (-128, 127)
        return int(np.clip(np.rint(np.float32(real) / np.float32(self.scale)) + self.zp, lo, hi))


class _Fold:
    def __init__(self, graph: Graph):
        self.g = graph
        self.rw = Rewriter(graph)
        self.consts = dict(graph.constants)
        self.cons = graph.consumers()
        self.outputs = set(graph.outputs)
        self.u8: dict = {}          # old integer Value -> new uint8 Value holding it (+128 where int8)
        self.done: set = set()      # ids of old nodes already replaced

    # ------------------------------------------------------------------ constants and parameters
    def const(self, v: Value):
        """v's value when it is a constant or a layout op (reshape, transpose, ...) of one, else None."""
        if v in self.consts:
            return np.asarray(self.consts[v])
        n = v.producer
        if n is None or n.op not in ("reshape", "transpose", "squeeze", "expand_dims", "copy"):
            return None
        x = self.const(n.inputs[0])
        if x is None:
            return None
        if n.op == "transpose":
            return np.transpose(x, n.attrs.get("axes"))
        return x.reshape(tuple(int(d) for d in v.type.shape)) if v.type.is_static else None

    def qparam(self, n: Node, dtype=None):
        """(scale, zero point) arrays of a qnn.quantize / qnn.dequantize node when constant, else None."""
        s = self.const(n.inputs[1])
        if s is None or s.dtype != np.float32:
            return None
        if len(n.inputs) > 2:
            z = self.const(n.inputs[2])
            if z is None:
                return None
        else:
            z = np.zeros(s.shape, dtype or "uint8")
        if n.attrs.get("block_size"):
            return None
        return s, z

    def tensor_param(self, n: Node):
        """The per-tensor _Param of a Q / DQ node on uint8 / int8, else None."""
        dtype = str(n.outputs[0].dtype) if n.op == "qnn.quantize" else str(n.inputs[0].dtype)
        if dtype not in ("uint8", "int8"):
            return None
        if n.op == "qnn.quantize" and (n.attrs.get("precision") or str(n.inputs[0].dtype) != "float32"):
            return None
        p = self.qparam(n, dtype)
        if p is None or p[0].size != 1 or p[1].size != 1:
            return None
        return _Param(p[0].reshape(()), p[1].reshape(()), dtype)

    def dq(self, v: Value):
        """(integer Value, _Param) when v = DQ(integer) per tensor, else None. Moves between the DQ and
        v (reshape, transpose, ...: v = move(DQ(x)) = DQ(move(x))) are made on the integers here, and v
        stands for their result."""
        n = v.producer
        if n is not None and n.op in MOVES and v not in self.outputs \
                and all(self.const(i) is not None for i in n.inputs[1:]):
            a = self.dq(n.inputs[0])
            if a is None:
                return None
            if v not in self.u8:
                ins = [self.holder(*a)] + [self.rw.get(i) for i in n.inputs[1:]]
                node = Node(n.op, ins, n.attrs, self.rw.fresh(f"{n.name}_int"), [v.type.with_dtype("uint8")],
                            [self.rw.fresh(f"{v.name}_int")])
                self.rw.nodes.append(node)
                self.u8[v] = node.outputs[0]
            return v, a[1].u8()
        if n is None or n.op != "qnn.dequantize" or n.attrs.get("out_dtype") not in ("", "float32"):
            return None
        p = self.tensor_param(n)
        return None if p is None else (n.inputs[0], p)

    def weight(self, v: Value, axis: int):
        """(int8 weights, float32 scales per index of `axis` (a vector)) of v = DQ(constant) [transposed],
        the weights with their zero point subtracted; None when v is not that or they do not fit int8."""
        n = v.producer
        moves = []
        while n is not None and n.op in ("transpose", "reshape") and n.op != "qnn.dequantize":
            moves.append(n)
            n = n.inputs[0].producer
        if n is None or n.op != "qnn.dequantize" or n.attrs.get("out_dtype") not in ("", "float32"):
            return None
        w = self.const(n.inputs[0])
        if w is None or str(w.dtype) not in ("int8", "uint8"):
            return None
        p = self.qparam(n, w.dtype)
        if p is None:
            return None
        s, z = p
        if s.size == 1:
            w = w.astype(np.int32) - int(z.reshape(-1)[0])
            s = np.full(1, s.reshape(()), np.float32)
            ax = None
        else:
            if s.ndim != 1 or n.attrs.get("block_size"):
                return None
            ax = int(n.attrs.get("axis", 1)) % w.ndim
            shape = [1] * w.ndim
            shape[ax] = -1
            w = w.astype(np.int32) - z.astype(np.int32).reshape(shape)
        if w.min(initial=0) < -128 or w.max(initial=0) > 127:
            return None
        for m in reversed(moves):          # the nodes between DQ and the op, applied to the integers
            if m.op == "transpose":
                perm = m.attrs.get("axes") or tuple(reversed(range(w.ndim)))
                ax = None if ax is None else list(perm).index(ax)
                w = np.transpose(w, perm)
            else:
                return None
        n_out = w.shape[axis]
        if ax is None:
            s = np.full(n_out, s[0], np.float32)
        elif ax != axis:
            return None
        return np.ascontiguousarray(w.astype(np.int8)), s.astype(np.float32)

    def single(self, v: Value, ops):
        """The one consumer of v when it is one of `ops` and v is no graph output, else None."""
        c = self.cons.get(v, [])
        if len(c) != 1 or v in self.outputs or c[0][0].op not in ops:
            return None
        return c[0][0]

    # ------------------------------------------------------------------ values in the new graph
    def holder(self, v: Value, p: _Param) -> Value:
        """The new uint8 Value holding old integer Value v (quantized as p)."""
        if v in self.u8:
            return self.u8[v]
        new = self.rw.get(v)
        if p.dtype == "int8":
            new = self.rw.make("qnn.rescale", new, name=f"{v.name}_u8", input_scale=p.scale, input_zero_point=p.zp,
                               output_scale=p.scale, output_zero_point=p.zp + 128, out_dtype="uint8")
        self.u8[v] = new
        return new

    def publish(self, q: Node, new: Value, p: _Param) -> None:
        """new (uint8, holding p.u8()) is what Q node q made: later readers of q's output get it."""
        out = q.outputs[0]
        self.u8[out] = new
        if p.dtype == "int8":     # readers that are not folded get int8, as the model made it
            u = p.u8()
            new = self.rw.make("qnn.rescale", new, name=f"{out.name}_i8", input_scale=u.scale, input_zero_point=u.zp,
                               output_scale=p.scale, output_zero_point=p.zp, out_dtype="int8")
        self.rw.replace(out, new)
        self.done.add(id(q))

    def tail(self, v: Value):
        """Follow v's clip-like consumers to a per-tensor Q: (Q node, its _Param, out_min, out_max in
        the uint8 form, old nodes consumed), or None."""
        used = []
        lo_real, hi_real = -np.inf, np.inf
        while True:
            n = self.single(v, ("nn.relu", "clip", "qnn.quantize"))
            if n is None:
                return None
            if n.op == "qnn.quantize":
                p = self.tensor_param(n)
                if p is None:
                    return None
                u = p.u8()
                lo, hi = 0, 255
                if lo_real > -np.inf:
                    lo = u.quantize(lo_real)
                if hi_real < np.inf:
                    hi = u.quantize(hi_real)
                return n, p, lo, hi, used
            if n.op == "nn.relu":
                lo_real = max(lo_real, 0.0)
            else:
                lo_real = max(lo_real, float(n.attrs["a_min"]))
                hi_real = min(hi_real, float(n.attrs["a_max"]))
            used.append(n)
            v = n.outputs[0]

    def bias_of(self, v: Value, channels: int, shape):
        """(add node, float64 bias (channels,)) when v's one consumer adds a constant bias of `shape`
        (or DQ(int32) of it) to it, else (None, None)."""
        add = self.single(v, ("add",))
        if add is None:
            return None, None
        other = add.inputs[1] if add.inputs[0] is v else add.inputs[0]
        b = self.const(other)
        if b is None:
            n = other.producer
            while n is not None and n.op in ("reshape", "expand_dims"):
                n = n.inputs[0].producer
            if n is not None and n.op == "qnn.dequantize" and self.qparam(n, "int32") is not None:
                x, (s, z) = self.const(n.inputs[0]), self.qparam(n, "int32")
                if x is not None and s.size in (1, channels):
                    b = ((x.astype(np.float64) - z.astype(np.float64)) * s.astype(np.float32)).astype(np.float32)
        if b is None or b.size != channels or tuple(add.outputs[0].type.shape) != tuple(v.type.shape):
            return None, None
        if tuple(b.shape) not in {tuple(shape), (channels,)} or not np.issubdtype(b.dtype, np.floating):
            return None, None
        return add, b.astype(np.float64).reshape(channels)

    # ------------------------------------------------------------------ groups
    def conv(self, n: Node) -> bool:
        x, w = n.inputs
        a = self.dq(x)
        if a is None or x.type.ndim != 4 or not w.type.is_static:
            return False
        wq = self.weight(w, 0)
        if wq is None:
            return False
        O = wq[0].shape[0]
        return self.integer_op(n, "qnn.conv2d", a, wq, O, (O, 1, 1), strides=n.attrs["strides"],
                               padding=n.attrs["padding"], dilation=n.attrs["dilation"], groups=n.attrs["groups"])

    def integer_op(self, n: Node, op: str, a, wq, channels: int, bias_shape, **attrs) -> bool:
        """n (conv or matmul, its input dequantized `a`, its weight quantized `wq`) with the bias add
        and the output's quantize after it as the integer `op` (int32 bias at ORT's bias scale, float32
        multiplier); False where no quantize follows."""
        xv, xp = a
        wi, ws = wq
        w = n.inputs[1]
        out = n.outputs[0]
        add, bias = self.bias_of(out, channels, bias_shape)
        t = self.tail(add.outputs[0] if add is not None else out)
        if t is None:
            return False
        q, yp, lo, hi, used = t
        acc_scale = (np.float32(xp.scale) * ws).astype(np.float32)      # ORT's bias scale, float32
        bias_i = _int32_bias(bias, acc_scale, wi, 0 if op == "qnn.conv2d" else 1)
        if bias_i is None:
            return False
        mult = (acc_scale / np.float32(yp.scale)).astype(np.float32)
        new = self.rw.make(op, self.holder(xv, xp), self.rw.const(wi, f"{w.name}_int8"),
                           self.rw.const(bias_i, f"{n.name}_bias_int32"),
                           self.rw.const(mult, f"{n.name}_multiplier"), name=n.name, **attrs,
                           input_zero_point=xp.u8().zp, output_zero_point=yp.u8().zp, out_dtype="uint8",
                           out_min=lo, out_max=hi)
        self.done.update(id(m) for m in [n, add] + used if m is not None)
        self.publish(q, new, yp)
        return True

    def matmul(self, n: Node) -> bool:
        if n.attrs.get("transpose_a") or n.attrs.get("transpose_b") or n.attrs.get("b_panel"):
            return False
        x, w = n.inputs
        a = self.dq(x)
        if a is None or w.type.ndim != 2 or x.type.ndim < 1 or not w.type.is_static:
            return False
        wq = self.weight(w, 1)
        if wq is None:
            return False
        N = wq[0].shape[1]
        return self.integer_op(n, "qnn.dense", a, wq, N, (N,))

    def add(self, n: Node) -> bool:
        a, b = (self.dq(v) for v in n.inputs)
        if a is None or b is None:
            return False
        t = self.tail(n.outputs[0])
        if t is None:
            return False
        q, yp, lo, hi, used = t
        (av, ap), (bv, bp) = a, b
        ua, ub, uy = ap.u8(), bp.u8(), yp.u8()
        new = self.rw.make("qnn.add", self.holder(av, ap), self.holder(bv, bp), name=n.name,
                           lhs_scale=ua.scale, lhs_zero_point=ua.zp, rhs_scale=ub.scale, rhs_zero_point=ub.zp,
                           output_scale=uy.scale, output_zero_point=uy.zp, out_dtype="uint8", out_min=lo, out_max=hi)
        self.done.update(id(m) for m in [n] + used)
        self.publish(q, new, yp)
        return True

    def rescaled(self, v: Value, p: _Param, y: _Param, lo=0, hi=255, name="rescale") -> Value:
        """v (uint8 holding p.u8()) in y.u8()'s quantization, clipped to [lo, hi] (no node where nothing
        changes)."""
        up, uy = p.u8(), y.u8()
        if up.same(uy) and (lo, hi) == (0, 255):
            return v
        return self.rw.make("qnn.rescale", v, name=name, input_scale=up.scale, input_zero_point=up.zp,
                            output_scale=uy.scale, output_zero_point=uy.zp, out_dtype="uint8", out_min=lo, out_max=hi)

    def unary(self, n: Node) -> bool:
        """max pool, a move (reshape, transpose, ...), relu / clip or nothing between a DQ and a Q."""
        a = self.dq(n.inputs[0])
        if a is None or len(n.outputs) != 1:
            return False
        if n.op not in ("qnn.dequantize", "nn.relu", "clip") and any(self.const(v) is None for v in n.inputs[1:]):
            return False
        start = n.outputs[0] if n.op != "qnn.dequantize" else n.outputs[0]
        t = self.tail(start)
        if t is None:
            return False
        q, yp, lo, hi, used = t
        xv, xp = a
        v = self.holder(xv, xp)
        if n.op in ("nn.relu", "clip"):
            # a clip of the input: in the output's quantization, or the input's where they agree
            lo_real = 0.0 if n.op == "nn.relu" else float(n.attrs["a_min"])
            hi_real = np.inf if n.op == "nn.relu" else float(n.attrs["a_max"])
            uy = yp.u8()
            lo = max(lo, uy.quantize(lo_real))
            hi = min(hi, uy.quantize(hi_real)) if hi_real < np.inf else hi
            new = self.rescaled(v, xp, yp, lo, hi, name=n.name)
            if new is v:
                new = self.rw.make("qnn.rescale", v, name=n.name, input_scale=uy.scale, input_zero_point=uy.zp,
                                   output_scale=uy.scale, output_zero_point=uy.zp, out_dtype="uint8", out_min=lo,
                                   out_max=hi)
        elif n.op == "qnn.dequantize":
            new = self.rescaled(v, xp, yp, lo, hi, name=f"{n.name}_rescale")
            if new is v:
                return False      # Q(DQ(x)) with the same parameters: nothing to fold; leave it
        else:
            ins = [v] + [self.rw.get(i) for i in n.inputs[1:]]
            node = Node(n.op, ins, n.attrs, n.name, [n.outputs[0].type.with_dtype("uint8")], [n.outputs[0].name])
            self.rw.nodes.append(node)
            new = self.rescaled(node.outputs[0], xp, yp, lo, hi, name=f"{n.name}_rescale")
        self.done.update(id(m) for m in [n] + used)
        self.publish(q, new, yp)
        return True

    def global_avg_pool(self, n: Node) -> bool:
        a = self.dq(n.inputs[0])
        if a is None or n.inputs[0].type.ndim != 4 or n.attrs.get("layout") not in (None, "", "NCHW"):
            return False
        t = self.tail(n.outputs[0])
        if t is None:
            return False
        q, yp, lo, hi, used = t
        xv, xp = a
        ux, uy = xp.u8(), yp.u8()
        new = self.rw.make("qnn.global_avg_pool", self.holder(xv, xp), name=n.name, input_scale=ux.scale,
                           input_zero_point=ux.zp, output_scale=uy.scale, output_zero_point=uy.zp,
                           out_dtype="uint8", out_min=lo, out_max=hi)
        self.done.update(id(m) for m in [n] + used)
        self.publish(q, new, yp)
        return True

    def concatenate(self, n: Node) -> bool:
        ins = [self.dq(v) for v in n.inputs]
        if any(a is None for a in ins):
            return False
        t = self.tail(n.outputs[0])
        if t is None:
            return False
        q, yp, lo, hi, used = t
        parts = [self.rescaled(self.holder(v, p), p, yp, lo, hi, name=f"{n.name}_in{k}")
                 for k, (v, p) in enumerate(ins)]
        node = Node("concatenate", parts, n.attrs, n.name, [n.outputs[0].type.with_dtype("uint8")],
                    [n.outputs[0].name])
        self.rw.nodes.append(node)
        self.done.update(id(m) for m in [n] + used)
        self.publish(q, node.outputs[0], yp)
        return True

    # ------------------------------------------------------------------ QOperator forms
    def qoperator(self, n: Node) -> bool:
        """nn.conv_integer / nn.matmul_integer (+ int32 bias) -> qnn.requantize (the ONNX frontend's
        QLinearConv / QLinearMatMul) as qnn.conv2d / qnn.dense with float64 requantization."""
        x, w, xz, wz = n.inputs
        xzp, wzp, wi = self.const(xz), self.const(wz), self.const(w)
        if xzp is None or wzp is None or wi is None or xzp.size != 1 or str(x.dtype) not in ("uint8", "int8"):
            return False
        conv = n.op == "nn.conv_integer"
        axis = 0 if conv else 1
        if wzp.size == 1:
            wi = wi.astype(np.int32) - int(wzp.reshape(-1)[0])
        else:
            shape = [1] * wi.ndim
            shape[axis] = -1
            wi = wi.astype(np.int32) - wzp.astype(np.int32).reshape(shape)
        if wi.min(initial=0) < -128 or wi.max(initial=0) > 127 or wi.ndim != (4 if conv else 2) \
                or (not conv and x.type.ndim < 1):
            return False
        O = wi.shape[axis]
        out = n.outputs[0]
        bias = np.zeros(O, np.int64)
        add = self.single(out, ("add",))
        if add is not None:
            other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
            b = self.const(other)
            if b is None or b.dtype != np.int32 or b.size != O:
                return False
            bias = b.astype(np.int64).reshape(O)
            out = add.outputs[0]
        rq = self.single(out, ("qnn.requantize",))
        if rq is None:
            return False
        m, yz = self.const(rq.inputs[1]), self.const(rq.inputs[2])
        if m is None or yz is None or yz.size != 1 or m.size not in (1, O) or m.dtype not in (np.float32, np.float64):
            return False
        ydt = str(yz.dtype)
        mult = np.broadcast_to(m.reshape(-1), (O,)).astype(m.dtype)
        if m.dtype == np.float64:            # float64 scales: the multiplier stays float64 in the op
            return False
        xp = _Param(1.0, int(xzp.reshape(-1)[0]), str(x.dtype))
        yp = _Param(1.0, int(yz.reshape(-1)[0]), ydt)
        common = dict(input_zero_point=xp.u8().zp, output_zero_point=yp.u8().zp, out_dtype="uint8",
                      precision="float64")
        wv = self.rw.const(np.ascontiguousarray(wi.astype(np.int8)), f"{w.name}_int8")
        bv = self.rw.const(np.clip(bias, -2**31, 2**31 - 1).astype(np.int32), f"{n.name}_bias_int32")
        mv = self.rw.const(mult.astype(np.float32), f"{n.name}_multiplier")
        if conv:
            new = self.rw.make("qnn.conv2d", self.holder(x, xp), wv, bv, mv, name=n.name, strides=n.attrs["strides"],
                               padding=n.attrs["padding"], dilation=n.attrs["dilation"], groups=n.attrs["groups"],
                               **common)
        else:
            new = self.rw.make("qnn.dense", self.holder(x, xp), wv, bv, mv, name=n.name, **common)
        self.done.update(id(k) for k in (n, add) if k is not None)
        self.publish(rq, new, yp)
        return True

    # ------------------------------------------------------------------ the pass
    def run(self) -> Graph:
        for n in self.g.nodes:
            if id(n) in self.done:
                continue
            ok = False
            if n.op == "nn.conv2d" and len(n.inputs) == 2 and n.attrs.get("out_dtype") in (None, ""):
                ok = self.conv(n)
            elif n.op == "nn.matmul":
                ok = self.matmul(n)
            elif n.op == "add":
                ok = self.add(n)
            elif n.op == "nn.global_avg_pool":
                ok = self.global_avg_pool(n)
            elif n.op == "concatenate":
                ok = self.concatenate(n)
            elif n.op in ("nn.conv_integer", "nn.matmul_integer") and len(n.inputs) == 4:
                ok = self.qoperator(n)
            elif n.op in ("nn.max_pool2d", "nn.relu", "clip", "qnn.dequantize") + MOVES:
                ok = self.unary(n)
            if not ok:
                self.keep(n)
        return self.rw.finish()

    def keep(self, n: Node) -> None:
        """n as it was; a Q on int8 is made on uint8 (+128) and given back as int8 to readers that
        need it, a DQ of a value held as uint8 reads that."""
        if n.op == "qnn.quantize":
            p = self.tensor_param(n)
            if p is not None and p.dtype == "int8":
                u = p.u8()
                new = self.rw.make("qnn.quantize", self.rw.get(n.inputs[0]),
                                   self.rw.const(np.float32(u.scale), f"{n.name}_scale"),
                                   self.rw.const(np.uint8(u.zp), f"{n.name}_zero_point"), name=n.name,
                                   out_dtype="uint8")
                self.publish(n, new, p)
                return
        if n.op == "qnn.dequantize":
            a = self.dq(n.outputs[0])
            if a is not None and a[0] in self.u8 and a[1].dtype == "int8":
                xv, xp = a
                u = xp.u8()
                new = self.rw.make("qnn.dequantize", self.u8[xv], self.rw.const(np.float32(u.scale), f"{n.name}_scale"),
                                   self.rw.const(np.uint8(u.zp), f"{n.name}_zero_point"), name=n.name)
                self.rw.replace(n.outputs[0], new)
                return
        self.rw.emit(n)


def fake_quantization_to_integer(graph: Graph, ctx=None) -> Graph:
    """`graph` with its QDQ groups and QOperator nodes computed by integer ops (see the module
    docstring); a graph with neither is returned as it is."""
    PassContext.of(ctx)
    if not isinstance(graph, Graph):
        raise TesseraError(f"fake_quantization_to_integer takes a tessera.graph.Graph, got {type(graph).__name__}")
    if not any(n.op in ("qnn.quantize", "qnn.requantize") for n in graph.nodes):
        return graph
    return _Fold(graph).run()


__all__ = ["fake_quantization_to_integer", "QOPS"]
