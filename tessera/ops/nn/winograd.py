"""Winograd convolution F(m x m, 3 x 3) for 3x3, stride-1 convolutions (Lavin & Gray 2016; TVM's
conv2d_winograd): three ops around an ordinary batched GEMM.

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A          per m x m output tile, alpha = m + 2

- nn.winograd_weight_transform: g (OIHW, or blocked OIHW{i}i{o}o) -> U (alpha, alpha, C, O), G g G^T;
  over a constant weight it folds at compile time (graph/passes/winograd.py);
- nn.winograd_input_transform: d (NCHW{x}c or NCHW) -> V (alpha, alpha, P, C), B^T d B of every
  (alpha x alpha) input tile, the padding read as zeros; P = rows >= the tile count (extra rows
  are zeros, so that a GEMM micro-kernel's rows divide P);
- nn.matmul(V, U) -> M (alpha, alpha, P, O): alpha^2 independent (P x C) @ (C x O) products;
- nn.winograd_output_transform: M -> Y (NCHW{x}c or NCHW), A^T m A, cut to the output size (a
  partial tile at the bottom or right edge is computed and dropped).

F(2x2, 3x3) multiplies 16 / 4 = 4 times an output (direct: 9), F(3x3, 3x3) 25 / 9 = 2.8 times, F(4x4, 3x3)
36 / 16 = 2.25 times; F(4x4) loses about one decimal digit of float32 accuracy to its larger transform
coefficients (tests/ops/nn/test_winograd.py measures all three against a float64 convolution).

The transforms are spatial computes whose sums are written out term by term with their constant
coefficients (zeros left out); the tile position (eps, nu) picks its row of B^T / A^T with a select
chain that the default schedule's unrolled loops fold to one row each. Default CPU schedules: the
input transform per (tile, channel block): the (alpha x alpha) patch, its row transform and its
column transform as three small stages in local arrays (compute_at), tile positions unrolled, the
channel block vectorized, tiles in parallel; the output transform per (tile row, tile) likewise,
with the fused epilogue (bias, ReLU, residual add) folded into its output block.
"""
from __future__ import annotations

import re
from fractions import Fraction

import numpy as np

from ... import te
from ...errors import ScheduleError, ShapeError, TesseraError
from ...ir import TensorType
from ...ir import expr as E
from .. import _schedule as S
from .._schedule import schedule_injective
from ..registry import REQUIRED, OpPattern, register_op
from . import _util as U

INPUT = "nn.winograd_input_transform"
OUTPUT = "nn.winograd_output_transform"
WEIGHT = "nn.winograd_weight_transform"
TILE_SIZES = (2, 3, 4)

_F = Fraction
# Lavin & Gray's matrices (interpolation points 0, 1, -1 for F(2); 0, +-1, +-2 for F(4)); F(3) by the
# Toom-Cook construction at points 0, 1, -1, 2 and infinity (tests/ops/nn/test_winograd.py checks all
# three against a direct convolution)
_MATRICES = {
    2: dict(BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
            G=[[1, 0, 0], [_F(1, 2), _F(1, 2), _F(1, 2)], [_F(1, 2), _F(-1, 2), _F(1, 2)], [0, 0, 1]],
            AT=[[1, 1, 1, 0], [0, 1, -1, -1]]),
    3: dict(BT=[[2, -1, -2, 1, 0], [0, -2, -1, 1, 0], [0, 2, -3, 1, 0], [0, -1, 0, 1, 0], [0, 2, -1, -2, 1]],
            G=[[_F(1, 2), 0, 0], [_F(-1, 2), _F(-1, 2), _F(-1, 2)], [_F(-1, 6), _F(1, 6), _F(-1, 6)],
               [_F(1, 6), _F(1, 3), _F(2, 3)], [0, 0, 1]],
            AT=[[1, 1, 1, 1, 0], [0, 1, -1, 2, 0], [0, 1, 1, 4, 1]]),
    4: dict(BT=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
            G=[[_F(1, 4), 0, 0], [_F(-1, 6), _F(-1, 6), _F(-1, 6)], [_F(-1, 6), _F(1, 6), _F(-1, 6)],
               [_F(1, 24), _F(1, 12), _F(1, 6)], [_F(1, 24), _F(-1, 12), _F(1, 6)], [0, 0, 1]],
            AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}

_BLOCKED = re.compile(r"^NCHW(\d+)c$")
_KBLOCKED = re.compile(r"^OIHW(\d+)i(\d+)o$")


def winograd_matrices(tile_size: int) -> dict:
    """{"BT", "G", "AT"} of F(m x m, 3 x 3) as float64 numpy arrays (for references and tests)."""
    m = _tile("winograd_matrices", tile_size)
    return {k: np.array([[float(x) for x in row] for row in v]) for k, v in _MATRICES[m].items()}


def _tile(op, m) -> int:
    if isinstance(m, bool) or not isinstance(m, int) or m not in TILE_SIZES:
        raise TesseraError(f"{op}: tile_size must be one of {TILE_SIZES} (F(m x m, 3 x 3)), got {m!r}")
    return m


def _layout_block(op, layout, what="layout") -> int:
    """0 for "NCHW", x for "NCHW{x}c"; TesseraError otherwise."""
    if layout == "NCHW":
        return 0
    mt = _BLOCKED.match(str(layout))
    if not mt or int(mt.group(1)) < 1:
        raise TesseraError(f"{op}: {what} {layout!r} must be 'NCHW' or a blocked layout NCHW{{x}}c such as 'NCHW16c'")
    return int(mt.group(1))


def tiles_of(size: int, m: int) -> int:
    """Tiles of m outputs along an axis of `size` outputs."""
    return -(-size // m)


# ---------------------------------------------------------------------------------------------
# expression helpers
# ---------------------------------------------------------------------------------------------
def _lincomb(coefs, terms, dtype):
    """sum_k coefs[k] * terms[k] with the zero coefficients left out and +-1 as additions."""
    total = None
    for c, x in zip(coefs, terms):
        if c == 0:
            continue
        if c == 1:
            t, sub = x, False
        elif c == -1:
            t, sub = x, True
        else:
            t, sub = x * te.const(float(c), dtype), False
        if total is None:
            total = t * te.const(-1.0, dtype) if sub else t
        else:
            total = total - t if sub else total + t
    return total if total is not None else te.const(0.0, dtype)


def _pick(index, exprs):
    """exprs[index] for a loop index in [0, len(exprs)): a select chain that folds to one entry once
    the index is a constant (an unrolled loop)."""
    out = exprs[-1]
    for k in range(len(exprs) - 2, -1, -1):
        out = E.Select(index == k, exprs[k], out)
    return out


# ---------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------
def input_transform_shape(op, data: TensorType, attrs) -> tuple:
    """(alpha, alpha, rows, C) of the input transform (checking the attributes)."""
    m = _tile(op, attrs["tile_size"])
    x = _layout_block(op, attrs["layout"])
    U.check_dtype(op, data, U.FLOATS, "data")
    U.check_rank(op, data, 5 if x else 4, f"data ({attrs['layout']})")
    dims = U.static_dims(op, data, range(data.ndim), "dimensions")
    if x and dims[4] != x:
        raise ShapeError(f"{op}: data {data} has blocks of {dims[4]} channels but layout is {attrs['layout']!r}")
    N, H, W = dims[0], dims[2], dims[3]
    C = dims[1] * x if x else dims[1]
    pt, pl, pb, pr = U.padding_tuple(op, attrs["padding"], 2)
    OH, OW = H + pt + pb - 2, W + pl + pr - 2
    if OH < 1 or OW < 1:
        raise ShapeError(f"{op}: a 3x3 window does not fit data {data} padded by {(pt, pl, pb, pr)}")
    tiles = N * tiles_of(OH, m) * tiles_of(OW, m)
    rows = attrs["rows"]
    if isinstance(rows, bool) or not isinstance(rows, int) or (rows and rows < tiles):
        raise ShapeError(f"{op}: rows={rows!r} must be 0 (the tile count) or an int >= the {tiles} tiles of "
                         f"data {data} in {m}x{m} output tiles")
    return (m + 2, m + 2, rows or tiles, C)


def output_transform_shape(op, data: TensorType, attrs) -> tuple:
    m = _tile(op, attrs["tile_size"])
    x = _layout_block(op, attrs["layout"])
    U.check_dtype(op, data, U.FLOATS, "data")
    U.check_rank(op, data, 4, "data (alpha, alpha, tiles, channels)")
    a0, a1, P, O = U.static_dims(op, data, range(4), "dimensions")
    if (a0, a1) != (m + 2, m + 2):
        raise ShapeError(f"{op}: data {data} must have {m + 2}x{m + 2} tile positions for tile_size {m}")
    N = attrs["batch"]
    OH, OW = U.int_tuple(op, "output_size", attrs["output_size"], 2, minimum=1)
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise TesseraError(f"{op}: batch must be a positive int, got {N!r}")
    tiles = N * tiles_of(OH, m) * tiles_of(OW, m)
    if P < tiles:
        raise ShapeError(f"{op}: data {data} has {P} tile rows, an output {N}x{OH}x{OW} in {m}x{m} tiles needs "
                         f"{tiles}")
    if x:
        if O % x:
            raise ShapeError(f"{op}: {O} channels do not divide into blocks of {x} (layout {attrs['layout']!r})")
        return (N, O // x, OH, OW, x)
    return (N, O, OH, OW)


def weight_transform_shape(op, weight: TensorType, attrs) -> tuple:
    m = _tile(op, attrs["tile_size"])
    U.check_dtype(op, weight, U.FLOATS, "weight")
    layout = attrs["kernel_layout"]
    if layout == "OIHW":
        U.check_rank(op, weight, 4, "weight (OIHW)")
        O, C, KH, KW = U.static_dims(op, weight, range(4), "dimensions")
    else:
        mt = _KBLOCKED.match(str(layout))
        if not mt:
            raise TesseraError(f"{op}: kernel_layout {layout!r} must be 'OIHW' or OIHW{{i}}i{{o}}o such as 'OIHW16i16o'")
        U.check_rank(op, weight, 6, f"weight ({layout})")
        Oc, Cc, KH, KW, ib, ob = U.static_dims(op, weight, range(6), "dimensions")
        if (ib, ob) != (int(mt.group(1)), int(mt.group(2))):
            raise ShapeError(f"{op}: weight {weight} has blocks {ib}i{ob}o but kernel_layout is {layout!r}")
        O, C = Oc * ob, Cc * ib
    if (KH, KW) != (3, 3):
        raise ShapeError(f"{op}: Winograd F(m x m, 3 x 3) takes a 3x3 kernel, got {KH}x{KW} (weight {weight})")
    return (m + 2, m + 2, C, O)


# ---------------------------------------------------------------------------------------------
# computes
# ---------------------------------------------------------------------------------------------
def winograd_input_transform(data, tile_size, padding=(0, 0, 0, 0), rows=0, layout="NCHW"):
    """V[eps, nu, p, c] = (B^T d_p B)[eps, nu] for input tile p (row-major over (n, tile row, tile
    column)) of channel c; rows past the tile count are zeros."""
    op = INPUT
    m = _tile(op, tile_size)
    alpha = m + 2
    x = _layout_block(op, layout)
    pt, pl, pb, pr = U.padding_tuple(op, padding, 2)
    dims = [int(s.value) for s in data.shape]
    N, H, W = dims[0], dims[2], dims[3]
    C = dims[1] * x if x else dims[1]
    OH, OW = H + pt + pb - 2, W + pl + pr - 2
    TH, TW = tiles_of(OH, m), tiles_of(OW, m)
    tiles = N * TH * TW
    P = rows or tiles
    dt = data.dtype
    BT = _MATRICES[m]["BT"]

    def load(n, h, w, c):
        return data[n, c // x, h, w, c % x] if x else data[n, c, h, w]

    def patch(r, s, p, c):
        n = p // (TH * TW) if N > 1 else 0
        th = (p // TW) % TH if TH > 1 else 0
        tw = p % TW if TW > 1 else 0
        h = th * m + (r - pt)
        w = tw * m + (s - pl)
        conds = []
        if P > tiles:
            conds.append(p < tiles)
        if pt:
            conds.append(h >= 0)
        if (TH - 1) * m + alpha - 1 - pt >= H:
            conds.append(h < H)
        if pl:
            conds.append(w >= 0)
        if (TW - 1) * m + alpha - 1 - pl >= W:
            conds.append(w < W)
        if not conds:
            return load(n, h, w, c)
        return te.if_then_else(te.all(*conds), load(n, h, w, c), te.const(0, dt))

    d = U.compute((alpha, alpha, P, C), ["r", "s", "p", "c"], patch, "input_tile")
    rows_t = U.compute((alpha, alpha, P, C), ["eps", "s", "p", "c"],
                       lambda e, s, p, c: _pick(e, [_lincomb(BT[k], [d[r, s, p, c] for r in range(alpha)], dt)
                                                    for k in range(alpha)]), "input_rows")
    return U.compute((alpha, alpha, P, C), ["eps", "nu", "p", "c"],
                     lambda e, nu, p, c: _pick(nu, [_lincomb(BT[k], [rows_t[e, s, p, c] for s in range(alpha)], dt)
                                                    for k in range(alpha)]), "data_pack")


def winograd_output_transform(data, tile_size, batch, output_size, layout="NCHW"):
    """Y[n, o, h, w] = (A^T M_p A)[h % m, w % m] for the tile p holding output (h, w)."""
    op = OUTPUT
    m = _tile(op, tile_size)
    alpha = m + 2
    x = _layout_block(op, layout)
    OH, OW = U.int_tuple(op, "output_size", output_size, 2, minimum=1)
    TH, TW = tiles_of(OH, m), tiles_of(OW, m)
    P, O = int(data.shape[2].value), int(data.shape[3].value)
    dt = data.dtype
    AT = _MATRICES[m]["AT"]
    rows_t = U.compute((m, alpha, P, O), ["i", "nu", "p", "o"],
                       lambda i, nu, p, o: _pick(i, [_lincomb(AT[k], [data[e, nu, p, o] for e in range(alpha)], dt)
                                                     for k in range(m)]), "inverse_rows")

    def out(n, oh, ow, o):
        p = n * (TH * TW) + (oh // m) * TW + ow // m
        return _pick(ow % m, [_lincomb(AT[k], [rows_t[oh % m, nu, p, o] for nu in range(alpha)], dt)
                              for k in range(m)])

    if x:
        return U.compute((batch, O // x, OH, OW, x), ["n", "oc_chunk", "oh", "ow", "oc_block"],
                         lambda n, oc, oh, ow, ob: out(n, oh, ow, oc * x + ob), "inverse")
    return U.compute((batch, O, OH, OW), ["n", "oc", "oh", "ow"], lambda n, o, oh, ow: out(n, oh, ow, o), "inverse")


def winograd_weight_transform(weight, tile_size, kernel_layout="OIHW"):
    """U[eps, nu, c, o] = (G g_{o,c} G^T)[eps, nu]."""
    op = WEIGHT
    m = _tile(op, tile_size)
    alpha = m + 2
    G = _MATRICES[m]["G"]
    dt = weight.dtype
    if kernel_layout == "OIHW":
        O, C = (int(s.value) for s in weight.shape[:2])

        def g(o, c, kh, kw):
            return weight[o, c, kh, kw]
    else:
        Oc, Cc, _, _, ib, ob = (int(s.value) for s in weight.shape)
        O, C = Oc * ob, Cc * ib

        def g(o, c, kh, kw):
            return weight[o // ob, c // ib, kh, kw, c % ib, o % ob]

    rows_t = U.compute((alpha, 3, C, O), ["eps", "kw", "c", "o"],
                       lambda e, kw, c, o: _pick(e, [_lincomb(G[k], [g(o, c, kh, kw) for kh in range(3)], dt)
                                                     for k in range(alpha)]), "kernel_rows")

    def body(e, nu, c, o):
        return _pick(nu, [_lincomb(G[k], [rows_t[e, kw, c, o] for kw in range(3)], dt) for k in range(alpha)])

    return U.compute((alpha, alpha, C, O), ["eps", "nu", "c", "o"], body, "kernel_pack")


# ---------------------------------------------------------------------------------------------
# schedules
# ---------------------------------------------------------------------------------------------
def _extent(sch, loop):
    ext = sch.get(loop).extent
    return ext.value if isinstance(ext, E.IntImm) else None


def _unroll_all(sch, loops):
    for lp in loops:
        if _extent(sch, lp) is not None:
            sch.unroll(lp)


def _lane_split(extent: int, target) -> int:
    """The channel vector of a plain layout: the target's fp32 lanes (or 8, 4) dividing `extent`."""
    lanes = max(4, int(getattr(target, "vector_bits", 128)) // 32)
    for v in (lanes, 8, 4):
        if extent % v == 0:
            return v
    return 1


def schedule_input_transform(sch, ctx):
    """Per (tile, channel block): the patch, its row and column transforms in local arrays, the
    tile positions unrolled, the channel block vectorized; (tile, channel block) parallel."""
    blk = sch.get_block(ctx.block)
    eps, nu, p, c = sch.get_loops(blk)
    x = _layout_block(INPUT, ctx.attrs["layout"]) or _lane_split(_extent(sch, c), ctx.target)
    cc, ci = sch.split(c, [None, x])
    sch.reorder(p, cc, eps, nu, ci)
    rows = sch.get_block("input_rows")
    sch.compute_at(rows, cc)
    tile = sch.get_block("input_tile")
    sch.compute_at(tile, cc)
    for b in (tile, rows, blk):
        loops = sch.get_loops(b)[2:]
        _unroll_all(sch, loops[:-1])
        S.vectorize_short(sch, loops[-1])
    work = _extent(sch, p) * _extent(sch, cc) * x * (_extent(sch, eps) ** 2)
    if S.thread_count(ctx.target) > 1 and work >= S.PARALLEL_MIN_WORK:
        # knob: the parallel loop over (tile, channel block) or over tiles only (a tile's channel
        # blocks on one core: fewer, longer parallel iterations)
        outer = ctx.choose(sch, "winograd.parallel", ["tiles"], "tiles_and_blocks")
        sch.parallel(sch.fuse(p, cc) if outer == "tiles_and_blocks" else p)


def schedule_output_transform(sch, ctx):
    """Per (tile row, tile): the row transform of the tile's alpha x alpha block of M in a local
    array, then its m x m outputs (epilogue included), tile positions unrolled, the channel block
    vectorized; (n, channel block, tile row) parallel."""
    blk = sch.get_block(ctx.block)
    m = _tile(OUTPUT, ctx.attrs["tile_size"])
    loops = sch.get_loops(blk)
    if len(loops) == 5:
        n, oc, oh, ow, ob = loops
    else:
        n, o, oh, ow = loops
        v = _lane_split(_extent(sch, o), ctx.target)
        oc, ob = sch.split(o, [None, v])
    th, i = sch.split(oh, [None, m])
    tw, j = sch.split(ow, [None, m])
    sch.reorder(n, oc, th, tw, i, j, ob)
    rows = sch.get_block("inverse_rows")
    sch.compute_at(rows, tw)
    for lp in sch.get_loops(rows)[4:-1]:
        if _extent(sch, lp) is not None:
            sch.unroll(lp)
    S.vectorize_short(sch, sch.get_loops(rows)[-1])
    sch.unroll(i)
    sch.unroll(j)
    S.vectorize_short(sch, ob)
    for name in ctx.epilogue:
        try:
            e = sch.get_block(name)
            sch.reverse_compute_at(e, tw)
            S.vectorize_short(sch, sch.get_loops(e)[-1])
        except ScheduleError:
            continue
    if S.thread_count(ctx.target) > 1:
        # knob: the parallel loop over (image, channel block, tile row) or (image, channel block)
        outer = ctx.choose(sch, "winograd.parallel", ["blocks"], "blocks_and_rows")
        sch.parallel(sch.fuse(n, oc, th) if outer == "blocks_and_rows" else sch.fuse(n, oc))


# ---------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------
def _register_transform(name, input_name, pattern, defaults, doc, shape_fn, transform, schedule):
    """One of the three transforms: typed by shape_fn(name, input type, attrs) with the input's dtype,
    computed by transform(input, *the attributes in the order `defaults` declares them)."""
    op = register_op(name, inputs=(input_name,), pattern=pattern, attrs=defaults, doc=doc)
    order = tuple(defaults)

    @op.def_infer
    def _infer(types, attrs):
        (t,) = types
        return [TensorType(shape_fn(name, t, attrs), t.dtype)]

    @op.def_compute
    def _compute(tensors, attrs):
        return [transform(tensors[0], *(attrs[k] for k in order))]

    op.def_schedule(schedule)
    return op


input_transform = _register_transform(
    INPUT, "data", OpPattern.OUT_ELEMWISE_FUSABLE,
    {"tile_size": REQUIRED, "padding": (0, 0, 0, 0), "rows": 0, "layout": "NCHW"},
    "Winograd F(m x m, 3 x 3) input transform: data (NCHW or NCHW{x}c) -> (m+2, m+2, rows, C), B^T d B "
    "of each input tile (padding read as zeros; rows 0: the tile count, more: zero rows).",
    input_transform_shape, winograd_input_transform, schedule_input_transform)

output_transform = _register_transform(
    OUTPUT, "data", OpPattern.OUT_ELEMWISE_FUSABLE,
    {"tile_size": REQUIRED, "batch": REQUIRED, "output_size": REQUIRED, "layout": "NCHW"},
    "Winograd F(m x m, 3 x 3) output transform: (m+2, m+2, tiles, O) -> (batch, O, H, W) in layout NCHW or "
    "NCHW{x}c, A^T M A of each tile, cut to output_size (H, W).",
    output_transform_shape, winograd_output_transform, schedule_output_transform)

weight_transform = _register_transform(
    WEIGHT, "weight", OpPattern.INJECTIVE, {"tile_size": REQUIRED, "kernel_layout": "OIHW"},
    "Winograd F(m x m, 3 x 3) weight transform: a 3x3 kernel (OIHW or OIHW{i}i{o}o) -> (m+2, m+2, C, O), "
    "G g G^T; over a constant weight it folds at compile time.",
    weight_transform_shape, winograd_weight_transform, schedule_injective)

__all__ = [
    "INPUT",
    "OUTPUT",
    "TILE_SIZES",
    "WEIGHT",
    "input_transform_shape",
    "output_transform_shape",
    "tiles_of",
    "weight_transform_shape",
    "winograd_input_transform",
    "winograd_matrices",
    "winograd_output_transform",
    "winograd_weight_transform",
]
