"""Recurrent cells and sequence ops: rnn.rnn_cell, rnn.gru_cell, rnn.lstm_cell (one time step each,
ONNX RNN/GRU/LSTM semantics), rnn.linear_attention_cell (one step of ONNX LinearAttention) and
reverse_sequence (ONNX ReverseSequence).

A recurrent layer is unrolled over its static sequence length by the frontend: the input
projection X @ W^T + biases is one dense op for all steps (`xw`, (T, B, gates*H)); each step is one
cell op that reads step `step` (an int64 scalar input, so every step shares one compiled kernel) of
xw, adds h @ R^T, applies the activations and returns the new state. With `has_seq_lens`, the last
input is the per-batch sequence lengths: a batch entry whose sequence has ended keeps its state
and the step's output row (an extra output `y`) is 0, as ONNX Runtime computes it.

Activations are named as in ONNX (Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu,
ScaledTanh, HardSigmoid, Elu, Softsign, Softplus) with their alpha/beta; `clip` bounds the
activations' inputs to [-clip, clip]. float16/bfloat16 compute in float32.
"""
from __future__ import annotations

from .. import te
from ..errors import DTypeError, ShapeError, TesseraError
from ..ir import TensorType
from ..ir import expr as E
from ._common import FLOATS, INDEX, accum_dtype, check_dtype, fmt_shape, normalize_axis
from ._schedule import schedule_blocks, schedule_injective
from .registry import REQUIRED, OpPattern, register_op

ACTIVATIONS = ("sigmoid", "tanh", "relu", "affine", "leakyrelu", "thresholdedrelu", "scaledtanh",
               "hardsigmoid", "elu", "softsign", "softplus")
# ONNX's defaults of the parameterized activations: name -> (alpha, beta)
ACTIVATION_DEFAULTS = {"affine": (1.0, 0.0), "leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0),
                       "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}


def activation(name: str, x, alpha: float, beta: float):
    """The te expression of ONNX recurrent activation `name` (lower case) applied to x."""
    dt = x.dtype
    c = lambda v: E.const(float(v), dt)  # noqa: E731
    zero, one = c(0), c(1)
    if name == "sigmoid":
        return te.sigmoid(x)
    if name == "tanh":
        return te.tanh(x)
    if name == "relu":
        return te.max(x, zero)
    if name == "affine":
        return c(alpha) * x + c(beta)
    if name == "leakyrelu":
        return E.Select(x < zero, c(alpha) * x, x)
    if name == "thresholdedrelu":
        return E.Select(x > c(alpha), x, zero)
    if name == "scaledtanh":
        return c(alpha) * te.tanh(c(beta) * x)
    if name == "hardsigmoid":
        return te.max(zero, te.min(one, c(alpha) * x + c(beta)))
    if name == "elu":
        return E.Select(x < zero, c(alpha) * (te.exp(x) - one), x)
    if name == "softsign":
        return x / (one + te.abs(x))
    if name == "softplus":
        return te.max(x, zero) + te.log1p(te.exp(-te.abs(x)))
    raise TesseraError(f"recurrent activation {name!r} is not one of {', '.join(ACTIVATIONS)}")


def _tt(t) -> TensorType:
    return TensorType([int(s.value) if isinstance(s, E.IntImm) else s.name for s in t.shape], t.dtype)


def _same(a, b) -> bool:
    return a == b or isinstance(a, str) != isinstance(b, str)


_CELL_ATTRS = {"activations": (), "alphas": (), "betas": (), "clip": None, "has_seq_lens": False}


def _check_cell(op, types, attrs, n_gates, n_acts, extra_names):
    """Shapes and dtypes of a cell's inputs; returns (B, H) and the named extra inputs' types."""
    xw, step, h = types[0], types[1], types[2]
    check_dtype(op, xw.dtype, FLOATS, "xw")
    check_dtype(op, step.dtype, INDEX, "step")
    if step.ndim != 0:
        raise ShapeError(f"{op}: step must be a scalar, got {fmt_shape(step.shape)}")
    if xw.ndim != 3:
        raise ShapeError(f"{op}: xw must be (T, B, {n_gates}*H), got {fmt_shape(xw.shape)}")
    if h.ndim != 2:
        raise ShapeError(f"{op}: h must be (B, H), got {fmt_shape(h.shape)}")
    b, hs = h.shape
    width_ok = not (isinstance(hs, int) and isinstance(xw.shape[2], int)) or xw.shape[2] == n_gates * hs
    if not _same(xw.shape[1], b) or not width_ok:
        raise ShapeError(f"{op}: xw {fmt_shape(xw.shape)} does not fit h {fmt_shape(h.shape)}: (T, B, {n_gates}*H) "
                         f"expected")
    names = list(extra_names) + (["seq_lens"] if attrs["has_seq_lens"] else [])
    if len(types) != 3 + len(names):
        raise ShapeError(f"{op}: takes xw, step, {', '.join(names)} ({3 + len(names)} inputs), got {len(types)}")
    extra = dict(zip(names, types[3:]))
    for k, t in extra.items():
        if k == "seq_lens":
            check_dtype(op, t.dtype, INDEX, "seq_lens")
            if t.ndim != 1 or not _same(t.shape[0], b):
                raise ShapeError(f"{op}: seq_lens must be (B,) = ({b},), got {fmt_shape(t.shape)}")
        elif t.dtype != xw.dtype:
            raise DTypeError(f"{op}: {k} is {t.dtype} but xw is {xw.dtype}; they must have one dtype")
    acts = tuple(attrs["activations"])
    if len(acts) != n_acts or any(a not in ACTIVATIONS for a in acts):
        raise TesseraError(f"{op}: activations must name {n_acts} of {', '.join(ACTIVATIONS)}, got {acts}")
    for key in ("alphas", "betas"):
        if len(tuple(attrs[key])) != n_acts:
            raise TesseraError(f"{op}: {key} must hold one value per activation ({n_acts}), got {attrs[key]}")
    if attrs["clip"] is not None and not float(attrs["clip"]) > 0:
        raise TesseraError(f"{op}: clip must be positive, got {attrs['clip']}")
    return b, hs, extra


def _state_type(op, t, name, b, hs, dtype):
    if t.ndim != 2 or not _same(t.shape[0], b) or not _same(t.shape[1], hs):
        raise ShapeError(f"{op}: {name} must be (B, H) = ({b}, {hs}), got {fmt_shape(t.shape)}")
    if t.dtype != dtype:
        raise DTypeError(f"{op}: {name} is {t.dtype} but xw is {dtype}")


def _check_r(op, r, n_gates, hs, dtype):
    static = isinstance(hs, int) and all(isinstance(d, int) for d in r.shape)
    if r.ndim != 2 or (static and r.shape != (n_gates * hs, hs)):
        raise ShapeError(f"{op}: r must be ({n_gates}*H, H) = ({n_gates}*{hs}, {hs}), got {fmt_shape(r.shape)}")
    if r.dtype != dtype:
        raise DTypeError(f"{op}: r is {r.dtype} but xw is {dtype}")


class _Cell:
    """What the cell computes share: accumulation dtype, activations, clip, the step and the mask."""

    def __init__(self, tensors, attrs, n_extra):
        self.xw, self.step, self.h = tensors[0], tensors[1], tensors[2]
        self.acc = accum_dtype(self.xw.dtype)
        self.acts = tuple(attrs["activations"])
        self.alphas, self.betas = tuple(attrs["alphas"]), tuple(attrs["betas"])
        self.clip = attrs["clip"]
        self.seq = tensors[-1] if attrs["has_seq_lens"] else None
        self.hs = self.h.shape[1]

    def act(self, k, x):
        if self.clip is not None:
            lim = E.const(float(self.clip), x.dtype)
            x = te.max(te.min(x, lim), -lim)
        return activation(self.acts[k], x, self.alphas[k], self.betas[k])

    def xw_at(self, b, g):
        s = self.step[()]
        return self.xw[s, b, g].astype(self.acc)

    def gates(self, r, n, name, offset=0):
        """(B, n*H) of xw[step] + h @ r[offset*H : (offset+n)*H]^T, accumulated in acc."""
        k = te.reduce_axis((0, self.hs), name="k")
        off = offset * self.hs if offset else 0

        def body(b, g):
            return te.sum(self.h[b, k].astype(self.acc) * r[g + off, k].astype(self.acc), axis=k)

        shape = (self.h.shape[0], self.hs * n if n > 1 else self.hs)
        return te.compute(shape, body, name=name)

    def alive(self, b):
        """Whether batch entry b's sequence still runs at this step."""
        s = self.step[()]
        ln = self.seq[b]
        return s.astype("int64") < ln.astype("int64")

    def finish(self, b, new, old):
        """The new state where the sequence runs, the old one after its end."""
        return E.Select(self.alive(b), new, old) if self.seq is not None else new

    def outputs(self, h_new_acc, extra=()):
        """h (and the masked y with seq lens) cast to the data dtype."""
        dt = self.xw.dtype
        shape = self.h.shape
        h = te.compute(shape, lambda b, j: self.finish(b, h_new_acc[b, j], self.h[b, j].astype(self.acc)).astype(dt),
                       name="h_next")
        outs = [h] + list(extra)
        if self.seq is not None:
            zero = E.const(0.0, dt)
            outs.append(te.compute(shape, lambda b, j: E.Select(self.alive(b), h[b, j], zero), name="y_step"))
        return outs


def _cell_outputs(types, attrs, n_states):
    h = types[2]
    outs = [TensorType(h.shape, types[0].dtype)] * n_states
    if attrs["has_seq_lens"]:
        outs.append(TensorType(h.shape, types[0].dtype))
    return outs


# ---------------------------------------------------------------------------------------------
# rnn.rnn_cell: h' = f(xw[step] + h R^T)
# ---------------------------------------------------------------------------------------------
rnn_cell = register_op(
    "rnn.rnn_cell", inputs=("xw", "step", "h", "r", "extra*"), pattern=OpPattern.OPAQUE, num_outputs=None,
    attrs=dict(_CELL_ATTRS), doc="One step of ONNX RNN: h' = f(xw[step] + h @ r^T); outputs h' (and y with seq lens).")
rnn_cell.def_schedule(schedule_blocks)


@rnn_cell.def_infer
def _rnn_infer(types, attrs):
    op = "rnn.rnn_cell"
    b, hs, _ = _check_cell(op, types[:3] + types[4:], attrs, 1, 1, [])
    _check_r(op, types[3], 1, hs, types[0].dtype)
    return _cell_outputs(types, attrs, 1)


@rnn_cell.def_compute
def _rnn_compute(tensors, attrs):
    _rnn_infer([_tt(t) for t in tensors], attrs)
    cell = _Cell(tensors, attrs, 0)
    r = tensors[3]
    hr = cell.gates(r, 1, "hr")
    pre = te.compute(hr.shape, lambda b, j: cell.act(0, cell.xw_at(b, j) + hr[b, j]), name="h_new")
    return cell.outputs(pre)


# ---------------------------------------------------------------------------------------------
# rnn.gru_cell: gates z, r, h; linear_before_reset
# ---------------------------------------------------------------------------------------------
gru_cell = register_op(
    "rnn.gru_cell", inputs=("xw", "step", "h", "r", "extra*"), pattern=OpPattern.OPAQUE, num_outputs=None,
    attrs=dict(_CELL_ATTRS, linear_before_reset=False),
    doc="One step of ONNX GRU (gates z, r, h; xw holds X W^T + Wb + Rb, except Rb_h with "
        "linear_before_reset, which is the extra input rb_h (H,)); outputs h' (and y with seq lens).")
gru_cell.def_schedule(schedule_blocks)


@gru_cell.def_infer
def _gru_infer(types, attrs):
    op = "rnn.gru_cell"
    names = ["rb_h"] if attrs["linear_before_reset"] else []
    b, hs, extra = _check_cell(op, types[:3] + types[4:], attrs, 3, 2, names)
    _check_r(op, types[3], 3, hs, types[0].dtype)
    if "rb_h" in extra and (extra["rb_h"].ndim != 1 or not _same(extra["rb_h"].shape[0], hs)):
        raise ShapeError(f"{op}: rb_h must be (H,) = ({hs},), got {fmt_shape(extra['rb_h'].shape)}")
    return _cell_outputs(types, attrs, 1)


@gru_cell.def_compute
def _gru_compute(tensors, attrs):
    _gru_infer([_tt(t) for t in tensors], attrs)
    cell = _Cell(tensors, attrs, 1 if attrs["linear_before_reset"] else 0)
    r = tensors[3]
    hs = cell.hs
    zr = cell.gates(r, 2, "hzr")                     # h @ [Rz; Rr]^T
    z = te.compute(cell.h.shape, lambda b, j: cell.act(0, cell.xw_at(b, j) + zr[b, j]), name="z")
    rg = te.compute(cell.h.shape, lambda b, j: cell.act(0, cell.xw_at(b, j + hs) + zr[b, j + hs]), name="r")
    k = te.reduce_axis((0, hs), name="k")
    acc = cell.acc
    if attrs["linear_before_reset"]:
        rbh = tensors[4]
        hh = te.compute(cell.h.shape, lambda b, j: te.sum(cell.h[b, k].astype(acc) * r[j + 2 * hs, k].astype(acc),
                                                           axis=k), name="hrh")
        cand = te.compute(cell.h.shape, lambda b, j: cell.act(
            1, cell.xw_at(b, j + 2 * hs) + rg[b, j] * (hh[b, j] + rbh[j].astype(acc))), name="h_cand")
    else:
        rh = te.compute(cell.h.shape, lambda b, j: rg[b, j] * cell.h[b, j].astype(acc), name="rh")
        hh = te.compute(cell.h.shape, lambda b, j: te.sum(rh[b, k] * r[j + 2 * hs, k].astype(acc), axis=k),
                        name="rhrh")
        cand = te.compute(cell.h.shape, lambda b, j: cell.act(1, cell.xw_at(b, j + 2 * hs) + hh[b, j]), name="h_cand")
    one = E.const(1.0, acc)
    new = te.compute(cell.h.shape, lambda b, j: (one - z[b, j]) * cand[b, j] + z[b, j] * cell.h[b, j].astype(acc),
                     name="h_new")
    return cell.outputs(new)


# ---------------------------------------------------------------------------------------------
# rnn.lstm_cell: gates i, o, f, c; peepholes; input_forget
# ---------------------------------------------------------------------------------------------
lstm_cell = register_op(
    "rnn.lstm_cell", inputs=("xw", "step", "h", "c", "r", "extra*"), pattern=OpPattern.OPAQUE, num_outputs=None,
    attrs=dict(_CELL_ATTRS, has_peepholes=False, input_forget=False),
    doc="One step of ONNX LSTM (gates i, o, f, c; optional peepholes p (3H,) = [p_i, p_o, p_f]; "
        "input_forget couples f = 1 - i); outputs h', c' (and y with seq lens).")
lstm_cell.def_schedule(schedule_blocks)


@lstm_cell.def_infer
def _lstm_infer(types, attrs):
    op = "rnn.lstm_cell"
    names = ["p"] if attrs["has_peepholes"] else []
    b, hs, extra = _check_cell(op, types[:3] + types[5:], attrs, 4, 3, names)
    _state_type(op, types[3], "c", b, hs, types[0].dtype)
    _check_r(op, types[4], 4, hs, types[0].dtype)
    if "p" in extra and (extra["p"].ndim != 1 or (isinstance(hs, int) and isinstance(extra["p"].shape[0], int)
                                                  and extra["p"].shape[0] != 3 * hs)):
        raise ShapeError(f"{op}: peepholes p must be (3*H,) = ({3 * hs if isinstance(hs, int) else '3*H'},), got "
                         f"{fmt_shape(extra['p'].shape)}")
    return _cell_outputs(types, attrs, 2)


@lstm_cell.def_compute
def _lstm_compute(tensors, attrs):
    _lstm_infer([_tt(t) for t in tensors], attrs)
    c_old, r = tensors[3], tensors[4]
    cell = _Cell(tensors[:3] + tensors[5:], attrs, 0)
    acc, hs = cell.acc, cell.hs
    p = tensors[5] if attrs["has_peepholes"] else None
    g = cell.gates(r, 4, "hr")
    zero, one = E.const(0.0, acc), E.const(1.0, acc)

    def pre(b, j, gate):
        return cell.xw_at(b, j + gate * hs) + g[b, j + gate * hs]

    def peep(j, k):
        return p[j + k * hs].astype(acc) if p is not None else zero

    def new_c(b, j):
        c0 = c_old[b, j].astype(acc)
        i = cell.act(0, pre(b, j, 0) + peep(j, 0) * c0)
        f = one - i if attrs["input_forget"] else cell.act(0, pre(b, j, 2) + peep(j, 2) * c0)
        return f * c0 + i * cell.act(1, pre(b, j, 3))

    c_new = te.compute(cell.h.shape, new_c, name="c_new")
    o = te.compute(cell.h.shape, lambda b, j: cell.act(0, pre(b, j, 1) + peep(j, 1) * c_new[b, j]), name="o")
    h_new = te.compute(cell.h.shape, lambda b, j: o[b, j] * cell.act(2, c_new[b, j]), name="h_new")
    c_out = te.compute(cell.h.shape, lambda b, j: cell.finish(b, c_new[b, j], c_old[b, j].astype(acc)).astype(
        c_old.dtype), name="c_next")
    outs = cell.outputs(h_new)
    return [outs[0], c_out] + outs[1:]


# ---------------------------------------------------------------------------------------------
# reverse_sequence
# ---------------------------------------------------------------------------------------------
reverse_sequence = register_op(
    "reverse_sequence", inputs=("data", "seq_lengths"), pattern=OpPattern.INJECTIVE,
    attrs={"seq_axis": 0, "batch_axis": 1},
    doc="Reverse the first seq_lengths[b] elements along seq_axis of every batch entry b (along "
        "batch_axis); the rest stay in place (ONNX ReverseSequence). Lengths are clamped to [0, T].")
reverse_sequence.def_schedule(schedule_injective)


def _rs_axes(op, data, lengths, attrs):
    if data.ndim < 2:
        raise ShapeError(f"{op}: data must have rank >= 2, got {fmt_shape(data.shape)}")
    sa = normalize_axis(op, attrs["seq_axis"], data.ndim, "seq_axis")
    ba = normalize_axis(op, attrs["batch_axis"], data.ndim, "batch_axis")
    if sa == ba:
        raise ShapeError(f"{op}: seq_axis and batch_axis are both axis {sa}")
    check_dtype(op, lengths.dtype, INDEX, "seq_lengths")
    if lengths.ndim != 1 or not _same(lengths.shape[0], data.shape[ba]):
        raise ShapeError(f"{op}: seq_lengths must be (batch,) = ({data.shape[ba]},), got {fmt_shape(lengths.shape)}")
    return sa, ba


@reverse_sequence.def_infer
def _rs_infer(types, attrs):
    _rs_axes("reverse_sequence", types[0], types[1], attrs)
    return [types[0]]


@reverse_sequence.def_compute
def _rs_compute(tensors, attrs):
    data, lengths = tensors
    sa, ba = _rs_axes("reverse_sequence", _tt(data), _tt(lengths), attrs)
    t_ext = data.shape[sa]

    def body(*i):
        t = i[sa].astype("int64")
        n = lengths[i[ba]].astype("int64")
        tt = E.const(t_ext.value, "int64") if isinstance(t_ext, E.IntImm) else E.convert(t_ext).astype("int64")
        n = te.max(te.min(n, tt), E.const(0, "int64"))
        src = E.Select(t < n, n - E.const(1, "int64") - t, t).astype(i[sa].dtype)
        return data[tuple(src if k == sa else v for k, v in enumerate(i))]

    return [te.compute(data.shape, body, name="reverse_sequence")]


# ---------------------------------------------------------------------------------------------
# rnn.linear_attention_cell: one step of ONNX LinearAttention (linear / gated / delta / gated_delta)
# ---------------------------------------------------------------------------------------------
linear_attention_cell = register_op(
    "rnn.linear_attention_cell", inputs=("query", "key", "value", "step", "state", "extra*"),
    pattern=OpPattern.OPAQUE, num_outputs=2,
    attrs={"q_num_heads": REQUIRED, "kv_num_heads": REQUIRED, "scale": 0.0, "has_decay": False,
           "has_beta": False},
    doc="One step of ONNX LinearAttention on (B, T, heads*d) query/key/value at `step`: the float32 state "
        "(B, kv_heads, d_k, d_v) is decayed by exp(decay) (gated rules), corrected by beta * (v - state^T k) "
        "(delta rules) and grown by k v^T; outputs the new state and the step's output (B, 1, q_heads*d_v) "
        "= scale * q^T state, in float32. extra: decay then beta, when flagged.")
linear_attention_cell.def_schedule(schedule_blocks)


def _la_check(types, attrs):
    op = "rnn.linear_attention_cell"
    q, k, v, step, state = types[:5]
    names = (["decay"] if attrs["has_decay"] else []) + (["beta"] if attrs["has_beta"] else [])
    if len(types) != 5 + len(names):
        raise ShapeError(f"{op}: takes query, key, value, step, state{''.join(', ' + n for n in names)}; got "
                         f"{len(types)} inputs")
    hq, hk = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    if hq < 1 or hk < 1 or hq % hk:
        raise ShapeError(f"{op}: q_num_heads {hq} must be a positive multiple of kv_num_heads {hk}")
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        check_dtype(op, t.dtype, FLOATS, what)
        if t.ndim != 3 or not isinstance(t.shape[2], int):
            raise ShapeError(f"{op}: {what} must be (B, T, heads*d) with a static last axis, got {fmt_shape(t.shape)}")
    check_dtype(op, step.dtype, INDEX, "step")
    if q.shape[2] % hq or k.shape[2] % hk or v.shape[2] % hk:
        raise ShapeError(f"{op}: query {fmt_shape(q.shape)}, key {fmt_shape(k.shape)}, value {fmt_shape(v.shape)} do "
                         f"not split into {hq} / {hk} heads")
    dk, dv = q.shape[2] // hq, v.shape[2] // hk
    if k.shape[2] != hk * dk:
        raise ShapeError(f"{op}: key {fmt_shape(k.shape)} must hold {hk} heads of d_k = {dk}")
    if state.ndim != 4 or state.shape[1:] != (hk, dk, dv) or state.dtype != "float32":
        raise ShapeError(f"{op}: state must be float32 (B, {hk}, {dk}, {dv}), got {state}")
    extra = dict(zip(names, types[5:]))
    if "decay" in extra and (extra["decay"].ndim != 3 or extra["decay"].shape[2] not in (hk, hk * dk)):
        raise ShapeError(f"{op}: decay must be (B, T, {hk}) or (B, T, {hk * dk}), got "
                         f"{fmt_shape(extra['decay'].shape)}")
    if "beta" in extra and (extra["beta"].ndim != 3 or extra["beta"].shape[2] not in (hk, 1)):
        raise ShapeError(f"{op}: beta must be (B, T, {hk}) or (B, T, 1), got {fmt_shape(extra['beta'].shape)}")
    return hq, hk, dk, dv, extra


@linear_attention_cell.def_infer
def _la_infer(types, attrs):
    hq, hk, dk, dv, _ = _la_check(types, attrs)
    b = types[0].shape[0]
    return [TensorType((b, hk, dk, dv), "float32"), TensorType((b, 1, hq * dv), "float32")]


@linear_attention_cell.def_compute
def _la_compute(tensors, attrs):
    hq, hk, dk, dv, _ = _la_check([_tt(t) for t in tensors], attrs)
    q, k, v, step, state = tensors[:5]
    rest = list(tensors[5:])
    decay = rest.pop(0) if attrs["has_decay"] else None
    beta = rest.pop(0) if attrs["has_beta"] else None
    f = "float32"
    group = hq // hk
    scale = float(attrs["scale"]) or 1.0 / float(dk) ** 0.5
    s = step[()]
    b_ext = q.shape[0]

    def c(v_, like):
        return E.const(v_, like.dtype)

    def kv(t, b, h, d, width):
        return t[b, s, h * c(width, h) + d].astype(f)

    cur = state
    if decay is not None:
        per_dim = int(decay.shape[2].value) == hk * dk

        def decayed(b, h, d, m):
            g = decay[b, s, h * c(dk, h) + d] if per_dim else decay[b, s, h]
            return state[b, h, d, m] * te.exp(g.astype(f))

        cur = te.compute(state.shape, decayed, name="state_decayed")
    if beta is not None:
        kd = te.reduce_axis((0, dk), name="kd")
        retrieved = te.compute((b_ext, hk, dv), lambda b, h, m: te.sum(
            cur[b, h, kd, m] * kv(k, b, h, kd.var, dk), axis=kd), name="retrieved")
        scalar_beta = int(beta.shape[2].value) == 1

        def corrected(b, h, m):
            bt = beta[b, s, E.const(0, h.dtype) if scalar_beta else h].astype(f)
            return bt * (kv(v, b, h, m, dv) - retrieved[b, h, m])

        vt = te.compute((b_ext, hk, dv), corrected, name="v_corrected")
        v_at = lambda b, h, m: vt[b, h, m]  # noqa: E731
    else:
        v_at = lambda b, h, m: kv(v, b, h, m, dv)  # noqa: E731
    new = te.compute(state.shape, lambda b, h, d, m: cur[b, h, d, m] + kv(k, b, h, d, dk) * v_at(b, h, m),
                     name="state_next")
    rd = te.reduce_axis((0, dk), name="rd")

    def read(b, o, j):
        hh = te.floordiv(j, c(dv, j))
        m = te.floormod(j, c(dv, j))
        return te.sum(kv(q, b, hh, rd.var, dk) * new[b, te.floordiv(hh, c(group, hh)), rd, m], axis=rd)

    qs = te.compute((b_ext, 1, hq * dv), read, name="q_state")
    out = te.compute(qs.shape, lambda b, o, j: E.const(scale, f) * qs[b, o, j], name="attention_step")
    return [new, out]
