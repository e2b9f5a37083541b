"""Matrix products: nn.dense (x @ W^T, Gemm's core), nn.matmul (numpy matmul: 1-D promotion, batch
broadcasting, symbolic batch; optional transposes), nn.batch_matmul (3-D, Relay's transpose_b=True
default) and nn.matmul_integer (ONNX MatMulInteger: int8/uint8 with zero points -> int32).

float16/bfloat16 accumulate in float32 and round once; integers accumulate in the output dtype.
"""
from __future__ import annotations

from ... import te
from ...errors import DTypeError, ShapeError, TesseraError
from ...ir import TensorType
from ...ir import expr as E
from ..registry import OpPattern, register_op
from . import _util as U
from .._schedule import schedule_injective
from ._cpu_schedule import schedule_matmul
from ...target import Target
from ...tir.tensor_intrin.x86 import AVX2, AVX512, FP32_GEMM
from ._cpu_schedule import tile_preference

_MATMUL_DTYPES = U.FLOATS + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _k_match(op, ka, kb, a, b):
    if ka != kb and not (isinstance(ka, str) or isinstance(kb, str)):
        raise ShapeError(f"{op}: contraction extents differ: {ka} ({a}) vs {kb} ({b})")
    if isinstance(ka, str) and isinstance(kb, str) and ka != kb:
        raise ShapeError(f"{op}: contraction extents are different symbols {ka!r} and {kb!r}")


def matmul_shape(op, a: TensorType, b: TensorType, transpose_a=False, transpose_b=False) -> tuple:
    """numpy.matmul's output shape (with optional transposes of the last two axes)."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"{op}: operands must have rank >= 1, got {a} and {b}")
    sa, sb = a.shape, b.shape
    if a.ndim == 1:
        m, ka, batch_a = None, sa[0], ()
    else:
        m, ka = (sa[-1], sa[-2]) if transpose_a else (sa[-2], sa[-1])
        batch_a = sa[:-2]
    if b.ndim == 1:
        n, kb, batch_b = None, sb[0], ()
    else:
        kb, n = (sb[-1], sb[-2]) if transpose_b else (sb[-2], sb[-1])
        batch_b = sb[:-2]
    _k_match(op, ka, kb, a, b)
    batch = U.broadcast_dims(op, batch_a, batch_b, ("batch of a", "batch of b"))
    return tuple(batch) + ((m,) if m is not None else ()) + ((n,) if n is not None else ())


def _panel(M, N, target=None):
    """Columns of a packed B panel: the nr of the target's best micro-kernel tile (the most FMAs per
    load, _cpu_schedule.tile_preference; AVX-512 tiles where the target has them; target None: the
    host) whose rows divide M and columns divide N (N None: any N), or None. M None (a symbolic row
    count): the best tile whose columns divide N (its rows are padded, see row_pad)."""
    t = Target.host() if target is None else Target(target)
    for isa, feats, lanes in (("avx512", AVX512, 16), ("avx2", AVX2, 8)):
        if all(t.has_feature(f) for f in feats):
            for mr, nr in sorted(FP32_GEMM[isa], key=lambda tile: tile_preference(tile, lanes)):
                if (M is None or M % mr == 0) and (N is None or N % nr == 0):
                    return nr
    return None


def _symbolic_panel(target=None):
    """Panel width for a symbolic column count N (attention's Q.K^T at a dynamic length): the
    narrowest tile width of the target's best ISA that is still two vectors (32 columns on AVX-512,
    16 on AVX2), or None. The last panel is zero-padded; at length 16 a 64-wide panel computed 4x
    the columns (Q.K^T took 7x a static compile's time at 1 thread, 32 wide 3.4x), while at 64-384
    the 32-wide tile measured within 3% of the 64-wide one."""
    t = Target.host() if target is None else Target(target)
    for isa, feats, lanes in (("avx512", AVX512, 16), ("avx2", AVX2, 8)):
        if all(t.has_feature(f) for f in feats):
            widths = [nr for _, nr in FP32_GEMM[isa] if nr >= 2 * lanes]
            if widths:
                return min(widths)
    return None


def row_pad(panel: int) -> int:
    """Rows a matmul over B packed in `panel`-wide panels pads a symbolic row count M to a multiple
    of: the fewest rows of the micro-kernel tiles that are `panel` wide (4 for 64, 24 and 16; 8 for
    32 and 8), so that the padding wastes the least (batch x sequence row counts are mostly
    multiples of 4, which pad by nothing)."""
    rows = [mr for tiles in FP32_GEMM.values() for mr, nr in tiles if nr == panel]
    if not rows:
        raise TesseraError(f"no x86 GEMM micro-kernel tile is {panel} columns wide (tiles: {FP32_GEMM})")
    return min(rows)


def _padded_panel(M, N, target=None):
    """For an N that no tile divides: the nr of the target's preferred tile whose rows divide M (B
    is then packed in zero-padded panels and C computed N rounded up to nr wide), or None."""
    if any(N % nr == 0 for tiles in _fp32_tiles().values() for _, nr in tiles):
        return None
    return _panel(M, None, target)


def _fp32_tiles():
    return FP32_GEMM


def k_unroll(K) -> int:
    """How many k steps one reduction step takes (unrolled in the expression, so that each update
    of a tile of C in memory carries several multiply-adds): 4 when it divides a static K."""
    if not isinstance(K, E.IntImm):
        return 1
    return next(u for u in (4, 2, 1) if K.value % u == 0)


def gemm_tileable(a, b, transpose_a, transpose_b, acc, target=None) -> bool:
    """Whether a float32 matmul fits the x86 GEMM micro-kernels (tessera.tir.tensor_intrin.x86):
    static M, N, K, B read row-major, and a supported tile whose rows divide M and whose columns
    divide N, or, for any N (GPT-2's 50257-word vocabulary), whose columns are padded to (B packed
    in zero-padded panels, see matmul_compute). Such a matmul keeps the plain one-step reduction,
    the form the micro-kernel's description matches (its default schedule tensorizes it; targets
    without AVX2 take the loop schedule). With a symbolic M, N or K (no transposes): on any target
    with the micro-kernels (rows and columns padded to the tile by matmul_compute)."""
    FP32_GEMM = _fp32_tiles()
    if acc != "float32" or a.dtype != "float32" or a.ndim < 2 or b.ndim < 2 or transpose_b:
        return False
    dims = [a.shape[-2], a.shape[-1], b.shape[-1]]
    if not all(isinstance(d, E.IntImm) for d in dims):
        # a symbolic extent: A's rows and B's columns are padded to the tile (see matmul_compute)
        return not transpose_a and _panel(None, None, target) is not None
    M, N = dims[0].value, dims[2].value
    if transpose_a and M > 1:
        return False
    if any(M % mr == 0 and N % nr == 0 for tiles in FP32_GEMM.values() for mr, nr in tiles):
        return True
    return _padded_panel(M, N, target) is not None


def _unpacked_type(b, b_cols):
    """The (..., K, N) TensorType of a B packed by nn.pack_matmul_weight ((..., P, K, panel))."""
    t = U.ttype(b)
    return TensorType(t.shape[:-3] + (t.shape[-2], b_cols), t.dtype)


def matmul_compute(a, b, transpose_a=False, transpose_b=False, out_dtype=None, name="matmul",
                   a_zero_point=None, b_zero_point=None, b_panel=0, b_cols=0, target=None):
    """out[batch, i, j] = sum_k a[batch', i, k] * b[batch'', k, j] (numpy matmul semantics); k is
    reduced `k_unroll(K)` steps at a time. b_panel > 0: b is already packed in panels of that many
    columns of a B with b_cols columns (nn.pack_matmul_weight's layout). The micro-kernel form with a
    symbolic M (or N, K): A's rows padded with zeros to a multiple of row_pad(panel) ("a_pad"), B
    packed in zero-padded panels ("b_pack"), C computed padded ("<name>_acc") and cut to (M, N)."""
    odt = U.out_dtype(name, out_dtype, a.dtype)
    acc = U.accum_dtype(odt) if odt.is_float() else odt
    b_type = _unpacked_type(b, b_cols) if b_panel else U.ttype(b)
    shape = U.shape_exprs(matmul_shape(name, U.ttype(a), b_type, transpose_a, transpose_b), a, b)
    K = a.shape[0] if a.ndim == 1 else (a.shape[-2] if transpose_a else a.shape[-1])
    plain = b_panel or (a_zero_point is None and gemm_tileable(a, b, transpose_a, transpose_b, acc, target))
    unroll = 1 if plain else k_unroll(K)
    k = te.reduce_axis((0, K // unroll if unroll > 1 else K), "k")
    nbatch = len(shape) - (a.ndim >= 2) - (b.ndim >= 2)
    names = [f"b{q}" for q in range(nbatch)] + (["i"] if a.ndim >= 2 else []) + (["j"] if b.ndim >= 2 else [])

    def operand(t, batch, row, transpose, zp, zp_row, kk):
        if t.ndim == 1:
            idx = (kk,)
        else:
            tb = U.broadcast_index_batch(t, batch)
            idx = tb + ((kk, row) if transpose else (row, kk))
        v = U.cast(t[idx], acc)
        if zp is not None:
            per_row = zp.ndim == 1 and U.dims_of(zp)[0] != 1
            z = zp[(zp_row,)] if per_row else zp[(0,) * zp.ndim]
            v = v - U.cast(z, acc)
        return v

    M = a.shape[-1] if transpose_a else a.shape[-2] if a.ndim >= 2 else None
    N_b = None if b_panel or b.ndim < 2 else b.shape[-1]
    # the micro-kernel form with a symbolic extent: B packed in (zero-padded) panels in the kernel
    sym = bool(plain) and not b_panel and M is not None and N_b is not None and not all(
        isinstance(d, E.IntImm) for d in (M, N_b, K))
    if b_panel:
        panel, padded = b_panel, (b_panel if b_cols % b_panel else None)
    elif sym:
        nv = N_b.value if isinstance(N_b, E.IntImm) else None
        panel = (_panel(None, nv, target) or _panel(None, None, target)) if nv else _symbolic_panel(target)
        padded = panel if nv is None or nv % panel else None
    else:
        padded = _padded_panel(M.value, b.shape[-1].value, target) if plain and M is not None else None
        panel = padded or (_panel(M.value, b.shape[-1].value, target) if plain and M is not None and M.value >= 64
                           else None)
    rows_padded = False
    if (b_panel or sym) and M is not None and (not isinstance(M, E.IntImm) or (sym and M.value % row_pad(panel))):
        # a symbolic row count: A's rows are padded with zeros to a multiple of the micro-kernel's
        # rows (row_pad), C computed that many rows and its first M rows copied out, so the tiles
        # of the micro-kernel cover every row (one copy of A and of C against a tail loop)
        pad = row_pad(panel)
        rows = -(-M.value // pad) * pad if isinstance(M, E.IntImm) else (M + (pad - 1)) // pad * pad
        M_sym = M
        a_in = a

        def pad_rows(*x):
            # a Select (both sides evaluated; the row index clamped inside A): a row is a vector
            # copy, where if_then_else would keep the loop scalar (tir/transform/vectorize.py)
            i = x[-2]
            return E.Select(i < M_sym, a_in[tuple(x[:-2]) + (te.min(i, M_sym - 1), x[-1])],
                            te.const(0, a_in.dtype))

        a = U.compute(tuple(a.shape[:-2]) + (rows, a.shape[-1]),
                      [f"b{q}" for q in range(a.ndim - 2)] + ["i", "k"], pad_rows, "a_pad")
        shape = tuple(shape[:-2]) + (rows, shape[-1])
        rows_padded = True
    if b_panel:
        b_packed = b
        if padded:
            shape = tuple(shape[:-1]) + (b.shape[-3] * panel,)
    elif panel:
        # B repacked in panel-column panels (each contiguous over k): what the micro-kernel streams;
        # columns past N (padded panels) are zeros
        N = b.shape[-1].value if isinstance(b.shape[-1], E.IntImm) else b.shape[-1]
        bb = tuple(b.shape[:-2])
        n_panels = -(-N // panel) if isinstance(N, int) else (N + (panel - 1)) // panel

        def pack(*x):
            j = x[-3] * panel + x[-1]
            if not padded:
                return b[tuple(x[:-3]) + (x[-2], j)]
            inside = j < N
            load = b[tuple(x[:-3]) + (x[-2], te.min(j, N - 1))]
            if not sym:
                return te.if_then_else(inside, load, te.const(0, b.dtype))
            # symbolic N: a full panel (jo < N // panel, the same for a whole vector of ji) is a
            # contiguous load from a start clamped inside B; only the last, partial panel loads
            # lane by lane (clamped, zero past N). Selects, which vectorize (see pad_rows); the C
            # code evaluates the one a scalar condition picks.
            start = te.max(te.min(x[-3] * panel, N - panel), 0)
            full = b[tuple(x[:-3]) + (x[-2], start + x[-1])]
            return E.Select(x[-3] < N // panel, full, E.Select(inside, load, te.const(0, b.dtype)))

        b_packed = U.compute(bb + (n_panels, K, panel), [f"b{q}" for q in range(len(bb))] + ["jo", "k", "ji"],
                             pack, "b_pack")
        if padded:
            shape = tuple(shape[:-1]) + (n_panels * panel,)
    else:
        b_packed = None

    def b_load(batch, j, kk):
        if b_packed is None:
            return operand(b, batch, j, not transpose_b, b_zero_point, j, kk)
        nb = b_packed.ndim - 3
        tb = tuple(0 if isinstance(b_packed.shape[q], E.IntImm) and b_packed.shape[q].value == 1 else x
                   for q, x in enumerate(batch[len(batch) - nb:])) if nb else ()
        return U.cast(b_packed[tb + (j // panel, kk, j % panel)], acc)

    def body(*idx):
        batch = idx[:nbatch]
        rest = idx[nbatch:]
        i = rest[0] if a.ndim >= 2 else None
        j = rest[-1] if b.ndim >= 2 else None
        total = None
        for u in range(unroll):
            kk = k * unroll + u if unroll > 1 else k
            term = operand(a, batch, i, transpose_a, a_zero_point, i, kk) * b_load(batch, j, kk)
            total = term if total is None else total + term
        return te.sum(total, axis=k)

    if padded or rows_padded:
        # C computed into zero-padded panels (and rows), then its first N columns (M rows) copied out
        full = U.compute(shape, names, body, name + "_acc")
        cols = ((E.const(b_cols, "int32"),) if b_panel else (b.shape[-1],)) if padded else (shape[-1],)
        out_shape = tuple(shape[:-2]) + ((M_sym,) if rows_padded else (shape[-2],)) + cols
        return U.compute(out_shape, names, lambda *i: full[i].astype(odt) if odt != acc else full[i], name)
    if acc == odt:
        return U.compute(shape, names, body, name)
    out = U.compute(shape, names, body, name + "_acc")
    return U.compute(shape, names, lambda *i: out[i].astype(odt), name)


def _check_pair(op, a, b, allowed=_MATMUL_DTYPES):
    U.check_dtype(op, a, allowed, "a")
    U.check_dtype(op, b, allowed, "b")
    U.same_dtype(op, (a, b), ("a", "b"))


# ---------------------------------------------------------------------------------------------
# nn.matmul
# ---------------------------------------------------------------------------------------------
matmul = register_op("nn.matmul", inputs=("a", "b"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                     attrs={"transpose_a": False, "transpose_b": False, "out_dtype": "", "b_panel": 0,
                            "b_cols": 0},
                     doc="numpy.matmul (1-D promotion, batch broadcasting), optionally transposing the "
                         "last two axes of a or b. b_panel > 0: b comes packed by nn.pack_matmul_weight "
                         "(panels of b_panel columns of a B with b_cols columns; float32, no transposes).")


matmul.def_schedule(schedule_matmul)


def _packed_b(op, a, b, attrs):
    """The unpacked (..., K, N) type of a packed b, after checking the packed matmul's contract."""
    panel, cols = attrs["b_panel"], attrs["b_cols"]
    if not isinstance(panel, int) or isinstance(panel, bool) or panel < 0:
        raise TesseraError(f"{op}: b_panel must be an int >= 0, got {panel!r}")
    if not panel:
        return b
    if attrs["transpose_a"] or attrs["transpose_b"] or str(a.dtype) != "float32" or attrs["out_dtype"] not in ("", "float32"):
        raise TesseraError(f"{op}: a packed b (b_panel={panel}) takes float32 operands without transposes")
    if b.ndim < 3 or b.shape[-1] != panel or not isinstance(b.shape[-3], int):
        raise ShapeError(f"{op}: b packed in panels of {panel} columns must be (..., panels, K, {panel}), got {b}")
    if not isinstance(cols, int) or not (b.shape[-3] - 1) * panel < cols <= b.shape[-3] * panel:
        raise ShapeError(f"{op}: b_cols={cols!r} does not fit {b.shape[-3]} panels of {panel} columns")
    return TensorType(b.shape[:-3] + (b.shape[-2], cols), b.dtype)


@matmul.def_infer
def _matmul_infer(types, attrs):
    a, b = types
    _check_pair("nn.matmul", a, b)
    b = _packed_b("nn.matmul", a, b, attrs)
    odt = U.out_dtype("nn.matmul", attrs["out_dtype"], a.dtype)
    return [TensorType(matmul_shape("nn.matmul", a, b, bool(attrs["transpose_a"]), bool(attrs["transpose_b"])), odt)]


@matmul.def_compute
def _matmul_compute(tensors, attrs, target=None):
    a, b = tensors
    return [matmul_compute(a, b, bool(attrs["transpose_a"]), bool(attrs["transpose_b"]), attrs["out_dtype"],
                           b_panel=attrs["b_panel"], b_cols=attrs["b_cols"], target=target)]


# ---------------------------------------------------------------------------------------------
# nn.pack_matmul_weight: B in the panel layout of the GEMM micro-kernels
# ---------------------------------------------------------------------------------------------
pack_matmul_weight = register_op(
    "nn.pack_matmul_weight", inputs=("b",), pattern=OpPattern.INJECTIVE, attrs={"panel": 16},
    doc="B (..., K, N) as (..., ceil(N / panel), K, panel): column panels, each contiguous over k, "
        "zero past N. nn.matmul with b_panel reads it; over a constant weight it folds at compile time.")


@pack_matmul_weight.def_infer
def _pack_infer(types, attrs):
    (b,) = types
    op = "nn.pack_matmul_weight"
    U.check_dtype(op, b, U.FLOATS, "b")
    panel = attrs["panel"]
    if not isinstance(panel, int) or isinstance(panel, bool) or panel < 1:
        raise TesseraError(f"{op}: panel must be a positive int, got {panel!r}")
    if b.ndim < 2:
        raise ShapeError(f"{op}: b must have rank >= 2, got {b}")
    K, N = U.static_dims(op, b, (b.ndim - 2, b.ndim - 1), "matrix dimensions")
    return [TensorType(b.shape[:-2] + (-(-N // panel), K, panel), b.dtype)]


@pack_matmul_weight.def_compute
def _pack_compute(tensors, attrs):
    (b,) = tensors
    panel = attrs["panel"]
    N = int(b.shape[-1].value)
    K = b.shape[-2]
    bb = tuple(b.shape[:-2])

    def pack(*x):
        j = x[-3] * panel + x[-1]
        if N % panel == 0:
            return b[tuple(x[:-3]) + (x[-2], j)]
        return te.if_then_else(j < N, b[tuple(x[:-3]) + (x[-2], te.min(j, N - 1))], te.const(0, b.dtype))

    return [U.compute(bb + (-(-N // panel), K, panel), [f"b{q}" for q in range(len(bb))] + ["jo", "k", "ji"],
                      pack, "packed_b")]


def pack_panel(M, N, target=None):
    """The panel width nn.pack_matmul_weight should use for an (M, K) x (K, N) float32 product on
    `target` (the best micro-kernel tile whose rows divide M; M None, a symbolic row count: the
    best tile, its rows padded, see row_pad), or None when no tile fits M."""
    return _panel(M, N, target) or _panel(M, None, target)


# ---------------------------------------------------------------------------------------------
# nn.dense
# ---------------------------------------------------------------------------------------------
dense = register_op("nn.dense", inputs=("data", "weight"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                    attrs={"out_dtype": ""},
                    doc="data (..., K) @ weight(N, K)^T -> (..., N): a fully connected layer.")


dense.def_schedule(schedule_matmul)


@dense.def_infer
def _dense_infer(types, attrs):
    data, weight = types
    op = "nn.dense"
    _check_pair(op, data, weight)
    U.check_rank(op, weight, 2, "weight")
    if data.ndim < 1:
        raise ShapeError(f"{op}: data must have rank >= 1, got {data}")
    _k_match(op, data.shape[-1], weight.shape[1], data, weight)
    odt = U.out_dtype(op, attrs["out_dtype"], data.dtype)
    return [TensorType(data.shape[:-1] + (weight.shape[0],), odt)]


@dense.def_compute
def _dense_compute(tensors, attrs):
    data, weight = tensors
    odt = U.out_dtype("nn.dense", attrs["out_dtype"], data.dtype)
    acc = U.accum_dtype(odt) if odt.is_float() else odt
    shape = tuple(data.shape[:-1]) + (weight.shape[0],)
    K = data.shape[-1]
    unroll = k_unroll(K)
    k = te.reduce_axis((0, K // unroll if unroll > 1 else K), "k")
    names = [f"i{q}" for q in range(data.ndim - 1)] + ["j"]
    if data.ndim == 2:
        names = ["i", "j"]

    def body(*idx):
        total = None
        for u in range(unroll):
            kk = k * unroll + u if unroll > 1 else k
            term = U.cast(data[idx[:-1] + (kk,)], acc) * U.cast(weight[idx[-1], kk], acc)
            total = term if total is None else total + term
        return te.sum(total, axis=k)

    if acc == odt:
        return [U.compute(shape, names, body, "dense")]
    out = U.compute(shape, names, body, "dense_acc")
    return [U.compute(shape, names, lambda *i: out[i].astype(odt), "dense")]


# ---------------------------------------------------------------------------------------------
# nn.batch_matmul
# ---------------------------------------------------------------------------------------------
batch_matmul = register_op("nn.batch_matmul", inputs=("x", "y"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                           attrs={"transpose_a": False, "transpose_b": True, "out_dtype": ""},
                           doc="3-D batched matmul; batch 1 broadcasts. Relay's default: y is (B, N, K).")


batch_matmul.def_schedule(schedule_matmul)


@batch_matmul.def_infer
def _bmm_infer(types, attrs):
    x, y = types
    op = "nn.batch_matmul"
    _check_pair(op, x, y)
    U.check_rank(op, x, 3, "x")
    U.check_rank(op, y, 3, "y")
    odt = U.out_dtype(op, attrs["out_dtype"], x.dtype)
    return [TensorType(matmul_shape(op, x, y, bool(attrs["transpose_a"]), bool(attrs["transpose_b"])), odt)]


@batch_matmul.def_compute
def _bmm_compute(tensors, attrs, target=None):
    x, y = tensors
    return [matmul_compute(x, y, bool(attrs["transpose_a"]), bool(attrs["transpose_b"]), attrs["out_dtype"],
                           name="batch_matmul", target=target)]


# ---------------------------------------------------------------------------------------------
# nn.matmul_integer
# ---------------------------------------------------------------------------------------------
matmul_integer = register_op(
    "nn.matmul_integer", inputs=("a", "b", "a_zero_point", "b_zero_point"),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs={"out_dtype": "int32"},
    doc="(a - a_zero_point) @ (b - b_zero_point) in int32 (ONNX MatMulInteger); zero points are "
        "scalars, per-row of a (M,) or per-column of b (N,).")


matmul_integer.def_schedule(schedule_matmul)


@matmul_integer.def_infer
def _mmi_infer(types, attrs):
    a, b, az, bz = types
    op = "nn.matmul_integer"
    U.check_dtype(op, a, ("int8", "uint8"), "a")
    U.check_dtype(op, b, ("int8", "uint8"), "b")
    if az.dtype != a.dtype or bz.dtype != b.dtype:
        raise DTypeError(f"{op}: zero points ({az.dtype}, {bz.dtype}) must have the dtypes of a and b "
                         f"({a.dtype}, {b.dtype})")
    shape = matmul_shape(op, a, b)
    m = a.shape[-2] if a.ndim >= 2 else 1
    n = b.shape[-1] if b.ndim >= 2 else 1
    for what, zp, ext in (("a_zero_point", az, m), ("b_zero_point", bz, n)):
        if zp.ndim > 1 or (zp.ndim == 1 and zp.shape[0] not in (1, ext)):
            raise ShapeError(f"{op}: {what} must be a scalar or have {ext} entries (one per "
                             f"{'row of a' if what[0] == 'a' else 'column of b'}), got {zp}")
    odt = U.out_dtype(op, attrs["out_dtype"], "int32")
    if odt not in ("int32", "int64"):
        raise DTypeError(f"{op}: out_dtype must be int32 or int64, got {odt}")
    return [TensorType(shape, odt)]


@matmul_integer.def_compute
def _mmi_compute(tensors, attrs):
    a, b, az, bz = tensors
    return [matmul_compute(a, b, out_dtype=attrs["out_dtype"], name="matmul_integer",
                           a_zero_point=az, b_zero_point=bz)]


pack_matmul_weight.def_schedule(schedule_injective)
