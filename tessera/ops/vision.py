"""Vision ops on (N, C, spatial...) tensors: image.grid_sample (ONNX GridSample).

grid_sample reads data at the normalized coordinates of `grid` (N, out..., r), r = the number of
spatial axes, the last grid axis listing them innermost first (x, y[, z]) as ONNX and PyTorch do.
A first stage per spatial axis turns the grid into pixel coordinates (denormalize by
align_corners, round half to even for nearest, clamp or reflect points outside the border); the
output stage gathers the taps of every axis (1 for nearest, 2 for linear, 4 for cubic with
a = -0.75) and sums them one axis at a time, innermost first, in the order of the ONNX reference.
Taps outside the input read 0 (padding_mode "zeros"), the edge ("border") or their mirror
("reflection"). Arithmetic is float32 (float64 for float64 data or grid); integer data is
computed in float64 and truncated on store, as the reference's numpy assignment does.
"""
from __future__ import annotations

from .. import te
from ..errors import ShapeError, TesseraError
from ..graph.ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import FLOATS, NUMERIC, check_dtype, fmt_shape
from ._schedule import schedule_injective
from .registry import OpPattern, register_op

GRID_SAMPLE_MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
_CUBIC_A = -0.75

grid_sample = register_op(
    "image.grid_sample", inputs=("data", "grid"), pattern=OpPattern.INJECTIVE,
    attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": False},
    doc="Sample data (N, C, D1..Dr) at the normalized grid points (N, H1..Hr', r): linear, nearest or "
        "cubic interpolation, zeros/border/reflection padding (ONNX GridSample, any r).")
grid_sample.def_schedule(schedule_injective)


def _check_grid_sample(data: TensorType, grid: TensorType, attrs):
    op = "image.grid_sample"
    check_dtype(op, data.dtype, NUMERIC, "data")
    check_dtype(op, grid.dtype, FLOATS, "grid")
    if attrs["mode"] not in GRID_SAMPLE_MODES:
        raise TesseraError(f"{op}: mode={attrs['mode']!r} is not one of {', '.join(GRID_SAMPLE_MODES)}")
    if attrs["padding_mode"] not in PADDING_MODES:
        raise TesseraError(f"{op}: padding_mode={attrs['padding_mode']!r} is not one of {', '.join(PADDING_MODES)}")
    r = data.ndim - 2
    if r < 1:
        raise ShapeError(f"{op}: data must be (N, C, D1..Dr) with r >= 1, got {fmt_shape(data.shape)}")
    if grid.ndim != r + 2 or grid.shape[-1] != r:
        raise ShapeError(f"{op}: grid must be (N, H1..H{r}, {r}) for data {fmt_shape(data.shape)}, got "
                         f"{fmt_shape(grid.shape)}")
    a, b = data.shape[0], grid.shape[0]
    if a != b and not (isinstance(a, str) != isinstance(b, str)):
        raise ShapeError(f"{op}: data {fmt_shape(data.shape)} and grid {fmt_shape(grid.shape)} have different "
                         f"batch sizes")
    return r


@grid_sample.def_infer
def _grid_sample_infer(types, attrs):
    data, grid = types
    _check_grid_sample(data, grid, attrs)
    return [TensorType((data.shape[0], data.shape[1]) + grid.shape[1:-1], data.dtype)]


def _compute_dtype(*dtypes) -> DataType:
    return DataType("float64") if any(str(d) in ("float64",) or DataType(d).is_integer() for d in dtypes) \
        else DataType("float32")


def _fconst(v, dt):
    return E.const(float(v), dt)


def reflect(x, lo, hi, dt):
    """x mirrored at lo and hi until it lies in [lo, hi] (ONNX GridSample's reflection); lo, hi
    are constants or float expressions of dtype dt."""
    rng = hi - lo
    zero, two = _fconst(0, dt), _fconst(2, dt)

    def fold(dx):
        # (reflected toward the near border when an even number of widths fit, else from the far one)
        n = te.floor(dx / rng)
        r = dx - n * rng
        return r, (n - two * te.floor(n / two)) != zero

    r_lo, odd_lo = fold(lo - x)
    below = E.Select(odd_lo, hi - r_lo, lo + r_lo)
    r_hi, odd_hi = fold(x - hi)
    above = E.Select(odd_hi, lo + r_hi, hi - r_hi)
    return E.Select(x < lo, below, E.Select(x > hi, above, x))


def _extent(d, dt):
    return _fconst(d.value, dt) if isinstance(d, E.IntImm) else d.astype(dt)


def _borders(length, align, dt):
    if align:
        return _fconst(0, dt), length - _fconst(1, dt)
    return _fconst(-0.5, dt), length - _fconst(0.5, dt)


def _cubic_coeffs(t, dt):
    a = _fconst(_CUBIC_A, dt)
    one, two = _fconst(1, dt), _fconst(2, dt)
    five, eight, four, three = (_fconst(v, dt) for v in (5, 8, 4, 3))
    x1, x2 = t + one, one - t
    x3 = two - t
    return [((a * x1 - five * a) * x1 + eight * a) * x1 - four * a,
            ((a + two) * t - (a + three)) * t * t + one,
            ((a + two) * x2 - (a + three)) * x2 * x2 + one,
            ((a * x3 - five * a) * x3 + eight * a) * x3 - four * a]


@grid_sample.def_compute
def _grid_sample_compute(tensors, attrs):
    data, grid = tensors
    tt = [TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)
          for t in tensors]
    r = _check_grid_sample(tt[0], tt[1], attrs)
    mode, pad, align = attrs["mode"], attrs["padding_mode"], bool(attrs["align_corners"])
    dt = _compute_dtype(data.dtype, grid.dtype)
    out_sp = list(grid.shape[1:-1])
    lengths = [_extent(data.shape[2 + d], dt) for d in range(r)]
    zero, one, half = _fconst(0, dt), _fconst(1, dt), _fconst(0.5, dt)

    # stage 1: per spatial axis, the (adjusted) pixel coordinate of every output point
    coords = []
    for d in range(r):
        length = lengths[d]

        def coord(n, *o, d=d, length=length):
            g = grid[(n,) + tuple(o) + (r - 1 - d,)].astype(dt)
            x = (g + one) * half * (length - one) if align else ((g + one) * length - one) * half
            if mode == "nearest":
                x = te.round(x)
            if pad == "border":
                lo, hi = _borders(length, align, dt)
                x = E.Select(E.Or(x < lo, x > hi), te.min(te.max(x, zero), length - one), x)
            elif pad == "reflection":
                lo, hi = _borders(length, align, dt)
                x = reflect(x, lo, hi, dt) if not (align and _is_one(data.shape[2 + d])) else lo
            return x

        coords.append(te.compute([grid.shape[0]] + out_sp, coord, name=f"grid_sample_coord{d}"))

    def fetch(n, c, idx):
        """data[n, c, idx...] for integer tap positions, with the padding rule."""
        ok, safe = [], []
        for d, i in enumerate(idx):
            ext = data.shape[2 + d]
            hi = ext - 1 if isinstance(ext, E.IntImm) else ext - E.const(1, ext.dtype)
            hi = E.const(hi.value, "int64") if isinstance(hi, E.IntImm) else E.convert(hi).astype("int64")
            if pad == "reflection":
                lo_f, hi_f = _borders(lengths[d], align, dt)
                i = reflect(i.astype(dt), lo_f, hi_f, dt).astype("int64") \
                    if not (align and _is_one(ext)) else E.const(0, "int64")
            elif pad == "zeros":
                ok.append(E.And(i >= E.const(0, "int64"), i <= hi))
            safe.append(te.max(te.min(i, hi), E.const(0, "int64")))
        v = data[(n, c) + tuple(safe)]
        v = v.astype(dt) if v.dtype != dt else v
        return E.Select(te.all(*ok), v, zero) if ok else v

    def sample(n, c, *o):
        xs = [coords[d][(n,) + tuple(o)] for d in range(r)]
        if mode == "nearest":
            return _store(fetch(n, c, [x.astype("int64") for x in xs]), data.dtype, dt)
        taps = []
        for x in xs:
            f = te.floor(x)
            t = x - f
            base = f.astype("int64")
            if mode == "linear":
                taps.append([(base, one - t), (base + E.const(1, "int64"), t)])
            else:
                ws = _cubic_coeffs(t, dt)
                taps.append([(base + E.const(k - 1, "int64"), ws[k]) for k in range(4)])

        def interp(d, prefix):
            # one axis at a time, the innermost axis first (as the reference's nested 1-d passes)
            acc = None
            for i, w in taps[d]:
                v = fetch(n, c, prefix + [i]) if d == r - 1 else interp(d + 1, prefix + [i])
                acc = w * v if acc is None else acc + w * v
            return acc

        return _store(interp(0, []), data.dtype, dt)

    shape = [data.shape[0], data.shape[1]] + out_sp
    return [te.compute(shape, sample, name="grid_sample")]


def _is_one(ext) -> bool:
    return isinstance(ext, E.IntImm) and ext.value == 1


def _store(v, dtype, dt):
    """v (computed in dt) as dtype: floats round, integers truncate toward zero after saturating."""
    dtype = DataType(dtype)
    if dtype == dt:
        return v
    if dtype.is_float():
        return v.astype(dtype)
    lo, hi = te.min_value(dtype), te.max_value(dtype)
    v = te.max(te.min(v, _fconst(hi.value, dt)), _fconst(lo.value, dt))
    return v.astype(dtype)
