"""Integer kernels of quantized models (what graph/passes/fake_quantization_to_integer.py makes of
QDQ groups and QOperator nodes): int8 tensors in, int8 tensors out, no float tensor in between.

    qnn.conv2d(data u8/s8 NCHW, weight s8 OIHW, bias i32 (O,), multiplier f32 (O,))
    qnn.dense(data u8/s8 (..., K), weight s8 (K, N), bias i32 (N,), multiplier f32 (N,))
    qnn.rescale(x)                 y = requant((x - x_zp) * x_scale / y_scale)
    qnn.add(a, b)                  y = requant((a - a_zp) * a_scale / y_scale + (b - b_zp) * b_scale / y_scale)
    qnn.global_avg_pool(x)         y = requant((sum over H, W of x - H * W * x_zp) * x_scale / (H * W * y_scale))

conv2d / dense: acc = sum (data - input_zero_point) * weight + bias in int32 (a padded pixel is
input_zero_point: a real zero), then the requantization ONNX's QLinearConv / QLinearMatMul define:
y = clip(rint(acc * multiplier) + output_zero_point, out_min, out_max) as out_dtype, with rint half to
even. `precision` says in which float type the product is formed: "float32" (float32(acc) *
multiplier, as ONNX Runtime's integer kernels compute it) or "float64" (exact: float64(acc) *
float64(multiplier), as ONNX's reference numpy promotes int32 * float32). out_min / out_max clip
further (a ReLU or Clip folded into the requantization: Q is monotone, so Q(max(v, 0)) == max(Q(v),
Q(0))). Scales of rescale / add / global_avg_pool are attributes (Python floats holding float32
values): their ratios are formed in float32, as ONNX Runtime's QLinearAdd and
QLinearGlobalAveragePool form them.

The blocked forms x86 kernels run (qnn.contrib_conv2d_NCHWc and its depthwise twin) live in
ops/nn/qconv_nchwc.py; graph/passes/alter_layout.py makes them.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..errors import DTypeError, ScheduleError, ShapeError, TesseraError
from ..ir import TensorType
from ..ir.dtype import DataType
from ._common import broadcast_index, broadcast_shape_te, check_dtype, fmt_shape
from ._schedule import schedule_injective
from .nn import _util as U
from ..target import Target
from ..tir.tensor_intrin import x86
from . import _schedule as S
from .nn._cpu_schedule import schedule_conv, schedule_matmul
from .nn.conv_nchwc import _extent, _get_block, _schedule_rest
from .registry import REQUIRED, OpPattern, register_op

ACTIVATIONS = ("uint8", "int8")
RANGE = {"uint8": (0, 255), "int8": (-128, 127)}
PRECISIONS = ("float32", "float64")

_REQUANT = {"output_zero_point": 0, "out_dtype": "uint8", "out_min": None, "out_max": None,
            "precision": "float32"}


def f32(x) -> float:
    """x rounded to float32, as a Python float (a scale attribute's value)."""
    return float(np.float32(x))


def out_range(op, attrs) -> tuple:
    """(lo, hi): the clip bounds of the output, inside its dtype's range; DTypeError / ShapeError
    naming the attribute that is wrong."""
    dt = str(attrs["out_dtype"])
    if dt not in RANGE:
        raise DTypeError(f"{op}: out_dtype {dt} must be one of {', '.join(ACTIVATIONS)}")
    lo, hi = RANGE[dt]
    zp = int(attrs["output_zero_point"])
    if not lo <= zp <= hi:
        raise ShapeError(f"{op}: output_zero_point {zp} lies outside {dt}'s range [{lo}, {hi}]")
    a = lo if attrs["out_min"] is None else int(attrs["out_min"])
    b = hi if attrs["out_max"] is None else int(attrs["out_max"])
    if not lo <= a <= b <= hi:
        raise ShapeError(f"{op}: out_min {a} / out_max {b} must satisfy {lo} <= out_min <= out_max <= {hi} "
                         f"for {dt}")
    if str(attrs["precision"]) not in PRECISIONS:
        raise DTypeError(f"{op}: precision {attrs['precision']!r} must be one of {', '.join(PRECISIONS)}")
    return a, b


def requantize_expr(acc, multiplier, attrs, lo, hi):
    """clip(rint(acc * multiplier) + output_zero_point, lo, hi) as out_dtype; acc int32, multiplier a
    float expression (float32), the product in attrs['precision']."""
    f = DataType(attrs["precision"])
    v = te.round(acc.astype(f) * (multiplier if multiplier.dtype == f else multiplier.astype(f)))
    v = v + te.const(float(int(attrs["output_zero_point"])), f)
    v = te.max(te.min(v, te.const(float(hi), f)), te.const(float(lo), f))
    return v.astype("int32").astype(attrs["out_dtype"])


def _check_vector(op, t: TensorType, n, dtype, what):
    check_dtype(op, t.dtype, (dtype,), what)
    if t.ndim != 1 or (isinstance(n, int) and t.shape[0] != n):
        raise ShapeError(f"{op}: {what} {fmt_shape(t.shape)} must be a vector of {n} values (one per output "
                         f"channel)")


def _check_zero_point(op, attrs, key, dtype):
    lo, hi = RANGE[str(dtype)]
    if not lo <= int(attrs[key]) <= hi:
        raise ShapeError(f"{op}: {key} {attrs[key]} lies outside {dtype}'s range [{lo}, {hi}]")


# ---------------------------------------------------------------------------------------------
# qnn.conv2d
# ---------------------------------------------------------------------------------------------
conv2d = register_op(
    "qnn.conv2d", inputs=("data", "weight", "bias", "multiplier"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
           "input_zero_point": REQUIRED, **_REQUANT},
    doc="integer 2-d convolution with the requantization fused (module docstring): data uint8/int8 NCHW, "
        "weight int8 OIHW, bias int32 and multiplier float32 per output channel.")


def conv2d_attrs(op, attrs):
    return (U.int_tuple(op, "strides", attrs["strides"], 2, minimum=1),
            U.padding_tuple(op, attrs["padding"], 2),
            U.int_tuple(op, "dilation", attrs["dilation"], 2, minimum=1))


@conv2d.def_infer
def _conv_infer(types, attrs):
    op = "qnn.conv2d"
    data, weight, bias, mult = types
    check_dtype(op, data.dtype, ACTIVATIONS, "data")
    check_dtype(op, weight.dtype, ("int8",), "weight")
    U.check_rank(op, data, 4, "data (NCHW)")
    U.check_rank(op, weight, 4, "weight (OIHW)")
    _check_zero_point(op, attrs, "input_zero_point", data.dtype)
    out_range(op, attrs)
    strides, padding, dilation = conv2d_attrs(op, attrs)
    groups = int(attrs["groups"])
    N, C, H, W = data.shape
    O, Cg, KH, KW = U.static_dims(op, weight, range(4), "weight dimensions")
    C, H, W = U.static_dims(op, data, (1, 2, 3), "channels and spatial dimensions")
    if groups < 1 or C % groups or O % groups or Cg != C // groups:
        raise ShapeError(f"{op}: weight {weight} does not fit data {data} with groups={groups} (weight's second "
                         f"dimension must be C / groups = {C // max(groups, 1)}, O divisible by groups)")
    _check_vector(op, bias, O, "int32", "bias")
    _check_vector(op, mult, O, "float32", "multiplier")
    out = []
    for k, (S_, K_) in enumerate(((H, KH), (W, KW))):
        padded = S_ + padding[k] + padding[2 + k]
        window = dilation[k] * (K_ - 1) + 1
        if window > padded:
            raise ShapeError(f"{op}: kernel {KH}x{KW} is larger than the padded input {data}")
        out.append((padded - window) // strides[k] + 1)
    return [TensorType((N, O, out[0], out[1]), attrs["out_dtype"])]


def pad_with(data, padding, value, name="data_pad"):
    """NCHW data padded on H and W (top, left, bottom, right) with the int `value`."""
    if not any(padding):
        return data
    pt, pl, pb, pr = padding
    H, W = (int(s.value) for s in data.shape[2:4])
    shape = (data.shape[0], data.shape[1], H + pt + pb, W + pl + pr)

    def body(n, c, h, w):
        inside = te.all(h >= pt, h < H + pt, w >= pl, w < W + pl)
        return te.if_then_else(inside, data[n, c, h - pt, w - pl], te.const(value, data.dtype))

    return U.compute(shape, ["n", "c", "hp", "wp"], body, name)


@conv2d.def_compute
def _conv_compute(tensors, attrs):
    data, weight, bias, mult = tensors
    lo, hi = out_range("qnn.conv2d", attrs)
    (sh, sw), padding, (dh, dw) = conv2d_attrs("qnn.conv2d", attrs)
    groups = int(attrs["groups"])
    zp = int(attrs["input_zero_point"])
    O, Cg, KH, KW = (int(s.value) for s in weight.shape)
    og = O // groups
    src = pad_with(data, padding, zp)
    ic = te.reduce_axis((0, Cg), "ic")
    kh = te.reduce_axis((0, KH), "kh")
    kw = te.reduce_axis((0, KW), "kw")
    N = data.shape[0]
    OH = (int(src.shape[2]) - dh * (KH - 1) - 1) // sh + 1
    OW = (int(src.shape[3]) - dw * (KW - 1) - 1) // sw + 1
    i32 = DataType("int32")

    def body(n, o, oh, ow):
        c = (o // og) * Cg + ic if groups > 1 else ic
        x = src[n, c, oh * sh + kh * dh, ow * sw + kw * dw].astype(i32) - te.const(zp, i32)
        return te.sum(x * weight[o, ic, kh, kw].astype(i32), axis=[ic, kh, kw])

    acc = U.compute((N, O, OH, OW), ["n", "o", "oh", "ow"], body, "qconv_acc")
    return [U.compute((N, O, OH, OW), ["n", "o", "oh", "ow"],
                      lambda n, o, oh, ow: requantize_expr(acc[n, o, oh, ow] + bias[o], mult[o], attrs, lo, hi),
                      "qconv")]


conv2d.def_schedule(schedule_conv)


# ---------------------------------------------------------------------------------------------
# qnn.dense
# ---------------------------------------------------------------------------------------------
dense = register_op(
    "qnn.dense", inputs=("data", "weight", "bias", "multiplier"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"input_zero_point": REQUIRED, "b_panel": 0, **_REQUANT},
    doc="integer matrix product data @ weight with the requantization fused (module docstring): data "
        "uint8/int8 (..., K), weight int8 (K, N), or packed for the micro-kernel with b_panel = nr: "
        "(N / nr, ceil(K / 4), nr, 4) (weight[k, j] at [j // nr, k // 4, j % nr, k % 4], zeros past K).")


def dense_dims(op, data: TensorType, weight: TensorType, attrs) -> tuple:
    """(K, N) of a qnn.dense, checking the weight's (packed) shape against the data."""
    K = data.shape[-1]
    nr = int(attrs["b_panel"])
    if nr:
        U.check_rank(op, weight, 4, "weight (packed N / nr, K / 4, nr, 4)")
        P, Q, R, F = U.static_dims(op, weight, range(4), "packed weight dimensions")
        if R != nr or F != 4 or not isinstance(K, int) or Q != -(-K // 4):
            raise ShapeError(f"{op}: packed weight {weight} does not fit data {data} with b_panel={nr}: it must "
                             f"be (N / {nr}, {-(-K // 4) if isinstance(K, int) else 'ceil(K / 4)'}, {nr}, 4)")
        return K, P * nr
    U.check_rank(op, weight, 2, "weight (K, N)")
    if isinstance(K, int) and isinstance(weight.shape[0], int) and weight.shape[0] != K:
        raise ShapeError(f"{op}: weight {weight} reduces {weight.shape[0]} values, data {data} has {K}")
    return K, weight.shape[1]


@dense.def_infer
def _dense_infer(types, attrs):
    op = "qnn.dense"
    data, weight, bias, mult = types
    check_dtype(op, data.dtype, ACTIVATIONS, "data")
    check_dtype(op, weight.dtype, ("int8",), "weight")
    if data.ndim < 1:
        raise ShapeError(f"{op}: data {data} must have at least one dimension")
    _check_zero_point(op, attrs, "input_zero_point", data.dtype)
    out_range(op, attrs)
    _, N = dense_dims(op, data, weight, attrs)
    _check_vector(op, bias, N, "int32", "bias")
    _check_vector(op, mult, N, "float32", "multiplier")
    return [TensorType(tuple(data.shape[:-1]) + (N,), attrs["out_dtype"])]


@dense.def_compute
def _dense_compute(tensors, attrs):
    data, weight, bias, mult = tensors
    lo, hi = out_range("qnn.dense", attrs)
    nr = int(attrs["b_panel"])
    K = data.shape[-1]
    N = int(weight.shape[0].value) * nr if nr else weight.shape[1]
    zp = int(attrs["input_zero_point"])
    k = te.reduce_axis((0, K), "k")
    i32 = DataType("int32")
    lead = list(data.shape[:-1])
    names = [f"i{d}" for d in range(len(lead))] + ["j"]

    def w_at(kk, j):
        return weight[j // nr, kk // 4, j % nr, kk % 4] if nr else weight[kk, j]

    def body(*idx):
        *i, j = idx
        x = data[tuple(i) + (k,)].astype(i32)
        if zp:            # (a packed weight's pass folded the zero point into the bias: zp 0)
            x = x - te.const(zp, i32)
        return te.sum(x * w_at(k, j).astype(i32), axis=k)

    acc = U.compute(tuple(lead) + (N,), names, body, "qdense_acc")
    return [U.compute(tuple(lead) + (N,), names,
                      lambda *idx: requantize_expr(acc[idx] + bias[idx[-1]], mult[idx[-1]], attrs, lo, hi),
                      "qdense")]


def int8_gemm_isa(target) -> str | None:
    """The target's int8 GEMM micro-kernel ISA (a key of x86.INT8_GEMM: "amx" (AMX tiles, VNNI for what
    they do not divide), "vnni", else "avx2"), or None; the one choice graph/passes/pack_matmul_weights
    packs the weight for and the schedule tensorizes with."""
    t = Target(target)
    for isa, feats in (("amx", x86.AMX + x86.VNNI), ("vnni", x86.VNNI), ("avx2", ("avx2",))):
        if all(t.has_feature(f) for f in feats):
            return isa
    return None


def _qdense_micro_kernel(sch, ctx) -> bool:
    """A packed qnn.dense (b_panel = nr, graph/passes/pack_matmul_weights) on the x86 int8 GEMM
    micro-kernel (tensor_intrin/x86.py: vpdpbusd, or AVX2's vpmaddwd): (lead..., j_0 | i_1, i_2, j_1, k)
    with the mr x nr x K tile tensorized, (lead, j_0) fused and parallel (a thread streams its weight
    panels), the requantization of each panel's columns right after them (still in cache), vectorized.
    False (nothing changed) where no tile of the target's ISA fits."""
    nr = int((ctx.attrs or {}).get("b_panel") or 0)
    acc = _get_block(sch, ctx.block + "_acc")
    if not nr or acc is None or int((ctx.attrs or {}).get("input_zero_point", 0)):
        return False
    loops = sch.get_loops(acc)
    if len(loops) < 3:
        return False
    *lead, i, j, k = loops
    M, N = _extent(sch, i), _extent(sch, j)
    if M is None or N is None or N % nr:
        return False
    isa = int8_gemm_isa(ctx.target)
    names = [x86.int8_gemm_name(isa, mr, n) for mr, n in x86.INT8_GEMM[isa] if n == nr and M % mr == 0] if isa else []
    if not names:
        return False
    name = ctx.choose(sch, "qdense.tile", names, names[0])
    mr = int(name.split("_gemm_")[1].split("x")[0])
    i1, i2 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, nr])
    sch.reorder(*lead, j0, i1, i2, j1, k)
    out = _get_block(sch, ctx.block)
    if out is not None:
        sch.reverse_compute_at(out, j0)
        sch.vectorize(sch.get_loops(out)[-1])
    sch.tensorize(i2, name)
    outer = [*lead, j0]
    if S.thread_count(ctx.target) > 1:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else j0)
    return True


def schedule_qdense(sch, ctx):
    """qnn.dense: a packed weight on the int8 GEMM micro-kernel (_qdense_micro_kernel), else the
    matmul schedule (ops/nn/_cpu_schedule.py)."""
    if ctx.knobs is not None:
        ok = _qdense_micro_kernel(sch, ctx)
    else:
        try:
            ok = _qdense_micro_kernel(sch.copy(), ctx)
        except (ScheduleError, TesseraError):
            ok = False
        if ok:
            ok = _qdense_micro_kernel(sch, ctx)
    if not ok:
        schedule_matmul(sch, ctx)
        return
    _schedule_rest(sch, {ctx.block + "_acc", ctx.block, *ctx.epilogue}, ctx.target)


dense.def_schedule(schedule_qdense)


# ---------------------------------------------------------------------------------------------
# qnn.rescale, qnn.add, qnn.global_avg_pool
# ---------------------------------------------------------------------------------------------
_SCALES = {"input_scale": REQUIRED, "input_zero_point": REQUIRED, "output_scale": REQUIRED}


def _check_scale(op, attrs, key):
    s = float(attrs[key])
    if not (np.isfinite(s) and s > 0):
        raise ShapeError(f"{op}: {key} must be a positive finite number, got {s}")
    return np.float32(s)


rescale = register_op(
    "qnn.rescale", inputs=("data",), pattern=OpPattern.ELEMWISE, attrs={**_SCALES, **_REQUANT},
    doc="one quantized tensor in another's scale and zero point: clip(rint((x - input_zero_point) * "
        "(input_scale / output_scale)) + output_zero_point, out_min, out_max) (Q(DQ(x)) of ONNX).")
rescale.def_schedule(schedule_injective)


def _ratio(op, attrs, num, den="output_scale", extra=1.0):
    return np.float32(_check_scale(op, attrs, num) / (np.float32(extra) * _check_scale(op, attrs, den)))


@rescale.def_infer
def _rescale_infer(types, attrs):
    (x,) = types
    check_dtype("qnn.rescale", x.dtype, ACTIVATIONS, "data")
    _check_zero_point("qnn.rescale", attrs, "input_zero_point", x.dtype)
    out_range("qnn.rescale", attrs)
    _ratio("qnn.rescale", attrs, "input_scale")
    return [TensorType(x.shape, attrs["out_dtype"])]


@rescale.def_compute
def _rescale_compute(tensors, attrs):
    (x,) = tensors
    lo, hi = out_range("qnn.rescale", attrs)
    r = te.const(float(_ratio("qnn.rescale", attrs, "input_scale")), "float32")
    zp = te.const(int(attrs["input_zero_point"]), "int32")
    return [te.compute(x.shape, lambda *i: requantize_expr(x[i].astype("int32") - zp, r, attrs, lo, hi),
                       name="rescale")]


add = register_op(
    "qnn.add", inputs=("lhs", "rhs"), pattern=OpPattern.BROADCAST,
    attrs={"lhs_scale": REQUIRED, "lhs_zero_point": REQUIRED, "rhs_scale": REQUIRED, "rhs_zero_point": REQUIRED,
           "output_scale": REQUIRED, **_REQUANT},
    doc="the sum of two quantized tensors (numpy broadcasting) in the output's scale: clip(rint((a - a_zp) * "
        "(a_scale / y_scale) + (b - b_zp) * (b_scale / y_scale)) + y_zp, out_min, out_max) (ONNX QLinearAdd).")
add.def_schedule(schedule_injective)


@add.def_infer
def _add_infer(types, attrs):
    op = "qnn.add"
    a, b = types
    check_dtype(op, a.dtype, ACTIVATIONS, "lhs")
    check_dtype(op, b.dtype, ACTIVATIONS, "rhs")
    _check_zero_point(op, attrs, "lhs_zero_point", a.dtype)
    _check_zero_point(op, attrs, "rhs_zero_point", b.dtype)
    out_range(op, attrs)
    _ratio(op, attrs, "lhs_scale")
    _ratio(op, attrs, "rhs_scale")
    return [TensorType(U.broadcast_dims(op, tuple(a.shape), tuple(b.shape)), attrs["out_dtype"])]


@add.def_compute
def _add_compute(tensors, attrs):
    a, b = tensors
    lo, hi = out_range("qnn.add", attrs)
    ra = te.const(float(_ratio("qnn.add", attrs, "lhs_scale")), "float32")
    rb = te.const(float(_ratio("qnn.add", attrs, "rhs_scale")), "float32")
    za = te.const(int(attrs["lhs_zero_point"]), "int32")
    zb = te.const(int(attrs["rhs_zero_point"]), "int32")
    shape = broadcast_shape_te("qnn.add", a.shape, b.shape)

    def body(*i):
        va = (a[broadcast_index(a, i)].astype("int32") - za).astype("float32") * ra
        vb = (b[broadcast_index(b, i)].astype("int32") - zb).astype("float32") * rb
        return _requant_float(va + vb, attrs, lo, hi)

    return [te.compute(shape, body, name="qadd")]


def _requant_float(v, attrs, lo, hi):
    """clip(rint(v) + output_zero_point, lo, hi) as out_dtype, v a float32 expression."""
    v = te.round(v) + te.const(float(int(attrs["output_zero_point"])), "float32")
    v = te.max(te.min(v, te.const(float(hi), "float32")), te.const(float(lo), "float32"))
    return v.astype("int32").astype(attrs["out_dtype"])


global_avg_pool = register_op(
    "qnn.global_avg_pool", inputs=("data",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={**_SCALES, "layout": "NCHW", **_REQUANT},
    doc="the mean over H and W of a quantized NCHW (or NCHW{x}c) tensor in the output's scale: clip(rint((sum "
        "- H * W * x_zp) * (x_scale / (H * W * y_scale))) + y_zp) (ONNX QLinearGlobalAveragePool); the sum "
        "in int32.")


def _gap_axes(op, x: TensorType, layout):
    layout = str(layout)
    if layout == "NCHW":
        U.check_rank(op, x, 4, "data (NCHW)")
    elif layout.startswith("NCHW") and layout.endswith("c"):
        U.check_rank(op, x, 5, f"data ({layout})")
    else:
        raise ShapeError(f"{op}: layout {layout!r} must be NCHW or NCHW{{x}}c")
    H, W = U.static_dims(op, x, (2, 3), "spatial dimensions")
    return H, W


@global_avg_pool.def_infer
def _gap_infer(types, attrs):
    op = "qnn.global_avg_pool"
    (x,) = types
    check_dtype(op, x.dtype, ACTIVATIONS, "data")
    _check_zero_point(op, attrs, "input_zero_point", x.dtype)
    out_range(op, attrs)
    _gap_axes(op, x, attrs["layout"])
    _ratio(op, attrs, "input_scale")
    shape = list(x.shape)
    shape[2] = shape[3] = 1
    return [TensorType(tuple(shape), attrs["out_dtype"])]


@global_avg_pool.def_compute
def _gap_compute(tensors, attrs):
    op = "qnn.global_avg_pool"
    (x,) = tensors
    lo, hi = out_range(op, attrs)
    H, W = (int(s.value) for s in x.shape[2:4])
    r = te.const(float(_ratio(op, attrs, "input_scale", extra=H * W)), "float32")
    bias = te.const(-H * W * int(attrs["input_zero_point"]), "int32")
    rh, rw = te.reduce_axis((0, H), "rh"), te.reduce_axis((0, W), "rw")
    shape = list(x.shape)
    shape[2] = shape[3] = 1
    names = ["n", "c", "h", "w", "cb"][:len(shape)]

    def body(n, c, h, w, *b):
        return te.sum(x[(n, c, rh, rw) + tuple(b)].astype("int32"), axis=[rh, rw])

    s = U.compute(tuple(shape), names, body, "qgap_sum")
    return [U.compute(tuple(shape), names,
                      lambda *i: requantize_expr(s[i] + bias, r, dict(attrs, precision="float32"), lo, hi),
                      "qgap")]


lookup = register_op(
    "qnn.lookup", inputs=("data", "table"), pattern=OpPattern.ELEMWISE,
    doc="y = table[x] for an 8-bit tensor x (uint8: index x; int8: index x + 128) and a table of 256 "
        "entries: any elementwise map of 8-bit integers, computed once (graph/passes/lookup_table.py).")
lookup.def_schedule(schedule_injective)


@lookup.def_infer
def _lookup_infer(types, attrs):
    op = "qnn.lookup"
    x, table = types
    check_dtype(op, x.dtype, ACTIVATIONS, "data")
    if tuple(table.shape) != (256,):
        raise ShapeError(f"{op}: table must have shape (256,) (one entry for each 8-bit value), got "
                         f"{fmt_shape(table.shape)}")
    return [TensorType(x.shape, table.dtype)]


@lookup.def_compute
def _lookup_compute(tensors, attrs):
    x, table = tensors
    base = te.const(128 if str(x.dtype) == "int8" else 0, "int32")
    # the index is in [0, 256) by the data's type: no range check
    return [te.compute(x.shape, lambda *i: table[x[i].astype("int32") + base], name="lookup")]


__all__ = ["conv2d", "dense", "rescale", "add", "global_avg_pool", "lookup", "requantize_expr", "out_range", "f32",
           "int8_gemm_isa", "pad_with", "conv2d_attrs", "dense_dims", "ACTIVATIONS", "RANGE"]
