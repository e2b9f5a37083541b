"""ONNX converters of the recurrent layers RNN, GRU and LSTM, and of ReverseSequence.

A layer is unrolled over its sequence length (a static extent of X): per direction, one nn.dense
projects every step's input at once (X W^T plus the biases), then one cell op per step
(rnn.rnn_cell / gru_cell / lstm_cell) advances the state; the steps' outputs are concatenated into
Y. A reverse direction walks the steps backwards; with sequence_lens it first reverses each batch
entry's own sequence (reverse_sequence), runs forward with the lengths masking finished entries,
and reverses Y back, as ONNX Runtime does. layout=1 (batch first) transposes in and out.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtype import numpy_dtype
from ...ops.rnn import ACTIVATION_DEFAULTS, ACTIVATIONS
from . import converter

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ("tanh",), "GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}
_NEEDS_BETA = ("affine", "scaledtanh", "hardsigmoid")


def _activations(ctx, kind, num_dirs):
    """Per direction: (names, alphas, betas) with ONNX's defaults; alpha/beta lists are consumed in
    order by the activations that take them."""
    n = len(_DEFAULT_ACTS[kind])
    names = ctx.attr("activations")
    if names is None:
        names = list(_DEFAULT_ACTS[kind]) * num_dirs
    names = [str(a).lower() for a in names]
    if len(names) == n and num_dirs == 2:
        names = names * 2
    if len(names) != n * num_dirs:
        ctx.unsupported(f"activations {names} must name {n * num_dirs} functions ({n} per direction)")
    bad = [a for a in names if a not in ACTIVATIONS]
    if bad:
        ctx.unsupported(f"activation {bad[0]!r} (tessera has {', '.join(ACTIVATIONS)})")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    al, be = [], []
    for a in names:
        da, db = ACTIVATION_DEFAULTS.get(a, (0.0, 0.0))
        al.append(float(alphas.pop(0)) if a in ACTIVATION_DEFAULTS and alphas else da)
        be.append(float(betas.pop(0)) if a in _NEEDS_BETA and betas else db)
    return [(tuple(names[d * n:(d + 1) * n]), tuple(al[d * n:(d + 1) * n]), tuple(be[d * n:(d + 1) * n]))
            for d in range(num_dirs)]


def _pick(ctx, v, d, name):
    """v[d]: the direction axis dropped."""
    return ctx.op("take", v, ctx.const(np.array(d, np.int64), f"{name}_dir"), axis=0)


def _slice(ctx, v, begin, end):
    return ctx.op("strided_slice", v, begin=(begin,), end=(end,), axes=(0,))


def _zeros_like_state(ctx, xw, hidden, dt):
    """A (B, H) zero state for a symbolic batch B: selected from xw's first step (never its values)."""
    first = ctx.op("take", xw, ctx.const(np.array(0, np.int64), "step0"), axis=0)
    part = ctx.op("strided_slice", first, begin=(0,), end=(hidden,), axes=(1,))
    return ctx.op("where", ctx.const(np.array(False), "false"), part, ctx.const(np.zeros((), dt), "zero"))


def _recurrent(kind):
    def convert(ctx):
        n_gates = _GATES[kind]
        x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
        b = ctx.input(3, optional=True)
        seq = ctx.input(4, optional=True)
        h0 = ctx.input(5, optional=True)
        c0 = ctx.input(6, optional=True) if kind == "LSTM" else None
        p = ctx.input(7, optional=True) if kind == "LSTM" else None
        layout = int(ctx.attr("layout", 0))
        if x.type.ndim != 3:
            ctx.unsupported(f"X {x.type} must be 3-d")
        if layout:
            x = ctx.op("transpose", x, axes=(1, 0, 2))
            h0 = ctx.op("transpose", h0, axes=(1, 0, 2)) if h0 is not None else None
            c0 = ctx.op("transpose", c0, axes=(1, 0, 2)) if c0 is not None else None
        steps, batch, _ = x.type.shape
        if not isinstance(steps, int):
            ctx.unsupported(f"the sequence length {steps!r} of X {x.type} must be static: the layer is unrolled")
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            ctx.unsupported(f"direction={direction!r}")
        num_dirs = 2 if direction == "bidirectional" else 1
        if w.type.ndim != 3 or w.type.shape[0] != num_dirs:
            ctx.unsupported(f"W {w.type} must be ({num_dirs}, {n_gates}*hidden_size, input_size) for direction "
                            f"{direction}")
        hidden = ctx.attr("hidden_size")
        hidden = int(hidden) if hidden is not None else r.type.shape[-1]
        if not isinstance(hidden, int) or r.type.shape[-1] != hidden:
            ctx.unsupported(f"R {r.type} does not fit hidden_size {hidden}")
        acts = _activations(ctx, kind, num_dirs)
        clip = ctx.attr("clip")
        lbr = bool(ctx.attr("linear_before_reset", 0)) if kind == "GRU" else False
        input_forget = bool(ctx.attr("input_forget", 0)) if kind == "LSTM" else False
        dt = numpy_dtype(x.type.dtype)
        if seq is not None and ctx.is_const(4):
            lens = np.asarray(ctx.const_input(4)).reshape(-1)
            if np.all(lens == steps):
                seq = None                      # every sequence is full: no masking needed
        if seq is not None and str(seq.type.dtype) not in ("int32", "int64"):
            ctx.unsupported(f"sequence_lens of dtype {seq.type.dtype}")
        zeros = None
        if isinstance(batch, int):
            zeros = ctx.const(np.zeros((batch, hidden), dt), "zeros")
        ys, hs, cs = [], [], []
        for d in range(num_dirs):
            reverse = direction == "reverse" or d == 1
            wd, rd = _pick(ctx, w, d, "W"), _pick(ctx, r, d, "R")
            xw = ctx.op("nn.dense", x, wd)                           # (T, B, gates*H)
            extra = []
            if b is not None:
                bd = _pick(ctx, b, d, "B")
                wb, rb = _slice(ctx, bd, 0, n_gates * hidden), _slice(ctx, bd, n_gates * hidden, 2 * n_gates * hidden)
                if lbr:
                    zr = ctx.op("add", _slice(ctx, wb, 0, 2 * hidden), _slice(ctx, rb, 0, 2 * hidden))
                    bias = ctx.op("concatenate", zr, _slice(ctx, wb, 2 * hidden, 3 * hidden), axis=0)
                    extra.append(_slice(ctx, rb, 2 * hidden, 3 * hidden))
                else:
                    bias = ctx.op("add", wb, rb)
                xw = ctx.op("add", xw, bias)
            elif lbr:
                extra.append(ctx.const(np.zeros(hidden, dt), "rb_h"))
            if kind == "LSTM" and p is not None:
                extra.append(_pick(ctx, p, d, "P"))
            if zeros is None and (h0 is None or (kind == "LSTM" and c0 is None)):
                zeros = _zeros_like_state(ctx, xw, hidden, dt)
            h = _pick(ctx, h0, d, "initial_h") if h0 is not None else zeros
            c = (_pick(ctx, c0, d, "initial_c") if c0 is not None else zeros) if kind == "LSTM" else None
            order = list(range(steps))
            if reverse and seq is not None:
                xw = ctx.op("reverse_sequence", xw, seq, seq_axis=0, batch_axis=1)
            elif reverse:
                order = order[::-1]
            names, alphas, betas = acts[d]
            attrs = dict(activations=names, alphas=alphas, betas=betas, clip=None if clip is None else float(clip),
                         has_seq_lens=seq is not None)
            if kind == "GRU":
                attrs["linear_before_reset"] = lbr
            if kind == "LSTM":
                attrs.update(has_peepholes=p is not None, input_forget=input_forget)
            tail = extra + ([seq] if seq is not None else [])
            y_at = {}
            for t in order:
                step = ctx.const(np.array(t, np.int64), "step")
                if kind == "LSTM":
                    outs = ctx.op("rnn.lstm_cell", xw, step, h, c, rd, *tail, **attrs)
                    h, c = outs[0], outs[1]
                    y_at[t] = outs[2] if seq is not None else h
                else:
                    outs = ctx.op(f"rnn.{kind.lower()}_cell", xw, step, h, rd, *tail, **attrs)
                    outs = outs if isinstance(outs, tuple) else (outs,)
                    h = outs[0]
                    y_at[t] = outs[1] if seq is not None else h
            hs.append(h)
            cs.append(c)
            if ctx.has_output(0):
                parts = [ctx.op("expand_dims", y_at[t], axis=0) for t in range(steps)]
                yd = parts[0] if len(parts) == 1 else ctx.op("concatenate", *parts, axis=0)   # (T, B, H)
                if reverse and seq is not None:
                    yd = ctx.op("reverse_sequence", yd, seq, seq_axis=0, batch_axis=1)
                ys.append(ctx.op("expand_dims", yd, axis=1))
        results = []
        y = (ys[0] if num_dirs == 1 else ctx.op("concatenate", *ys, axis=1)) if ys else None     # (T, D, B, H)
        if y is not None and layout:
            y = ctx.op("transpose", y, axes=(2, 0, 1, 3))
        results.append(y)
        for states in ([hs, cs] if kind == "LSTM" else [hs]):
            if not ctx.has_output(len(results)):
                results.append(None)
                continue
            parts = [ctx.op("expand_dims", s, axis=0) for s in states]
            v = parts[0] if num_dirs == 1 else ctx.op("concatenate", *parts, axis=0)       # (D, B, H)
            results.append(ctx.op("transpose", v, axes=(1, 0, 2)) if layout else v)
        return tuple(results)

    return convert


for _kind in ("RNN", "GRU", "LSTM"):
    converter(_kind, since=7)(_recurrent(_kind))   # 14 adds layout, read with its default


@converter("ReverseSequence", since=10)
def _reverse_sequence(ctx):
    x, lens = ctx.input(0), ctx.input(1)
    if str(lens.type.dtype) not in ("int32", "int64"):
        ctx.unsupported(f"sequence_lens of dtype {lens.type.dtype}")
    return ctx.op("reverse_sequence", x, lens, seq_axis=int(ctx.attr("time_axis", 0)),
                  batch_axis=int(ctx.attr("batch_axis", 1)))


@converter("LinearAttention", since=27)
def _linear_attention(ctx):
    """Unrolled over the static sequence length: one rnn.linear_attention_cell per step (a float32
    state), the steps' outputs concatenated and cast to the query's dtype."""
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    past, decay, beta = (ctx.input(i, optional=True) for i in (3, 4, 5))
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        ctx.unsupported(f"update_rule={rule!r}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for needed, val, name in ((gating, decay, "decay"), (delta, beta, "beta")):
        if needed != (val is not None):
            ctx.unsupported(f"update_rule {rule!r} {'needs' if needed else 'forbids'} the {name} input")
    hq, hk = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if hq is None or hk is None:
        ctx.unsupported("q_num_heads and kv_num_heads are required")
    hq, hk = int(hq), int(hk)
    if q.type.ndim != 3 or not isinstance(q.type.shape[1], int):
        ctx.unsupported(f"query {q.type} must be (B, T, heads*d) with a static T: the steps are unrolled")
    if hq < 1 or hk < 1 or q.type.shape[2] % hq or v.type.shape[2] % hk:
        ctx.unsupported(f"query {q.type} / value {v.type} do not split into {hq} / {hk} heads")
    batch, steps = q.type.shape[0], q.type.shape[1]
    dk, dv = q.type.shape[2] // hq, v.type.shape[2] // hk
    if past is not None:
        state = past if str(past.type.dtype) == "float32" else ctx.op("cast", past, dtype="float32")
        state_dtype = str(past.type.dtype)
    else:
        if not isinstance(batch, int):
            ctx.unsupported("a symbolic batch without past_state (the zero state needs the batch size)")
        state = ctx.const(np.zeros((batch, hk, dk, dv), np.float32), "zero_state")
        state_dtype = str(q.type.dtype)
    extra = [t for t in (decay, beta) if t is not None]
    attrs = dict(q_num_heads=hq, kv_num_heads=hk, scale=float(ctx.attr("scale", 0.0) or 0.0),
                 has_decay=decay is not None, has_beta=beta is not None)
    outs = []
    for t in range(steps):
        step = ctx.const(np.array(t, np.int64), "step")
        state, o = ctx.op("rnn.linear_attention_cell", q, k, v, step, state, *extra, **attrs)
        outs.append(o)
    y = outs[0] if len(outs) == 1 else ctx.op("concatenate", *outs, axis=1)
    if str(q.type.dtype) != "float32":
        y = ctx.op("cast", y, dtype=str(q.type.dtype))
    if state_dtype != "float32":
        state = ctx.op("cast", state, dtype=state_dtype)
    return y, state
