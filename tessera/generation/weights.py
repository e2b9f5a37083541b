"""A decoder's configuration and weights read from its ONNX model, for the decoding step.

The configuration is Hugging Face's config.json (the keys of GPT2Config or LlamaConfig): passed as a
dict or a path, else the model's metadata_props["transformers_config"] (tessera.zoo's decoders carry
it), else config.json beside the model file (where optimum writes it). The weights are the model's
initializers under their parameter names (GPT-2: h.{i}.attn.c_attn.weight, with or without the
"transformer." prefix; LLaMA: model.layers.{i}.self_attn.q_proj.weight, ...). A projection's
orientation is read from the node that uses it: MatMul(x, W) stores it [in, out], MatMul(x,
Transpose(W)) or Gemm(transB=1) [out, in]. Every matrix is returned [out, in] (rows contiguous, what
the decoding step streams); the query, key and value projections as one matrix, and LLaMA's gate and
up projections as one (gate rows first).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import TesseraError
from ..frontend.onnx import tensor_to_array

CONFIG_KEY = "transformers_config"     # as tessera.zoo.decoder writes it
ARCHS = ("gpt2", "llama")


@dataclass(frozen=True)
class DecoderConfig:
    """What the decoding step needs to know of a model beyond its weights."""

    arch: str                 # "gpt2" or "llama"
    n_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int                  # the MLP's inner width
    vocab: int
    max_positions: int
    eps: float                # the norms' epsilon
    rope_theta: float = 0.0   # LLaMA's rotary base (0: no rotary embeddings)

    @staticmethod
    def from_transformers(cfg: dict) -> "DecoderConfig":
        """From config.json's keys (GPT2Config or LlamaConfig)."""
        kind = cfg.get("model_type")
        try:
            if kind == "gpt2":
                hidden, heads = int(cfg["n_embd"]), int(cfg["n_head"])
                return DecoderConfig("gpt2", int(cfg["n_layer"]), hidden, heads, heads, hidden // heads,
                                     int(cfg.get("n_inner") or 4 * hidden), int(cfg["vocab_size"]),
                                     int(cfg["n_positions"]), float(cfg.get("layer_norm_epsilon", 1e-5)))
            if kind == "llama":
                hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
                if cfg.get("hidden_act", "silu") != "silu":
                    raise TesseraError(f"decoder config: hidden_act {cfg['hidden_act']!r} (the decoding step "
                                       f"runs LLaMA's silu)")
                if cfg.get("rope_scaling") or cfg.get("attention_bias") or cfg.get("mlp_bias"):
                    raise TesseraError("decoder config: rope_scaling, attention_bias and mlp_bias are not supported")
                dh = int(cfg.get("head_dim") or hidden // heads)
                return DecoderConfig("llama", int(cfg["num_hidden_layers"]), hidden, heads,
                                     int(cfg.get("num_key_value_heads") or heads), dh, int(cfg["intermediate_size"]),
                                     int(cfg["vocab_size"]), int(cfg["max_position_embeddings"]),
                                     float(cfg.get("rms_norm_eps", 1e-6)), float(cfg.get("rope_theta", 10000.0)))
        except (KeyError, TypeError, ValueError) as e:
            raise TesseraError(f"decoder config ({kind}): missing or bad entry {e}") from None
        raise TesseraError(f"decoder config: model_type {kind!r} is not one the decoding step runs "
                           f"({', '.join(ARCHS)})")

    def check(self):
        sizes = dict(n_layers=self.n_layers, hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads,
                     head_dim=self.head_dim, ffn=self.ffn, vocab=self.vocab, max_positions=self.max_positions)
        bad = [f"{k}={v}" for k, v in sizes.items() if v <= 0]
        if bad or self.heads % self.kv_heads or (self.arch == "llama" and self.head_dim % 2):
            raise TesseraError(f"decoder config: sizes {sizes} are not a decoder's (positive; heads a multiple of "
                               f"kv_heads; an even head size with rotary embeddings)")
        return self


@dataclass
class LayerWeights:
    """One layer; matrices [out, in] float32, None where the architecture has no such tensor."""

    norm1: np.ndarray
    norm1_bias: np.ndarray | None
    qkv: np.ndarray                    # [(heads + 2 kv_heads) * head_dim, hidden]
    qkv_bias: np.ndarray | None
    out: np.ndarray                    # [hidden, heads * head_dim]
    out_bias: np.ndarray | None
    norm2: np.ndarray
    norm2_bias: np.ndarray | None
    up: np.ndarray                     # gpt2: [ffn, hidden]; llama: gate then up, [2 ffn, hidden]
    up_bias: np.ndarray | None
    down: np.ndarray                   # [hidden, ffn]
    down_bias: np.ndarray | None


@dataclass
class DecoderWeights:
    config: DecoderConfig
    embed: np.ndarray                  # [vocab, hidden]
    pos_embed: np.ndarray | None       # GPT-2's learned positions [max_positions, hidden]
    inv_freq: np.ndarray | None        # LLaMA's rotary frequencies [head_dim / 2]
    layers: list = field(default_factory=list)
    norm: np.ndarray | None = None
    norm_bias: np.ndarray | None = None
    head: np.ndarray | None = None     # [vocab, hidden]; GPT-2's is `embed` itself (tied)


# ---------------------------------------------------------------------------------------------
def load_config(model, config=None, path: str | None = None) -> DecoderConfig:
    """The DecoderConfig of an onnx.ModelProto: `config` (a dict, or a path to config.json), else its
    metadata, else config.json beside `path` (the model file)."""
    if isinstance(config, (str, os.PathLike)):
        config = _read_json(os.fspath(config))
    if config is None:
        text = next((p.value for p in model.metadata_props if p.key == CONFIG_KEY), None)
        if text is not None:
            config = _parse_json(text, f"metadata_props[{CONFIG_KEY!r}]")
    if config is None and path is not None:
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        if os.path.isfile(beside):
            config = _read_json(beside)
    if config is None:
        raise TesseraError("the decoder's configuration is unknown: pass config= (a dict or the path of its "
                           "config.json), put config.json beside the model, or set the model's "
                           f"metadata_props[{CONFIG_KEY!r}]")
    if not isinstance(config, dict):
        raise TesseraError(f"decoder config: expected a dict (config.json), got {type(config).__name__}")
    return DecoderConfig.from_transformers(config).check()


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return _parse_json(f.read(), path)
    except OSError as e:
        raise TesseraError(f"cannot read the decoder config {path}: {e}") from None


def _parse_json(text: str, where: str):
    try:
        return json.loads(text)
    except ValueError as e:
        raise TesseraError(f"decoder config {where}: not JSON ({e})") from None


class _Initializers:
    """The model's initializers by name (as float32 arrays), with the orientation of projections."""

    def __init__(self, model):
        self.arrays = {t.name: t for t in model.graph.initializer}
        self.users: dict = {}
        for n in model.graph.node:
            for i, name in enumerate(n.input):
                self.users.setdefault(name, []).append((n, i))
        self.prefix = ""

    def name(self, key: str) -> str | None:
        for cand in (self.prefix + key, key):
            if cand in self.arrays:
                return cand
        return None

    def _array(self, name: str) -> np.ndarray:
        """Initializer `name` as float32; one stored as integers (a quantized model's int8 codes, which
        a DequantizeLinear scales) is refused rather than read as the weights' values."""
        # (the frontend's reader: malformed data refused, external data never read from the working
        # directory; a model loaded from its path has its external data in already)
        a = tensor_to_array(self.arrays[name], f"the decoder's weight {name!r}")
        if a.dtype.kind in "biu":
            raise TesseraError(f"the decoder's weight {name!r} is stored as {a.dtype}, not floating point (the "
                               f"decoding step reads float weights; weights='int8' quantizes them itself)")
        return a.astype(np.float32, copy=False)

    def get(self, key: str, shape: tuple, optional: bool = False) -> np.ndarray | None:
        name = self.name(key)
        if name is None:
            if optional:
                return None
            raise TesseraError(f"the decoder's weight {self.prefix + key!r} is not among the model's initializers "
                               f"(the decoding step reads the weights by their parameter names)")
        a = np.ascontiguousarray(self._array(name))
        if a.shape != tuple(shape):
            raise TesseraError(f"the decoder's weight {name!r} has shape {a.shape}; the configuration says {shape}")
        return a

    def matrix(self, key: str, n_in: int, n_out: int) -> np.ndarray:
        """Projection `key` as [out, in] (see the module docstring)."""
        name = self.name(key)
        if name is None:
            return self.get(key, (n_in, n_out))         # (raises, naming it)
        a = self._array(name)
        stored = self._orientation(name, a.shape, n_in, n_out)
        if stored == "in_out":
            return np.ascontiguousarray(a.T)
        return np.ascontiguousarray(a)

    def _orientation(self, name: str, shape, n_in: int, n_out: int) -> str:
        if shape not in ((n_in, n_out), (n_out, n_in)):
            raise TesseraError(f"the decoder's weight {name!r} has shape {shape}; the configuration says "
                               f"{(n_in, n_out)} (or transposed)")
        if n_in != n_out:
            return "in_out" if shape == (n_in, n_out) else "out_in"
        for node, i in self.users.get(name, []):
            if node.op_type == "MatMul" and i == 1:
                return "in_out"
            if node.op_type == "Gemm" and i == 1:
                trans = next((a.i for a in node.attribute if a.name == "transB"), 0)
                return "out_in" if trans else "in_out"
            if node.op_type == "Transpose" and all(u.op_type == "MatMul" and j == 1
                                                   for u, j in self.users.get(node.output[0], [])):
                return "out_in"
        raise TesseraError(f"the decoder's square weight {name!r}: no MatMul or Gemm uses it in a way that says "
                           f"whether it is stored [in, out] or [out, in]")


def read_weights(model, config: DecoderConfig) -> DecoderWeights:
    """The weights of `model` (an onnx.ModelProto) for `config`'s architecture."""
    init = _Initializers(model)
    c = config
    H, dh = c.hidden, c.head_dim
    if c.arch == "gpt2":
        init.prefix = "transformer." if "transformer.wte.weight" in init.arrays else ""
        wte = init.get("wte.weight", (c.vocab, H))
        w = DecoderWeights(c, wte, init.get("wpe.weight", (c.max_positions, H)), None)
        for i in range(c.n_layers):
            p = f"h.{i}."
            w.layers.append(LayerWeights(
                init.get(p + "ln_1.weight", (H,)), init.get(p + "ln_1.bias", (H,)),
                init.matrix(p + "attn.c_attn.weight", H, 3 * H), init.get(p + "attn.c_attn.bias", (3 * H,)),
                init.matrix(p + "attn.c_proj.weight", H, H), init.get(p + "attn.c_proj.bias", (H,)),
                init.get(p + "ln_2.weight", (H,)), init.get(p + "ln_2.bias", (H,)),
                init.matrix(p + "mlp.c_fc.weight", H, c.ffn), init.get(p + "mlp.c_fc.bias", (c.ffn,)),
                init.matrix(p + "mlp.c_proj.weight", c.ffn, H), init.get(p + "mlp.c_proj.bias", (H,))))
        w.norm, w.norm_bias = init.get("ln_f.weight", (H,)), init.get("ln_f.bias", (H,))
        w.head = wte
        return w
    nq, nkv = c.heads * dh, c.kv_heads * dh
    inv = init.get("model.rotary_emb.inv_freq", (dh // 2,), optional=True)
    if inv is None:
        inv = (1.0 / (c.rope_theta ** (np.arange(0, dh, 2, dtype=np.float64) / dh))).astype(np.float32)
    w = DecoderWeights(c, init.get("model.embed_tokens.weight", (c.vocab, H)), None, inv)
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        qkv = np.concatenate([init.matrix(p + f"self_attn.{x}_proj.weight", H, n)
                              for x, n in (("q", nq), ("k", nkv), ("v", nkv))])
        up = np.concatenate([init.matrix(p + f"mlp.{x}_proj.weight", H, c.ffn) for x in ("gate", "up")])
        w.layers.append(LayerWeights(
            init.get(p + "input_layernorm.weight", (H,)), None, qkv, None,
            init.matrix(p + "self_attn.o_proj.weight", nq, H), None,
            init.get(p + "post_attention_layernorm.weight", (H,)), None,
            up, None, init.matrix(p + "mlp.down_proj.weight", c.ffn, H), None))
    w.norm = init.get("model.norm.weight", (H,))
    w.head = init.matrix("lm_head.weight", H, c.vocab) if init.name("lm_head.weight") else w.embed
    return w
