"""ONNX converters of the attention family: Attention (opsets 23-25), RotaryEmbedding (23), and Einsum."""
from __future__ import annotations

from . import converter


@converter("Attention", since=23)
def _attention(ctx):
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    mask = ctx.input(3, optional=True)
    past_k, past_v = ctx.input(4, optional=True), ctx.input(5, optional=True)
    nonpad = ctx.input(6, optional=True) if ctx.opset >= 24 else None
    if (past_k is None) != (past_v is None):
        ctx.unsupported("past_key and past_value must be given together")
    extras = [x for x in (mask, past_k, past_v, nonpad) if x is not None]
    precision = ctx.attr("softmax_precision")
    want_present = ctx.has_output(1) or ctx.has_output(2)
    want_qk = ctx.has_output(3)
    scale = ctx.attr("scale")
    outs = ctx.op("nn.attention", q, k, v, *extras, has_mask=mask is not None, has_past=past_k is not None,
                  has_nonpad=nonpad is not None, scale=None if scale is None else float(scale),
                  is_causal=bool(ctx.attr("is_causal", 0)), q_num_heads=int(ctx.attr("q_num_heads", 0)),
                  kv_num_heads=int(ctx.attr("kv_num_heads", 0)), softcap=float(ctx.attr("softcap", 0.0)),
                  qk_matmul_output_mode=int(ctx.attr("qk_matmul_output_mode", 0)),
                  left_window_size=int(ctx.attr("left_window_size", -1)) if ctx.opset >= 25 else -1,
                  right_window_size=int(ctx.attr("right_window_size", -1)) if ctx.opset >= 25 else -1,
                  softmax_precision=ctx.dtype(precision) if precision is not None else "",
                  return_present=want_present, return_qk=want_qk)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    y = outs.pop(0)
    pk, pv = (outs.pop(0), outs.pop(0)) if want_present else (None, None)
    qk = outs.pop(0) if want_qk else None
    return y, pk, pv, qk


@converter("RotaryEmbedding", since=23)
def _rotary_embedding(ctx):
    ins = [ctx.input(0), ctx.input(1), ctx.input(2)]
    pos = ctx.input(3, optional=True)
    if pos is not None:
        ins.append(pos)
    return ctx.op("nn.rotary_embedding", *ins, interleaved=bool(ctx.attr("interleaved", 0)),
                  num_heads=int(ctx.attr("num_heads", 0)),
                  rotary_embedding_dim=int(ctx.attr("rotary_embedding_dim", 0)))


@converter("Einsum", since=12)
def _einsum(ctx):
    ins = [ctx.input(i) for i in range(ctx.num_inputs)]
    return ctx.op("einsum", *ins, equation=str(ctx.attr("equation")))
