"""ONNX converters of the classical-ML domain (ai.onnx.ml) that work on numeric tensors: Binarizer,
ArrayFeatureExtractor and TreeEnsemble. (String-typed ML ops have no tessera tensors to run on.)"""
from __future__ import annotations

import numpy as np

from ...ir.dtype import numpy_dtype
from . import converter
from ...ops.misc import TREE_AGGREGATES, TREE_MODES

ML = "ai.onnx.ml"


@converter("Binarizer", domain=ML)
def _binarizer(ctx):
    """1 where x > threshold, else 0, in x's dtype."""
    x = ctx.input(0)
    dt = numpy_dtype(x.type.dtype)
    above = ctx.op("greater", x, ctx.const(np.array(ctx.attr("threshold", 0.0), dt), "threshold"))
    return ctx.op("cast", above, dtype=str(x.type.dtype))


@converter("ArrayFeatureExtractor", domain=ML)
def _array_feature_extractor(ctx):
    """x[..., indices] with the indices flattened; a vector input gives one row (as onnxruntime)."""
    x, idx = ctx.input(0), ctx.input(1)
    if str(idx.type.dtype) != "int64":
        ctx.unsupported(f"indices of dtype {idx.type.dtype} (int64 expected)")
    if idx.type.ndim != 1:
        if not idx.type.is_static:
            ctx.unsupported(f"indices {idx.type} must have a static shape")
        idx = ctx.op("reshape", idx, newshape=(-1,))
    if x.type.ndim == 1:
        x = ctx.op("reshape", x, newshape=(1, x.type.shape[0] if isinstance(x.type.shape[0], int) else -1))
    return ctx.op("take", x, idx, axis=x.type.ndim - 1)


@converter("TreeEnsemble", since=5, domain=ML)
def _tree_ensemble(ctx):
    """The ensemble's nodes as tree_ensemble attributes, its leaves as constant inputs. MEMBER nodes
    take their sets from membership_values (NaN-separated) in the order the ONNX reference builds
    the trees (depth first, true branch first)."""
    x = ctx.input(0)
    post = int(ctx.attr("post_transform", 0))
    if post != 0:
        ctx.unsupported(f"post_transform {post} (tessera implements NONE; apply the transform after the node)")

    def ints(name, default=None):
        v = ctx.attr(name, default)
        if v is None:
            ctx.unsupported(f"attribute {name} is required")
        return [int(i) for i in np.asarray(v).reshape(-1)]

    modes = ints("nodes_modes")
    if any(not 0 <= m < len(TREE_MODES) for m in modes):
        ctx.unsupported(f"node modes {sorted(set(modes))} (ONNX defines 0..{len(TREE_MODES) - 1})")
    splits = [float(v) for v in np.asarray(ctx.attr("nodes_splits")).reshape(-1)]
    true_ids, false_ids = ints("nodes_truenodeids"), ints("nodes_falsenodeids")
    true_leafs, false_leafs = ints("nodes_trueleafs"), ints("nodes_falseleafs")
    missing = ints("nodes_missing_value_tracks_true", [0] * len(modes))
    roots = ints("tree_roots")
    weights = np.asarray(ctx.attr("leaf_weights")).reshape(-1)
    targets = np.asarray(ints("leaf_targetids"), np.int64)
    agg = int(ctx.attr("aggregate_function", 1))
    if not 0 <= agg < len(TREE_AGGREGATES):
        ctx.unsupported(f"aggregate_function {agg}")
    members = {}
    values = ctx.attr("membership_values")
    if values is not None:
        it = iter(float(v) for v in np.asarray(values).reshape(-1))
        seen = set()

        def visit(node, leaf):
            if leaf or node in seen or not 0 <= node < len(modes):
                return
            seen.add(node)
            if TREE_MODES[modes[node]] == "MEMBER":
                found = []
                for v in it:
                    if np.isnan(v):
                        break
                    found.append(v)
                members[node] = tuple(found)
            visit(true_ids[node], true_leafs[node])
            visit(false_ids[node], false_leafs[node])

        for r in roots:
            visit(r, bool(true_leafs[r] and false_leafs[r] and true_ids[r] == false_ids[r]))
    elif any(TREE_MODES[m] == "MEMBER" for m in modes):
        ctx.unsupported("set membership nodes without membership_values")
    dt = numpy_dtype(x.type.dtype)
    return ctx.op("tree_ensemble", x, ctx.const(weights.astype(dt), "leaf_weights"), ctx.const(targets, "leaf_targets"),
                  n_targets=int(ctx.attr("n_targets", 1)), aggregate=TREE_AGGREGATES[agg], roots=tuple(roots),
                  modes=tuple(TREE_MODES[m] for m in modes), features=tuple(ints("nodes_featureids")),
                  splits=tuple(splits), true_ids=tuple(true_ids), false_ids=tuple(false_ids),
                  true_leafs=tuple(true_leafs), false_leafs=tuple(false_leafs), missing_true=tuple(missing),
                  members=tuple(sorted(members.items())))
