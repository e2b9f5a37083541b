"""The transformer zoo models: a BERT-base encoder and GPT-2 (one decoder block, or a stack with embeddings).

The graphs are what torch.onnx.export (opset 17) writes for Hugging Face's BertModel and GPT2Model:
embeddings as Gather, LayerNormalization, nn.Linear on 3-D input as MatMul + Add (weights stored
[in, out], as the exporter folds the transpose), heads split with Reshape + Transpose, scores
scaled with Div, Softmax, BERT's padding mask as Unsqueeze/Cast/Sub/Mul added to the scores,
GPT-2's causal mask as a Slice of a boolean buffer and Where, GELU written out with Erf (BERT) or
with Pow/Tanh (GPT-2's "gelu_new"). With `dynamic_shapes=True` the Reshape targets and slice bounds
come from Shape -> Gather -> Unsqueeze -> Concat subgraphs, as an export with dynamic axes writes
them; otherwise they are constants.

Weights are seeded random with trained-like scales (projections 1/sqrt(fan_in), so attention
scores are O(1) and the softmax is far from uniform; GPT-2's residual projections scaled by
1/sqrt(2 * layers) as in its paper), so activations stay at unit scale through the depth.
"""
from __future__ import annotations

import math

import numpy as np

from ._onnx_builder import OnnxGraphWriter
from ..errors import TesseraError

FLOAT, INT64, BOOL = 1, 7, 9  # onnx.TensorProto element types
_FLOAT_MIN = float(np.finfo(np.float32).min)


class TransformerWriter(OnnxGraphWriter):
    """OnnxGraphWriter plus the transformer layers, for one (batch, sequence) layout."""

    def __init__(self, name: str, rng: np.random.Generator, batch, seq_len: int, dynamic_shapes: bool):
        super().__init__(name)
        self.rng = rng
        self.batch = batch
        self.seq_len = seq_len
        self.dynamic = bool(dynamic_shapes)

    # -- weights ------------------------------------------------------------------------------
    def normal(self, shape, std: float) -> np.ndarray:
        return self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    def i64(self, values) -> str:
        return self.const(values, np.int64)

    # -- layers -------------------------------------------------------------------------------
    def linear(self, x: str, param: str, scope: str, n_in: int, n_out: int, std: float | None = None) -> str:
        """nn.Linear on a [batch, seq, n_in] input: MatMul with the [in, out] weight, then Add bias."""
        w = self.normal((n_in, n_out), std if std is not None else 1.0 / math.sqrt(n_in))
        b = self.normal((n_out,), 0.02)
        y = self.node("MatMul", [x, self.initializer(f"{param}.weight", w)], scope)
        return self.node("Add", [self.initializer(f"{param}.bias", b), y], scope)

    def layer_norm(self, x: str, param: str, scope: str, hidden: int, eps: float) -> str:
        g = (1.0 + self.normal((hidden,), 0.05)).astype(np.float32)
        b = self.normal((hidden,), 0.05)
        return self.node("LayerNormalization", [x, self.initializer(f"{param}.weight", g),
                                                self.initializer(f"{param}.bias", b)],
                         scope, axis=-1, epsilon=eps)

    def dims(self, x: str, scope: str, axes) -> list:
        """The sizes of `x`'s axes as 1-element int64 tensors: Shape -> Gather -> Unsqueeze each."""
        shape = self.node("Shape", [x], scope)
        out = []
        for a in axes:
            d = self.node("Gather", [shape, self.i64(a)], scope, axis=0)
            out.append(self.node("Unsqueeze", [d, self.i64([0])], scope))
        return out

    def reshape(self, x: str, tail, scope: str) -> str:
        """Reshape [batch, seq, ...] -> [batch, seq, *tail], the target constant or computed from x."""
        if self.dynamic:
            b, s = self.dims(x, scope, (0, 1))
            target = self.node("Concat", [b, s, self.i64(list(tail))], scope, axis=0)
        else:
            b = self.batch if isinstance(self.batch, int) else -1
            target = self.i64([b, self.seq_len, *tail])
        return self.node("Reshape", [x, target], scope, allowzero=0)

    def gelu_erf(self, x: str, scope: str) -> str:
        """x * 0.5 * (1 + erf(x / sqrt(2))), as exported from torch's GELU (BERT)."""
        d = self.node("Div", [x, self.const(1.4142135381698608)], scope)
        e = self.node("Erf", [d], scope)
        a = self.node("Add", [e, self.const(1.0)], scope)
        m = self.node("Mul", [x, a], scope)
        return self.node("Mul", [m, self.const(0.5)], scope)

    def gelu_tanh(self, x: str, scope: str) -> str:
        """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), GPT-2's gelu_new."""
        h = self.node("Mul", [self.const(0.5), x], scope)
        p = self.node("Pow", [x, self.const(3.0)], scope)
        c = self.node("Mul", [self.const(0.044715), p], scope)
        s = self.node("Add", [x, c], scope)
        k = self.node("Mul", [self.const(math.sqrt(2.0 / math.pi)), s], scope)
        t = self.node("Tanh", [k], scope)
        a = self.node("Add", [self.const(1.0), t], scope)
        return self.node("Mul", [h, a], scope)

    def attention_core(self, q: str, k: str, v: str, scope: str, heads: int, hidden: int,
                       mask_add: str | None = None, causal: str | None = None) -> str:
        """Split heads, softmax(q k^T / sqrt(d) [+ mask]) v, merge heads: [batch, seq, hidden] out."""
        dh = hidden // heads
        q = self.node("Transpose", [self.reshape(q, (heads, dh), scope)], scope, perm=[0, 2, 1, 3])
        k = self.node("Transpose", [self.reshape(k, (heads, dh), scope)], scope, perm=[0, 2, 3, 1])
        v = self.node("Transpose", [self.reshape(v, (heads, dh), scope)], scope, perm=[0, 2, 1, 3])
        s = self.node("MatMul", [q, k], scope)
        s = self.node("Div", [s, self.const(math.sqrt(dh))], scope)
        if causal is not None:
            s = self.node("Where", [causal, s, self.const(_FLOAT_MIN)], scope)
        if mask_add is not None:
            s = self.node("Add", [s, mask_add], scope)
        p = self.node("Softmax", [s], scope, axis=-1)
        c = self.node("MatMul", [p, v], scope)
        c = self.node("Transpose", [c], scope, perm=[0, 2, 1, 3])
        return self.reshape(c, (hidden,), scope)


def check_heads(model: str, hidden: int, heads: int):
    if hidden <= 0 or heads <= 0 or hidden % heads:
        raise TesseraError(f"zoo {model}: hidden ({hidden}) must be a positive multiple of heads ({heads})")


# ---------------------------------------------------------------------------------------------
# BERT
# ---------------------------------------------------------------------------------------------
def bert_base(batch=1, seed=0, seq_len=128, n_layers=12, hidden=768, heads=12, ffn=3072, vocab=30522,
              max_position=512, pooler=True, dynamic_shapes=False):
    """BERT-base encoder (Hugging Face BertModel); inputs "input_ids", "attention_mask",
    "token_type_ids" (int64 [batch, seq]) -> "last_hidden_state" [batch, seq, hidden] and, with
    `pooler`, "pooler_output" [batch, hidden]."""
    check_heads("bert_base", hidden, heads)
    if not 0 < seq_len <= max_position:
        raise TesseraError(f"zoo bert_base: seq_len must be in 1..max_position ({max_position}), got {seq_len}")
    g = TransformerWriter("bert_base", np.random.default_rng(seed), batch, seq_len, dynamic_shapes)
    ids = g.input("input_ids", INT64, [batch, seq_len])
    mask = g.input("attention_mask", INT64, [batch, seq_len])
    types = g.input("token_type_ids", INT64, [batch, seq_len])

    # embeddings: word + token type + position, LayerNorm
    sc = "/embeddings"
    word = g.node("Gather", [g.initializer("embeddings.word_embeddings.weight", g.normal((vocab, hidden), 0.05)),
                             ids], f"{sc}/word_embeddings", axis=0)
    tt = g.node("Gather", [g.initializer("embeddings.token_type_embeddings.weight", g.normal((2, hidden), 0.05)),
                           types], f"{sc}/token_type_embeddings", axis=0)
    x = g.node("Add", [word, tt], sc)
    pos_buf = g.initializer("embeddings.position_ids", np.arange(max_position, dtype=np.int64)[None, :])
    if g.dynamic:
        (end,) = g.dims(ids, sc, (1,))
    else:
        end = g.i64([seq_len])
    pos = g.node("Slice", [pos_buf, g.i64([0]), end, g.i64([1]), g.i64([1])], sc)
    pe = g.node("Gather", [g.initializer("embeddings.position_embeddings.weight",
                                         g.normal((max_position, hidden), 0.05)), pos],
                f"{sc}/position_embeddings", axis=0)
    x = g.node("Add", [x, pe], sc)
    x = g.layer_norm(x, "embeddings.LayerNorm", f"{sc}/LayerNorm", hidden, 1e-12)

    # extended attention mask: (1 - mask[:, None, None, :]) * finfo.min, added to every layer's scores
    m = g.node("Unsqueeze", [mask, g.i64([1])], "")
    m = g.node("Unsqueeze", [m, g.i64([2])], "")
    m = g.node("Cast", [m], "", to=FLOAT)
    m = g.node("Sub", [g.const(1.0), m], "")
    mask_add = g.node("Mul", [m, g.const(_FLOAT_MIN)], "")

    for i in range(n_layers):
        p = f"encoder.layer.{i}"
        sc = f"/encoder/layer.{i}"
        a = f"{sc}/attention/self"
        q = g.linear(x, f"{p}.attention.self.query", f"{a}/query", hidden, hidden)
        k = g.linear(x, f"{p}.attention.self.key", f"{a}/key", hidden, hidden)
        v = g.linear(x, f"{p}.attention.self.value", f"{a}/value", hidden, hidden)
        c = g.attention_core(q, k, v, a, heads, hidden, mask_add=mask_add)
        o = g.linear(c, f"{p}.attention.output.dense", f"{sc}/attention/output/dense", hidden, hidden)
        o = g.node("Add", [o, x], f"{sc}/attention/output")
        x = g.layer_norm(o, f"{p}.attention.output.LayerNorm", f"{sc}/attention/output/LayerNorm", hidden, 1e-12)
        h = g.linear(x, f"{p}.intermediate.dense", f"{sc}/intermediate/dense", hidden, ffn)
        h = g.gelu_erf(h, f"{sc}/intermediate/intermediate_act_fn")
        h = g.linear(h, f"{p}.output.dense", f"{sc}/output/dense", ffn, hidden)
        h = g.node("Add", [h, x], f"{sc}/output")
        x = g.layer_norm(h, f"{p}.output.LayerNorm", f"{sc}/output/LayerNorm", hidden, 1e-12)

    g.output(x, "last_hidden_state", FLOAT, [batch, seq_len, hidden])
    if pooler:
        first = g.node("Gather", [x, g.i64(0)], "/pooler", axis=1)
        w = g.normal((hidden, hidden), 1.0 / math.sqrt(hidden))
        d = g.node("Gemm", [first, g.initializer("pooler.dense.weight", w),
                            g.initializer("pooler.dense.bias", g.normal((hidden,), 0.02))],
                   "/pooler/dense", alpha=1.0, beta=1.0, transB=1)
        g.output(g.node("Tanh", [d], "/pooler/activation"), "pooler_output", FLOAT, [batch, hidden])
    return g.model("bert_base: Hugging Face BertModel architecture, seeded random weights (tessera.zoo)")


# ---------------------------------------------------------------------------------------------
# GPT-2
# ---------------------------------------------------------------------------------------------
def _gpt2_block(g: TransformerWriter, x: str, i: int, hidden: int, heads: int, n_layers: int, causal_buf: str) -> str:
    p = f"h.{i}"
    sc = f"/h.{i}"
    h = g.layer_norm(x, f"{p}.ln_1", f"{sc}/ln_1", hidden, 1e-5)
    a = f"{sc}/attn"
    qkv = g.linear(h, f"{p}.attn.c_attn", f"{a}/c_attn", hidden, 3 * hidden)
    q, k, v = g.node("Split", [qkv, g.i64([hidden] * 3)], a, n_outputs=3, axis=2)
    # causal mask: bias[:, :, key_len - query_len : key_len, :key_len]
    if g.dynamic:
        (ql,) = g.dims(q, a, (1,))
        (kl,) = g.dims(k, a, (1,))
        start = g.node("Sub", [kl, ql], a)
        causal = g.node("Slice", [causal_buf, g.node("Concat", [start, g.i64([0])], a, axis=0),
                                  g.node("Concat", [kl, kl], a, axis=0), g.i64([2, 3]), g.i64([1, 1])], a)
    else:
        s = g.seq_len
        causal = g.node("Slice", [causal_buf, g.i64([0, 0]), g.i64([s, s]), g.i64([2, 3]), g.i64([1, 1])], a)
    c = g.attention_core(q, k, v, a, heads, hidden, causal=causal)
    return gpt2_block_output(g, x, c, i, hidden, n_layers)


def gpt2_block_output(g: TransformerWriter, x: str, c: str, i: int, hidden: int, n_layers: int) -> str:
    """The rest of GPT-2 block i after its attention: x + c_proj(c), then the MLP (c_fc, gelu, c_proj)
    over ln_2 of that, added to it; the output projections' weights scaled down by the depth."""
    p, sc = f"h.{i}", f"/h.{i}"
    resid_std = 1.0 / math.sqrt(2 * n_layers)
    c = g.linear(c, f"{p}.attn.c_proj", f"{sc}/attn/c_proj", hidden, hidden, resid_std / math.sqrt(hidden))
    x = g.node("Add", [c, x], sc)
    h = g.layer_norm(x, f"{p}.ln_2", f"{sc}/ln_2", hidden, 1e-5)
    h = g.linear(h, f"{p}.mlp.c_fc", f"{sc}/mlp/c_fc", hidden, 4 * hidden)
    h = g.gelu_tanh(h, f"{sc}/mlp/act")
    h = g.linear(h, f"{p}.mlp.c_proj", f"{sc}/mlp/c_proj", 4 * hidden, hidden, resid_std / math.sqrt(4 * hidden))
    return g.node("Add", [x, h], sc)


def causal_buffer(g: TransformerWriter, n_positions: int) -> str:
    return g.initializer("causal_bias", np.tril(np.ones((n_positions, n_positions), dtype=bool))[None, None])


def check_positions(model: str, seq_len: int, n_positions: int):
    if not 0 < seq_len <= n_positions:
        raise TesseraError(f"zoo {model}: seq_len must be in 1..n_positions ({n_positions}), got {seq_len}")


def gpt2_block(batch=1, seed=0, seq_len=128, hidden=768, heads=12, n_positions=1024, dynamic_shapes=False):
    """One GPT-2 decoder block (pre-LayerNorm causal self-attention + MLP, Hugging Face GPT2Block);
    "hidden_states" float32 [batch, seq, hidden] -> "output" [batch, seq, hidden]."""
    check_heads("gpt2_block", hidden, heads)
    check_positions("gpt2_block", seq_len, n_positions)
    g = TransformerWriter("gpt2_block", np.random.default_rng(seed), batch, seq_len, dynamic_shapes)
    x = g.input("hidden_states", FLOAT, [batch, seq_len, hidden])
    y = _gpt2_block(g, x, 0, hidden, heads, 1, causal_buffer(g, n_positions))
    g.output(y, "output", FLOAT, [batch, seq_len, hidden])
    return g.model("gpt2_block: one Hugging Face GPT2Block, seeded random weights (tessera.zoo)")


def gpt2_small(batch=1, seed=0, seq_len=128, n_layers=12, hidden=768, heads=12, vocab=50257, n_positions=1024,
               dynamic_shapes=False):
    """GPT-2 small (Hugging Face GPT2LMHeadModel without cache): "input_ids" int64 [batch, seq] ->
    "logits" [batch, seq, vocab], the LM head tied to the token embeddings."""
    check_heads("gpt2_small", hidden, heads)
    check_positions("gpt2_small", seq_len, n_positions)
    g = TransformerWriter("gpt2_small", np.random.default_rng(seed), batch, seq_len, dynamic_shapes)
    ids = g.input("input_ids", INT64, [batch, seq_len])
    wte = g.initializer("wte.weight", g.normal((vocab, hidden), 0.02))
    x = g.node("Gather", [wte, ids], "/wte", axis=0)
    # position_ids = arange(seq_len)[None]
    if g.dynamic:
        shape = g.node("Shape", [ids], "")
        limit = g.node("Gather", [shape, g.i64(1)], "", axis=0)
    else:
        limit = g.i64(seq_len)
    pos = g.node("Range", [g.i64(0), limit, g.i64(1)], "")
    pos = g.node("Unsqueeze", [pos, g.i64([0])], "")
    pe = g.node("Gather", [g.initializer("wpe.weight", g.normal((n_positions, hidden), 0.01)), pos], "/wpe", axis=0)
    x = g.node("Add", [x, pe], "")
    causal_buf = causal_buffer(g, n_positions)
    for i in range(n_layers):
        x = _gpt2_block(g, x, i, hidden, heads, n_layers, causal_buf)
    x = g.layer_norm(x, "ln_f", "/ln_f", hidden, 1e-5)
    head = g.node("Transpose", [wte], "/lm_head", perm=[1, 0])
    logits = g.node("MatMul", [x, head], "/lm_head")
    g.output(logits, "logits", FLOAT, [batch, seq_len, vocab])
    return g.model("gpt2_small: Hugging Face GPT2LMHeadModel architecture, seeded random weights (tessera.zoo)")
