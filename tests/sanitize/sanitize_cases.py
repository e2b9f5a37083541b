"""The sample of real kernels run under AddressSanitizer + UndefinedBehaviorSanitizer.

Every op of the op library appears here at one small static shape (`op_cases()`), chosen to reach
the border code: odd extents that are not multiples of any vector width (remainder loops),
convolutions and pools with padding, stride, dilation and ceil mode, negative indices, the
tensorized micro-kernels (dense/matmul large enough for the GEMM schedule, the NCHWc convs, the
packed matmul). A few ops are easiest to reach with the attributes the ONNX frontend derives, so
they come as one-node ONNX models (`onnx_cases()`), compiled at opt_level 0: one kernel per node.
`model_cases()` are small models run through the graph executor's static plan and the AOT entry.

The module is imported both by the tests (to list cases and check op coverage, without building
anything) and by sanitize_driver.py, which runs in a subprocess with the ASan runtime preloaded.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

SANITIZE_TARGET = "c -sanitize=address,undefined"
GROUPS = ("elemwise", "reduce_transform", "nn_conv_pool", "nn_other", "misc")


@dataclass
class OpCase:
    """One op at one signature: run through the graph executor's kernel path (compute + default schedule)."""

    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    tag: str = ""
    ref: object = None          # optional numpy reference: fn(*inputs) -> list of arrays

    @property
    def label(self) -> str:
        shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.inputs)
        return f"{self.op}{'[' + self.tag + ']' if self.tag else ''}({shapes})"


@dataclass
class GraphCase:
    """A graph (from the ONNX frontend or graph.Builder) with its inputs; every node is a kernel."""

    name: str
    build: object               # () -> (graph, params, {input name: array})
    opt_level: int = 0

    @property
    def label(self) -> str:
        return f"graph {self.name}"


RNG = np.random.default_rng(2024)


def f32(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def i32(*shape, lo=-50, hi=50, dtype=np.int32):
    return RNG.integers(lo, hi, shape).astype(dtype)


def boolean(*shape):
    return RNG.random(shape) > 0.5


# ----------------------------------------------------------------------------------- elementwise
UNARY_ANY = ["abs", "atan", "asinh", "ceil", "cos", "cosh", "erf", "exp", "floor", "isinf", "isnan", "negative",
             "round", "sigmoid", "sign", "sin", "sinh", "tan", "tanh", "trunc", "copy", "nn.celu", "nn.elu",
             "nn.gelu", "nn.hardsigmoid", "nn.hardswish", "nn.leaky_relu", "nn.mish", "nn.relu", "nn.selu",
             "nn.shrink", "nn.softplus", "nn.softsign", "nn.thresholded_relu"]
UNARY_UNIT = ["acos", "asin", "atanh"]                 # domain (-1, 1)
UNARY_POS = ["log", "sqrt", "rsqrt", "reciprocal"]     # domain (0, inf)
BINARY_FLOAT = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "floor_divide",
                "floor_mod", "fmod", "mod", "equal", "not_equal", "greater", "greater_equal", "less",
                "less_equal"]
BINARY_INT = ["add", "subtract", "multiply", "floor_divide", "floor_mod", "fmod", "mod", "bitwise_and",
              "bitwise_or", "bitwise_xor", "maximum", "minimum"]
SHIFTS = ["left_shift", "right_shift"]
LOGICAL = ["logical_and", "logical_or", "logical_xor"]


def elemwise_cases():
    shape = (3, 37)                 # 37: not a multiple of 4, 8 or 16 lanes
    cases = [OpCase(op, [f32(*shape, lo=-3, hi=3)]) for op in UNARY_ANY]
    cases += [OpCase(op, [f32(*shape, lo=-0.95, hi=0.95)]) for op in UNARY_UNIT]
    cases += [OpCase(op, [f32(*shape, lo=0.05, hi=4)]) for op in UNARY_POS]
    cases.append(OpCase("acosh", [f32(*shape, lo=1.0, hi=4)]))
    cases.append(OpCase("bitwise_not", [i32(*shape)]))
    cases.append(OpCase("logical_not", [boolean(*shape)]))
    # binary ops with a broadcast right operand (the broadcast index arithmetic)
    for op in BINARY_FLOAT:
        rhs = f32(shape[1], lo=0.5, hi=2) if op in ("power", "divide", "floor_divide", "floor_mod", "fmod", "mod") \
            else f32(shape[1])
        lhs = f32(*shape, lo=0.1, hi=3) if op == "power" else f32(*shape, lo=-3, hi=3)
        cases.append(OpCase(op, [lhs, rhs]))
    for op in BINARY_INT:
        rhs = i32(1, shape[1], lo=1, hi=9) * RNG.choice([-1, 1], (1, shape[1])).astype(np.int32)
        cases.append(OpCase(op, [i32(*shape, lo=-1000, hi=1000), rhs], tag="int32"))
    for op in SHIFTS:
        cases.append(OpCase(op, [i32(*shape, lo=0, hi=1 << 20, dtype=np.uint32),
                                 i32(*shape, lo=0, hi=12, dtype=np.uint32)]))
    for op in LOGICAL:
        cases.append(OpCase(op, [boolean(*shape), boolean(*shape)]))
    # integer add / multiply wrap around (ONNX and numpy semantics): near the int32 limits
    big = np.array([[2**31 - 1, -2**31, 2**30, -2**30, 123456789] * 3], np.int32)
    cases.append(OpCase("add", [big, big[:, ::-1].copy()], tag="int32 wrap", ref=lambda a, b: [a + b]))
    cases.append(OpCase("multiply", [big, big[:, ::-1].copy()], tag="int32 wrap", ref=lambda a, b: [a * b]))
    cases.append(OpCase("subtract", [big, big[:, ::-1].copy()], tag="int32 wrap", ref=lambda a, b: [a - b]))
    cases.append(OpCase("negative", [big], tag="int32 wrap", ref=lambda a: [-a]))
    cases.append(OpCase("abs", [big], tag="int32 wrap", ref=lambda a: [np.abs(a)]))
    big64 = np.array([2**63 - 1, -2**63, 2**62, 7], np.int64)
    cases.append(OpCase("add", [big64, big64], tag="int64 wrap", ref=lambda a, b: [a + b]))
    cases.append(OpCase("multiply", [big64, big64[::-1].copy()], tag="int64 wrap", ref=lambda a, b: [a * b]))
    cases.append(OpCase("where", [boolean(*shape), f32(*shape), f32(1, shape[1])]))
    cases.append(OpCase("clip", [f32(*shape)], {"a_min": -0.5, "a_max": 0.7}))
    cases.append(OpCase("cast", [f32(*shape, lo=-100, hi=100)], {"dtype": "int8"}))
    cases.append(OpCase("cast", [f32(*shape)], {"dtype": "float16"}))
    cases.append(OpCase("cast", [f32(*shape, lo=-600, hi=600)], {"dtype": "float8_e4m3fn"}, tag="float8"))
    cases.append(OpCase("cast", [f32(*shape, lo=-8, hi=8).astype(ml_dtypes.int4)], {"dtype": "float32"}, tag="int4"))
    cases.append(OpCase("reinterpret", [f32(*shape)], {"dtype": "int32"}))
    cases.append(OpCase("nn.prelu", [f32(2, 5, 3, 7), f32(5, 1, 1)]))
    return cases


# ---------------------------------------------------------------------------- reduce / transform
def reduce_transform_cases():
    x = f32(2, 5, 19)
    c = []
    for op in ("sum", "mean", "max", "min", "prod", "logsumexp"):
        c.append(OpCase(op, [f32(2, 5, 19, lo=0.5, hi=1.5) if op == "prod" else x], {"axis": (1, 2)}))
    c.append(OpCase("sum", [x], {"axis": None}, tag="all"))
    c.append(OpCase("max", [x], {"axis": (0,), "keepdims": True}, tag="keepdims"))
    for op in ("argmax", "argmin"):
        c.append(OpCase(op, [x], {"axis": 2, "select_last_index": True}))
    for op in ("cumsum", "cumprod"):
        c.append(OpCase(op, [f32(2, 5, 19, lo=0.5, hi=1.5)], {"axis": 2, "exclusive": True, "reverse": True}))
    for op in ("nn.softmax", "nn.log_softmax", "nn.hardmax"):
        c.append(OpCase(op, [x], {"axis": -1}))
    c.append(OpCase("nn.lp_normalize", [x], {"axis": 1, "p": 2}))
    c.append(OpCase("broadcast_to", [f32(1, 5, 1)], {"shape": (3, 5, 7)}))
    c.append(OpCase("concatenate", [f32(2, 3, 5), f32(2, 1, 5), f32(2, 4, 5)], {"axis": 1}))
    c.append(OpCase("expand_dims", [f32(3, 5)], {"axis": 1, "num_newaxis": 2}))
    c.append(OpCase("eye_like", [f32(5, 7)], {"k": -2}))
    c.append(OpCase("gather_elements", [f32(4, 6), i32(4, 3, lo=-6, hi=6, dtype=np.int64)], {"axis": 1}))
    c.append(OpCase("gather_nd", [f32(3, 4, 5), np.array([[0, -1], [2, 3], [-3, 0]], np.int64)]))
    c.append(OpCase("take", [f32(5, 7), np.array([[0, -1, 4], [-5, 2, 3]], np.int64)], {"axis": 0}))
    c.append(OpCase("one_hot", [np.array([0, 3, -1, 4, -5], np.int64), np.array([0.0, 1.0], np.float32)],
                    {"depth": 5}))
    c.append(OpCase("layout_transform", [f32(1, 16, 3, 5)], {"src_layout": "NCHW", "dst_layout": "NCHW8c"}))
    c.append(OpCase("reshape", [f32(2, 3, 5)], {"newshape": (5, -1)}))
    c.append(OpCase("reverse", [f32(3, 7)], {"axis": 1}))
    c.append(OpCase("reverse_sequence", [f32(4, 3, 2), np.array([9, -2, 3], np.int64)],
                    {"seq_axis": 0, "batch_axis": 1}))
    c.append(OpCase("scatter_elements", [f32(4, 5), np.array([[1, -1, 0], [3, 2, -4]], np.int64), f32(2, 3)],
                    {"axis": 1, "reduction": "add"}))
    c.append(OpCase("scatter_nd", [f32(4, 5), np.array([[0], [-1]], np.int64), f32(2, 5)]))
    c.append(OpCase("split", [f32(7, 3)], {"indices_or_sections": (2, 5), "axis": 0}))
    c.append(OpCase("squeeze", [f32(3, 1, 5)], {"axes": (1,)}))
    c.append(OpCase("strided_slice", [f32(6, 9)], {"begin": (-1, 1), "end": (-7, 100), "strides": (-2, 3)}))
    c.append(OpCase("tile", [f32(2, 3)], {"reps": (2, 3)}))
    c.append(OpCase("transpose", [f32(2, 3, 5)], {"axes": (2, 0, 1)}))
    c.append(OpCase("trilu", [f32(2, 5, 7)], {"upper": False, "k": 1}))
    c.append(OpCase("shape_of", [f32(2, 3, 5)], {"start": 1}))
    c.append(OpCase("ndarray_size", [f32(2, 3, 5)]))
    c.append(OpCase("sort", [f32(3, 13)], {"axis": -1}))
    c.append(OpCase("argsort", [f32(3, 13)], {"axis": 0, "is_ascend": False}))
    c.append(OpCase("topk", [f32(3, 13)], {"k": 4, "axis": -1}))
    c.append(OpCase("det", [f32(2, 5, 5)]))
    c.append(OpCase("einsum", [f32(2, 3, 5), f32(5, 7)], {"equation": "bij,jk->bik"}))
    c.append(OpCase("tensor_scatter", [f32(3, 2, 7, 4), f32(3, 2, 3, 4), np.array([0, 5, 6], np.int64)],
                    {"axis": 2, "mode": "linear"}))
    c.append(OpCase("nn.pad", [f32(2, 3, 5)], {"pad_width": ((0, 0), (1, 2), (2, 1)), "pad_mode": "reflect"}))
    c.append(OpCase("nn.pad", [f32(2, 3, 5)], {"pad_width": ((1, 0), (0, 2), (3, 1)), "pad_value": 1.5},
                    tag="constant"))
    c.append(OpCase("nn.pad", [f32(2, 3, 5)], {"pad_width": ((0, 0), (2, 2), (1, 3)), "pad_mode": "edge"},
                    tag="edge"))
    c.append(OpCase("nn.depth_to_space", [f32(1, 8, 3, 5)], {"block_size": 2, "mode": "CRD"}))
    c.append(OpCase("nn.space_to_depth", [f32(1, 2, 6, 4)], {"block_size": 2}))
    return c


# ---------------------------------------------------------------------------------- nn: conv, pool
def _pack_data(x, b):
    n, ch, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, ch // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _pack_weight(w, ib, ob):
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // ob, ob, i // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def _nchwc(x, w, block, tag, **attrs):
    """An nn.contrib_conv2d_NCHWc case of NCHW x and OIHW w packed in blocks of `block` channels."""
    layouts = {"data_layout": f"NCHW{block}c", "kernel_layout": f"OIHW{block}i{block}o", "out_layout": f"NCHW{block}c"}
    return OpCase("nn.contrib_conv2d_NCHWc", [_pack_data(x, block), _pack_weight(w, block, block)],
                  {**attrs, **layouts}, tag=tag)


def nn_conv_pool_cases():
    c = []
    c.append(OpCase("nn.conv1d", [f32(1, 3, 11), f32(4, 3, 3)], {"strides": (2,), "padding": (1, 2)}))
    c.append(OpCase("nn.conv2d", [f32(1, 3, 9, 11), f32(5, 3, 3, 3)],
                    {"strides": (2, 2), "padding": (1, 1, 2, 0), "dilation": (1, 1)}))
    c.append(OpCase("nn.conv2d", [f32(1, 6, 7, 9), f32(6, 1, 3, 3)],
                    {"strides": (1, 2), "padding": (1, 1, 1, 1), "groups": 6}, tag="depthwise"))
    c.append(OpCase("nn.conv2d", [f32(1, 16, 8, 13), f32(24, 16, 3, 3)], {"padding": (1, 1, 1, 1)},
                    tag="larger"))
    c.append(OpCase("nn.conv3d", [f32(1, 2, 5, 6, 5), f32(3, 2, 3, 2, 3)],
                    {"strides": (2, 1, 2), "padding": (1, 0, 1, 1, 1, 0)}))
    c.append(OpCase("nn.conv1d_transpose", [f32(1, 3, 7), f32(3, 2, 3)],
                    {"strides": (2,), "padding": (1, 0), "output_padding": (1,)}))
    c.append(OpCase("nn.conv2d_transpose", [f32(1, 4, 5, 6), f32(4, 3, 3, 3)],
                    {"strides": (2, 2), "padding": (1, 1, 0, 1), "output_padding": (1, 0)}))
    c.append(OpCase("nn.conv3d_transpose", [f32(1, 2, 3, 4, 3), f32(2, 2, 2, 3, 2)],
                    {"strides": (2, 1, 2), "padding": (0, 1, 0, 0, 1, 1)}))
    c.append(OpCase("nn.conv_integer", [i32(1, 3, 7, 9, lo=0, hi=255, dtype=np.uint8),
                                        i32(4, 3, 3, 3, lo=-128, hi=127, dtype=np.int8),
                                        np.array(7, np.uint8), np.array(-3, np.int8)],
                    {"padding": 1, "strides": 2}))
    # blocked NCHWc convolutions: the x86 row micro-kernel where the host has AVX2 / AVX-512
    c.append(_nchwc(f32(1, 16, 7, 11), f32(16, 16, 3, 3), 8, "3x3 pad", padding=(1, 1, 1, 1), strides=(1, 1)))
    c.append(_nchwc(f32(1, 16, 9, 9), f32(32, 16, 1, 1), 16, "1x1 stride 2", strides=(2, 2)))
    # the row micro-kernel's paths: 7 rows of a 7x7 map a call in tiles across the rows (flat), the
    # weight prefetch (>= 256 KB of 1x1 weights; past the last output blocks it points beyond them), each
    # row group padding its own input rows, three 8-channel blocks a call (ymm in 32 registers with AVX-512VL)
    c.append(_nchwc(f32(1, 16, 7, 7), f32(256, 16, 1, 1), 16, "1x1 7x7 flat tiles"))
    c.append(_nchwc(f32(1, 256, 7, 7), f32(256, 256, 1, 1, lo=-0.1, hi=0.1), 16, "1x1 prefetch"))
    c.append(_nchwc(f32(1, 32, 28, 28), f32(64, 32, 3, 3), 16, "3x3 stride 2 pad per row group",
                    padding=(1, 1, 1, 1), strides=(2, 2)))
    c.append(_nchwc(f32(1, 48, 14, 14), f32(24, 48, 1, 1), 8, "8c 1x1"))
    x, w = f32(1, 16, 9, 10), f32(16, 1, 3, 3)
    c.append(OpCase("nn.contrib_depthwise_conv2d_NCHWc", [_pack_data(x, 8), _pack_weight(w, 1, 8)],
                    {"padding": (1, 1, 1, 1), "strides": (2, 2), "data_layout": "NCHW8c",
                     "kernel_layout": "OIHW1i8o", "out_layout": "NCHW8c"}, tag="stride 2 pad"))
    x, w = f32(1, 16, 7, 13), f32(16, 1, 3, 3)
    c.append(OpCase("nn.contrib_depthwise_conv2d_NCHWc", [_pack_data(x, 16), _pack_weight(w, 1, 16)],
                    {"padding": (1, 1, 1, 1), "data_layout": "NCHW16c", "kernel_layout": "OIHW1i16o",
                     "out_layout": "NCHW16c"}, tag="16c"))
    # Winograd transforms (graph/passes/winograd.py): odd sizes (partial tiles at the border), padding
    # read as zeros, zero rows past the tile count
    c.append(OpCase("nn.winograd_input_transform", [_pack_data(f32(1, 16, 9, 7), 8)],
                    {"tile_size": 4, "padding": (1, 0, 2, 1), "rows": 12, "layout": "NCHW8c"}, tag="F4 pad"))
    c.append(OpCase("nn.winograd_input_transform", [f32(1, 5, 6, 7)], {"tile_size": 2, "layout": "NCHW"}, tag="F2"))
    c.append(OpCase("nn.winograd_weight_transform", [_pack_weight(f32(16, 16, 3, 3), 8, 8)],
                    {"tile_size": 4, "kernel_layout": "OIHW8i8o"}))
    c.append(OpCase("nn.winograd_output_transform", [f32(6, 6, 12, 16)],
                    {"tile_size": 4, "batch": 1, "output_size": (9, 7), "layout": "NCHW8c"}, tag="F4 partial tiles"))
    c.append(OpCase("nn.winograd_output_transform", [f32(4, 4, 13, 5)],
                    {"tile_size": 2, "batch": 1, "output_size": (7, 5), "layout": "NCHW"}, tag="F2"))
    c.append(OpCase("nn.winograd_input_transform", [_pack_data(f32(1, 16, 8, 7), 8)],
                    {"tile_size": 3, "padding": (1, 1, 1, 1), "rows": 10, "layout": "NCHW8c"}, tag="F3 pad"))
    c.append(OpCase("nn.winograd_weight_transform", [_pack_weight(f32(16, 16, 3, 3), 8, 8)],
                    {"tile_size": 3, "kernel_layout": "OIHW8i8o"}, tag="F3"))
    c.append(OpCase("nn.winograd_output_transform", [f32(5, 5, 10, 16)],
                    {"tile_size": 3, "batch": 1, "output_size": (8, 7), "layout": "NCHW8c"}, tag="F3 partial tiles"))
    # pools: padding, stride, dilation, ceil mode (the last window hangs over the border)
    c.append(OpCase("nn.max_pool1d", [f32(1, 3, 10)], {"pool_size": (3,), "strides": (2,), "padding": (1, 1),
                                                        "ceil_mode": True}))
    c.append(OpCase("nn.avg_pool1d", [f32(1, 3, 10)], {"pool_size": (3,), "strides": (2,), "padding": (1, 1),
                                                        "ceil_mode": True}))
    c.append(OpCase("nn.max_pool2d", [f32(1, 3, 9, 10)], {"pool_size": (3, 3), "strides": (2, 2),
                                                           "padding": (1, 1, 1, 1), "ceil_mode": True}))
    c.append(OpCase("nn.max_pool2d", [f32(1, 3, 9, 10)], {"pool_size": (2, 3), "strides": (1, 2),
                                                           "dilation": (2, 1), "padding": (0, 1, 1, 0)},
                    tag="dilated"))
    c.append(OpCase("nn.avg_pool2d", [f32(1, 3, 9, 10)], {"pool_size": (3, 3), "strides": (2, 2),
                                                           "padding": (1, 1, 1, 1), "ceil_mode": True,
                                                           "count_include_pad": True}))
    c.append(OpCase("nn.avg_pool2d", [f32(1, 3, 9, 10)], {"pool_size": (3, 2), "strides": (2, 3),
                                                           "padding": (1, 0, 1, 1), "ceil_mode": True},
                    tag="exclude pad"))
    c.append(OpCase("nn.max_pool3d", [f32(1, 2, 5, 6, 5)], {"pool_size": (2, 3, 2), "strides": (2, 2, 2),
                                                             "padding": (1, 1, 0, 0, 1, 1), "ceil_mode": True}))
    c.append(OpCase("nn.avg_pool3d", [f32(1, 2, 5, 6, 5)], {"pool_size": (2, 3, 2), "strides": (2, 2, 2),
                                                             "padding": (1, 1, 0, 0, 1, 1), "ceil_mode": True}))
    c.append(OpCase("nn.max_pool_with_indices", [f32(1, 2, 7, 6)],
                    {"pool_size": (3, 2), "strides": (2, 2), "padding": (1, 0, 1, 1), "ceil_mode": True}))
    c.append(OpCase("nn.lp_pool", [f32(1, 2, 7, 6)], {"pool_size": (3, 2), "strides": (2, 2),
                                                       "padding": (1, 0, 1, 1), "p": 3}))
    c.append(OpCase("nn.global_avg_pool", [f32(1, 5, 7, 9)]))
    c.append(OpCase("nn.global_max_pool", [f32(1, 5, 7, 9)]))
    return c


# ------------------------------------------------------------------------- nn: dense, norm, ...
def nn_other_cases():
    c = []
    # dense / matmul big enough for the default schedule's GEMM micro-kernel, with ragged edges
    c.append(OpCase("nn.dense", [f32(37, 70), f32(45, 70)], ref=lambda a, b: [a @ b.T]))
    c.append(OpCase("nn.matmul", [f32(37, 70), f32(70, 45)], ref=lambda a, b: [a @ b]))
    c.append(OpCase("nn.matmul", [f32(2, 5, 9), f32(9, 7)], tag="batched small"))
    c.append(OpCase("nn.batch_matmul", [f32(2, 19, 33), f32(2, 21, 33)], ref=lambda a, b: [a @ b.transpose(0, 2, 1)]))
    # the packed matmul: B laid out in zero-padded column panels, then read by matmul's b_panel form
    b = f32(70, 45)
    c.append(OpCase("nn.pack_matmul_weight", [b], {"panel": 16}))
    packed = _packed(b, 16)
    c.append(OpCase("nn.matmul", [f32(37, 70), packed], {"b_panel": 16, "b_cols": 45}, tag="packed",
                    ref=lambda a, p: [a @ b]))
    c.append(OpCase("nn.matmul_integer", [i32(5, 13, lo=0, hi=255, dtype=np.uint8),
                                          i32(13, 7, lo=-128, hi=127, dtype=np.int8),
                                          i32(5, lo=0, hi=20, dtype=np.uint8), np.array(3, np.int8)]))
    c.append(OpCase("nn.batch_norm", [f32(2, 5, 3, 7), f32(5), f32(5), f32(5), f32(5, lo=0.5, hi=2)]))
    c.append(OpCase("nn.batch_norm_training", [f32(2, 5, 3, 7), f32(5), f32(5), f32(5), f32(5, lo=0.5, hi=2)]))
    c.append(OpCase("nn.group_norm", [f32(2, 6, 3, 5), f32(6), f32(6)], {"num_groups": 3}))
    c.append(OpCase("nn.instance_norm", [f32(2, 5, 3, 7), f32(5), f32(5)]))
    c.append(OpCase("nn.layer_norm", [f32(3, 5, 19), f32(19), f32(19)]))
    c.append(OpCase("nn.rms_norm", [f32(3, 5, 19), f32(19)]))
    c.append(OpCase("nn.lrn", [f32(1, 7, 3, 5)], {"size": 3}))
    c.append(OpCase("nn.mean_variance_normalization", [f32(2, 3, 4, 5)]))
    c.append(OpCase("nn.nll_loss", [f32(5, 4, 3), np.array([[0, 2, 3], [1, 2, 0], [3, 3, 1], [2, 0, 0],
                                                            [1, 1, 2]], np.int64), f32(4, lo=0.5, hi=2)],
                    {"reduction": "mean", "ignore_index": 2}))
    c.append(OpCase("nn.attention", [f32(2, 3, 5, 8), f32(2, 3, 7, 8), f32(2, 3, 7, 6)], {"is_causal": True}))
    c.append(OpCase("nn.rotary_embedding", [f32(1, 2, 3, 8), f32(9, 4), f32(9, 4), np.array([[0, 5, 8]], np.int64)],
                    {"interleaved": True}))
    return c


def _packed(b, panel):
    k, n = b.shape
    p = -(-n // panel)
    out = np.zeros((p, k, panel), np.float32)
    for j in range(p):
        cols = b[:, j * panel:(j + 1) * panel]
        out[j, :, :cols.shape[1]] = cols
    return out


# ----------------------------------------------------------------------- misc: image, qnn, rnn
def misc_cases():
    c = []
    c.append(OpCase("image.resize", [f32(1, 2, 5, 7)], {"sizes": (1, 2, 8, 11), "method": "cubic"}))
    c.append(OpCase("image.resize", [f32(1, 2, 5, 7)], {"sizes": (1, 2, 3, 11), "method": "linear",
                                                         "coordinate_transformation_mode": "align_corners"},
                    tag="linear"))
    c.append(OpCase("image.resize", [f32(1, 2, 5, 7)], {"sizes": (1, 2, 9, 4), "method": "nearest"}, tag="nearest"))
    g = f32(1, 3, 6, 2, lo=-1.4, hi=1.4)
    c.append(OpCase("image.grid_sample", [f32(1, 2, 4, 5), g], {"mode": "cubic", "padding_mode": "border"}))
    c.append(OpCase("image.grid_sample", [f32(1, 2, 4, 5), g], {"mode": "linear", "padding_mode": "reflection"},
                    tag="linear"))
    block, image = (2, 3), (5, 6)
    blocks = ((5 + 1 + 0 - 2) // 2 + 1) * ((6 + 0 + 1 - 3) // 1 + 1)
    c.append(OpCase("image.col2im", [f32(1, 3 * 6, blocks)],
                    {"image_shape": image, "block_shape": block, "padding": (1, 0, 0, 1), "strides": (2, 1)}))
    rois = np.array([[0.5, 1.0, 7.5, 9.0], [2.0, 2.0, 3.0, 2.5], [-3.0, -2.0, 15.0, 20.0]], np.float32)
    c.append(OpCase("image.roi_align", [f32(2, 3, 12, 10), rois, np.array([1, 0, 1], np.int64)],
                    {"output_size": (3, 4), "spatial_scale": 0.8, "sampling_ratio": 0, "max_grid": (8, 8)}))
    x, w = f32(1, 4, 5, 6), f32(6, 2, 2, 3)
    oh, ow = 5, 3
    c.append(OpCase("image.deform_conv2d", [x, w, f32(1, 2 * 2 * 3 * 2, oh, ow, lo=-3, hi=3)],
                    {"groups": 2, "offset_groups": 2, "strides": (1, 2), "padding": (1, 0, 0, 1)}))
    c.append(OpCase("qnn.quantize", [f32(3, 4, 7, lo=-300, hi=300), f32(4, lo=0.5, hi=4),
                                     i32(4, lo=0, hi=50, dtype=np.uint8)], {"axis": 1}))
    c.append(OpCase("qnn.quantize", [f32(2, 7, lo=-60, hi=60), f32(2, 3, lo=0.5, hi=2), i32(2, 3, lo=-10, hi=10,
                                                                                         dtype=np.int8)],
                    {"axis": 1, "block_size": 3, "out_dtype": "int8"}, tag="blocked"))
    c.append(OpCase("qnn.dequantize", [i32(3, 4, 7, lo=-128, hi=127, dtype=np.int8), f32(4, lo=0.5, hi=2),
                                       i32(4, lo=-5, hi=5, dtype=np.int8)], {"axis": 1}))
    c.append(OpCase("qnn.quantize", [f32(3, 5, lo=-1e5, hi=1e5), f32(5, lo=0.5, hi=2)],
                    {"axis": 1, "out_dtype": "float8_e5m2", "saturate": False}, tag="float8"))
    c.append(OpCase("qnn.dequantize", [f32(3, 5, lo=-2, hi=2).astype(ml_dtypes.uint2), f32(5, lo=0.5, hi=2)],
                    {"axis": 1}, tag="uint2"))
    c.append(OpCase("qnn.dynamic_quantize", [f32(5, 7)]))
    c.append(OpCase("qnn.requantize", [i32(4, 3, 5, lo=-10**6, hi=10**6), f32(4, 1, 1, lo=1e-4, hi=1e-2),
                                       np.array(3, np.int8)]))
    c += _integer_cases()
    xw, h, r = f32(3, 2, 4), f32(2, 4), f32(4, 4)
    c.append(OpCase("rnn.rnn_cell", [xw, np.array(1, np.int64), h, r],
                    {"activations": ("tanh",), "alphas": (0.0,), "betas": (0.0,), "clip": 1.1}))
    hs = 3
    c.append(OpCase("rnn.lstm_cell", [f32(2, 3, 4 * hs), np.array(1, np.int64), f32(3, hs), f32(3, hs),
                                      f32(4 * hs, hs), np.array([2, 1, 0], np.int32)],
                    {"has_seq_lens": True, "activations": ("sigmoid", "tanh", "tanh"), "alphas": (0.0,) * 3,
                     "betas": (0.0,) * 3}))
    return c


def _integer_cases():
    """The integer kernels of quantized models: odd extents, padding, stride, zero points that are not 0,
    the blocked int8 convolutions at a block every x86 level runs (8 output channels a call)."""
    u8 = lambda *shape: i32(*shape, lo=0, hi=256, dtype=np.uint8)          # noqa: E731
    s8 = lambda *shape: i32(*shape, lo=-128, hi=128, dtype=np.int8)        # noqa: E731
    req = {"output_zero_point": 3, "out_dtype": "uint8"}
    c = [OpCase("qnn.conv2d", [u8(1, 5, 7, 6), s8(6, 5, 3, 3), i32(6, lo=-500, hi=500), f32(6, lo=1e-4, hi=1e-3)],
                {"strides": (2, 1), "padding": (1, 0, 1, 1), "input_zero_point": 7, **req}),
         OpCase("qnn.conv2d", [u8(1, 4, 5, 5), s8(4, 1, 3, 3), i32(4, lo=-500, hi=500), f32(4, lo=1e-3, hi=1e-2)],
                {"padding": (1, 1, 1, 1), "groups": 4, "input_zero_point": 9, "output_zero_point": -5,
                 "out_dtype": "int8"}, tag="depthwise"),
         OpCase("qnn.dense", [u8(3, 13), s8(13, 6), i32(6, lo=-500, hi=500), f32(6, lo=1e-4, hi=1e-3)],
                {"input_zero_point": 11, **req}),
         OpCase("qnn.dense", [u8(17, 64), s8(64, 33), i32(33, lo=-500, hi=500), f32(33, lo=1e-5, hi=1e-4)],
                {"input_zero_point": 128, **req}, tag="gemm"),
         OpCase("qnn.rescale", [u8(3, 7)], {"input_scale": 0.05, "input_zero_point": 12, "output_scale": 0.02, **req}),
         OpCase("qnn.add", [u8(2, 3, 5), u8(3, 1)], {"lhs_scale": 0.03, "lhs_zero_point": 4, "rhs_scale": 0.07,
                                                    "rhs_zero_point": 250, "output_scale": 0.05, **req}),
         OpCase("qnn.global_avg_pool", [u8(1, 3, 5, 7)], {"input_scale": 0.1, "input_zero_point": 6,
                                                         "output_scale": 0.08, **req}),
         OpCase("qnn.pack_nchwc", [u8(1, 3, 5, 6)], {"block": 4, "fill": 9}),
         OpCase("qnn.lookup", [u8(3, 37), u8(256)]),
         OpCase("qnn.lookup", [s8(2, 19), s8(256)], tag="int8"),
         # a packed weight of 64-column panels, rows 16 divides, K % 64 = 6: the AMX tile where the CPU
         # has AMX (its VNNI tail), else the VNNI / AVX2 micro-kernel
         OpCase("qnn.dense", [u8(32, 70), s8(1, 18, 64, 4), i32(64, lo=-500, hi=500), f32(64, lo=1e-5, hi=1e-4)],
                {"input_zero_point": 0, "b_panel": 64, **req}, tag="packed")]
    blocked = {"strides": (2, 1), "padding": (1, 0, 1, 1), "pad_value": 5, **req}
    c.append(OpCase("qnn.contrib_conv2d_NCHWc", [u8(1, 2, 7, 9, 8), s8(1, 2, 3, 3, 2, 8, 4),
                                                 i32(1, 8, lo=-500, hi=500), f32(1, 8, lo=1e-5, hi=1e-4)], blocked))
    # 64-channel input blocks, 16-channel output vectors: the AMX kernel where the CPU has AMX (rows of 16
    # + 3 pixels); VNNI elsewhere
    c.append(OpCase("qnn.contrib_conv2d_NCHWc", [u8(1, 1, 6, 19, 64), s8(2, 1, 3, 3, 16, 16, 4),
                                                 i32(2, 16, lo=-500, hi=500), f32(2, 16, lo=1e-5, hi=1e-4)],
                    {"padding": (1, 1, 1, 1), "pad_value": 5, **req}, tag="blocks_of_64"))
    c.append(OpCase("qnn.contrib_depthwise_conv2d_NCHWc", [u8(1, 2, 7, 9, 8), s8(2, 3, 3, 8),
                                                           i32(2, 8, lo=-500, hi=500), f32(2, 8, lo=1e-3, hi=1e-2)],
                    blocked))
    # the integer dot-product micro-kernel (tir/tensor_intrin/x86_qdepthwise.py), a channel plane a call that
    # reads rows and columns outside the input as the pad value: 16 channels (vpdpbusd on zmm where the CPU
    # has AVX512-VNNI), stride 1: 7 rows = pairs sharing their input rows and one alone, 9 columns = blocks
    # of 4 and a tail; a 5x5 window (two tap groups), batch 2, dilated columns, int8 out; stride 2 with
    # whole rows and columns of padding past the input, a clamped output range
    c.append(OpCase("qnn.contrib_depthwise_conv2d_NCHWc", [u8(1, 1, 7, 9, 16), s8(1, 3, 3, 16),
                                                           i32(1, 16, lo=-500, hi=500), f32(1, 16, lo=1e-3, hi=1e-2)],
                    {"padding": (1, 1, 1, 1), "pad_value": 5, **req}, tag="pairs"))
    c.append(OpCase("qnn.contrib_depthwise_conv2d_NCHWc", [u8(2, 1, 8, 7, 8), s8(1, 5, 5, 8),
                                                           i32(1, 8, lo=-500, hi=500), f32(1, 8, lo=1e-4, hi=1e-3)],
                    {"padding": (2, 4, 2, 3), "dilation": (1, 2), "pad_value": 200, "output_zero_point": -7,
                     "out_dtype": "int8"}, tag="5x5"))
    c.append(OpCase("qnn.contrib_depthwise_conv2d_NCHWc", [u8(1, 2, 5, 6, 16), s8(2, 3, 3, 16),
                                                           i32(2, 16, lo=-500, hi=500), f32(2, 16, lo=1e-3, hi=1e-2)],
                    {"padding": (3, 2, 4, 5), "strides": (2, 2), "pad_value": 31, "output_zero_point": 4,
                     "out_min": 10, "out_max": 240}, tag="wide_padding"))
    return c


def op_cases() -> dict:
    """{group: [OpCase]}"""
    return {"elemwise": elemwise_cases(), "reduce_transform": reduce_transform_cases(),
            "nn_conv_pool": nn_conv_pool_cases(), "nn_other": nn_other_cases(), "misc": misc_cases()}


# ----------------------------------------------------------------- ops reached through ONNX nodes
def _one_node(op, inputs, attrs=None, opset=17, outputs=("y",), domain=""):
    from onnx import helper

    node = helper.make_node(op, [n for n in inputs], list(outputs), domain=domain or None, **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items() if n]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    g = helper.make_graph([node], "g", ins, outs)
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 5))
    return helper.make_model(g, opset_imports=imports)


def _from_onnx(model, feeds):
    from tessera.frontend import from_onnx

    graph, params = from_onnx(model)
    return graph, params, feeds


def _gru():
    steps, batch, inp, hidden = 3, 3, 2, 3
    feeds = {"x": f32(steps, batch, inp), "w": f32(1, 3 * hidden, inp, lo=-0.5, hi=0.5),
             "r": f32(1, 3 * hidden, hidden, lo=-0.5, hi=0.5), "b": f32(1, 6 * hidden, lo=-0.3, hi=0.3),
             "lens": np.array([3, 1, 2], np.int32)}
    m = _one_node("GRU", feeds, dict(hidden_size=hidden, linear_before_reset=1), opset=14, outputs=("y", "yh"))
    return _from_onnx(m, feeds)


def _linear_attention():
    b, t, hq, hk, dk, dv = 2, 3, 4, 2, 3, 2
    feeds = {"q": f32(b, t, hq * dk), "k": f32(b, t, hk * dk, lo=-1, hi=1), "v": f32(b, t, hk * dv),
             "past": f32(b, hk, dk, dv), "decay": -RNG.uniform(0, 1, (b, t, hk)).astype(np.float32),
             "beta": RNG.uniform(0, 1, (b, t, 1)).astype(np.float32)}
    m = _one_node("LinearAttention", feeds, dict(q_num_heads=hq, kv_num_heads=hk, update_rule="gated_delta",
                                                 scale=0.7), opset=27, outputs=("y", "state"))
    return _from_onnx(m, feeds)


def _tfidf():
    feeds = {"x": RNG.integers(1, 6, (3, 9)).astype(np.int32)}
    attrs = dict(mode="TFIDF", min_gram_length=1, max_gram_length=3, max_skip_count=2,
                 ngram_counts=[0, 3, 7], ngram_indexes=[0, 1, 2, 3, 4, 5, 1],
                 pool_int64s=[1, 2, 3, 1, 2, 4, 5, 1, 2, 3], weights=[0.5, 2.0, 1.5, 3.0, 0.25, 1.0, 7.0])
    return _from_onnx(_one_node("TfIdfVectorizer", feeds, attrs, opset=9), feeds)


def _tree_ensemble():
    from onnx import numpy_helper

    x = np.array([[0.5, 2.0], [3.0, -1.0], [np.nan, 4.0], [1.5, 1.5], [7.0, 0.0]], np.float32)
    attrs = dict(
        n_targets=3, aggregate_function=1, tree_roots=[0, 2],
        nodes_modes=numpy_helper.from_array(np.array([0, 3, 4], np.uint8), "nodes_modes"),
        nodes_featureids=[0, 1, 1],
        nodes_splits=numpy_helper.from_array(np.array([1.0, 1.0, 1.5], np.float32), "nodes_splits"),
        nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
        nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0],
        leaf_targetids=[0, 1, 2, 0, 1],
        leaf_weights=numpy_helper.from_array(np.array([1.5, -2.0, 4.0, 10.0, 0.25], np.float32), "leaf_weights"))
    return _from_onnx(_one_node("TreeEnsemble", {"x": x}, attrs, opset=21, domain="ai.onnx.ml"), {"x": x})


def onnx_cases() -> list:
    return [GraphCase("onnx GRU", _gru), GraphCase("onnx LinearAttention", _linear_attention),
            GraphCase("onnx TfIdfVectorizer", _tfidf), GraphCase("onnx TreeEnsemble", _tree_ensemble)]


# --------------------------------------------------------------------------------------- models
def _tiny_convnet():
    from tessera.graph import Builder

    gb = Builder("tiny_convnet")
    x = gb.input("x", (1, 3, 15, 13))
    w1 = gb.const(f32(16, 3, 3, 3, lo=-0.5, hi=0.5), "conv1.weight")
    b1 = gb.const(f32(16, 1, 1, lo=-0.1, hi=0.1), "conv1.bias")
    y = gb.op("nn.relu", gb.op("add", gb.op("nn.conv2d", x, w1, strides=(2, 2), padding=(1, 1, 1, 1)), b1))
    # a residual block: conv + bias + the block's input + ReLU, the epilogue the conv kernel folds in
    wr = gb.const(f32(16, 16, 1, 1, lo=-0.5, hi=0.5), "res.weight")
    br = gb.const(f32(16, 1, 1, lo=-0.1, hi=0.1), "res.bias")
    yr = gb.op("nn.relu", gb.op("add", gb.op("add", gb.op("nn.conv2d", y, wr), br), y))
    w2 = gb.const(f32(16, 1, 3, 3, lo=-0.5, hi=0.5), "dw.weight")
    z = gb.op("nn.conv2d", y, w2, padding=(1, 1, 1, 1), groups=16)
    z = gb.op("clip", z, a_min=0.0, a_max=6.0)
    w3 = gb.const(f32(24, 16, 1, 1, lo=-0.5, hi=0.5), "pw.weight")
    z = gb.op("nn.conv2d", z, w3)
    p = gb.op("nn.max_pool2d", z, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    g = gb.op("reshape", gb.op("nn.global_avg_pool", p), newshape=(1, 24))
    wf = gb.const(f32(10, 24, lo=-0.5, hi=0.5), "fc.weight")
    wm = gb.const(f32(24, 37, lo=-0.5, hi=0.5), "mm.weight")
    gb.output(gb.op("nn.softmax", gb.op("nn.dense", g, wf)), gb.op("nn.matmul", g, wm), y, yr)
    return gb.finish(), {}, {"x": f32(1, 3, 15, 13)}


def model_cases() -> list:
    return [GraphCase("tiny_convnet", _tiny_convnet, opt_level=3)]
