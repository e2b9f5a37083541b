"""Ops whose output extents depend on their input values (nonzero, unique, non_max_suppression) or
are symbols of the graph's inputs (prefix_slice, arange).

No ahead-of-time layout can hold their results, so they run on the host (OpDef.host): the graph
executor calls the op's numpy function on the run's arrays, takes the true extents from what it
returns and binds them to the symbols the op's types name (attribute `extent`, one fresh symbol per
node, chosen by the frontend), and the kernels after it, compiled once for symbolic extents, run on
whatever extent came out. The functions follow the ONNX reference semantics (tie orders included).
prefix_slice and arange are compiled kernels whose output extent is a symbol the graph's inputs
bind (what a shape computed from a dynamic axis becomes); prefix_slice's bound is checked per run.
Both are OPAQUE: the symbol is a te.var of their own compute, so they are never fused with kernels
whose dimensions name the same symbol.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeError, TesseraError
from ..ir import TensorType
from ._common import normalize_axis
from .registry import REQUIRED, OpPattern, register_op


def _extent(op: str, attrs) -> str:
    name = attrs["extent"]
    if not isinstance(name, str) or not name.isidentifier():
        raise TesseraError(f"{op}: attribute extent must name a symbol (an identifier), got {name!r}")
    return name


# ---------------------------------------------------------------------------------------------
nonzero = register_op("nonzero", inputs=("data",), pattern=OpPattern.OPAQUE, attrs={"extent": REQUIRED},
                      doc="the indices of the nonzero elements, int64[ndim, extent] in row-major order "
                          "(ONNX NonZero, numpy.nonzero stacked); extent: the symbol of their count.")


@nonzero.def_infer
def _nonzero_infer(types, attrs):
    (data,) = types
    return [TensorType((data.ndim, _extent("nonzero", attrs)), "int64")]


@nonzero.def_host
def _nonzero_host(arrays, attrs):
    (x,) = arrays
    if x.ndim == 0:
        return [np.zeros((0, int(x != 0)), np.int64)]
    return [np.ascontiguousarray(np.stack(np.nonzero(x)).astype(np.int64).reshape(x.ndim, -1))]


# ---------------------------------------------------------------------------------------------
unique = register_op("unique", inputs=("data",), pattern=OpPattern.OPAQUE, num_outputs=4,
                     attrs={"extent": REQUIRED, "axis": None, "sorted": True},
                     doc="ONNX Unique: the distinct values (or slices along axis), sorted or in order of "
                         "first occurrence; outputs (values, first indices, inverse indices, counts), "
                         "int64 indices; extent: the symbol of the distinct count.")


@unique.def_infer
def _unique_infer(types, attrs):
    (data,) = types
    n = _extent("unique", attrs)
    if attrs["axis"] is None:
        values = TensorType((n,), data.dtype)
        total = data.numel() if data.is_static else f"{n}_in"    # flattened: a symbol when not static
    else:
        axis = normalize_axis("unique", attrs["axis"], data.ndim)
        values = TensorType(tuple(n if d == axis else s for d, s in enumerate(data.shape)), data.dtype)
        total = data.shape[axis]
    return [values, TensorType((n,), "int64"), TensorType((total,), "int64"), TensorType((n,), "int64")]


@unique.def_host
def _unique_host(arrays, attrs):
    (x,) = arrays
    axis = attrs["axis"]
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    else:
        axis = normalize_axis("unique", axis, x.ndim)
    if x.shape[axis] == 0:
        empty = np.zeros(0, np.int64)
        return [np.ascontiguousarray(x), empty, empty.copy(), empty.copy()]
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                               axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs["sorted"]:
        order = np.argsort(first, kind="stable")
        values = np.take(values, order, axis=axis)
        first, counts = first[order], counts[order]
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        inverse = rank[inverse]
    return [np.ascontiguousarray(values), first.astype(np.int64), inverse.astype(np.int64),
            counts.astype(np.int64)]


# ---------------------------------------------------------------------------------------------
non_max_suppression = register_op(
    "non_max_suppression", inputs=("boxes", "scores", "max_output_boxes_per_class", "iou_threshold",
                                   "score_threshold"),
    pattern=OpPattern.OPAQUE, attrs={"extent": REQUIRED, "center_point_box": 0, "use_score_threshold": False},
    doc="ONNX NonMaxSuppression: per batch and class, boxes in decreasing score (the lower index first "
        "among equal scores) kept greedily unless their IoU with a kept one exceeds iou_threshold; "
        "int64[extent, 3] rows (batch, class, box). use_score_threshold: only boxes scoring above it.")


@non_max_suppression.def_infer
def _nms_infer(types, attrs):
    boxes, scores = types[0], types[1]
    if boxes.ndim != 3 or (isinstance(boxes.shape[2], int) and boxes.shape[2] != 4):
        raise ShapeError(f"non_max_suppression: boxes must be [batch, boxes, 4], got {boxes}")
    if scores.ndim != 3:
        raise ShapeError(f"non_max_suppression: scores must be [batch, classes, boxes], got {scores}")
    for name, t in zip(("max_output_boxes_per_class", "iou_threshold", "score_threshold"), types[2:]):
        if t.is_static and t.numel() > 1:
            raise ShapeError(f"non_max_suppression: {name} must hold one value, got {t}")
    if attrs["center_point_box"] not in (0, 1):
        raise TesseraError(f"non_max_suppression: center_point_box must be 0 or 1, got {attrs['center_point_box']!r}")
    return [TensorType((_extent("non_max_suppression", attrs), 3), "int64")]


def _corners(b: np.ndarray, center: int):
    """(x_min, x_max, y_min, y_max) per box, in the boxes' dtype, as the ONNX reference computes them."""
    if center == 0:
        y1, x1, y2, x2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
        return np.minimum(x1, x2), np.maximum(x1, x2), np.minimum(y1, y2), np.maximum(y1, y2)
    half_w, half_h = b[:, 2] / b.dtype.type(2), b[:, 3] / b.dtype.type(2)
    return b[:, 0] - half_w, b[:, 0] + half_w, b[:, 1] - half_h, b[:, 1] + half_h


def _suppressed(c, i: int, rest: np.ndarray, threshold) -> np.ndarray:
    """Which boxes of `rest` overlap box i by more than threshold (IoU), as the reference decides."""
    x0, x1, y0, y1 = c
    ix0, ix1 = np.maximum(x0[i], x0[rest]), np.minimum(x1[i], x1[rest])
    iy0, iy1 = np.maximum(y0[i], y0[rest]), np.minimum(y1[i], y1[rest])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_i = (x1[i] - x0[i]) * (y1[i] - y0[i])
    area_r = (x1[rest] - x0[rest]) * (y1[rest] - y0[rest])
    union = area_i + area_r - inter
    ok = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area_i > 0) & (area_r > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / np.where(ok, union, 1)
    return ok & (iou > threshold)


@non_max_suppression.def_host
def _nms_host(arrays, attrs):
    boxes, scores, max_out, iou_thr, score_thr = arrays
    if boxes.shape[0] != scores.shape[0] or boxes.shape[1] != scores.shape[2]:
        raise ShapeError(f"non_max_suppression: boxes {list(boxes.shape)} and scores {list(scores.shape)} "
                         f"disagree on the batch or the number of boxes")
    limit = max(int(max_out.reshape(-1)[0]), 0) if max_out.size else 0
    thr = iou_thr.reshape(-1)[0] if iou_thr.size else boxes.dtype.type(0)
    use_score = attrs["use_score_threshold"] and score_thr.size
    rows = []
    for b in range(boxes.shape[0]):
        c = _corners(boxes[b], attrs["center_point_box"])
        for k in range(scores.shape[1]):
            s = scores[b, k]
            cand = np.nonzero(s > score_thr.reshape(-1)[0])[0] if use_score else np.arange(len(s))
            # decreasing score, the lower index first among equal scores (a stable sort of -score)
            order = cand[np.argsort(-s[cand], kind="stable")]
            kept = 0
            while len(order) and kept < limit:
                i = order[0]
                rows.append((b, k, i))
                kept += 1
                rest = order[1:]
                order = rest[~_suppressed(c, i, rest, thr)]
    return [np.array(rows, np.int64).reshape(-1, 3)]


__all__ = ["nonzero", "unique", "non_max_suppression"]


# ---------------------------------------------------------------------------------------------
# extents named by a symbol of the graph's inputs (a shape computed from a dynamic axis)
# ---------------------------------------------------------------------------------------------
def _symbol(op: str, name) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise TesseraError(f"{op}: an extent must name a symbol (an identifier), got {name!r}")
    return name


prefix_slice = register_op(
    "prefix_slice", inputs=("data",), pattern=OpPattern.OPAQUE, attrs={"axes": REQUIRED, "extents": REQUIRED},
    doc="data[..., :S, ...]: the first S entries of each of `axes` (static extents), S the symbols of "
        "`extents` (bound by the graph's inputs at run time, at most the axis extent: checked per run). "
        "What ONNX Slice(x, 0, Shape(y)[k]) is when y has a dynamic axis.")


def _prefix_axes(t: TensorType, attrs) -> dict:
    axes = [normalize_axis("prefix_slice", a, t.ndim) for a in attrs["axes"]]
    names = [_symbol("prefix_slice", s) for s in attrs["extents"]]
    if len(axes) != len(names) or len(set(axes)) != len(axes):
        raise ShapeError(f"prefix_slice: axes {list(attrs['axes'])} and extents {list(attrs['extents'])} must pair up "
                         f"one distinct axis with one symbol")
    for a in axes:
        if not isinstance(t.shape[a], int):
            raise ShapeError(f"prefix_slice: axis {a} of {t} must have a static extent")
    return dict(zip(axes, names))


@prefix_slice.def_infer
def _prefix_slice_infer(types, attrs):
    (t,) = types
    cut = _prefix_axes(t, attrs)
    return [TensorType(tuple(cut.get(d, s) for d, s in enumerate(t.shape)), t.dtype)]


@prefix_slice.def_bounds
def _prefix_slice_bounds(types, attrs):
    (t,) = types
    return {s: t.shape[a] for a, s in _prefix_axes(t, attrs).items()}


@prefix_slice.def_compute
def _prefix_slice_compute(tensors, attrs):
    (x,) = tensors
    axes = {normalize_axis("prefix_slice", a, len(x.shape)): s for a, s in zip(attrs["axes"], attrs["extents"])}
    shape = [te.var(axes[d], "int64") if d in axes else x.shape[d] for d in range(len(x.shape))]

    def body(*idx):
        # the extent is checked against the axis before the call; the min keeps every read inside
        return x[tuple(te.min(i, x.shape[d] - 1) if d in axes else i for d, i in enumerate(idx))]

    return [te.compute(shape, body, name="prefix_slice")]


arange = register_op(
    "arange", inputs=(), pattern=OpPattern.OPAQUE, attrs={"extent": REQUIRED, "dtype": "int64"},
    doc="[0, 1, ..., S - 1] for the symbol S of `extent` (bound by the graph's inputs at run time): "
        "ONNX Range(0, Shape(x)[k], 1) when x has a dynamic axis.")


@arange.def_infer
def _arange_infer(types, attrs):
    return [TensorType((_symbol("arange", attrs["extent"]),), attrs["dtype"])]


@arange.def_compute
def _arange_compute(tensors, attrs):
    n = te.var(attrs["extent"], "int64")
    return [te.compute((n,), lambda i: i.astype(attrs["dtype"]), name="arange")]


__all__ += ["prefix_slice", "arange"]
