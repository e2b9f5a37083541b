"""Scaled dot-product attention (ONNX Attention, opsets 23-25) and rotary position embedding
(ONNX RotaryEmbedding), each one op whose compute is a few TE stages.

nn.attention: Q (B, Hq, Sq, D) or (B, Sq, Hq*D); K, V likewise with Hk heads (Hq % Hk == 0:
grouped-query attention); optional extras, flagged by attributes, in this order: attn_mask
(bool: False masks; float: added; broadcast to (B, Hq, Sq, T), a shorter last axis is padded as
masked), past_key/past_value (B, Hk, P, D) (T = P + Skv; present_key/value are returned),
nonpad_kv_seqlen (B,) (keys at or after it are masked). is_causal masks key j for query i when
j > i + offset (offset = P, or nonpad_kv_seqlen[b] - Sq, or 0), left/right_window_size bound
i + offset - j. Scores are Q*sqrt(scale) . K*sqrt(scale), softcapped (tanh) before the mask;
rows with no attendable key give 0. For float16/bfloat16 the intermediate results are rounded
to the data type where the ONNX reference rounds them, so results agree to the last bit more
often than not.
"""
from __future__ import annotations

import math

from ... import te
from ...errors import DTypeError, ShapeError, TesseraError
from ...ir import TensorType
from ...ir import expr as E
from ...ir.dtype import DataType
from ..registry import OpPattern, register_op
from .._schedule import schedule_blocks
from . import _util as U

_NEG_INF = float("-inf")

attention = register_op(
    "nn.attention", inputs=("q", "k", "v", "extra*"), pattern=OpPattern.OPAQUE, num_outputs=None,
    attrs={"has_mask": False, "has_past": False, "has_nonpad": False, "scale": None, "is_causal": False,
           "q_num_heads": 0, "kv_num_heads": 0, "softcap": 0.0, "qk_matmul_output_mode": 0,
           "left_window_size": -1, "right_window_size": -1, "softmax_precision": "",
           "return_present": False, "return_qk": False},
    doc="softmax(Q K^T * scale + mask) V with causal / window / padding masks, GQA, KV cache and "
        "softcap (ONNX Attention); outputs Y [, present_key, present_value] [, qk_matmul_output].")


class _Layout:
    """The shapes of one attention call, from TensorTypes (infer) or te tensors (compute)."""

    def __init__(self, op, types, attrs):
        q, k, v = types[:3]
        extras = list(types[3:])
        want = int(bool(attrs["has_mask"])) + 2 * int(bool(attrs["has_past"])) + int(bool(attrs["has_nonpad"]))
        if len(extras) != want:
            raise ShapeError(f"{op}: the has_mask/has_past/has_nonpad attributes announce {want} extra inputs, "
                             f"got {len(extras)}")
        self.mask = extras.pop(0) if attrs["has_mask"] else None
        self.past_k = extras.pop(0) if attrs["has_past"] else None
        self.past_v = extras.pop(0) if attrs["has_past"] else None
        self.nonpad = extras.pop(0) if attrs["has_nonpad"] else None
        for t, what in ((q, "Q"), (k, "K"), (v, "V")):
            U.check_dtype(op, t, U.FLOATS, what)
        U.same_dtype(op, (q, k, v), ("Q", "K", "V"))
        if not q.ndim == k.ndim == v.ndim or q.ndim not in (3, 4):
            raise ShapeError(f"{op}: Q, K, V must all be 3-D or all 4-D, got {q}, {k}, {v}")
        self.rank = q.ndim
        self.B = q.shape[0]
        if self.rank == 4:
            if attrs["q_num_heads"] or attrs["kv_num_heads"]:
                pass  # opset 23/24 tolerate them on 4-D inputs; the shapes decide
            (self.Hq, self.D) = U.static_dims(op, q, (1, 3), "heads and head size of Q")
            self.Sq = q.shape[2]
            (self.Hk, Dk) = U.static_dims(op, k, (1, 3), "heads and head size of K")
            (Hv, self.Dv) = U.static_dims(op, v, (1, 3), "heads and head size of V")
            self.Skv = k.shape[2]
            if Hv != self.Hk:
                raise ShapeError(f"{op}: K has {self.Hk} heads but V has {Hv}")
            if v.shape[2] != self.Skv:
                raise ShapeError(f"{op}: K and V sequence lengths differ: {k} vs {v}")
        else:
            self.Hq, self.Hk = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
            if self.Hq <= 0 or self.Hk <= 0:
                raise ShapeError(f"{op}: 3-D inputs need q_num_heads and kv_num_heads")
            (hq,) = U.static_dims(op, q, (2,), "hidden size of Q")
            (hk,) = U.static_dims(op, k, (2,), "hidden size of K")
            (hv,) = U.static_dims(op, v, (2,), "hidden size of V")
            for h, n, what in ((hq, self.Hq, "Q"), (hk, self.Hk, "K"), (hv, self.Hk, "V")):
                if h % n:
                    raise ShapeError(f"{op}: hidden size {h} of {what} is not divisible by its {n} heads")
            self.D, Dk, self.Dv = hq // self.Hq, hk // self.Hk, hv // self.Hk
            self.Sq, self.Skv = q.shape[1], k.shape[1]
            if v.shape[1] != self.Skv:
                raise ShapeError(f"{op}: K and V sequence lengths differ: {k} vs {v}")
        if Dk != self.D:
            raise ShapeError(f"{op}: Q head size {self.D} and K head size {Dk} differ")
        if self.Hq % self.Hk:
            raise ShapeError(f"{op}: {self.Hq} query heads are not a multiple of {self.Hk} key/value heads")
        for t in (k, v):
            if t.shape[0] != self.B:
                raise ShapeError(f"{op}: batch sizes of Q, K, V differ: {q}, {k}, {v}")
        self.P = 0
        if self.past_k is not None:
            for t, d, what in ((self.past_k, self.D, "past_key"), (self.past_v, self.Dv, "past_value")):
                U.check_rank(op, t, 4, what)
                if t.dtype != q.dtype:
                    raise DTypeError(f"{op}: {what} is {t.dtype}, Q is {q.dtype}")
                if t.shape[1] != self.Hk or t.shape[3] != d or t.shape[0] != self.B:
                    raise ShapeError(f"{op}: {what} {t} must be (batch, {self.Hk}, past, {d})")
            (self.P,) = U.static_dims(op, self.past_k, (2,), "past sequence length")
            if self.past_v.shape[2] != self.P:
                raise ShapeError(f"{op}: past_key and past_value lengths differ")
            (skv,) = U.static_dims(op, k, (1 if self.rank == 3 else 2,), "sequence length of K (with a cache)")
            self.T = self.P + skv
        else:
            self.T = self.Skv
        if self.mask is not None:
            m = self.mask
            if str(m.dtype) not in ("bool",) + U.FLOATS:
                raise DTypeError(f"{op}: attn_mask has dtype {m.dtype}; it must be bool or a float type")
            if m.ndim < 1 or m.ndim > 4:
                raise ShapeError(f"{op}: attn_mask must have rank 1 to 4, got {m}")
            last = m.shape[-1]
            if last != self.T and not (isinstance(last, int) and isinstance(self.T, int) and last <= self.T):
                raise ShapeError(f"{op}: attn_mask's last axis ({last}) must not exceed the key length {self.T}")
            full = (self.B, self.Hq, self.Sq)
            for d, want in zip(m.shape[:-1][::-1], full[::-1]):
                if d != 1 and d != want:
                    raise ShapeError(f"{op}: attn_mask {m} does not broadcast to (batch, heads, q, kv) = "
                                     f"({self.B}, {self.Hq}, {self.Sq}, {self.T})")
        if self.nonpad is not None:
            U.check_dtype(op, self.nonpad, ("int32", "int64"), "nonpad_kv_seqlen")
            if self.nonpad.ndim != 1 or self.nonpad.shape[0] != self.B:
                raise ShapeError(f"{op}: nonpad_kv_seqlen must be (batch,), got {self.nonpad}")
            if self.past_k is not None:
                raise ShapeError(f"{op}: nonpad_kv_seqlen cannot be combined with past_key/past_value")
        if attrs["qk_matmul_output_mode"] not in (0, 1, 2, 3):
            raise TesseraError(f"{op}: qk_matmul_output_mode={attrs['qk_matmul_output_mode']} must be 0-3")
        for w in ("left_window_size", "right_window_size"):
            if int(attrs[w]) < -1:
                raise TesseraError(f"{op}: {w}={attrs[w]} must be -1 or >= 0")
        self.dtype = q.dtype

    def out_types(self, attrs):
        dt = self.dtype
        y = (self.B, self.Sq, self.Hq * self.Dv) if self.rank == 3 else (self.B, self.Hq, self.Sq, self.Dv)
        out = [TensorType(y, dt)]
        if attrs["return_present"]:
            out += [TensorType((self.B, self.Hk, self.T, self.D), dt), TensorType((self.B, self.Hk, self.T, self.Dv), dt)]
        if attrs["return_qk"]:
            out.append(TensorType((self.B, self.Hq, self.Sq, self.T), dt))
        return out


@attention.def_infer
def _attention_infer(types, attrs):
    if len(types) < 3:
        raise ShapeError(f"nn.attention: takes Q, K, V and extras, got {len(types)} inputs")
    return _Layout("nn.attention", types, attrs).out_types(attrs)


@attention.def_compute
def _attention_compute(tensors, attrs):
    op = "nn.attention"
    lay = _Layout(op, [U.ttype(t) for t in tensors], attrs)
    q, k, v = tensors[:3]
    extras = list(tensors[3:])
    mask = extras.pop(0) if attrs["has_mask"] else None
    past_k = extras.pop(0) if attrs["has_past"] else None
    past_v = extras.pop(0) if attrs["has_past"] else None
    nonpad = extras.pop(0) if attrs["has_nonpad"] else None
    dt = q.dtype
    half = str(dt) in U.HALF
    acc = DataType("float64") if dt == "float64" else DataType("float32")
    sp = U.out_dtype(op, attrs["softmax_precision"], dt) if attrs["softmax_precision"] else dt
    sp_acc = DataType("float64") if sp == "float64" else acc

    def rnd(x, to=dt):
        """x (in acc) rounded to `to` where the reference computes in that narrower type."""
        return U.cast(U.cast(x, to), x.dtype) if str(to) in U.HALF or (to == "float32" and x.dtype == "float64") \
            else x

    B, Hq, Hk, D, Dv, P = lay.B, lay.Hq, lay.Hk, lay.D, lay.Dv, lay.P
    Sq = U.shape_exprs((lay.Sq,), *tensors)[0]
    T = U.shape_exprs((lay.T,), *tensors)[0] if isinstance(lay.T, str) else lay.T
    Bx = U.shape_exprs((B,), *tensors)[0]
    group = Hq // Hk
    three = lay.rank == 3

    def kv_load(t, b, h, j, d, width):
        return t[b, j, h * width + d] if three else t[b, h, j, d]

    def q_load(b, h, i, d):
        return q[b, i, h * D + d] if three else q[b, h, i, d]

    # present key / value: the cache followed by the new keys, in (B, Hk, T, head) layout
    def present(t, past, width, name):
        def body(b, h, j, d):
            new = kv_load(t, b, h, j - P if P else j, d, width)
            if past is None:
                return new
            return te.if_then_else(j < P, past[b, h, te.min(j, P - 1) if P else j, d], new)

        return U.compute((Bx, Hk, T, width), ["b", "h", "j", "d"], body, name)

    need_present = bool(attrs["return_present"]) or past_k is not None
    pk = present(k, past_k, D, "present_key") if need_present else None
    pv = present(v, past_v, Dv, "present_value") if need_present else None

    def key(b, h, j, d):
        return pk[b, h, j, d] if pk is not None else kv_load(k, b, h, j, d, D)

    def value(b, h, j, e):
        return pv[b, h, j, e] if pv is not None else kv_load(v, b, h, j, e, Dv)

    scale = attrs["scale"]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    s_half = te.const(float(U.numpy_value(math.sqrt(scale), dt)), dt)

    # scores = (Q * sqrt(scale)) . (K * sqrt(scale)), in acc, rounded to dt as the reference's matmul
    rd = te.reduce_axis((0, D), "d")

    def score_body(b, h, i, j):
        qs = U.cast(q_load(b, h, i, rd) * s_half, acc)
        ks = U.cast(key(b, h // group if group > 1 else h, j, rd) * s_half, acc)
        return te.sum(qs * ks, axis=rd)

    names4 = ["b", "h", "i", "j"]
    shape4 = (Bx, Hq, Sq, T)
    raw = U.compute(shape4, names4, score_body, "attention_scores")
    softcap = float(attrs["softcap"])

    def capped(b, h, i, j):
        x = rnd(raw[b, h, i, j])
        if softcap > 0:
            c = te.const(softcap, acc)
            x = rnd(rnd(te.tanh(rnd(x / c))) * c)
        return x

    # the additive bias: 0 where key j is attendable from query i, -inf (or the float mask) elsewhere
    ninf = te.const(_NEG_INF, acc)
    zero = te.const(0.0, acc)
    causal = bool(attrs["is_causal"])
    left, right = int(attrs["left_window_size"]), int(attrs["right_window_size"])
    windowed = left >= 0 or right >= 0

    def offset(b):
        if P:
            return te.const(P, "int32")
        if nonpad is not None:
            return nonpad[b].astype("int32") - Sq.astype("int32") if isinstance(Sq, E.PrimExpr) and not \
                isinstance(Sq, E.IntImm) else nonpad[b].astype("int32") - int(Sq)
        return te.const(0, "int32")

    def bias(b, h, i, j):
        terms = []
        if mask is not None:
            m_last = U.dims_of(mask)[-1]
            full = (b, h, i, j)
            idx = []
            for ax, d in enumerate(U.dims_of(mask)):
                pos = full[4 - mask.ndim + ax]
                idx.append(0 if d == 1 else pos)
            if ax_last_short := (isinstance(m_last, int) and isinstance(T, int) and m_last < T):
                idx[-1] = te.min(j, m_last - 1)
            mv = mask[tuple(idx)]
            term = te.if_then_else(mv, zero, ninf) if mask.dtype == "bool" else rnd(U.cast(mv, acc))
            if ax_last_short:
                term = te.if_then_else(j < m_last, term, ninf)
            terms.append(term)
        if causal:
            terms.append(te.if_then_else(j <= i + offset(b), zero, ninf))
        if windowed:
            diff = i + offset(b) - j
            conds = ([diff <= left] if left >= 0 else []) + ([-diff <= right] if right >= 0 else [])
            terms.append(te.if_then_else(te.all(*conds), zero, ninf))
        if nonpad is not None:
            terms.append(te.if_then_else(j < nonpad[b].astype("int32"), zero, ninf))
        if not terms:
            return None
        out = terms[0]
        for t in terms[1:]:
            out = rnd(out + t)
        return out

    has_bias = bias(0, 0, 0, 0) is not None

    def biased(b, h, i, j):
        x = capped(b, h, i, j)
        bb = bias(b, h, i, j)
        return x if bb is None else rnd(x + bb)

    # numerically stable softmax over j in precision sp; fully-masked rows (all -inf) give 0
    rj = te.reduce_axis((0, T), "j")
    xmax = U.compute((Bx, Hq, Sq), ["b", "h", "i"],
                     lambda b, h, i: te.max(U.cast(biased(b, h, i, rj), sp_acc), axis=rj), "attention_max")

    def expo(b, h, i, j):
        m = xmax[b, h, i]
        safe = te.if_then_else(m == te.const(_NEG_INF, sp_acc), te.const(0.0, sp_acc), m)
        return rnd(te.exp(rnd(U.cast(biased(b, h, i, j), sp_acc) - safe, sp)), sp)

    ex = U.compute(shape4, names4, expo, "attention_exp")
    rs = te.reduce_axis((0, T), "s")
    if sp == "bfloat16":  # numpy sums bfloat16 (an ml_dtypes type) in bfloat16, one rounding per add
        esum = U.compute((Bx, Hq, Sq), ["b", "h", "i"],
                         lambda b, h, i: te.sum(U.cast(ex[b, h, i, rs], sp), axis=rs), "attention_expsum")
    else:  # float16 sums accumulate in float32 (numpy's half pairwise sum)
        esum = U.compute((Bx, Hq, Sq), ["b", "h", "i"], lambda b, h, i: te.sum(ex[b, h, i, rs], axis=rs),
                         "attention_expsum")
    masked_row = None
    if has_bias:
        rm = te.reduce_axis((0, T), "m")
        masked_row = U.compute((Bx, Hq, Sq), ["b", "h", "i"],
                               lambda b, h, i: te.max(bias(b, h, i, rm), axis=rm), "attention_bias_max")

    def prob(b, h, i, j):
        s = rnd(U.cast(esum[b, h, i], sp_acc), sp)
        s = te.if_then_else(s == te.const(0.0, sp_acc), te.const(1.0, sp_acc), s)
        p = rnd(ex[b, h, i, j] / s, sp)
        if masked_row is not None:
            p = te.if_then_else(masked_row[b, h, i] == ninf, te.const(0.0, sp_acc), p)
        return U.cast(p, dt)

    probs = U.compute(shape4, names4, prob, "attention_probs")

    rj2 = te.reduce_axis((0, T), "t")

    def out_body(*idx):
        if three:
            b, i, c = idx
            h, e = c // Dv, c % Dv
        else:
            b, h, i, e = idx
        return te.sum(U.cast(probs[b, h, i, rj2], acc) * U.cast(value(b, h // group if group > 1 else h, rj2, e), acc),
                      axis=rj2)

    if three:
        yshape, ynames = (Bx, Sq, Hq * Dv), ["b", "i", "c"]
    else:
        yshape, ynames = (Bx, Hq, Sq, Dv), ["b", "h", "i", "e"]
    yacc = U.compute(yshape, ynames, out_body, "attention_out")
    y = U.compute(yshape, ynames, lambda *i: U.cast(yacc[i], dt), "attention") if acc != dt else yacc
    outs = [y]
    if attrs["return_present"]:
        outs += [pk, pv]
    if attrs["return_qk"]:
        mode = int(attrs["qk_matmul_output_mode"])
        if mode in (0, 1):
            qk = U.compute(shape4, names4, lambda *i: U.cast(capped(*i), dt), "qk_matmul_output")
        elif mode == 2:
            qk = U.compute(shape4, names4, lambda *i: U.cast(biased(*i), dt), "qk_matmul_output")
        else:
            qk = probs
        outs.append(qk)
    return outs


# ---------------------------------------------------------------------------------------------
# rotary embedding
# ---------------------------------------------------------------------------------------------
rotary_embedding = register_op(
    "nn.rotary_embedding", inputs=("data", "cos_cache", "sin_cache", "position_ids*"), pattern=OpPattern.INJECTIVE,
    attrs={"interleaved": False, "num_heads": 0, "rotary_embedding_dim": 0},
    doc="rotates pairs of the first rotary_embedding_dim features of each head by the cached angles "
        "(ONNX RotaryEmbedding): data (B, H, S, D) or (B, S, H*D); caches (max_pos, R/2) with "
        "position_ids (B, S), or (B, S, R/2) without.")


def _rotary_dims(op, types, attrs):
    x, cos, sin = types[:3]
    if len(types) > 4:
        raise ShapeError(f"{op}: takes data, cos_cache, sin_cache and optional position_ids")
    U.check_dtype(op, x, U.FLOATS, "data")
    for t, what in ((cos, "cos_cache"), (sin, "sin_cache")):
        if t.dtype != x.dtype:
            raise DTypeError(f"{op}: {what} is {t.dtype}, data is {x.dtype}")
    if x.ndim == 4:
        (H, D) = U.static_dims(op, x, (1, 3), "heads and head size")
    elif x.ndim == 3:
        H = int(attrs["num_heads"])
        (hid,) = U.static_dims(op, x, (2,), "hidden size")
        if H <= 0 or hid % H:
            raise ShapeError(f"{op}: 3-D data needs num_heads dividing its hidden size {hid}, got {H}")
        D = hid // H
    else:
        raise ShapeError(f"{op}: data must be 3-D or 4-D, got {x}")
    R = int(attrs["rotary_embedding_dim"]) or D
    if R % 2 or R > D:
        raise ShapeError(f"{op}: rotary_embedding_dim {R} must be even and at most the head size {D}")
    pos = types[3] if len(types) == 4 else None
    want_rank = 2 if pos is not None else 3
    for t, what in ((cos, "cos_cache"), (sin, "sin_cache")):
        if t.ndim != want_rank or t.shape[-1] != R // 2:
            raise ShapeError(f"{op}: {what} must be {'(max_position, R/2)' if pos is not None else '(B, S, R/2)'} "
                             f"with R/2 = {R // 2}, got {t}")
    if pos is not None:
        U.check_dtype(op, pos, ("int32", "int64"), "position_ids")
        if pos.ndim != 2:
            raise ShapeError(f"{op}: position_ids must be (batch, sequence), got {pos}")
    return H, D, R


@rotary_embedding.def_infer
def _rotary_infer(types, attrs):
    _rotary_dims("nn.rotary_embedding", types, attrs)
    return [types[0]]


@rotary_embedding.def_compute
def _rotary_compute(tensors, attrs):
    x, cos, sin = tensors[:3]
    pos = tensors[3] if len(tensors) == 4 else None
    H, D, R = _rotary_dims("nn.rotary_embedding", [U.ttype(t) for t in tensors], attrs)
    half = R // 2
    acc = U.accum_dtype(x.dtype)
    interleaved = bool(attrs["interleaved"])
    four = x.ndim == 4

    def xv(idx, d):
        if four:
            b, h, s, _ = idx
            return U.cast(x[b, h, s, d], acc)
        b, s, c = idx
        return U.cast(x[b, s, (c // D) * D + d], acc)

    def cache(t, b, s, kk):
        return U.cast(t[pos[b, s], kk] if pos is not None else t[b, s, kk], acc)

    def body(*idx):
        if four:
            b, _, s, d = idx
        else:
            b, s, c = idx
            d = c % D
        if interleaved:
            kk = d // 2
            x1, x2 = xv(idx, kk * 2), xv(idx, kk * 2 + 1)
            first = d % 2 == 0
        else:
            kk = te.if_then_else(d < half, d, d - half)
            x1, x2 = xv(idx, kk), xv(idx, kk + half)
            first = d < half
        cv, sv = cache(cos, b, s, kk), cache(sin, b, s, kk)
        rotated = te.if_then_else(first, cv * x1 - sv * x2, sv * x1 + cv * x2)
        if R < D:
            rotated = te.if_then_else(d < R, rotated, xv(idx, te.min(d, D - 1)))
        return U.cast(rotated, x.dtype)

    names = ["b", "h", "s", "d"] if four else ["b", "s", "c"]
    return [U.compute(x.shape, names, body, "rotary_embedding")]


attention.def_schedule(schedule_blocks)
rotary_embedding.def_schedule(schedule_blocks)
