"""Decoder language models with past key/values: GPT-2 and a LLaMA-style model, as ONNX graphs in the
form transformers' and optimum's exporters write for generation with a KV cache.

Inputs: "input_ids" int64 [batch_size, sequence_length], "attention_mask" int64 [batch_size,
past_sequence_length + sequence_length] (1 for a token, 0 for padding), "position_ids" int64
[batch_size, sequence_length] and, with `with_past`, per layer i "past_key_values.i.key" and
"past_key_values.i.value" float32 [batch_size, kv_heads, past_sequence_length, head_dim]. Outputs:
"logits" [batch_size, sequence_length, vocab] and per layer "present.i.key" / "present.i.value"
[batch_size, kv_heads, past_sequence_length + sequence_length, head_dim] (the past with this call's
keys and values appended: Concat on axis 2). Without `with_past` (optimum's decoder_model.onnx) there
are no past inputs and the presents hold the prompt's keys and values. Every dimension but the model's
own sizes is symbolic, so one compile serves every prompt and past length.

The attention mask is causal (key positions Range(total) compared with the query positions
Range(sequence_length) + past length, as recent exports compute it) and padded ((1 - attention_mask) * finfo(float32).min added to the
scores), as the exporters write them. GPT-2 is Hugging Face's GPT2LMHeadModel (see transformer.py;
the LM head tied to the token embeddings). The LLaMA-style model is LlamaForCausalLM's layout:
RMSNorm written out (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul), rotary embeddings from the position
ids (cos and sin of position * inv_freq, rotate_half by Slice/Neg/Concat), grouped-query attention
(keys and values of `kv_heads` heads repeated by Unsqueeze/Expand/Reshape after the present outputs),
a SwiGLU MLP (down(silu(gate(x)) * up(x)), silu as x * Sigmoid(x)), no biases, an untied LM head.
Projection matrices are stored [in, out] under their parameter names (model.layers.0.self_attn.q_proj.weight),
as the zoo's other transformers do.

Each model carries its Hugging Face configuration (config.json's keys: model_type, the head counts,
the norm epsilon, rope_theta) as the JSON of metadata_props["transformers_config"]: what a runtime
needs that the weights do not say (tessera.generation reads it).
"""
from __future__ import annotations

import json
import math

import numpy as np

from ..errors import TesseraError
from .transformer import FLOAT, INT64, TransformerWriter, check_heads, gpt2_block_output

_FLOAT_MIN = float(np.finfo(np.float32).min)
CONFIG_KEY = "transformers_config"          # the metadata_props entry holding config.json's text

BATCH, SEQ, PAST, TOTAL = "batch_size", "sequence_length", "past_sequence_length", \
    "past_sequence_length + sequence_length"


class _DecoderWriter(TransformerWriter):
    """TransformerWriter plus what the decoders share: inputs, masks, heads, the KV-cache outputs."""

    def __init__(self, name, seed, batch, with_past: bool):
        super().__init__(name, np.random.default_rng(seed), batch, 0, dynamic_shapes=True)
        self.with_past = bool(with_past)
        self.presents: list = []

    def decoder_inputs(self, n_layers: int, kv_heads: int, head_dim: int):
        """input_ids, attention_mask, position_ids and the past key/value pairs (None without past)."""
        total = TOTAL if self.with_past else SEQ
        ids = self.input("input_ids", INT64, [self.batch, SEQ])
        mask = self.input("attention_mask", INT64, [self.batch, total])
        pos = self.input("position_ids", INT64, [self.batch, SEQ])
        past = []
        for i in range(n_layers):
            if self.with_past:
                shape = [self.batch, kv_heads, PAST, head_dim]
                past.append((self.input(f"past_key_values.{i}.key", FLOAT, shape),
                             self.input(f"past_key_values.{i}.value", FLOAT, shape)))
            else:
                past.append(None)
        return ids, mask, pos, past

    def masks(self, ids: str, mask: str):
        """(causal [S, T] bool, padding [B, 1, 1, T] float to add), T = the attention mask's length: key
        position j is visible from query i (at position T - S + i) when j <= T - S + i."""
        (ql,) = self.dims(ids, "", (1,))
        (kl,) = self.dims(mask, "", (1,))
        one, zero = self.i64(1), self.i64(0)
        start = self.node("Sub", [self.node("Squeeze", [kl], ""), self.node("Squeeze", [ql], "")], "")
        qpos = self.node("Add", [self.node("Range", [zero, self.node("Squeeze", [ql], ""), one], ""), start], "")
        kpos = self.node("Range", [zero, self.node("Squeeze", [kl], ""), one], "")
        causal = self.node("LessOrEqual", [self.node("Unsqueeze", [kpos, self.i64([0])], ""),
                                           self.node("Unsqueeze", [qpos, self.i64([1])], "")], "")
        m = self.node("Unsqueeze", [mask, self.i64([1, 2])], "")
        m = self.node("Cast", [m], "", to=FLOAT)
        m = self.node("Sub", [self.const(1.0), m], "")
        return causal, self.node("Mul", [m, self.const(_FLOAT_MIN)], "")

    def split_heads(self, x: str, heads: int, head_dim: int, scope: str) -> str:
        """[B, S, heads * head_dim] -> [B, heads, S, head_dim]."""
        return self.node("Transpose", [self.reshape(x, (heads, head_dim), scope)], scope, perm=[0, 2, 1, 3])

    def cache(self, i: int, k: str, v: str, past, scope: str):
        """This call's keys and values after the past ones (Concat on the sequence axis); the results are
        the layer's present outputs."""
        if past is not None:
            k = self.node("Concat", [past[0], k], scope, axis=2)
            v = self.node("Concat", [past[1], v], scope, axis=2)
        self.presents.append((k, f"present.{i}.key"))
        self.presents.append((v, f"present.{i}.value"))
        return k, v

    def attend(self, q: str, k: str, v: str, causal: str, mask_add: str, head_dim: int, hidden: int, scope: str) -> str:
        """softmax(q k^T / sqrt(d), causal and padded) v with heads merged: [B, S, hidden]."""
        s = self.node("MatMul", [q, self.node("Transpose", [k], scope, perm=[0, 1, 3, 2])], scope)
        s = self.node("Div", [s, self.const(math.sqrt(head_dim))], scope)
        s = self.node("Where", [causal, s, self.const(_FLOAT_MIN)], scope)
        s = self.node("Add", [s, mask_add], scope)
        p = self.node("Softmax", [s], scope, axis=-1)
        c = self.node("Transpose", [self.node("MatMul", [p, v], scope)], scope, perm=[0, 2, 1, 3])
        return self.reshape(c, (hidden,), scope)

    def decoder_model(self, logits: str, vocab: int, kv_heads: int, head_dim: int, config: dict, doc: str):
        self.output(logits, "logits", FLOAT, [self.batch, SEQ, vocab])
        total = TOTAL if self.with_past else SEQ
        for value, name in self.presents:
            self.output(value, name, FLOAT, [self.batch, kv_heads, total, head_dim])
        m = self.model(doc)
        entry = m.metadata_props.add()
        entry.key, entry.value = CONFIG_KEY, json.dumps(config, sort_keys=True)
        return m


def _check_sizes(model: str, **sizes):
    for k, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise TesseraError(f"zoo {model}: {k} must be a positive int, got {v!r}")


# ---------------------------------------------------------------------------------------------
# GPT-2
# ---------------------------------------------------------------------------------------------
def gpt2_decoder(batch=BATCH, seed=0, n_layers=12, hidden=768, heads=12, vocab=50257, n_positions=1024,
                 with_past=True):
    """GPT-2 (GPT2LMHeadModel, GPT-2 small by default) for generation with a KV cache; see the module
    docstring for its inputs and outputs (kv_heads = heads, head_dim = hidden / heads)."""
    check_heads("gpt2_decoder", hidden, heads)
    _check_sizes("gpt2_decoder", n_layers=n_layers, vocab=vocab, n_positions=n_positions)
    dh = hidden // heads
    g = _DecoderWriter("gpt2_decoder", seed, batch, with_past)
    ids, mask, pos, past = g.decoder_inputs(n_layers, heads, dh)
    wte = g.initializer("wte.weight", g.normal((vocab, hidden), 0.02))
    x = g.node("Gather", [wte, ids], "/wte", axis=0)
    pe = g.node("Gather", [g.initializer("wpe.weight", g.normal((n_positions, hidden), 0.01)), pos], "/wpe", axis=0)
    x = g.node("Add", [x, pe], "")
    causal, mask_add = g.masks(ids, mask)
    for i in range(n_layers):
        p, sc = f"h.{i}", f"/h.{i}"
        a = f"{sc}/attn"
        h = g.layer_norm(x, f"{p}.ln_1", f"{sc}/ln_1", hidden, 1e-5)
        qkv = g.linear(h, f"{p}.attn.c_attn", f"{a}/c_attn", hidden, 3 * hidden)
        q, k, v = g.node("Split", [qkv, g.i64([hidden] * 3)], a, n_outputs=3, axis=2)
        q, k, v = (g.split_heads(t, heads, dh, a) for t in (q, k, v))
        k, v = g.cache(i, k, v, past[i], a)
        c = g.attend(q, k, v, causal, mask_add, dh, hidden, a)
        x = gpt2_block_output(g, x, c, i, hidden, n_layers)
    x = g.layer_norm(x, "ln_f", "/ln_f", hidden, 1e-5)
    logits = g.node("MatMul", [x, g.node("Transpose", [wte], "/lm_head", perm=[1, 0])], "/lm_head")
    config = {"model_type": "gpt2", "n_layer": n_layers, "n_embd": hidden, "n_head": heads, "vocab_size": vocab,
              "n_positions": n_positions, "n_inner": None, "layer_norm_epsilon": 1e-5,
              "activation_function": "gelu_new", "tie_word_embeddings": True}
    return g.decoder_model(logits, vocab, heads, dh, config,
                           "gpt2_decoder: Hugging Face GPT2LMHeadModel with past key/values, seeded random "
                           "weights (tessera.zoo)")


# ---------------------------------------------------------------------------------------------
# LLaMA
# ---------------------------------------------------------------------------------------------
def _rms_norm(g: _DecoderWriter, x: str, param: str, scope: str, hidden: int, eps: float) -> str:
    """LlamaRMSNorm: weight * x / sqrt(mean(x^2) + eps), as exported."""
    w = (1.0 + g.normal((hidden,), 0.05)).astype(np.float32)
    v = g.node("ReduceMean", [g.node("Pow", [x, g.const(2.0)], scope)], scope, axes=[-1], keepdims=1)
    r = g.node("Reciprocal", [g.node("Sqrt", [g.node("Add", [v, g.const(eps)], scope)], scope)], scope)
    return g.node("Mul", [g.initializer(f"{param}.weight", w), g.node("Mul", [x, r], scope)], scope)


def _matmul(g: _DecoderWriter, x: str, param: str, scope: str, n_in: int, n_out: int, std: float | None = None) -> str:
    w = g.normal((n_in, n_out), std if std is not None else 1.0 / math.sqrt(n_in))
    return g.node("MatMul", [x, g.initializer(f"{param}.weight", w)], scope)


def _rotate(g: _DecoderWriter, x: str, cos: str, sin: str, head_dim: int, scope: str) -> str:
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., d/2:], x[..., :d/2])."""
    half = head_dim // 2
    x1 = g.node("Slice", [x, g.i64([0]), g.i64([half]), g.i64([3]), g.i64([1])], scope)
    x2 = g.node("Slice", [x, g.i64([half]), g.i64([head_dim]), g.i64([3]), g.i64([1])], scope)
    rot = g.node("Concat", [g.node("Neg", [x2], scope), x1], scope, axis=-1)
    return g.node("Add", [g.node("Mul", [x, cos], scope), g.node("Mul", [rot, sin], scope)], scope)


def _repeat_kv(g: _DecoderWriter, x: str, kv_heads: int, n_rep: int, head_dim: int, scope: str) -> str:
    """[B, kv_heads, T, D] -> [B, kv_heads * n_rep, T, D], each key/value head repeated n_rep times."""
    if n_rep == 1:
        return x
    b, t = g.dims(x, scope, (0, 2))
    e = g.node("Expand", [g.node("Unsqueeze", [x, g.i64([2])], scope),
                          g.node("Concat", [b, g.i64([kv_heads, n_rep]), t, g.i64([head_dim])], scope, axis=0)], scope)
    return g.node("Reshape", [e, g.node("Concat", [b, g.i64([kv_heads * n_rep]), t, g.i64([head_dim])], scope, axis=0)],
                  scope, allowzero=0)


def llama_decoder(batch=BATCH, seed=0, n_layers=2, hidden=256, heads=8, kv_heads=2, ffn=688, vocab=1024,
                  max_position=2048, rope_theta=10000.0, rms_norm_eps=1e-5, with_past=True):
    """A LLaMA-style decoder (LlamaForCausalLM layout: RMSNorm, rotary embeddings, SwiGLU, grouped-query
    attention with `kv_heads` key/value heads) for generation with a KV cache; see the module docstring."""
    check_heads("llama_decoder", hidden, heads)
    _check_sizes("llama_decoder", n_layers=n_layers, kv_heads=kv_heads, ffn=ffn, vocab=vocab, max_position=max_position)
    dh = hidden // heads
    if heads % kv_heads:
        raise TesseraError(f"zoo llama_decoder: heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if dh % 2:
        raise TesseraError(f"zoo llama_decoder: the head size hidden / heads ({dh}) must be even (rotary embeddings "
                           f"rotate pairs)")
    g = _DecoderWriter("llama_decoder", seed, batch, with_past)
    ids, mask, pos, past = g.decoder_inputs(n_layers, kv_heads, dh)
    emb = g.initializer("model.embed_tokens.weight", g.normal((vocab, hidden), 0.02))
    x = g.node("Gather", [emb, ids], "/model/embed_tokens", axis=0)
    causal, mask_add = g.masks(ids, mask)
    # rotary embeddings: angle = position * theta^(-2j/d), cos and sin [B, 1, S, d]
    sc = "/model/rotary_emb"
    inv_freq = (1.0 / (rope_theta ** (np.arange(0, dh, 2, dtype=np.float64) / dh))).astype(np.float32)
    p = g.node("Unsqueeze", [g.node("Cast", [pos], sc, to=FLOAT), g.i64([2])], sc)
    f = g.node("Mul", [p, g.initializer("model.rotary_emb.inv_freq", inv_freq)], sc)
    angle = g.node("Concat", [f, f], sc, axis=-1)
    cos = g.node("Unsqueeze", [g.node("Cos", [angle], sc), g.i64([1])], sc)
    sin = g.node("Unsqueeze", [g.node("Sin", [angle], sc), g.i64([1])], sc)
    resid_std = 1.0 / math.sqrt(2 * n_layers)
    n_rep = heads // kv_heads
    for i in range(n_layers):
        prm, sc = f"model.layers.{i}", f"/model/layers.{i}"
        a = f"{sc}/self_attn"
        h = _rms_norm(g, x, f"{prm}.input_layernorm", f"{sc}/input_layernorm", hidden, rms_norm_eps)
        q = g.split_heads(_matmul(g, h, f"{prm}.self_attn.q_proj", f"{a}/q_proj", hidden, heads * dh), heads, dh, a)
        k = g.split_heads(_matmul(g, h, f"{prm}.self_attn.k_proj", f"{a}/k_proj", hidden, kv_heads * dh), kv_heads, dh, a)
        v = g.split_heads(_matmul(g, h, f"{prm}.self_attn.v_proj", f"{a}/v_proj", hidden, kv_heads * dh), kv_heads, dh, a)
        q, k = _rotate(g, q, cos, sin, dh, a), _rotate(g, k, cos, sin, dh, a)
        k, v = g.cache(i, k, v, past[i], a)
        k, v = _repeat_kv(g, k, kv_heads, n_rep, dh, a), _repeat_kv(g, v, kv_heads, n_rep, dh, a)
        c = g.attend(q, k, v, causal, mask_add, dh, heads * dh, a)
        c = _matmul(g, c, f"{prm}.self_attn.o_proj", f"{a}/o_proj", heads * dh, hidden, resid_std / math.sqrt(hidden))
        x = g.node("Add", [x, c], sc)
        h = _rms_norm(g, x, f"{prm}.post_attention_layernorm", f"{sc}/post_attention_layernorm", hidden, rms_norm_eps)
        gate = _matmul(g, h, f"{prm}.mlp.gate_proj", f"{sc}/mlp/gate_proj", hidden, ffn)
        up = _matmul(g, h, f"{prm}.mlp.up_proj", f"{sc}/mlp/up_proj", hidden, ffn)
        act = g.node("Mul", [gate, g.node("Sigmoid", [gate], f"{sc}/mlp/act_fn")], f"{sc}/mlp/act_fn")
        d = _matmul(g, g.node("Mul", [act, up], f"{sc}/mlp"), f"{prm}.mlp.down_proj", f"{sc}/mlp/down_proj", ffn, hidden,
                    resid_std / math.sqrt(ffn))
        x = g.node("Add", [x, d], sc)
    x = _rms_norm(g, x, "model.norm", "/model/norm", hidden, rms_norm_eps)
    logits = _matmul(g, x, "lm_head", "/lm_head", hidden, vocab)
    config = {"model_type": "llama", "num_hidden_layers": n_layers, "hidden_size": hidden,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "intermediate_size": ffn,
              "vocab_size": vocab, "max_position_embeddings": max_position, "rope_theta": float(rope_theta),
              "rms_norm_eps": float(rms_norm_eps), "hidden_act": "silu", "tie_word_embeddings": False}
    return g.decoder_model(logits, vocab, kv_heads, dh, config,
                           "llama_decoder: LlamaForCausalLM-style decoder with past key/values, seeded random "
                           "weights (tessera.zoo)")
