"""simplify_inference: inference-only rewrites that make the graph cheaper before fusion.

1. No-op nodes go (Identity/Dropout arrive as nothing from the ONNX frontend; graphs built by hand
   or by other passes may hold them): `copy`, a `cast` to the same dtype, a reshape /
   broadcast_to / squeeze / expand_dims / pad / strided_slice / layout_transform whose output type
   equals its input type with nothing moved, a `transpose` by the identity permutation, a `clip`
   without bounds.
2. `nn.batch_norm` with constant statistics becomes `x * scale + shift`, per channel
   (scale = gamma / sqrt(var + eps), shift = beta - mean * scale), TVM's SimplifyInference.
3. A per-channel affine chain after a convolution or a dense/matmul layer with a constant weight
   (multiply / divide / add / subtract by constants that vary along the output channels only, the
   chain of step 2 included) is folded into the layer: its weight is scaled per output channel and
   one per-channel bias add remains (TVM's FoldScaleAxis). Every intermediate must have the chain
   as its only reader.

The new scale, shift and weight values are graph nodes over constants; fold_constant (which the
pass manager runs next) evaluates them, so no arithmetic on weights is done here.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph
from ._rewrite import Rewriter, const_derived
from ...ir.dtype import DataType, numpy_dtype
from .context import PassContext

_FLOATS = ("float16", "bfloat16", "float32", "float64")
_CONVS = ("nn.conv1d", "nn.conv2d", "nn.conv3d")


def simplify_inference(graph: Graph, ctx=None) -> Graph:
    """`graph` with no-op nodes dropped, batch norms decomposed and per-channel affine chains
    folded into the preceding conv/dense weights (see the module docstring)."""
    PassContext.of(ctx)   # the one pass signature: this pass needs none of the context
    graph = _drop_noops(graph)
    graph = _decompose_batch_norm(graph)
    return _fold_scale_shift(graph)


# ---------------------------------------------------------------------------------------------
# 1. no-op nodes
# ---------------------------------------------------------------------------------------------
def _is_noop(n) -> bool:
    if len(n.inputs) != 1 or len(n.outputs) != 1:
        return False
    t_in, t_out = n.inputs[0].type, n.outputs[0].type
    if t_in != t_out:
        return False
    op, a = n.op, n.attrs
    if op in ("copy", "cast", "reshape", "broadcast_to", "squeeze", "expand_dims", "layout_transform"):
        return op != "layout_transform" or a.get("src_layout") == a.get("dst_layout")
    if op == "transpose":
        axes = a.get("axes")
        return axes is None and t_in.ndim <= 1 or axes is not None and tuple(axes) == tuple(range(t_in.ndim))
    if op == "clip":
        return a.get("a_min") is None and a.get("a_max") is None
    if op == "nn.pad":
        return all(int(x) == 0 for x in np.asarray(a.get("pad_width"), dtype=object).reshape(-1))
    if op == "strided_slice":
        strides = a.get("strides")
        return strides is None or all(int(s) == 1 for s in strides)
    return False


def _drop_noops(graph: Graph) -> Graph:
    if not any(_is_noop(n) for n in graph.nodes):
        return graph
    rw = Rewriter(graph)
    for n in graph.nodes:
        if _is_noop(n):
            rw.replace(n.outputs[0], rw.get(n.inputs[0]))
        else:
            rw.emit(n)
    return rw.finish()


# ---------------------------------------------------------------------------------------------
# 2. batch norm -> multiply + add
# ---------------------------------------------------------------------------------------------
def _decompose_batch_norm(graph: Graph) -> Graph:
    const = const_derived(graph)
    todo = [n for n in graph.nodes if n.op == "nn.batch_norm" and all(v in const for v in n.inputs[1:])
            and str(n.inputs[0].dtype) in _FLOATS]
    if not todo:
        return graph
    rw = Rewriter(graph)
    for n in graph.nodes:
        if n not in todo:
            rw.emit(n)
            continue
        x, gamma, beta, mean, var = (rw.get(v) for v in n.inputs)
        ndim = x.type.ndim
        axis = int(n.attrs["axis"])
        axis = axis + ndim if axis < 0 else axis
        dt = str(x.dtype)
        base = n.name
        eps = rw.const(np.array(n.attrs["epsilon"], dtype=_np(dt)), f"{base}_eps")
        std = rw.make("sqrt", rw.make("add", var, eps, name=f"{base}_var_eps"), name=f"{base}_std")
        scale = rw.make("divide", gamma, std, name=f"{base}_scale")
        shift = rw.make("subtract", beta, rw.make("multiply", mean, scale, name=f"{base}_mean_scale"),
                        name=f"{base}_shift")
        trailing = ndim - 1 - axis
        if trailing:
            shape = (x.type.shape[axis],) + (1,) * trailing
            scale = rw.make("reshape", scale, name=f"{base}_scale_b", newshape=shape)
            shift = rw.make("reshape", shift, name=f"{base}_shift_b", newshape=shape)
        y = rw.make("add", rw.make("multiply", x, scale, name=f"{base}_mul"), shift, name=base, takes_over=n)
        rw.replace(n.outputs[0], y)
    return rw.finish()


def _np(dtype: str):
    return numpy_dtype(DataType(dtype))


# ---------------------------------------------------------------------------------------------
# 3. per-channel scale / shift folded into the conv / dense weight
# ---------------------------------------------------------------------------------------------
def _layer(n, const):
    """(channel axis of the output, weight input index, weight's output-channel axis) when node n
    is a float conv / dense / matmul with a constant weight, else None."""
    out = n.outputs[0].type if len(n.outputs) == 1 else None
    if out is None or str(out.dtype) not in _FLOATS:
        return None
    if n.op in _CONVS:
        w = n.inputs[1]
        if w not in const or str(n.inputs[0].dtype) not in _FLOATS or str(w.dtype) != str(out.dtype):
            return None
        return 1, 1, 0
    if n.op == "nn.dense":
        w = n.inputs[1]
        if w not in const or w.type.ndim != 2 or str(w.dtype) != str(out.dtype):
            return None
        return out.ndim - 1, 1, 0
    if n.op == "nn.matmul":
        b = n.inputs[1]
        if b not in const or b.type.ndim != 2 or out.ndim < 2 or str(b.dtype) != str(out.dtype):
            return None
        return out.ndim - 1, 1, (0 if n.attrs.get("transpose_b") else 1)
    return None


def _per_channel(v, out_type, axis):
    """How `v` (an operand of a binary op on a tensor of out_type) varies: 'scalar', 'channel'
    (along `axis` only, one value per channel) or None (anything else)."""
    s = v.type.shape
    if len(s) > out_type.ndim:
        return None
    full = (1,) * (out_type.ndim - len(s)) + tuple(s)
    if any(not isinstance(d, int) for d in full):
        return None
    others = [d for k, d in enumerate(full) if k != axis]
    if any(d != 1 for d in others):
        return None
    if full[axis] == 1:
        return "scalar"
    return "channel" if full[axis] == out_type.shape[axis] else None


def _fold_scale_shift(graph: Graph) -> Graph:
    const = const_derived(graph)
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    plans = {}          # layer node -> (chain of (node, kind, operand), channel axis, weight idx, weight axis)
    in_chain = set()
    for n in graph.nodes:
        info = _layer(n, const)
        if info is None:
            continue
        axis, widx, waxis = info
        out_t = n.outputs[0].type
        if not isinstance(out_t.shape[axis], int):
            continue
        chain = []
        v = n.outputs[0]
        while v not in outputs:
            users = consumers.get(v, [])
            if len(users) != 1:
                break
            c, pos = users[0]
            if c.op not in ("multiply", "divide", "add", "subtract") or c.outputs[0].type != out_t:
                break
            other = c.inputs[1 - pos]
            if other is v or other not in const or str(other.dtype) != str(out_t.dtype):
                break
            kind = _per_channel(other, out_t, axis)
            if kind is None or (c.op == "divide" and pos == 1):
                break
            chain.append((c, pos, other))
            v = c.outputs[0]
        scales = sum(1 for c, _, _ in chain if c.op in ("multiply", "divide"))
        if scales == 0 and len(chain) < 2:
            continue
        plans[n] = (chain, axis, widx, waxis)
        in_chain.update(c for c, _, _ in chain)
    if not plans:
        return graph
    rw = Rewriter(graph)
    # the replacement is emitted where the chain ends: every operand is defined by then
    at_end = {chain[-1][0]: layer for layer, (chain, *_rest) in plans.items()}
    for m in graph.nodes:
        if m in plans:
            continue
        if m in in_chain and m not in at_end:
            continue          # folded: its readers read the layer's replacement
        if m not in at_end:
            rw.emit(m)
            continue
        n = at_end[m]
        chain, axis, widx, waxis = plans[n]
        out_t = n.outputs[0].type
        C = out_t.shape[axis]
        base = n.name
        scale = shift = None          # per-channel (C,) vectors; None: 1 and 0

        def vec(operand, what):
            """The operand as a (C,) vector."""
            x = rw.get(operand)
            if x.type.shape != (C,):
                x = rw.make("reshape", x, name=f"{base}_{what}_vec", newshape=(-1,))
                if x.type.shape != (C,):
                    x = rw.make("broadcast_to", x, name=f"{base}_{what}_bc", shape=(C,))
            return x

        for k, (c, pos, other) in enumerate(chain):
            o = vec(other, f"{k}")
            if c.op == "multiply" or c.op == "divide":
                op = c.op
                scale = o if scale is None and op == "multiply" else rw.make(
                    op, scale if scale is not None else rw.const(np.ones(C, _np(str(out_t.dtype))), f"{base}_one"),
                    o, name=f"{base}_scale{k}")
                if shift is not None:
                    shift = rw.make(op, shift, o, name=f"{base}_shift{k}")
            elif c.op == "add":
                shift = o if shift is None else rw.make("add", shift, o, name=f"{base}_shift{k}")
            elif pos == 0:      # y - o
                neg = rw.make("negative", o, name=f"{base}_neg{k}")
                shift = neg if shift is None else rw.make("subtract", shift, o, name=f"{base}_shift{k}")
            else:               # o - y: negate what is there, then add o
                minus1 = rw.const(np.full(C, -1, _np(str(out_t.dtype))), f"{base}_minus_one")
                scale = minus1 if scale is None else rw.make("negative", scale, name=f"{base}_scale{k}")
                shift = o if shift is None else rw.make("subtract", o, shift, name=f"{base}_shift{k}")
        ins = [rw.get(v) for v in n.inputs]
        if scale is not None:
            w = ins[widx]
            shape = [1] * w.type.ndim
            shape[waxis] = C
            s = scale if tuple(shape) == (C,) else rw.make("reshape", scale, name=f"{base}_wscale",
                                                           newshape=tuple(shape))
            ins[widx] = rw.make("multiply", w, s, name=f"{w.name}_scaled")
        last = chain[-1][0]
        y = rw.make(n.op, *ins, name=base, takes_over=n, **dict(n.attrs))
        if shift is not None:
            bshape = (C,) + (1,) * (out_t.ndim - 1 - axis)
            b = shift if bshape == (C,) else rw.make("reshape", shift, name=f"{base}_bias", newshape=bshape)
            y = rw.make("add", y, b, name=last.name, takes_over=last)
        rw.replace(last.outputs[0], y)
    return rw.finish()
