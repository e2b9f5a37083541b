"""Generation with a decoder language model: the prompt through the compiled model, then one token at a
time over a KV cache.

    gen = tessera.Generator("decoder_model.onnx")                # or tessera.zoo.get_model("gpt2_decoder")
    out = gen.generate([[464, 3290, 318]], max_new_tokens=64)     # greedy
    out.tokens, out.tokens_per_second
    out = gen.generate(prompts, 64, do_sample=True, top_k=50, top_p=0.9, seed=0, stop_tokens=[50256])

The model is a decoder in the form transformers' and optimum's exporters write (see tessera.zoo.decoder):
input_ids, attention_mask and position_ids (the last two optional), past_key_values.N.key/value (optional:
a model without them is optimum's decoder_model.onnx), outputs logits and present.N.key/value. Its
architecture (GPT-2 or LLaMA-style) and sizes come from its transformers configuration
(generation.weights.load_config).

Prefill: the prompts, left-padded to the longest (attention_mask 0 on the padding, position ids counted
from each row's first token), run through the model compiled by tessera.compile, once, for every
length, its LM head on the last position only (last_position_logits); the presents fill the first
positions of the cache. Decode: the cache is two float32 arrays
[layers, batch, kv_heads, max_len, head_dim] allocated once per (batch, max_len) and reused; each step
is one call of the compiled decoding step (generation.engine), which writes its position's keys and
values into them in place and attends row b over slots start[b] .. pos (start[b]: the row's padding),
reading every weight once: no allocation, no concatenation, no Python between the kernels. With
weights="int8" the step's matrices are int8 with per-row scales (a quarter of the bytes); the prompt
still runs in float32. A row ends at one of its stop tokens (which is kept); generation ends when
every row has or after max_new_tokens.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import numpy as np

from ..compile_graph import compile as compile_graph
from ..errors import TesseraError
from ..frontend.onnx import from_onnx, load_model
from ..runtime.ndarray import from_numpy
from .engine import WEIGHTS, DecodeEngine
from .sampling import Sampler
from .weights import load_config, read_weights

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_PRESENT = re.compile(r"^present\.(\d+)\.(key|value)$")


@dataclass
class GenerationOutput:
    """What generate returns: per prompt the new tokens, and where the time went."""

    tokens: list                  # per prompt, the generated token ids (a stop token ends a row, kept)
    prompt_lengths: list
    prefill_seconds: float        # the prompts through the compiled model, the cache filled
    decode_seconds: float         # every decoding step, token choice included
    decode_steps: int             # steps run after the prefill (each makes one token per row)

    @property
    def tokens_per_second(self) -> float:
        """Tokens the decoding steps made per second (rows x steps / decode time)."""
        n = len(self.tokens) * self.decode_steps
        return n / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def ms_per_token(self) -> float:
        """Milliseconds per decoding step (one token of every row)."""
        return self.decode_seconds * 1e3 / self.decode_steps if self.decode_steps else float("nan")


def _load(model):
    """(onnx.ModelProto, its path or None), read by the frontend's load_model (external data only from
    the model's folder; a file without a graph refused)."""
    import onnx

    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise TesseraError(f"Generator: model file {path} does not exist")
        return load_model(path), path
    if isinstance(model, onnx.ModelProto):
        return model, None
    raise TesseraError(f"Generator: expected an ONNX model (a path or an onnx.ModelProto), got {type(model).__name__}")


def last_position_logits(proto):
    """(model, True): a copy of the decoder whose LM head reads only the last position, logits [batch, 1,
    vocab] (all generation needs of the prompt: transformers' generate asks its models for the same, and
    the head of a GPT-2 small prompt of 128 tokens is a third of its work); (proto itself, False) when
    the logits are not MatMul(hidden [batch, seq, hidden], a 2-D weight) behind Identity nodes."""
    import onnx
    from onnx import helper

    g = proto.graph
    producer = {o: n for n in g.node for o in n.output}
    inits = {t.name: t for t in g.initializer}
    out = next((o for o in g.output if o.name == "logits"), None)
    if out is None or len(out.type.tensor_type.shape.dim) != 3:
        return proto, False
    node = producer.get("logits")
    while node is not None and node.op_type == "Identity":
        node = producer.get(node.input[0])
    if node is None or node.op_type != "MatMul":
        return proto, False
    w = node.input[1]
    if w not in inits and not (w in producer and producer[w].op_type == "Transpose" and producer[w].input[0] in inits):
        return proto, False
    weight = inits[w] if w in inits else inits[producer[w].input[0]]
    if len(weight.dims) != 2:
        return proto, False
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    hidden, last = node.input[0], "tessera_prefill/last_position"
    g.initializer.append(helper.make_tensor(f"{last}/index", onnx.TensorProto.INT64, [1], [-1]))
    index = next(i for i, n in enumerate(g.node) if n.output == node.output and n.op_type == "MatMul")
    g.node[index].input[0] = last
    g.node.insert(index, helper.make_node("Gather", [hidden, f"{last}/index"], [last], name=last, axis=1))
    dim = next(o for o in g.output if o.name == "logits").type.tensor_type.shape.dim[1]
    dim.Clear()
    dim.dim_value = 1
    return m, True


class Generator:
    """A decoder compiled for generation (see the module docstring).

    model: an ONNX decoder (path or ModelProto); target: a CPU target (default: the host);
    weights: "float32" or "int8" (the decoding step's matrices); config: the transformers
    configuration (a dict or a config.json path) when the model does not carry it.
    """

    def __init__(self, model, target=None, weights: str = "float32", config=None):
        if weights not in WEIGHTS:
            raise TesseraError(f"Generator: weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
        proto, path = _load(model)
        self.config = c = load_config(proto, config, path)
        self._check_interface(proto)
        self.engine = DecodeEngine(read_weights(proto, c), target, weights)
        self.target = self.engine.target
        prefill, self.prefill_last_only = last_position_logits(proto)
        graph, params = from_onnx(prefill)
        self.prefill_model = compile_graph(graph, params, target=self.target)
        self.cache_k = self.cache_v = None

    def _check_interface(self, proto):
        c = self.config
        inits = {t.name for t in proto.graph.initializer}
        inputs = [i.name for i in proto.graph.input if i.name not in inits]
        outputs = [o.name for o in proto.graph.output]
        want_past = {f"past_key_values.{i}.{kv}" for i in range(c.n_layers) for kv in ("key", "value")}
        past = {n for n in inputs if _PAST.match(n)}
        if past and past != want_past:
            raise TesseraError(f"Generator: the model's past inputs {sorted(past)} are not one key and one value for "
                               f"each of its {c.n_layers} layers")
        other = sorted(set(inputs) - past - {"input_ids", "attention_mask", "position_ids"})
        if "input_ids" not in inputs or other:
            raise TesseraError(f"Generator: a decoder takes input_ids (and optionally attention_mask, position_ids, "
                               f"past_key_values.N.key/value); this model's inputs are {inputs}")
        self._inputs, self._has_past = set(inputs), bool(past)
        want_present = [f"present.{i}.{kv}" for i in range(c.n_layers) for kv in ("key", "value")]
        missing = [n for n in ["logits"] + want_present if n not in outputs]
        if missing:
            raise TesseraError(f"Generator: the model has no output {', '.join(missing)} (a decoder returns logits "
                               f"and present.N.key/value for each layer)")
        self._logits = outputs.index("logits")
        self._present = [(outputs.index(f"present.{i}.key"), outputs.index(f"present.{i}.value"))
                         for i in range(c.n_layers)]

    # ------------------------------------------------------------------ the cache
    def _cache_for(self, batch: int, max_len: int):
        c = self.config
        shape = (c.n_layers, batch, c.kv_heads, max_len, c.head_dim)
        if self.cache_k is None or self.cache_k.shape != shape:
            self.cache_k = np.zeros(shape, np.float32)
            self.cache_v = np.zeros(shape, np.float32)
        self.engine.prepare(batch, max_len)
        return self.cache_k, self.cache_v

    # ------------------------------------------------------------------ generation
    def _prompts(self, prompts) -> list:
        if isinstance(prompts, np.ndarray):
            prompts = prompts.tolist()
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise TesseraError("generate: prompts must be a non-empty list of token ids, or a list of such lists")
        if all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in prompts):
            prompts = [prompts]
        out = []
        for r, p in enumerate(prompts):
            if isinstance(p, np.ndarray):
                p = p.tolist()
            if not isinstance(p, (list, tuple)) or not p or not all(
                    isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in p):
                raise TesseraError(f"generate: prompt {r} must be a non-empty list of token ids, got {p!r}")
            bad = [int(t) for t in p if not 0 <= t < self.config.vocab]
            if bad:
                raise TesseraError(f"generate: prompt {r} has token ids {bad[:5]} outside the vocabulary "
                                   f"[0, {self.config.vocab})")
            out.append([int(t) for t in p])
        return out

    def _prefill(self, prompts: list):
        """Run the padded prompts through the compiled model: (last logits [batch, vocab], start [batch])."""
        c = self.config
        batch, S = len(prompts), max(len(p) for p in prompts)
        start = np.array([S - len(p) for p in prompts], np.int64)
        if start.any() and "attention_mask" not in self._inputs:
            raise TesseraError("generate: prompts of different lengths need the model's attention_mask input")
        ids = np.zeros((batch, S), np.int64)
        for r, p in enumerate(prompts):
            ids[r, start[r]:] = p
        cols = np.arange(S, dtype=np.int64)[None, :]
        feeds = {"input_ids": ids}
        if "attention_mask" in self._inputs:
            feeds["attention_mask"] = (cols >= start[:, None]).astype(np.int64)
        if "position_ids" in self._inputs:
            feeds["position_ids"] = np.maximum(cols - start[:, None], 0)
        if self._has_past:
            empty = np.zeros((batch, c.kv_heads, 0, c.head_dim), np.float32)
            for i in range(c.n_layers):
                feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
        outs = self.prefill_model.run(feeds)
        for i, (k, v) in enumerate(self._present):
            self.cache_k[i, :, :, :S] = outs[k]
            self.cache_v[i, :, :, :S] = outs[v]
        return outs[self._logits][:, -1, :], start

    def generate(self, prompts, max_new_tokens: int = 32, *, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed=None, stop_tokens=(), on_step=None) -> GenerationOutput:
        """Continue each prompt (a list of token ids, or a list of such lists: a batch) by up to
        max_new_tokens tokens; see the module docstring. on_step(step, tokens): called after each
        token is chosen (step 0: the prefill's), tokens the int64 array of each row's new token."""
        c = self.config
        prompts = self._prompts(prompts)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
            raise TesseraError(f"generate: max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        stops = {int(t) for t in stop_tokens}
        sampler = Sampler(do_sample, temperature, top_k, top_p, seed)
        S = max(len(p) for p in prompts)
        max_len = S + int(max_new_tokens)
        if max_len > c.max_positions:
            raise TesseraError(f"generate: the longest prompt ({S}) plus max_new_tokens ({max_new_tokens}) is "
                               f"{max_len} positions; the model has {c.max_positions}")
        batch = len(prompts)
        cache_k, cache_v = self._cache_for(batch, max_len)
        t0 = time.perf_counter()
        logits, start = self._prefill(prompts)
        tokens = sampler(logits)
        t1 = time.perf_counter()
        out = [[int(t)] for t in tokens]
        done = np.array([int(t) in stops for t in tokens])
        if on_step is not None:
            on_step(0, tokens)
        step_logits = np.empty((batch, c.vocab), np.float32)
        # the step's arrays wrapped once (sharing memory), so that a step converts only the new tokens
        ck, cv, rows, out_logits = (from_numpy(a) for a in (cache_k, cache_v, start, step_logits))
        steps = 0
        for step in range(1, int(max_new_tokens)):
            if done.all():
                break
            self.engine.step(ck, cv, tokens, rows, S + step - 1, out_logits)
            tokens = sampler(step_logits)
            steps += 1
            for r in range(batch):
                if not done[r]:
                    out[r].append(int(tokens[r]))
                    done[r] = int(tokens[r]) in stops
            if on_step is not None:
                on_step(step, tokens)
        t2 = time.perf_counter()
        return GenerationOutput(out, [len(p) for p in prompts], t1 - t0, t2 - t1, steps)


def generate(model, prompts, max_new_tokens: int = 32, *, target=None, weights: str = "float32", config=None,
             **options) -> GenerationOutput:
    """Generator(model, target, weights, config).generate(prompts, max_new_tokens, **options)."""
    return Generator(model, target=target, weights=weights, config=config).generate(prompts, max_new_tokens,
                                                                                   **options)
