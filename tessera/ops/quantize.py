"""Quantization ops (Relay's qnn names): qnn.quantize, qnn.dequantize, qnn.requantize and
qnn.dynamic_quantize, with ONNX QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear semantics.

A scale (and zero point) is per tensor (a scalar or a 1-element vector), per axis (a vector along
`axis`) or blocked (x's rank, `axis` shrunk to ceil(extent / block_size): element i uses entry
i // block_size). Rounding is half to even and the result saturates to the integer type, as the
ONNX reference computes it: quantize is clip(rint(x / scale) + zero_point), with the division in
the inputs' dtype (or `precision`); dequantize is (float32(x) - zero_point) * scale; requantize
(the second half of QLinearMatMul / QLinearConv) is clip(rint(x * multiplier + zero_point)) in
float64, as numpy promotes int32 * float. NaN quantizes to the type's lowest value, as numpy's cast.

The quantized type may also be int4 / uint4 / int2 / uint2 (saturated to their range like the others)
or a float8 / float4 storage type, as ONNX's reference computes them: float8 is x / scale converted
(clamped to the type's finite range first with saturate, NaN staying NaN; the zero point, which ONNX
requires to be zero, is not added), float4_e2m1fn is x / scale + zero_point converted; dequantizing
a float8 / float4 ignores the zero point the same way.
"""
from __future__ import annotations

from .. import te
from ..errors import DTypeError, ShapeError
from ..ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import (FLOATS, MINIFLOATS, broadcast_index, broadcast_shapes, check_dtype, fmt_shape,
                      normalize_axis)
from ._schedule import schedule_blocks, schedule_injective
from .registry import OpPattern, register_op

_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
          "int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}
QUANT_DTYPES = tuple(_RANGE) + MINIFLOATS
DEQUANT_DTYPES = QUANT_DTYPES + ("int32",)
# largest finite value of each float8 / float4 type (saturation clamps to it)
_FLOAT_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0, "float8_e5m2": 57344.0,
              "float8_e5m2fnuz": 57344.0, "float4_e2m1fn": 6.0}


def _tt(t) -> TensorType:
    return TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)


def _is_scalar(t) -> bool:
    return t.ndim == 0 or (t.ndim == 1 and t.shape[0] == 1)


def check_param(op, x: TensorType, p: TensorType, axis, block_size, what) -> str:
    """How scale/zero point `p` applies to x: 'tensor', 'axis' or 'block'; ShapeError otherwise."""
    if _is_scalar(p):
        return "tensor"
    ax = normalize_axis(op, axis, x.ndim)
    if not block_size:
        if p.ndim != 1 or (isinstance(p.shape[0], int) and isinstance(x.shape[ax], int) and p.shape[0] != x.shape[ax]):
            raise ShapeError(f"{op}: {what} {fmt_shape(p.shape)} must be a scalar or a vector of x's extent "
                             f"{x.shape[ax]} along axis {ax} (x is {fmt_shape(x.shape)}); for blocked "
                             f"quantization give block_size")
        return "axis"
    if block_size < 0:
        raise ShapeError(f"{op}: block_size must be positive, got {block_size}")
    if p.ndim != x.ndim:
        raise ShapeError(f"{op}: blocked {what} {fmt_shape(p.shape)} must have x's rank {x.ndim} "
                         f"({fmt_shape(x.shape)})")
    for k, (a, b) in enumerate(zip(x.shape, p.shape)):
        want = -(-a // block_size) if (k == ax and isinstance(a, int)) else a
        if isinstance(want, int) and isinstance(b, int) and want != b or (isinstance(want, str) != isinstance(b, str)):
            raise ShapeError(f"{op}: blocked {what} {fmt_shape(p.shape)} does not fit x {fmt_shape(x.shape)} with "
                             f"block_size {block_size} along axis {ax} (axis {k} should be {want})")
    return "block"


def _data_and_scale(op, types):
    """The data and scale of a quantize / dequantize (its inputs: data, scale, an optional zero_point)."""
    if len(types) > 3:
        raise ShapeError(f"{op}: takes data, scale and an optional zero_point, got {len(types)} inputs")
    return types[0], types[1]


def _param_kind(op, types, attrs, zero_like: str, zero_dtype) -> str:
    """How the scale and the optional zero point of a quantize / dequantize apply to its data
    (check_param's kind); the zero point must have zero_dtype (`zero_like`'s) and the scale's layout."""
    x, s = types[0], types[1]
    kind = check_param(op, x, s, attrs["axis"], attrs["block_size"], "scale")
    if len(types) == 3:
        z = types[2]
        if z.dtype != zero_dtype:
            raise DTypeError(f"{op}: zero_point is {z.dtype} but {zero_like} is {zero_dtype}; they must agree")
        zkind = check_param(op, x, z, attrs["axis"], attrs["block_size"], "zero_point")
        if zkind != kind or (kind != "tensor" and z.shape != s.shape):
            raise ShapeError(f"{op}: zero_point {fmt_shape(z.shape)} and scale {fmt_shape(s.shape)} must have "
                             f"one shape")
    return kind


def _shaped_like_data(check):
    """The infer function of quantize / dequantize: data's shape, in the dtype `check` gives."""
    def infer(types, attrs):
        _, out = check(types, attrs)
        return [TensorType(types[0].shape, out)]

    return infer


def _operands(op, kind, tensors, attrs) -> tuple:
    """(data, scale, zero point or None, axis, block size) of a quantize / dequantize compute: the
    tensors, and how param_at picks the scale / zero point entry of an element of data."""
    x, s = tensors[0], tensors[1]
    z = tensors[2] if len(tensors) == 3 else None
    axis = normalize_axis(op, attrs["axis"], len(x.shape)) if kind != "tensor" else 0
    return x, s, z, axis, int(attrs["block_size"] or 0)


def param_at(p, kind, i, axis, block_size):
    """The entry of scale/zero point p for the element at index i of x."""
    if kind == "tensor":
        return p[()] if len(p.shape) == 0 else p[0]
    if kind == "axis":
        return p[i[axis]]
    return p[tuple(v if k != axis else te.floordiv(v, E.const(block_size, v.dtype)) for k, v in enumerate(i))]


def _promote(*dtypes) -> DataType:
    """numpy's promotion of the float/int dtypes of x and scale (for the division)."""
    ds = [DataType(d) for d in dtypes]
    floats = [d for d in ds if d.is_float()]
    ints = [d for d in ds if not d.is_float()]
    if not floats:
        return DataType("float64")
    if "float64" in floats or any(d.bits >= 32 for d in ints):
        return DataType("float64")
    if "float32" in floats or len(set(str(f) for f in floats)) > 1:
        return DataType("float32")
    return floats[0]


def _saturate(v, dtype, fdt):
    """v (float, already rounded) clamped to dtype's range, NaN to its lowest value, then cast: fmax
    drops the NaN (fmax(NaN, lo) = lo), so v is read once -- a fused kernel inlines v's expression at
    each use, and a select on isnan(v) doubled it at every quantize of a chain (BERT's QDQ GELU
    computed erf eight times)."""
    lo, hi = _RANGE[str(dtype)]
    low = E.call_intrin(fdt, "fmax", v, E.const(float(lo), fdt))
    return E.call_intrin(fdt, "fmin", low, E.const(float(hi), fdt)).astype(dtype)


def saturate_float(v, dtype):
    """v clamped to the finite range of float8/float4 `dtype` (inf to the largest value, NaN kept:
    Min/Max propagate NaN), then converted: ONNX's saturating cast."""
    m = _FLOAT_MAX[str(dtype)]
    return te.max(te.min(v, E.const(m, v.dtype)), E.const(-m, v.dtype)).astype(dtype)


# ---------------------------------------------------------------------------------------------
# qnn.quantize
# ---------------------------------------------------------------------------------------------
quantize = register_op(
    "qnn.quantize", inputs=("data", "scale", "zero_point*"), pattern=OpPattern.INJECTIVE,
    attrs={"axis": 1, "block_size": 0, "out_dtype": "uint8", "precision": "", "saturate": True},
    doc="clip(rint(data / scale) + zero_point) as out_dtype (ONNX QuantizeLinear): per tensor, per axis or "
        "blocked; precision: the float dtype of the division (default: numpy's promotion of data and scale); "
        "a float8 out_dtype converts data / scale, clamped to its range when saturate.")
quantize.def_schedule(schedule_injective)


def _quantize_check(types, attrs):
    op = "qnn.quantize"
    x, s = _data_and_scale(op, types)
    check_dtype(op, x.dtype, FLOATS + ("int32",), "data")
    check_dtype(op, s.dtype, FLOATS + ("int32",), "scale")
    out = DataType(attrs["out_dtype"])
    if str(out) not in QUANT_DTYPES:
        raise DTypeError(f"{op}: out_dtype {out} is not a quantized type tessera has ({', '.join(QUANT_DTYPES)})")
    if attrs["precision"]:
        check_dtype(op, attrs["precision"], FLOATS, "precision")
    return _param_kind(op, types, attrs, "out_dtype", out), out


quantize.def_infer(_shaped_like_data(_quantize_check))


@quantize.def_compute
def _quantize_compute(tensors, attrs):
    kind, out = _quantize_check([_tt(t) for t in tensors], attrs)
    x, s, z, axis, block = _operands("qnn.quantize", kind, tensors, attrs)
    fdt = DataType(attrs["precision"]) if attrs["precision"] else _promote(x.dtype, s.dtype)
    wide = DataType("float64") if fdt == "float64" else DataType("float32")

    def body(*i):
        v = x[i].astype(fdt) / param_at(s, kind, i, axis, block).astype(fdt)
        if out.is_minifloat():
            if z is not None and out == "float4_e2m1fn":
                v = v + param_at(z, kind, i, axis, block).astype(fdt)
            return saturate_float(v, out) if attrs["saturate"] and out != "float4_e2m1fn" else v.astype(out)
        q = te.round(v).astype(wide)
        if z is not None:
            q = q + param_at(z, kind, i, axis, block).astype(wide)
        return _saturate(q, out, wide)

    return [te.compute(x.shape, body, name="quantize")]


# ---------------------------------------------------------------------------------------------
# qnn.dequantize
# ---------------------------------------------------------------------------------------------
dequantize = register_op(
    "qnn.dequantize", inputs=("data", "scale", "zero_point*"), pattern=OpPattern.INJECTIVE,
    attrs={"axis": 1, "block_size": 0, "out_dtype": ""},
    doc="(float32(data) - zero_point) * scale as out_dtype (default: scale's dtype) (ONNX DequantizeLinear): "
        "per tensor, per axis or blocked.")
dequantize.def_schedule(schedule_injective)


def _dequantize_check(types, attrs):
    op = "qnn.dequantize"
    x, s = _data_and_scale(op, types)
    check_dtype(op, x.dtype, DEQUANT_DTYPES, "data")
    check_dtype(op, s.dtype, FLOATS, "scale")
    out = DataType(attrs["out_dtype"]) if attrs["out_dtype"] else s.dtype
    check_dtype(op, out, FLOATS, "out_dtype")
    return _param_kind(op, types, attrs, "data", x.dtype), out


dequantize.def_infer(_shaped_like_data(_dequantize_check))


@dequantize.def_compute
def _dequantize_compute(tensors, attrs):
    kind, out = _dequantize_check([_tt(t) for t in tensors], attrs)
    x, s, z, axis, block = _operands("qnn.dequantize", kind, tensors, attrs)
    # numpy: float32 - int32 and anything * float64 are float64; the rest stays float32
    wide = z is not None and x.dtype == "int32" or s.dtype == "float64"
    fdt = DataType("float64" if wide else "float32")

    if x.dtype.is_minifloat():
        z = None   # a float8's zero point is zero (ONNX); a float4's is not applied (its reference)

    def body(*i):
        v = x[i].astype("float32")
        if z is not None:
            v = v.astype(fdt) - param_at(z, kind, i, axis, block).astype(fdt)
        v = v.astype(fdt) * param_at(s, kind, i, axis, block).astype(fdt)
        return v.astype(out) if out != fdt else v

    return [te.compute(x.shape, body, name="dequantize")]


# ---------------------------------------------------------------------------------------------
# qnn.requantize
# ---------------------------------------------------------------------------------------------
requantize = register_op(
    "qnn.requantize", inputs=("data", "multiplier", "zero_point"), pattern=OpPattern.BROADCAST,
    attrs={},
    doc="clip(rint(data * multiplier + zero_point)) as zero_point's dtype, in float64 (the output stage of "
        "ONNX QLinearMatMul / QLinearConv); multiplier and zero_point broadcast against data.")
requantize.def_schedule(schedule_injective)


def _requantize_check(types):
    op = "qnn.requantize"
    x, m, z = types
    check_dtype(op, x.dtype, ("int32",), "data")
    check_dtype(op, m.dtype, FLOATS, "multiplier")
    check_dtype(op, z.dtype, tuple(_RANGE), "zero_point")
    shape = broadcast_shapes(op, x.shape, m.shape, z.shape)
    if shape != tuple(x.shape):
        raise ShapeError(f"{op}: multiplier {fmt_shape(m.shape)} and zero_point {fmt_shape(z.shape)} must "
                         f"broadcast to data {fmt_shape(x.shape)} without growing it")
    return z.dtype


@requantize.def_infer
def _requantize_infer(types, attrs):
    return [TensorType(types[0].shape, _requantize_check(types))]


@requantize.def_compute
def _requantize_compute(tensors, attrs):
    x, m, z = tensors
    out = _requantize_check([_tt(t) for t in tensors])
    f64 = DataType("float64")

    def body(*i):
        v = x[i].astype(f64) * m[broadcast_index(m, i)].astype(f64) + z[broadcast_index(z, i)].astype(f64)
        return _saturate(te.round(v), out, f64)

    return [te.compute(x.shape, body, name="requantize")]


# ---------------------------------------------------------------------------------------------
# qnn.dynamic_quantize
# ---------------------------------------------------------------------------------------------
dynamic_quantize = register_op(
    "qnn.dynamic_quantize", inputs=("data",), pattern=OpPattern.OPAQUE, num_outputs=3, attrs={},
    doc="uint8 quantization with a scale and zero point computed from the data's range including 0 "
        "(ONNX DynamicQuantizeLinear): outputs (y, y_scale, y_zero_point).")
dynamic_quantize.def_schedule(schedule_blocks)


@dynamic_quantize.def_infer
def _dynamic_quantize_infer(types, attrs):
    (x,) = types
    check_dtype("qnn.dynamic_quantize", x.dtype, ("float32",), "data")
    return [TensorType(x.shape, "uint8"), TensorType((), x.dtype), TensorType((), "uint8")]


@dynamic_quantize.def_compute
def _dynamic_quantize_compute(tensors, attrs):
    (x,) = tensors
    check_dtype("qnn.dynamic_quantize", x.dtype, ("float32",), "data")
    f = DataType("float32")
    zero = E.const(0.0, f)
    nd = len(x.shape)
    if nd == 0:
        lo = te.compute((), lambda: te.min(x[()], zero), name="dq_min")
        hi = te.compute((), lambda: te.max(x[()], zero), name="dq_max")
    else:
        ra = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(x.shape)]
        sa = [te.reduce_axis((0, d), name=f"s{k}") for k, d in enumerate(x.shape)]
        mn = te.compute((), lambda: te.min(x[tuple(a.var for a in ra)], axis=ra), name="dq_min_data")
        mx = te.compute((), lambda: te.max(x[tuple(a.var for a in sa)], axis=sa), name="dq_max_data")
        # numpy's minimum/maximum with 0: a NaN stays NaN
        lo = te.compute((), lambda: E.Select(te.isnan(mn[()]), mn[()], te.min(mn[()], zero)), name="dq_min")
        hi = te.compute((), lambda: E.Select(te.isnan(mx[()]), mx[()], te.max(mx[()], zero)), name="dq_max")
    scale = te.compute((), lambda: E.Select(hi[()] == lo[()], E.const(1.0, f), hi[()] - lo[()]) /
                       E.const(255.0, f), name="y_scale")

    def zp_body():
        init = zero - lo[()] / scale[()]
        return te.round(te.max(E.const(0.0, f), te.min(E.const(255.0, f), init)))

    zp_f = te.compute((), zp_body, name="dq_zero_point")
    y = te.compute(x.shape, lambda *i: _saturate(te.round(x[i] / scale[()]) + zp_f[()], "uint8", f), name="y")
    zp = te.compute((), lambda: _saturate(zp_f[()], "uint8", f), name="y_zero_point")
    return [y, scale, zp]


__all__ = ["QUANT_DTYPES", "check_param", "param_at", "saturate_float", "quantize", "dequantize", "requantize",
           "dynamic_quantize"]
