"""Ops of no larger family: reinterpret (ONNX BitCast), det (ONNX Det), tensor_scatter (ONNX
TensorScatter, a KV-cache write), tfidf_vectorizer (ONNX TfIdfVectorizer on integer sequences) and
tree_ensemble (ai.onnx.ml TreeEnsemble: every tree compiled into nested selects).

reinterpret reads each element's bits as another dtype of the same width (a `reinterpret` call the
C backend renders with memcpy); bool counts as an 8-bit type holding 0 or 1.

det is the determinant of the last two (square, static) axes by Gaussian elimination with partial
pivoting, unrolled over the static matrix size: stage k picks the row of the largest |a[i, k]|
(i >= k; the first such row on ties), swaps it into row k and eliminates below it; the result is
the product of the pivots, negated for an odd number of swaps. Computed in float64 and rounded
once to the input dtype.
"""
from __future__ import annotations

from .. import te
from ..errors import DTypeError, ShapeError, TesseraError
from ..ir import TensorType
from ..ir import expr as E
from ..ir.dtype import DataType
from ._common import ALL, FLOATS, check_dtype, fmt_shape
from ._schedule import schedule_blocks, schedule_injective
from .registry import REQUIRED, OpPattern, register_op
from ._common import normalize_axis

# ---------------------------------------------------------------------------------------------
# reinterpret
# ---------------------------------------------------------------------------------------------
reinterpret = register_op(
    "reinterpret", inputs=("data",), pattern=OpPattern.ELEMWISE, attrs={"dtype": REQUIRED},
    doc="The bits of every element read as `dtype`, of the same width (ONNX BitCast, TVM's reinterpret).")
reinterpret.def_schedule(schedule_injective)


def _width(dt: DataType) -> int:
    return 8 if dt.is_bool() else dt.bits


def _reinterpret_dtype(src, attrs) -> DataType:
    try:
        dst = DataType(attrs["dtype"])
    except DTypeError as e:
        raise DTypeError(f"reinterpret: {e}") from None
    check_dtype("reinterpret", dst, ALL, "dtype")
    check_dtype("reinterpret", src, ALL, "data")
    if _width(DataType(src)) != _width(dst):
        raise DTypeError(f"reinterpret: {src} ({_width(DataType(src))} bits) and {dst} ({_width(dst)} bits) have "
                         f"different widths; the bits of one element must make one element")
    return dst


@reinterpret.def_infer
def _reinterpret_infer(types, attrs):
    (x,) = types
    return [TensorType(x.shape, _reinterpret_dtype(x.dtype, attrs))]


@reinterpret.def_compute
def _reinterpret_compute(tensors, attrs):
    (x,) = tensors
    dst = _reinterpret_dtype(x.dtype, attrs)

    def body(*i):
        v = x[i]
        if v.dtype.is_bool() or dst.is_bool():        # a byte holding 0 or 1 either way
            return v.astype(dst) if not dst.is_bool() else v != E.const(0, v.dtype)
        return E.Call(dst, "reinterpret", (v,))

    return [te.compute(x.shape, body, name="reinterpret")]


# ---------------------------------------------------------------------------------------------
# det
# ---------------------------------------------------------------------------------------------
det = register_op(
    "det", inputs=("data",), pattern=OpPattern.OPAQUE,
    doc="Determinant of the square matrices in the last two axes (ONNX Det), by Gaussian elimination "
        "with partial pivoting over the static matrix size.")
det.def_schedule(schedule_blocks)


def _det_check(t: TensorType) -> int:
    check_dtype("det", t.dtype, FLOATS, "data")
    if t.ndim < 2 or t.shape[-1] != t.shape[-2] or not isinstance(t.shape[-1], int):
        raise ShapeError(f"det: data must be (..., n, n) with a static n, got {fmt_shape(t.shape)}")
    return t.shape[-1]


@det.def_infer
def _det_infer(types, attrs):
    (x,) = types
    _det_check(x)
    return [TensorType(x.shape[:-2], x.dtype)]


@det.def_compute
def _det_compute(tensors, attrs):
    (x,) = tensors
    n = _det_check(TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in x.shape], x.dtype))
    f = DataType("float64")
    batch = list(x.shape[:-2])
    nb = len(batch)
    zero, one = E.const(0.0, f), E.const(1.0, f)
    a = te.compute(x.shape, lambda *i: x[i].astype(f), name="det_a")
    sign = None                                   # per batch: +1/-1 of the swaps so far
    pivots = []
    for k in range(n):
        if k == n - 1:
            pivots.append(te.compute(batch, lambda *b, a=a, k=k: a[tuple(b) + (k, k)], name=f"det_pivot{k}"))
            break
        # the pivot row: the first row i >= k holding the largest |a[i, k]|
        r = te.reduce_axis((k, n), name=f"r{k}")

        def key(*b, a=a, k=k, r=r):
            return te.max(te.abs(a[tuple(b) + (r, k)]), axis=r)

        best = te.compute(batch, key, name=f"det_max{k}")
        r2 = te.reduce_axis((k, n), name=f"q{k}")

        def first(*b, a=a, k=k, r2=r2, best=best):
            hit = te.abs(a[tuple(b) + (r2, k)]) == best[tuple(b)]
            return te.min(E.Select(hit, r2, E.const(n, r2.var.dtype)), axis=r2)

        first_row = te.compute(batch, first, name=f"det_first{k}")
        # (no row matches when the column holds a NaN: keep row k, so the NaN reaches the result)
        prow = te.compute(batch, lambda *b, fr=first_row, k=k: E.Select(
            fr[tuple(b)] >= E.const(n, fr.dtype), E.const(k, fr.dtype), fr[tuple(b)]), name=f"det_row{k}")

        def swapped(*i, a=a, k=k, prow=prow):
            b, row, col = tuple(i[:nb]), i[nb], i[nb + 1]
            p = prow[b]
            src = E.Select(row == k, p, E.Select(row == p, E.const(k, row.dtype), row))
            return a[b + (src, col)]

        s = te.compute(x.shape, swapped, name=f"det_swap{k}")
        pivots.append(te.compute(batch, lambda *b, s=s, k=k: s[tuple(b) + (k, k)], name=f"det_pivot{k}"))

        def flip(*b, prow=prow, k=k, sign=sign):
            prev = sign[tuple(b)] if sign is not None else one
            return E.Select(prow[tuple(b)] != k, -prev, prev)

        sign = te.compute(batch, flip, name=f"det_sign{k}")

        def eliminate(*i, s=s, k=k):
            b, row, col = tuple(i[:nb]), i[nb], i[nb + 1]
            piv = s[b + (k, k)]
            factor = E.Select(piv == zero, zero, s[b + (row, k)] / E.Select(piv == zero, one, piv))
            return E.Select(row > k, s[b + (row, col)] - factor * s[b + (k, col)], s[b + (row, col)])

        a = te.compute(x.shape, eliminate, name=f"det_elim{k}")

    def product(*b):
        v = sign[tuple(b)] if sign is not None else one
        for p in pivots:
            v = v * p[tuple(b)]
        return v.astype(x.dtype)

    return [te.compute(batch, product, name="det")]


# ---------------------------------------------------------------------------------------------
# tensor_scatter
# ---------------------------------------------------------------------------------------------
tensor_scatter = register_op(
    "tensor_scatter", inputs=("past", "update", "write_indices*"), pattern=OpPattern.INJECTIVE,
    attrs={"axis": -2, "mode": "linear"},
    doc="A KV-cache write (ONNX TensorScatter): past with update's sequence written along `axis` from "
        "write_indices[batch] (0 without them); mode 'circular' wraps around the cache length.")
tensor_scatter.def_schedule(schedule_injective)


def _ts_check(types, attrs):
    op = "tensor_scatter"
    past, upd = types[0], types[1]
    if len(types) > 3:
        raise ShapeError(f"{op}: takes past, update and optional write_indices, got {len(types)} inputs")
    if attrs["mode"] not in ("linear", "circular"):
        raise ShapeError(f"{op}: mode must be 'linear' or 'circular', got {attrs['mode']!r}")
    if past.dtype != upd.dtype:
        raise DTypeError(f"{op}: update is {upd.dtype} but past is {past.dtype}")
    if past.ndim < 2 or upd.ndim != past.ndim:
        raise ShapeError(f"{op}: past {fmt_shape(past.shape)} and update {fmt_shape(upd.shape)} must have one "
                         f"rank >= 2")
    axis = normalize_axis(op, attrs["axis"], past.ndim)
    if axis == 0:
        raise ShapeError(f"{op}: axis 0 is the batch axis; the sequence axis must come after it")
    for k, (a, b) in enumerate(zip(past.shape, upd.shape)):
        if k != axis and a != b and isinstance(a, int) == isinstance(b, int):
            raise ShapeError(f"{op}: update {fmt_shape(upd.shape)} differs from past {fmt_shape(past.shape)} in "
                             f"axis {k}")
        if k == axis and isinstance(a, int) and isinstance(b, int) and b > a:
            raise ShapeError(f"{op}: update's sequence ({b}) is longer than the cache ({a})")
    if len(types) == 3:
        w = types[2]
        check_dtype(op, w.dtype, ("int32", "int64"), "write_indices")
        if w.ndim != 1:
            raise ShapeError(f"{op}: write_indices must be (batch,), got {fmt_shape(w.shape)}")
    return axis


@tensor_scatter.def_infer
def _ts_infer(types, attrs):
    _ts_check(types, attrs)
    return [types[0]]


@tensor_scatter.def_compute
def _ts_compute(tensors, attrs):
    past, upd = tensors[0], tensors[1]
    w = tensors[2] if len(tensors) == 3 else None
    axis = _ts_check([TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)
                      for t in tensors], attrs)
    cache, seq = past.shape[axis], upd.shape[axis]

    def as64(e):
        return E.const(e.value, "int64") if isinstance(e, E.IntImm) else E.convert(e).astype("int64")

    def body(*i):
        start = w[i[0]].astype("int64") if w is not None else E.const(0, "int64")
        rel = i[axis].astype("int64") - start
        if attrs["mode"] == "circular":
            rel = te.floormod(rel, as64(cache))
        hit = E.And(rel >= E.const(0, "int64"), rel < as64(seq))
        safe = te.max(te.min(rel, as64(seq) - E.const(1, "int64")), E.const(0, "int64")).astype(i[axis].dtype)
        v = upd[tuple(safe if k == axis else x for k, x in enumerate(i))]
        return E.Select(hit, v, past[i])

    return [te.compute(past.shape, body, name="tensor_scatter")]


# ---------------------------------------------------------------------------------------------
# tfidf_vectorizer
# ---------------------------------------------------------------------------------------------
tfidf_vectorizer = register_op(
    "tfidf_vectorizer", inputs=("data", "tokens", "sizes", "columns", "weights*"), pattern=OpPattern.OPAQUE,
    attrs={"output_size": REQUIRED, "max_skip_count": 0, "mode": "TF"},
    doc="n-gram counts of integer sequences (ONNX TfIdfVectorizer): tokens (J, max_n) lists each pool n-gram "
        "(sizes (J,) its length), columns (J,) its output column; an n-gram of length n >= 2 matches items "
        "d apart for every d in 1..max_skip_count+1, a unigram once per occurrence. mode TF gives the counts, "
        "IDF weights[c] (or 1) where a count is nonzero, TFIDF weights[c] * count; float32 output.")
tfidf_vectorizer.def_schedule(schedule_blocks)


def _tfidf_check(types, attrs):
    op = "tfidf_vectorizer"
    x, tok, sizes, cols = types[:4]
    check_dtype(op, x.dtype, ("int32", "int64"), "data")
    if x.ndim not in (1, 2):
        raise ShapeError(f"{op}: data must be (L,) or (B, L), got {fmt_shape(x.shape)}")
    if tok.dtype != "int64" or tok.ndim != 2 or sizes.shape != (tok.shape[0],) or cols.shape != (tok.shape[0],):
        raise ShapeError(f"{op}: tokens (J, max_n) int64, sizes (J,) and columns (J,) expected, got {tok}, {sizes}, "
                         f"{cols}")
    if attrs["mode"] not in ("TF", "IDF", "TFIDF"):
        raise TesseraError(f"{op}: mode must be TF, IDF or TFIDF, got {attrs['mode']!r}")
    n_out = int(attrs["output_size"])
    if len(types) > 5:
        raise ShapeError(f"{op}: takes at most one weights input")
    if len(types) == 5 and (types[4].shape != (n_out,) or types[4].dtype != "float32"):
        raise ShapeError(f"{op}: weights must be float32 ({n_out},), got {types[4]}")
    if int(attrs["max_skip_count"]) < 0:
        raise ShapeError(f"{op}: max_skip_count must be >= 0")
    return n_out


@tfidf_vectorizer.def_infer
def _tfidf_infer(types, attrs):
    n_out = _tfidf_check(types, attrs)
    x = types[0]
    return [TensorType((n_out,) if x.ndim == 1 else (x.shape[0], n_out), "float32")]


@tfidf_vectorizer.def_compute
def _tfidf_compute(tensors, attrs):
    n_out = _tfidf_check([TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)
                          for t in tensors], attrs)
    x, tok, sizes, cols = tensors[:4]
    weights = tensors[4] if len(tensors) == 5 else None
    vector = len(x.shape) == 1
    length = x.shape[-1]
    max_n = int(tok.shape[1].value)
    n_grams = tok.shape[0]
    skips = int(attrs["max_skip_count"]) + 1
    i64 = "int64"
    f = DataType("float32")

    def item(b, pos):
        return x[pos] if vector else x[b, pos]

    rd = te.reduce_axis((1, skips + 1), name="d")
    rp = te.reduce_axis((0, length), name="p")

    def count(b, j):
        d, p = rd.var.astype(i64), rp.var.astype(i64)
        n = sizes[j].astype(i64)
        ok = [E.Or(n > E.const(1, i64), d == E.const(1, i64)),                 # unigrams: once
              p + (n - E.const(1, i64)) * d < (E.const(length.value, i64) if isinstance(length, E.IntImm)
                                               else E.convert(length).astype(i64))]
        for k in range(max_n):
            pos = p + E.const(k, i64) * d
            safe = te.min(pos, (E.const(length.value, i64) if isinstance(length, E.IntImm)
                                else E.convert(length).astype(i64)) - E.const(1, i64)).astype(rp.var.dtype)
            ok.append(E.Or(E.const(k, i64) >= n, item(b, safe).astype(i64) == tok[j, k]))
        return te.sum(E.Select(te.all(*ok), E.const(1.0, f), E.const(0.0, f)), axis=[rd, rp])

    batch = E.const(1, "int32") if vector else x.shape[0]
    counts = te.compute((batch, n_grams), count, name="ngram_counts")
    rj = te.reduce_axis((0, n_grams), name="j")
    freq = te.compute((batch, n_out), lambda b, c: te.sum(
        E.Select(cols[rj].astype(i64) == c.astype(i64), counts[b, rj], E.const(0.0, f)), axis=rj), name="frequencies")
    mode = attrs["mode"]

    def weigh(b, c):
        v = freq[b, c]
        w = weights[c] if weights is not None else E.const(1.0, f)
        if mode == "IDF":
            return E.Select(v > E.const(0.0, f), w, E.const(0.0, f))
        if mode == "TFIDF" and weights is not None:
            return w * v
        return v

    if vector:
        return [te.compute((n_out,), lambda c: weigh(E.const(0, "int32"), c), name="tfidf")]
    return [te.compute((batch, n_out), weigh, name="tfidf")]


# ---------------------------------------------------------------------------------------------
# tree_ensemble
# ---------------------------------------------------------------------------------------------
TREE_MODES = ("LEQ", "LT", "GTE", "GT", "EQ", "NEQ", "MEMBER")
TREE_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")

tree_ensemble = register_op(
    "tree_ensemble", inputs=("data", "leaf_weights", "leaf_targets"), pattern=OpPattern.OPAQUE,
    attrs={"n_targets": REQUIRED, "aggregate": "SUM", "roots": REQUIRED, "modes": REQUIRED, "features": REQUIRED,
           "splits": REQUIRED, "true_ids": REQUIRED, "false_ids": REQUIRED, "true_leafs": REQUIRED,
           "false_leafs": REQUIRED, "missing_true": REQUIRED, "members": ()},
    doc="Decision-tree ensemble (ONNX ai.onnx.ml TreeEnsemble): every tree walks its interior nodes "
        "(mode, feature, split, true/false child that is a node or a leaf; MEMBER tests set membership, "
        "members[node]; missing_true sends NaN down the true branch) to a leaf, whose weight goes to its "
        "target; the trees' values per target are summed, averaged, or min/max-ed.")
tree_ensemble.def_schedule(schedule_blocks)


def _tree_check(types, attrs):
    op = "tree_ensemble"
    x, w, t = types
    check_dtype(op, x.dtype, FLOATS, "data")
    if x.ndim != 2 or not isinstance(x.shape[1], int):
        raise ShapeError(f"{op}: data must be (N, F) with a static F, got {fmt_shape(x.shape)}")
    if w.ndim != 1 or t.shape != w.shape or t.dtype != "int64":
        raise ShapeError(f"{op}: leaf_weights (L,) and int64 leaf_targets (L,) expected, got {w}, {t}")
    n = len(attrs["modes"])
    for key in ("features", "splits", "true_ids", "false_ids", "true_leafs", "false_leafs", "missing_true"):
        if len(attrs[key]) != n:
            raise ShapeError(f"{op}: {key} has {len(attrs[key])} entries for {n} nodes")
    if any(m not in TREE_MODES for m in attrs["modes"]):
        raise TesseraError(f"{op}: node modes must be among {TREE_MODES}")
    if attrs["aggregate"] not in TREE_AGGREGATES:
        raise TesseraError(f"{op}: aggregate must be one of {TREE_AGGREGATES}, got {attrs['aggregate']!r}")
    if any(not 0 <= f < x.shape[1] for f in attrs["features"]):
        raise ShapeError(f"{op}: a node reads a feature outside 0..{x.shape[1] - 1}")
    if int(attrs["n_targets"]) < 1 or not attrs["roots"]:
        raise ShapeError(f"{op}: n_targets must be positive and there must be a tree")
    return n


@tree_ensemble.def_infer
def _tree_infer(types, attrs):
    _tree_check(types, attrs)
    return [TensorType((types[0].shape[0], int(attrs["n_targets"])), types[0].dtype)]


@tree_ensemble.def_compute
def _tree_compute(tensors, attrs):
    x, lw, lt = tensors
    n_nodes = _tree_check([TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)
                           for t in tensors], attrs)
    f64, i64 = DataType("float64"), DataType("int64")
    n_leaves = lw.shape[0]
    members = dict(attrs["members"])

    def walk(n, node, is_leaf, depth):
        """The leaf index reached from `node` (an interior node, or a leaf when is_leaf)."""
        if is_leaf:
            return E.const(int(node), i64)
        if depth > n_nodes:
            raise ShapeError("tree_ensemble: a tree has a cycle (a path longer than the node count)")
        if not 0 <= node < n_nodes:
            raise ShapeError(f"tree_ensemble: node id {node} is out of 0..{n_nodes - 1}")
        v = x[n, int(attrs["features"][node])].astype(f64)
        mode = attrs["modes"][node]
        s = E.const(float(attrs["splits"][node]), f64)
        cond = {"LEQ": lambda: v <= s, "LT": lambda: v < s, "GTE": lambda: v >= s, "GT": lambda: v > s,
                "EQ": lambda: v == s, "NEQ": lambda: v != s,
                "MEMBER": lambda: te.any(*[v == E.const(float(m), f64) for m in members.get(node, ())])}[mode]()
        if attrs["missing_true"][node]:
            cond = E.Or(cond, te.isnan(v))
        yes = walk(n, int(attrs["true_ids"][node]), bool(attrs["true_leafs"][node]), depth + 1)
        no = walk(n, int(attrs["false_ids"][node]), bool(attrs["false_leafs"][node]), depth + 1)
        return E.Select(cond, yes, no)

    leaves = []
    for k, root in enumerate(attrs["roots"]):
        root = int(root)
        leaf_root = (attrs["true_leafs"][root] and attrs["false_leafs"][root]
                     and attrs["true_ids"][root] == attrs["false_ids"][root])
        leaves.append(te.compute((x.shape[0],), lambda n, r=root, lr=leaf_root: walk(n, r, bool(lr), 0),
                                 name=f"tree{k}_leaf"))
    agg = attrs["aggregate"]
    dt = x.dtype
    last = n_leaves - 1 if isinstance(n_leaves, int) else E.const(n_leaves.value - 1, i64)

    def combine(n, t):
        if agg in ("SUM", "AVERAGE"):
            acc = E.const(0.0, dt)
        else:
            acc = te.max_value(dt) if agg == "MIN" else te.min_value(dt)
        for leaf in leaves:
            j = te.max(te.min(leaf[n], last), E.const(0, i64))
            hit = lt[j] == t.astype(i64)
            w = lw[j].astype(dt)
            if agg == "SUM":
                acc = acc + E.Select(hit, w, E.const(0.0, dt))
            elif agg == "AVERAGE":
                acc = acc + E.Select(hit, w / E.const(float(len(leaves)), dt), E.const(0.0, dt))
            elif agg == "MIN":
                acc = E.Select(E.And(hit, w < acc), w, acc)
            else:
                acc = E.Select(E.And(hit, w > acc), w, acc)
        return acc

    return [te.compute((x.shape[0], int(attrs["n_targets"])), combine, name="tree_ensemble")]
