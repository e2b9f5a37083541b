"""ONNX converters of the classical-ML domain (ai.onnx.ml) that work on numeric tensors: Binarizer
and ArrayFeatureExtractor. (String-typed ML ops have no tessera tensors to run on.)"""
from __future__ import annotations

import numpy as np

from ...ir.dtype import numpy_dtype
from . import converter

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
