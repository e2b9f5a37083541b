"""The offline model zoo: real architectures as ONNX models with seeded random weights, no download.

    import tessera
    model = tessera.zoo.get_model("resnet18")                 # an onnx.ModelProto (opset 17)
    inputs = tessera.zoo.sample_input("resnet18")             # {"input": float32 [1, 3, 224, 224]}
    graph, params = tessera.frontend.from_onnx(model)
    y = tessera.compile(graph, params).run(inputs)[0]

| name          | inputs                                                        | outputs                  |
| ------------- | ------------------------------------------------------------- | ------------------------ |
| resnet18      | input f32 [N, 3, S, S] (S = image_size, 224)                   | output f32 [N, classes]  |
| resnet50      | input f32 [N, 3, S, S]                                         | output f32 [N, classes]  |
| mobilenet_v2  | input f32 [N, 3, S, S]                                         | output f32 [N, classes]  |
| bert_base     | input_ids, attention_mask, token_type_ids i64 [N, L] (L = 128) | last_hidden_state f32 [N, L, H], pooler_output f32 [N, H] |
| gpt2_block    | hidden_states f32 [N, L, H]                                    | output f32 [N, L, H]     |
| gpt2_small    | input_ids i64 [N, L]                                           | logits f32 [N, L, vocab] |
| gpt2_decoder  | input_ids, attention_mask, position_ids i64, past_key_values.i.key/value f32 [N, H, P, D] | logits, present.i.key/value [N, H, P + L, D] |
| llama_decoder | as gpt2_decoder (key/value heads kv_heads)                     | as gpt2_decoder          |

Every builder takes `batch` (an int, or a name such as "N" for a symbolic batch dimension), `seed`
(the same seed gives the same weights), and its own size options (`model_info(name).options`), so
tests can build the same architecture small. The graphs use the ops and layout torch.onnx.export
writes at opset 17 (see tessera/zoo/cnn.py and transformer.py). The decoders (decoder.py) are the form
exporters write for generation with a KV cache: every sequence length symbolic (L the new tokens, P
the past ones); their sample input has a past of 4 positions (with_past=True).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import TesseraError
from . import cnn, decoder, transformer

__all__ = ["get_model", "list_models", "sample_input", "model_info", "ModelInfo", "TensorSpec"]


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: name, shape (ints, or the batch's name when symbolic) and dtype."""

    name: str
    shape: tuple
    dtype: str


@dataclass(frozen=True)
class ModelInfo:
    """What `model_info` tells of a zoo model: a summary, its options with defaults, its inputs and outputs."""

    name: str
    summary: str
    options: dict = field(default_factory=dict)
    inputs: tuple = ()
    outputs: tuple = ()


@dataclass(frozen=True)
class _Entry:
    build: Callable
    summary: str
    io: Callable       # (batch, options) -> (inputs, outputs) as tuples of TensorSpec
    sample: Callable   # (rng, batch, options) -> {input name: array}


def _image_io(batch, o):
    s = o["image_size"]
    return ((TensorSpec("input", (batch, 3, s, s), "float32"),),
            (TensorSpec("output", (batch, o["num_classes"]), "float32"),))


def _image_sample(rng, batch, o):
    s = o["image_size"]
    return {"input": rng.standard_normal((batch, 3, s, s), dtype=np.float32)}


def _bert_io(batch, o):
    L, H = o["seq_len"], o["hidden"]
    ins = tuple(TensorSpec(n, (batch, L), "int64") for n in ("input_ids", "attention_mask", "token_type_ids"))
    outs = (TensorSpec("last_hidden_state", (batch, L, H), "float32"),)
    if o["pooler"]:
        outs += (TensorSpec("pooler_output", (batch, H), "float32"),)
    return ins, outs


def _bert_sample(rng, batch, o):
    """Token ids, a padding mask (each row's tail padded by a random amount, the first row not at
    all) and sentence-pair token types (a random split point per row)."""
    L = o["seq_len"]
    ids = rng.integers(0, o["vocab"], (batch, L), dtype=np.int64)
    mask = np.ones((batch, L), dtype=np.int64)
    types = np.zeros((batch, L), dtype=np.int64)
    for r in range(batch):
        pad = 0 if r == 0 else int(rng.integers(0, max(1, L // 4)))
        if pad:
            mask[r, L - pad:] = 0
        types[r, int(rng.integers(1, L + 1)):] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _gpt2_block_io(batch, o):
    shape = (batch, o["seq_len"], o["hidden"])
    return (TensorSpec("hidden_states", shape, "float32"),), (TensorSpec("output", shape, "float32"),)


def _gpt2_block_sample(rng, batch, o):
    return {"hidden_states": rng.standard_normal((batch, o["seq_len"], o["hidden"]), dtype=np.float32)}


def _gpt2_io(batch, o):
    L = o["seq_len"]
    return ((TensorSpec("input_ids", (batch, L), "int64"),),
            (TensorSpec("logits", (batch, L, o["vocab"]), "float32"),))


def _gpt2_sample(rng, batch, o):
    return {"input_ids": rng.integers(0, o["vocab"], (batch, o["seq_len"]), dtype=np.int64)}


def _decoder_dims(o):
    """(key/value heads, head size) of a decoder's options."""
    heads = o["heads"]
    return o.get("kv_heads", heads), o["hidden"] // heads


_SAMPLE_PAST, _SAMPLE_NEW = 4, 8     # the past and new positions of a decoder's sample input


def _decoder_io(batch, o):
    kvh, dh = _decoder_dims(o)
    past, total = decoder.PAST, (decoder.TOTAL if o["with_past"] else decoder.SEQ)
    ins = (TensorSpec("input_ids", (batch, decoder.SEQ), "int64"),
           TensorSpec("attention_mask", (batch, total), "int64"),
           TensorSpec("position_ids", (batch, decoder.SEQ), "int64"))
    if o["with_past"]:
        ins += tuple(TensorSpec(f"past_key_values.{i}.{kv}", (batch, kvh, past, dh), "float32")
                     for i in range(o["n_layers"]) for kv in ("key", "value"))
    outs = (TensorSpec("logits", (batch, decoder.SEQ, o["vocab"]), "float32"),)
    outs += tuple(TensorSpec(f"present.{i}.{kv}", (batch, kvh, total, dh), "float32")
                  for i in range(o["n_layers"]) for kv in ("key", "value"))
    return ins, outs


def _decoder_sample(rng, batch, o):
    kvh, dh = _decoder_dims(o)
    p = _SAMPLE_PAST if o["with_past"] else 0
    feeds = {"input_ids": rng.integers(0, o["vocab"], (batch, _SAMPLE_NEW), dtype=np.int64),
             "attention_mask": np.ones((batch, p + _SAMPLE_NEW), np.int64),
             "position_ids": np.broadcast_to(np.arange(p, p + _SAMPLE_NEW, dtype=np.int64), (batch, _SAMPLE_NEW)).copy()}
    if o["with_past"]:
        for i in range(o["n_layers"]):
            for kv in ("key", "value"):
                feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((batch, kvh, p, dh), dtype=np.float32)
    return feeds


_MODELS = {
    "resnet18": _Entry(cnn.resnet18, "ResNet-18 image classifier (torchvision layout)", _image_io, _image_sample),
    "resnet50": _Entry(cnn.resnet50, "ResNet-50 v1.5 image classifier (torchvision layout)", _image_io,
                       _image_sample),
    "mobilenet_v2": _Entry(cnn.mobilenet_v2, "MobileNetV2 image classifier (torchvision layout)", _image_io,
                           _image_sample),
    "bert_base": _Entry(transformer.bert_base, "BERT-base encoder, seq 128 (Hugging Face BertModel layout)",
                        _bert_io, _bert_sample),
    "gpt2_block": _Entry(transformer.gpt2_block, "one GPT-2 decoder block, causal (Hugging Face GPT2Block)",
                         _gpt2_block_io, _gpt2_block_sample),
    "gpt2_small": _Entry(transformer.gpt2_small, "GPT-2 small language model (Hugging Face GPT2LMHeadModel)",
                         _gpt2_io, _gpt2_sample),
    "gpt2_decoder": _Entry(decoder.gpt2_decoder, "GPT-2 small with past key/values, for generation with a KV cache",
                           _decoder_io, _decoder_sample),
    "llama_decoder": _Entry(decoder.llama_decoder, "LLaMA-style decoder (RMSNorm, rotary, SwiGLU, grouped-query "
                            "attention) with past key/values", _decoder_io, _decoder_sample),
}


def list_models() -> list:
    """The names get_model accepts."""
    return sorted(_MODELS)


def _entry(name: str) -> _Entry:
    e = _MODELS.get(name) if isinstance(name, str) else None
    if e is None:
        raise TesseraError(f"tessera.zoo has no model {name!r}; it has {', '.join(list_models())}")
    return e


def _options(name: str, e: _Entry, kw: dict) -> dict:
    """The builder's size options with defaults, `kw` applied; a name it does not take is an error."""
    params = inspect.signature(e.build).parameters
    opts = {k: p.default for k, p in params.items() if k not in ("batch", "seed")}
    unknown = sorted(set(kw) - set(opts))
    if unknown:
        raise TesseraError(f"tessera.zoo model {name!r} has no option {', '.join(map(repr, unknown))}; "
                           f"its options are {', '.join(f'{k}={v!r}' for k, v in opts.items())}")
    for k, v in kw.items():
        d = opts[k]
        if isinstance(d, bool) and not isinstance(v, (bool, np.bool_)):
            raise TesseraError(f"tessera.zoo model {name!r}: option {k} must be True or False, got {v!r}")
        if isinstance(d, int) and not isinstance(d, bool) and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                                                or v <= 0):
            raise TesseraError(f"tessera.zoo model {name!r}: option {k} must be a positive int, got {v!r}")
        if isinstance(d, float) and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise TesseraError(f"tessera.zoo model {name!r}: option {k} must be a positive number, got {v!r}")
    opts.update(kw)
    return opts


def _check_batch(batch, symbolic_ok: bool = True):
    if isinstance(batch, (int, np.integer)) and not isinstance(batch, bool) and batch > 0:
        return int(batch)
    if symbolic_ok and isinstance(batch, str) and batch.isidentifier():
        return batch
    allowed = "a positive int or a dimension name such as \"N\"" if symbolic_ok else "a positive int"
    raise TesseraError(f"tessera.zoo: batch must be {allowed}, got {batch!r}")


def get_model(name: str, batch=1, seed: int = 0, **options):
    """The zoo model `name` as an onnx.ModelProto with weights drawn from `seed`.

    batch: an int, or a name ("N") for a symbolic batch dimension. options: the model's size
    options (see model_info(name).options), e.g. get_model("bert_base", n_layers=2, seq_len=32).
    """
    e = _entry(name)
    batch = _check_batch(batch)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TesseraError(f"tessera.zoo: seed must be a non-negative int, got {seed!r}")
    return e.build(batch=batch, seed=int(seed), **_options(name, e, options))


def sample_input(name: str, batch: int = 1, seed: int = 0, **options) -> dict:
    """A realistic input for `name` ({input name: numpy array}); pass the size options given to get_model."""
    e = _entry(name)
    batch = _check_batch(batch, symbolic_ok=False)
    return e.sample(np.random.default_rng([int(seed), 2]), batch, _options(name, e, options))


def model_info(name: str, batch=1, **options) -> ModelInfo:
    """Summary, options (defaults with `options` applied) and input/output specs of `name`, without building it."""
    e = _entry(name)
    batch = _check_batch(batch)
    opts = _options(name, e, options)
    ins, outs = e.io(batch, opts)
    return ModelInfo(name, e.summary, opts, ins, outs)
