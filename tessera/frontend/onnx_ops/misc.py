"""ONNX converters of the remaining small ops: BitCast (reinterpret), Det, CenterCropPad (slice and
pad), MaxUnpool (a scatter into zeros), NonZero of a constant (folded), SwiGLU, TensorScatter,
CausalConvWithState (concat + depthwise conv1d + SiLU), and the ops whose output shape depends on
the data (NonMaxSuppression, Unique, NonZero of a runtime tensor): host ops (tessera/ops/dynamic.py)
whose extents the graph executor binds when they run.
"""
from __future__ import annotations

import re

import numpy as np

from ...ir.dtype import numpy_dtype
from ...ops._common import normalize_axis
from . import converter


def _ints(a) -> list:
    return [int(x) for x in np.asarray(a).reshape(-1)]


@converter("BitCast", since=26)
def _bitcast(ctx):
    x = ctx.input(0)
    to = ctx.attr("to")
    if to is None:
        ctx.unsupported("BitCast needs the 'to' attribute")
    return ctx.op("reinterpret", x, dtype=ctx.dtype(int(to)))


@converter("Det", since=11)
def _det(ctx):
    x = ctx.input(0)
    if x.type.ndim < 2 or not isinstance(x.type.shape[-1], int) or x.type.shape[-1] != x.type.shape[-2]:
        ctx.unsupported(f"input {x.type} must be (..., n, n) with a static n")
    return ctx.op("det", x)


@converter("CenterCropPad", since=18)
def _center_crop_pad(ctx):
    x = ctx.input(0)
    shape = _ints(ctx.const_input(1))
    nd = x.type.ndim
    axes = ctx.attr("axes")
    axes = list(range(nd)) if axes is None else [normalize_axis("CenterCropPad", a, nd) for a in axes]
    if len(axes) != len(shape):
        ctx.unsupported(f"shape {shape} has {len(shape)} entries for axes {axes}")
    begin, end, crop_axes = [], [], []
    pads = [[0, 0] for _ in range(nd)]
    for a, want in zip(axes, shape):
        have = x.type.shape[a]
        if not isinstance(have, int):
            if have == want:
                continue
            ctx.unsupported(f"axis {a} of {x.type} is symbolic; it cannot be cropped or padded to {want}")
        if want < 0:
            ctx.unsupported(f"negative target extent {want} for axis {a}")
        if want < have:                 # crop: the larger half of the excess goes at the end
            start = (have - want) // 2
            begin.append(start)
            end.append(start + want)
            crop_axes.append(a)
        elif want > have:               # pad with zeros: the larger half at the end
            pads[a] = [(want - have) // 2, want - have - (want - have) // 2]
    if crop_axes:
        x = ctx.op("strided_slice", x, begin=tuple(begin), end=tuple(end), axes=tuple(crop_axes))
    if any(p != [0, 0] for p in pads):
        dt = str(x.type.dtype)
        value = False if dt == "bool" else 0.0 if dt.startswith(("float", "bfloat")) else 0
        x = ctx.op("nn.pad", x, pad_width=tuple(tuple(p) for p in pads), pad_mode="constant", pad_value=value)
    return x


@converter("MaxUnpool", since=9)
def _max_unpool(ctx):
    """Y = zeros; Y.flat[indices] = X over the shape MaxPool had (from kernel, strides and pads),
    then zero-padded at the end of each spatial axis to output_shape when that is given."""
    x, idx = ctx.input(0), ctx.input(1)
    if not x.type.is_static:
        ctx.unsupported(f"input {x.type} must have a static shape (the output is scattered into zeros)")
    if idx.type.shape != x.type.shape:
        ctx.unsupported(f"indices {idx.type} must have the shape of X {x.type}")
    nd = x.type.ndim - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != nd:
        ctx.unsupported(f"kernel_shape {kernel} must have {nd} entries")
    strides = [int(s) for s in (ctx.attr("strides") or [1] * nd)]
    pads = [int(p) for p in (ctx.attr("pads") or [0] * (2 * nd))]
    inferred = list(x.type.shape[:2]) + [
        (x.type.shape[2 + d] - 1) * strides[d] - (pads[d] + pads[nd + d]) + int(kernel[d]) for d in range(nd)]
    if any(s <= 0 for s in inferred):
        ctx.unsupported(f"kernel {list(kernel)}, strides {strides} and pads {pads} give the empty shape {inferred}")
    total = int(np.prod(inferred, dtype=object))
    ctx.check_constant_size([total], numpy_dtype(x.type.dtype), "the zeros the output is scattered into")
    if str(idx.type.dtype) != "int64":
        idx = ctx.op("cast", idx, dtype="int64")
    flat = ctx.const(np.zeros(total, numpy_dtype(x.type.dtype)), "zeros")
    # ONNX Runtime takes MaxUnpool's indices in [0, size of Y): a negative one is refused, not counted from the end
    y = ctx.op("scatter_elements", flat, ctx.op("reshape", idx, newshape=(-1,)), ctx.op("reshape", x, newshape=(-1,)),
               axis=0, negative_indices=False)
    y = ctx.op("reshape", y, newshape=tuple(inferred))
    if ctx.has_input(2):
        out = _ints(ctx.const_input(2))
        if len(out) != len(inferred) or any(o < i for o, i in zip(out, inferred)):
            ctx.unsupported(f"output_shape {out} must not be smaller than the unpooled shape {inferred}")
        if out != inferred:
            dt = str(x.type.dtype)
            y = ctx.op("nn.pad", y, pad_width=tuple((0, o - i) for o, i in zip(out, inferred)), pad_mode="constant",
                       pad_value=0.0 if dt.startswith(("float", "bfloat")) else 0)
    return y


def extent_symbol(ctx, what: str) -> str:
    """The symbol naming a data-dependent extent of this node's output (one per node)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", ctx.node_name).strip("_") or "node"
    return f"{'n_' + base if base[0].isdigit() else base}_{what}"


@converter("NonZero", since=9)
def _nonzero(ctx):
    if ctx.is_const(0):
        a = np.asarray(ctx.const_input(0))
        return ctx.const(np.stack(np.nonzero(a)).astype(np.int64).reshape(a.ndim, -1), "nonzero")
    return ctx.op("nonzero", ctx.input(0), extent=extent_symbol(ctx, "nonzero"))


@converter("Unique", since=11)
def _unique(ctx):
    axis = ctx.attr("axis")
    outs = ctx.op("unique", ctx.input(0), extent=extent_symbol(ctx, "unique"),
                  axis=None if axis is None else int(axis), sorted=bool(ctx.attr("sorted", 1)))
    return list(outs)


@converter("NonMaxSuppression", since=10)
def _non_max_suppression(ctx):
    boxes, scores = ctx.input(0), ctx.input(1)
    dt = str(boxes.type.dtype)
    if str(scores.type.dtype) != dt:
        ctx.unsupported(f"boxes are {dt}, scores {scores.type.dtype}: they must have one dtype")

    def scalar(i, dtype, default):
        v = ctx.input(i, optional=True)
        if v is None:
            return ctx.const(np.array(default, dtype), f"default{i}")
        return v

    return ctx.op("non_max_suppression", boxes, scores, scalar(2, np.int64, 0), scalar(3, numpy_dtype(dt), 0),
                  scalar(4, numpy_dtype(dt), 0), extent=extent_symbol(ctx, "selected"),
                  center_point_box=int(ctx.attr("center_point_box", 0)), use_score_threshold=ctx.has_input(4))


# ---------------------------------------------------------------------------------------------
# SwiGLU, TensorScatter, CausalConvWithState (the LLM building blocks of recent opsets)
# ---------------------------------------------------------------------------------------------
@converter("SwiGLU", since=28)
def _swiglu(ctx):
    """Swish_alpha(A) * B = A * sigmoid(alpha * A) * B, as the reference rounds it."""
    a, b = ctx.input(0), ctx.input(1)
    if a.type != b.type:
        ctx.unsupported(f"A {a.type} and B {b.type} must have one shape and dtype (SwiGLU does not broadcast)")
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        scaled = ctx.op("multiply", a, ctx.const(np.array(alpha, numpy_dtype(a.type.dtype)), "alpha"))
    else:
        scaled = a
    return ctx.op("multiply", ctx.op("multiply", a, ctx.op("sigmoid", scaled)), b)


@converter("TensorScatter", since=24)
def _tensor_scatter(ctx):
    past, upd = ctx.input(0), ctx.input(1)
    w = ctx.input(2, optional=True)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        ctx.unsupported(f"mode={mode!r}")
    ins = [past, upd] + ([w] if w is not None else [])
    return ctx.op("tensor_scatter", *ins, axis=int(ctx.attr("axis", -2)), mode=mode)


@converter("CausalConvWithState", since=27)
def _causal_conv_with_state(ctx):
    """concat(past_state or zeros, input) along time, a depthwise valid conv1d (+ bias), SiLU when
    asked; present_state is the last k-1 steps of the concatenation."""
    x, w = ctx.input(0), ctx.input(1)
    bias, past = ctx.input(2, optional=True), ctx.input(3, optional=True)
    act = ctx.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        ctx.unsupported(f"activation={act!r} (ONNX defines none, silu and swish)")
    if x.type.ndim != 3 or w.type.ndim != 3 or w.type.shape[1] != 1:
        ctx.unsupported(f"input {x.type} must be (B, C, L) and weight {w.type} (C, 1, k)")
    batch, ch, _ = x.type.shape
    k = w.type.shape[2]
    if not isinstance(k, int) or not isinstance(ch, int) or w.type.shape[0] != ch:
        ctx.unsupported(f"weight {w.type} must be ({ch}, 1, k) with a static k")
    dt = numpy_dtype(x.type.dtype)
    if past is None:
        if not isinstance(batch, int):
            ctx.unsupported("a symbolic batch without past_state (the zero state needs the batch size)")
        past = ctx.const(np.zeros((batch, ch, k - 1), dt), "zero_state")
    padded = ctx.op("concatenate", past, x, axis=2) if k > 1 else x
    y = ctx.op("nn.conv1d", padded, w, groups=ch)
    if bias is not None:
        y = ctx.op("add", y, ctx.op("reshape", bias, newshape=(ch, 1)))
    if act in ("silu", "swish"):
        y = ctx.op("multiply", y, ctx.op("sigmoid", y))
    if not ctx.has_output(1):
        return (y,)
    total = padded.type.shape[2]
    if k == 1:                                  # no state to carry: an empty one
        if not isinstance(batch, int):
            ctx.unsupported("an empty present_state of a symbolic batch")
        return y, ctx.const(np.zeros((batch, ch, 0), dt), "present_state")
    state = ctx.op("strided_slice", padded, begin=(-(k - 1),), end=(total if isinstance(total, int) else 2**62,),
                   axes=(2,))
    return y, state


@converter("TfIdfVectorizer", since=9)
def _tfidf_vectorizer(ctx):
    """The pool's n-grams (those of min..max_gram_length) as constant token/size/column tables; the
    counting is tfidf_vectorizer's. A repeated n-gram counts for its last entry, as the reference's trie."""
    x = ctx.input(0)
    if ctx.attr("pool_strings") is not None:
        ctx.unsupported("string pools (tessera has no string tensors)")
    pool = [int(v) for v in (ctx.attr("pool_int64s") or [])]
    counts = [int(v) for v in (ctx.attr("ngram_counts") or [])]
    indexes = [int(v) for v in (ctx.attr("ngram_indexes") or [])]
    lo, hi = int(ctx.attr("min_gram_length", 1)), int(ctx.attr("max_gram_length", 1))
    mode = ctx.attr("mode", "TF")
    if not pool or not counts or not indexes or lo < 1 or hi < lo:
        ctx.unsupported(f"pool {len(pool)} items, ngram_counts {counts}, gram lengths {lo}..{hi} define no n-grams")
    grams, ngram_id = {}, 0
    for level, start in enumerate(counts):
        n = level + 1
        end = counts[level + 1] if level + 1 < len(counts) else len(pool)
        for k in range((end - start) // n):
            if lo <= n <= hi:
                if ngram_id >= len(indexes):
                    ctx.unsupported(f"ngram_indexes ({len(indexes)} entries) does not cover n-gram {ngram_id}")
                grams[tuple(pool[start + k * n:start + (k + 1) * n])] = indexes[ngram_id]
            ngram_id += 1
    if not grams:
        ctx.unsupported(f"no pool n-gram has a length in {lo}..{hi}")
    max_n = max(len(g) for g in grams)
    tokens = np.zeros((len(grams), max_n), np.int64)
    for j, g in enumerate(grams):
        tokens[j, :len(g)] = g
    sizes = np.array([len(g) for g in grams], np.int32)
    cols = np.array(list(grams.values()), np.int64)
    ins = [x, ctx.const(tokens, "tokens"), ctx.const(sizes, "sizes"), ctx.const(cols, "columns")]
    w = ctx.attr("weights")
    out_size = max(indexes) + 1
    if w is not None and len(w):
        # one weight per ngram_indexes entry (the spec), read by output column (the reference and
        # onnxruntime): the first output_size of them are used
        if len(w) < out_size:
            ctx.unsupported(f"{len(w)} weights for {out_size} output columns")
        ins.append(ctx.const(np.asarray(w[:out_size], np.float32), "weights"))
    if str(x.type.dtype) not in ("int32", "int64"):
        ctx.unsupported(f"input of dtype {x.type.dtype} (tessera counts int32/int64 tokens)")
    return ctx.op("tfidf_vectorizer", *ins, output_size=out_size, max_skip_count=int(ctx.attr("max_skip_count", 0)),
                  mode=mode)


@converter("FlexAttention", domain="ai.onnx.preview")
def _flex_attention(ctx):
    """softmax(score_mod(Q K^T * scale)) then prob_mod, times V, as the ONNX reference computes it:
    Q and K each scaled by sqrt(scale) in their dtype, K/V heads repeated for grouped queries, the
    softmax (and the modifier subgraphs, converted inline) in softmax_precision (float32 for
    halves), the result cast to V's dtype."""
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if q.type.ndim != 4 or k.type.ndim != 4 or v.type.ndim != 4:
        ctx.unsupported(f"Q {q.type}, K {k.type} and V {v.type} must be rank 4")
    hq, hk = q.type.shape[1], k.type.shape[1]
    if not isinstance(hq, int) or not isinstance(hk, int) or hk < 1 or hq % hk or v.type.shape[1] != hk:
        ctx.unsupported(f"query heads {hq} must be a static multiple of the key/value heads {hk} ({v.type})")
    head = q.type.shape[3]
    if not isinstance(head, int):
        ctx.unsupported(f"the head size of Q {q.type} must be static")
    dt = numpy_dtype(q.type.dtype)
    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(head) if scale is None else float(scale)
    root = ctx.const(np.array(np.sqrt(np.float32(scale)), dtype=dt), "sqrt_scale")
    if hq != hk:
        heads = ctx.const(np.repeat(np.arange(hk, dtype=np.int64), hq // hk), "kv_heads")
        k = ctx.op("take", k, heads, axis=1)
        v = ctx.op("take", v, heads, axis=1)
    scores = ctx.op("nn.matmul", ctx.op("multiply", q, root), ctx.op("multiply", k, root), transpose_b=True)
    prec = ctx.attr("softmax_precision")
    if prec is not None:
        compute = ctx.dtype(int(prec))
    else:
        compute = "float64" if str(q.type.dtype) == "float64" else "float32"
    if str(scores.type.dtype) != compute:
        scores = ctx.op("cast", scores, dtype=compute)

    def modify(name, x):
        g = ctx.attr(name)
        if g is None:
            return x
        outs = ctx.subgraph(g, [x])
        if len(outs) != 1 or outs[0].type.shape != x.type.shape:
            ctx.unsupported(f"{name} must map one {x.type} tensor to one of the same shape")
        y = outs[0]
        return y if str(y.type.dtype) == compute else ctx.op("cast", y, dtype=compute)

    probs = modify("prob_mod", ctx.op("nn.softmax", modify("score_mod", scores), axis=-1))
    vc = v if str(v.type.dtype) == compute else ctx.op("cast", v, dtype=compute)
    y = ctx.op("nn.matmul", probs, vc)
    return y if str(y.type.dtype) == str(v.type.dtype) else ctx.op("cast", y, dtype=str(v.type.dtype))
