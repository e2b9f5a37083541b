"""ONNX converters of the optimizer updates of ai.onnx.preview.training: Adagrad, Adam, Momentum
(standard and Nesterov), composed from elementwise ops as the ONNX reference computes them. The
step count T is a runtime scalar; the branches on T > 0 are `where`s."""
from __future__ import annotations

import numpy as np

from ...ir.dtype import numpy_dtype
from . import converter

TRAINING = "ai.onnx.preview.training"


class _Ops:
    """Small arithmetic helpers over Values of one float dtype."""

    def __init__(self, ctx, like):
        self.ctx, self.dt = ctx, numpy_dtype(like.type.dtype)
        self.dtype = str(like.type.dtype)

    def c(self, v):
        return self.ctx.const(np.array(v, self.dt), "c")

    def as_dt(self, v):
        return v if str(v.type.dtype) == self.dtype else self.ctx.op("cast", v, dtype=self.dtype)

    def __getattr__(self, name):                       # add, subtract, multiply, divide, sqrt, ...
        return lambda *args: self.ctx.op(name, *args)


def _groups(ctx, per_tensor):
    """(R, T, [tuple of the per-tensor inputs for each optimized tensor])."""
    n_in = ctx.num_inputs - 2
    if n_in < per_tensor or n_in % per_tensor:
        ctx.unsupported(f"{ctx.num_inputs} inputs: R, T and {per_tensor} tensors per optimized tensor expected")
    n = n_in // per_tensor
    ins = [ctx.input(2 + i) for i in range(n_in)]
    return ctx.input(0), ctx.input(1), [tuple(ins[k * n + i] for k in range(per_tensor)) for i in range(n)], n


def _scalar_float(ops, v):
    return ops.as_dt(ops.ctx.op("reshape", v, newshape=()) if v.type.ndim else v)


@converter("Adagrad", domain=TRAINING)
def _adagrad(ctx):
    r, t, groups, n = _groups(ctx, 3)
    xs, hs = [], []
    for x, g, h in groups:
        o = _Ops(ctx, x)
        rr, tt = _scalar_float(o, r), _scalar_float(o, t)
        r_ = o.divide(rr, o.add(o.c(1.0), o.multiply(tt, o.c(ctx.attr("decay_factor", 0.0)))))
        g_reg = o.add(o.multiply(o.c(ctx.attr("norm_coefficient", 0.0)), x), g)
        h_new = o.add(h, o.multiply(g_reg, g_reg))
        h_sqrt = o.add(o.sqrt(h_new), o.c(ctx.attr("epsilon", 0.0)))
        xs.append(o.subtract(x, o.divide(o.multiply(r_, g_reg), h_sqrt)))
        hs.append(h_new)
    return tuple(xs + hs)


@converter("Adam", domain=TRAINING)
def _adam(ctx):
    r, t, groups, n = _groups(ctx, 4)
    alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
    eps = float(ctx.attr("epsilon", 0.0))
    nc, ncp = float(ctx.attr("norm_coefficient", 0.0)), float(ctx.attr("norm_coefficient_post", 0.0))
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        o = _Ops(ctx, x)
        rr, tt = _scalar_float(o, r), _scalar_float(o, t)
        g_reg = o.add(o.multiply(o.c(nc), x), g)
        v_new = o.add(o.multiply(o.c(alpha), v), o.multiply(o.c(1 - alpha), g_reg))
        h_new = o.add(o.multiply(o.c(beta), h), o.multiply(o.c(1 - beta), o.multiply(g_reg, g_reg)))
        h_sqrt = o.add(o.sqrt(h_new), o.c(eps))
        corrected = o.divide(o.multiply(rr, o.sqrt(o.subtract(o.c(1.0), o.power(o.c(beta), tt)))),
                             o.subtract(o.c(1.0), o.power(o.c(alpha), tt)))
        r_adj = ctx.op("where", ctx.op("greater", t, ctx.const(np.zeros((), numpy_dtype(t.type.dtype)), "zero")),
                       corrected, rr)
        x_new = o.subtract(x, o.multiply(r_adj, o.divide(v_new, h_sqrt)))
        xs.append(o.multiply(o.c(1 - ncp), x_new))
        vs.append(v_new)
        hs.append(h_new)
    return tuple(xs + vs + hs)


@converter("Momentum", domain=TRAINING)
def _momentum(ctx):
    r, t, groups, n = _groups(ctx, 3)
    alpha, beta = float(ctx.attr("alpha")), float(ctx.attr("beta"))
    mode = ctx.attr("mode", "standard")
    if mode not in ("standard", "nesterov"):
        ctx.unsupported(f"mode={mode!r}")
    xs, vs = [], []
    for x, g, v in groups:
        o = _Ops(ctx, x)
        rr = _scalar_float(o, r)
        g_reg = o.add(o.multiply(o.c(float(ctx.attr("norm_coefficient"))), x), g)
        first = ctx.op("greater", t, ctx.const(np.zeros((), numpy_dtype(t.type.dtype)), "zero"))
        beta_adj = ctx.op("where", first, o.c(beta), o.c(1.0))
        v_new = o.add(o.multiply(o.c(alpha), v), o.multiply(beta_adj, g_reg))
        step = v_new if mode == "standard" else o.add(g_reg, o.multiply(o.c(alpha), v_new))
        xs.append(o.subtract(x, o.multiply(rr, step)))
        vs.append(v_new)
    return tuple(xs + vs)
