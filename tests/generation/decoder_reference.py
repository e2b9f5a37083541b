"""A numpy reference for the zoo decoders: the whole sequence's logits from the model's initializers (float64,
no cache: every step recomputes every position), and the greedy loop over it."""
import json

import numpy as np
from onnx import numpy_helper

from tessera.zoo.decoder import CONFIG_KEY


def params_of(model) -> tuple:
    """({initializer name: float64 array}, the transformers config dict) of a zoo decoder."""
    p = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    cfg = json.loads(next(m.value for m in model.metadata_props if m.key == CONFIG_KEY))
    return p, cfg


def _attention(q, k, v):
    """q [heads, T, d], k/v [heads, T, d]: causal softmax(q k^T / sqrt(d)) v -> [T, heads * d]."""
    T, d = q.shape[1], q.shape[2]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    o = (s / s.sum(-1, keepdims=True)) @ v
    return o.transpose(1, 0, 2).reshape(T, -1)


def _gpt2(p, cfg, ids):
    H, nh = cfg["n_embd"], cfg["n_head"]
    dh = H // nh

    def ln(x, n):
        m = x.mean(-1, keepdims=True)
        var = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(var + cfg["layer_norm_epsilon"]) * p[n + ".weight"] + p[n + ".bias"]

    def heads(t):
        return t.reshape(len(ids), nh, dh).transpose(1, 0, 2)

    x = p["wte.weight"][ids] + p["wpe.weight"][np.arange(len(ids))]
    for i in range(cfg["n_layer"]):
        a = f"h.{i}."
        qkv = ln(x, a + "ln_1") @ p[a + "attn.c_attn.weight"] + p[a + "attn.c_attn.bias"]
        q, k, v = (heads(t) for t in np.split(qkv, 3, axis=-1))
        x = x + _attention(q, k, v) @ p[a + "attn.c_proj.weight"] + p[a + "attn.c_proj.bias"]
        u = ln(x, a + "ln_2") @ p[a + "mlp.c_fc.weight"] + p[a + "mlp.c_fc.bias"]
        u = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
        x = x + u @ p[a + "mlp.c_proj.weight"] + p[a + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ p["wte.weight"].T


def _llama(p, cfg, ids):
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dh, T = H // nh, len(ids)

    def rms(x, n):
        return p[n + ".weight"] * (x / np.sqrt((x ** 2).mean(-1, keepdims=True) + cfg["rms_norm_eps"]))

    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, dh, 2) / dh)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(t):             # [heads, T, dh]
        rot = np.concatenate([-t[..., dh // 2:], t[..., :dh // 2]], -1)
        return t * cos + rot * sin

    def heads(t, n):
        return t.reshape(T, n, dh).transpose(1, 0, 2)

    x = p["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        a = f"model.layers.{i}."
        h = rms(x, a + "input_layernorm")
        q = rope(heads(h @ p[a + "self_attn.q_proj.weight"], nh))
        k = rope(heads(h @ p[a + "self_attn.k_proj.weight"], nkv))
        v = heads(h @ p[a + "self_attn.v_proj.weight"], nkv)
        rep = nh // nkv
        x = x + _attention(q, np.repeat(k, rep, 0), np.repeat(v, rep, 0)) @ p[a + "self_attn.o_proj.weight"]
        h = rms(x, a + "post_attention_layernorm")
        g = h @ p[a + "mlp.gate_proj.weight"]
        x = x + (g / (1 + np.exp(-g)) * (h @ p[a + "mlp.up_proj.weight"])) @ p[a + "mlp.down_proj.weight"]
    return rms(x, "model.norm") @ p["lm_head.weight"]


def logits(p, cfg, ids) -> np.ndarray:
    """[len(ids), vocab] float64."""
    ids = np.asarray(ids, np.int64)
    return _gpt2(p, cfg, ids) if cfg["model_type"] == "gpt2" else _llama(p, cfg, ids)


def greedy(p, cfg, prompt, max_new_tokens: int) -> list:
    seq = list(prompt)
    for _ in range(max_new_tokens):
        seq.append(int(np.argmax(logits(p, cfg, seq)[-1])))
    return seq[len(prompt):]
