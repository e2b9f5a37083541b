"""Small quantized ONNX models for the integer-pass tests: QDQ groups as onnxruntime.quantization
writes them (per-channel int8 weights, int32 bias), QOperator nodes, and a runner comparing tessera
with ONNX Runtime in quantization steps."""
import numpy as np

import tessera

onnx = None


def _onnx():
    import onnx as o
    return o


def qparams(lo, hi, dtype="uint8"):
    """(scale, zero point) of an asymmetric range [lo, hi] in dtype, as the quantizer picks them."""
    qmin, qmax = (0, 255) if dtype == "uint8" else (-128, 127)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    s = np.float32((hi - lo) / (qmax - qmin))
    z = int(np.clip(np.rint(qmin - lo / s), qmin, qmax))
    return s, np.array(z, dtype)


class QDQ:
    """A model built node by node: `q(name, x, lo, hi)` quantizes float tensor x and returns the name
    of its DQ; `weight(w)` adds DQ(int8 per-channel w); `bias(b, in_scale, w_scales)` DQ(int32)."""

    def __init__(self, act="uint8", seed=0):
        self.h = _onnx().helper
        self.nodes, self.inits = [], []
        self.act = act
        self.rng = np.random.default_rng(seed)
        self.scales = {}
        self.k = 0

    def name(self, hint):
        self.k += 1
        return f"{hint}{self.k}"

    def init(self, arr, hint):
        n = self.name(hint)
        self.inits.append(_onnx().numpy_helper.from_array(np.asarray(arr), n))
        return n

    def node(self, op, ins, hint="t", **attrs):
        out = self.name(hint)
        self.nodes.append(self.h.make_node(op, ins, [out], **attrs))
        return out

    def q(self, x, lo, hi, dtype=None):
        s, z = qparams(lo, hi, dtype or self.act)
        sn, zn = self.init(np.float32(s), "s"), self.init(z, "z")
        qx = self.node("QuantizeLinear", [x, sn, zn], "q")
        dq = self.node("DequantizeLinear", [qx, sn, zn], "dq")
        self.scales[dq] = float(s)
        return dq

    def weight(self, w, axis=0):
        w = np.asarray(w, np.float32)
        red = tuple(d for d in range(w.ndim) if d != axis)
        s = (np.abs(w).max(axis=red) / 127).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        wq = np.clip(np.rint(w / s.reshape(shape)), -127, 127).astype(np.int8)
        return self.node("DequantizeLinear", [self.init(wq, "wq"), self.init(s, "ws"),
                                              self.init(np.zeros(s.shape, np.int8), "wz")], "w", axis=axis), s

    def bias(self, b, in_scale, w_scales):
        s = (np.float32(in_scale) * np.asarray(w_scales, np.float32)).astype(np.float32)
        bq = np.rint(np.asarray(b, np.float32) / s).astype(np.int32)
        return self.node("DequantizeLinear", [self.init(bq, "bq"), self.init(s, "bs"),
                                              self.init(np.zeros(s.shape, np.int32), "bz")], "b", axis=0)

    def model(self, inputs, output, out_shape):
        h = self.h
        TP = _onnx().TensorProto
        g = h.make_graph(self.nodes, "qdq", [h.make_tensor_value_info(n, TP.FLOAT, s) for n, s in inputs],
                         [h.make_tensor_value_info(output, TP.FLOAT, out_shape)], self.inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def ort_run(model, feeds, optimized=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def tessera_run(model, feeds, target="c", opt_level=3):
    g, p = tessera.frontend.from_onnx(model)
    return tessera.compile(g, p, target=target, opt_level=opt_level).run(feeds), g, p


def steps(a, b, scale):
    """|a - b| in quantization steps, rounded (outputs are DQ'd integers)."""
    return np.rint(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) / scale).astype(np.int64)
