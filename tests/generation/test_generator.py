"""tessera.generation.Generator on the zoo decoders (GPT-2 and LLaMA-style, small, random weights): greedy
tokens identical to a numpy reference for single prompts and batches of different lengths, the KV cache
allocated once and written in place, the decoding step against onnxruntime on every x86 level, int8
weights within a stated tolerance of float32, seeded sampling, stop tokens, refusals."""
import numpy as np
import pytest

import tessera
from tessera import zoo
from tessera.errors import TesseraError
from tessera.generation import Generator
from tessera.generation.engine import DecodeEngine
from tessera.generation import generator as generator_module
from tessera.generation.generator import last_position_logits
from tessera.generation.weights import load_config, read_weights

from decoder_reference import greedy, logits, params_of

ort = pytest.importorskip("onnxruntime")

SMALL = {"gpt2_decoder": dict(n_layers=2, hidden=64, heads=4, vocab=300, n_positions=64),
         "llama_decoder": dict(n_layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=300, max_position=64)}
TARGET = "c -num-threads=2"


@pytest.fixture(scope="module", params=sorted(SMALL))
def model(request):
    return zoo.get_model(request.param, batch="batch_size", **SMALL[request.param])


@pytest.fixture(scope="module")
def gen(model):
    return Generator(model, target=TARGET)


def _ort(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _ort_feeds(model, ids):
    """The with-past model's inputs for one sequence `ids` and an empty past."""
    c = load_config(model)
    T = len(ids)
    f = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, T), np.int64),
         "position_ids": np.arange(T, dtype=np.int64)[None]}
    for i in range(c.n_layers):
        for kv in ("key", "value"):
            f[f"past_key_values.{i}.{kv}"] = np.zeros((1, c.kv_heads, 0, c.head_dim), np.float32)
    return f


def test_greedy_tokens_match_the_numpy_reference(model, gen):
    p, cfg = params_of(model)
    for prompts in ([[7]], [[3, 141, 59, 26, 5, 35, 89, 79, 32]], [[11, 2], [5, 6, 290, 8, 9, 10], [42, 17, 3]]):
        out = gen.generate(prompts, max_new_tokens=14)
        assert out.decode_steps == 13
        for prompt, got in zip(prompts, out.tokens):
            assert got == greedy(p, cfg, prompt, 14), f"prompt {prompt}"


def test_the_cache_is_allocated_once_and_each_step_writes_its_position_in_place(model, gen):
    prompt = [4, 8, 15, 16, 23]
    seen = []

    def on_step(step, tokens):
        seen.append((id(gen.cache_k), id(gen.cache_v), gen.cache_k.ctypes.data, gen.cache_v.ctypes.data))

    out = gen.generate(prompt, max_new_tokens=9, on_step=on_step)
    assert len(seen) == 9 and len(set(seen)) == 1
    # every position the steps wrote holds the key and value the model gives for the whole sequence
    seq = prompt + out.tokens[0][:-1]
    want = _ort(model).run(None, _ort_feeds(model, seq))
    c = gen.config
    for i in range(c.n_layers):
        np.testing.assert_allclose(gen.cache_k[i, 0, :, :len(seq)], want[1 + 2 * i][0], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(gen.cache_v[i, 0, :, :len(seq)], want[2 + 2 * i][0], rtol=1e-4, atol=1e-4)
    # the next generation of the same size reuses the buffers
    gen.generate([1, 2, 3, 4, 5], max_new_tokens=9, on_step=on_step)
    assert len(set(seen)) == 1


def _one_step(model, engine, batch=2, past=6):
    """Logits of the engine's step and onnxruntime's for `past` random cached positions + one token."""
    c = engine.config
    rng = np.random.default_rng(1)
    ids = rng.integers(0, c.vocab, (batch, 1))
    f = {"input_ids": ids, "attention_mask": np.ones((batch, past + 1), np.int64),
         "position_ids": np.full((batch, 1), past, np.int64)}
    shape = (c.n_layers, batch, c.kv_heads, past + 4, c.head_dim)
    ck, cv = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    for i in range(c.n_layers):
        for kv, cache in (("key", ck), ("value", cv)):
            cache[i, :, :, :past] = f[f"past_key_values.{i}.{kv}"] = \
                rng.standard_normal((batch, c.kv_heads, past, c.head_dim)).astype(np.float32)
    engine.prepare(batch, past + 4)
    got = np.zeros((batch, c.vocab), np.float32)
    engine.step(ck, cv, ids[:, 0].copy(), np.zeros(batch, np.int64), past, got)
    want = _ort(model).run(None, f)
    return got, want[0][:, 0], (ck, cv, want)


@pytest.mark.parametrize("level", ["isa", "c -mcpu=x86-64-v2"])
def test_the_decoding_step_matches_onnxruntime_on_every_x86_level(model, isa_target, level):
    target = isa_target if level == "isa" else level
    c = load_config(model)
    engine = DecodeEngine(read_weights(model, c), f"{target} -num-threads=2")
    got, want, (ck, cv, outs) = _one_step(model, engine)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for i in range(c.n_layers):         # this position's keys and values went into the cache
        np.testing.assert_allclose(ck[i, :, :, :7], outs[1 + 2 * i], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(cv[i, :, :, :7], outs[2 + 2 * i], rtol=1e-4, atol=1e-4)


INT8_TOLERANCE = 0.02    # max |int8 logit - float32 logit| over the float32 logits' range (seen: 0.008-0.009)


def test_int8_weights_give_logits_within_tolerance_of_float32(model):
    c = load_config(model)
    w = read_weights(model, c)
    f32 = DecodeEngine(w, TARGET)
    q = DecodeEngine(w, TARGET, "int8")
    assert q.wq.nbytes > 0 and q.wf.nbytes < f32.wf.nbytes
    ref, _, _ = _one_step(model, f32)
    got, _, _ = _one_step(model, q)
    err = np.abs(got - ref).max() / (ref.max() - ref.min())
    assert 0 < err <= INT8_TOLERANCE, err


def test_seeded_sampling_is_reproducible_and_stays_in_the_top_k(model, gen):
    p, cfg = params_of(model)
    prompt = [9, 8, 7]
    a = gen.generate(prompt, 12, do_sample=True, top_k=5, temperature=1.5, seed=7).tokens[0]
    assert a == gen.generate(prompt, 12, do_sample=True, top_k=5, temperature=1.5, seed=7).tokens[0]
    assert a != gen.generate(prompt, 12, do_sample=True, top_k=5, temperature=1.5, seed=8).tokens[0]
    seq = prompt + a
    for j, tok in enumerate(a):                     # each token is among the 5 most likely after its prefix
        top5 = np.argsort(logits(p, cfg, seq[:len(prompt) + j])[-1])[-5:]
        assert tok in top5
    greedy_tokens = greedy(p, cfg, prompt, 12)
    assert gen.generate(prompt, 12, do_sample=True, top_k=1, seed=3).tokens[0] == greedy_tokens
    assert gen.generate(prompt, 12, do_sample=True, top_p=1e-6, seed=3).tokens[0] == greedy_tokens


def test_a_stop_token_ends_its_row_and_the_others_go_on(model, gen):
    first = gen.generate([[5, 6, 7], [1, 2]], 10).tokens
    stop = first[0][3]
    k = first[0].index(stop)
    out = gen.generate([[5, 6, 7], [1, 2]], 10, stop_tokens=[stop])
    assert out.tokens[0] == first[0][:k + 1]
    other = first[1][:first[1].index(stop) + 1] if stop in first[1] else first[1]
    assert out.tokens[1] == other


def test_a_model_without_past_inputs_generates_the_same_tokens(model, gen):
    name = "gpt2_decoder" if load_config(model).arch == "gpt2" else "llama_decoder"
    plain = Generator(zoo.get_model(name, batch="batch_size", with_past=False, **SMALL[name]), target=TARGET)
    prompts = [[3, 4, 5, 6], [7]]
    assert plain.generate(prompts, 8).tokens == gen.generate(prompts, 8).tokens


def test_generate_refuses_what_it_cannot_do(model, gen):
    with pytest.raises(TesseraError, match="outside the vocabulary"):
        gen.generate([1, 300], 4)
    with pytest.raises(TesseraError, match="positions"):
        gen.generate(list(range(60)), 10)
    with pytest.raises(TesseraError, match="max_new_tokens"):
        gen.generate([1, 2], 0)
    with pytest.raises(TesseraError, match="non-empty"):
        gen.generate([[1], []], 3)
    with pytest.raises(TesseraError, match="top_p"):
        gen.generate([1], 3, do_sample=True, top_p=0)
    with pytest.raises(TesseraError, match="weights"):
        Generator(model, weights="int4")


def test_a_model_without_a_configuration_is_refused_with_the_ways_to_give_one(model):
    bare = type(model)()
    bare.CopyFrom(model)
    del bare.metadata_props[:]
    with pytest.raises(TesseraError, match="config.json"):
        Generator(bare, target=TARGET)
    with pytest.raises(TesseraError, match="model_type 'bert'"):
        Generator(bare, target=TARGET, config={"model_type": "bert"})


def test_a_weight_stored_as_integers_is_refused_not_read_as_values(model):
    """A quantized export's int8 codes (scaled by a DequantizeLinear) are not the weights: read_weights
    refuses them rather than casting the codes to float."""
    from onnx import numpy_helper
    q = type(model)()
    q.CopyFrom(model)
    c = load_config(q)
    t = next(t for t in q.graph.initializer if t.name.endswith(("c_fc.weight", "up_proj.weight")))
    t.CopyFrom(numpy_helper.from_array(np.ones(tuple(t.dims), np.int8), t.name))
    with pytest.raises(TesseraError, match="stored as int8, not floating point"):
        read_weights(q, c)
    want = read_weights(model, c)                        # a half-precision weight is read as its values
    layer = int(next(part for part in t.name.split(".") if part.isdigit()))
    h = numpy_helper.to_array(next(u for u in model.graph.initializer if u.name == t.name)).astype(np.float16)
    t.CopyFrom(numpy_helper.from_array(h, t.name))
    got = read_weights(q, c).layers[layer].up
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want.layers[layer].up, rtol=1e-3, atol=1e-4)


def test_external_weights_are_read_beside_the_model_never_from_the_working_directory(model, tmp_path, monkeypatch):
    import onnx
    path = tmp_path / "decoder.onnx"
    copy = type(model)()
    copy.CopyFrom(model)                              # (saving with external data changes the proto it saves)
    onnx.save(copy, str(path), save_as_external_data=True, location="decoder.data", size_threshold=0)
    c = load_config(model)
    loaded = read_weights(generator_module._load(str(path))[0], c)         # read beside the file
    np.testing.assert_array_equal(loaded.layers[0].qkv, read_weights(model, c).layers[0].qkv)
    bare = onnx.load(str(path), load_external_data=False)
    monkeypatch.chdir(tmp_path)                       # the data file is in the working directory: not read
    with pytest.raises(TesseraError, match="external file 'decoder.data'"):
        read_weights(bare, c)


def test_tessera_generate_is_the_generators_greedy_loop(model):
    p, cfg = params_of(model)
    out = tessera.generate(model, [2, 3], max_new_tokens=5, target=TARGET)
    assert out.tokens == [greedy(p, cfg, [2, 3], 5)]
    assert out.tokens_per_second > 0 and out.ms_per_token > 0


def test_the_prefill_model_computes_the_last_positions_logits_only(model):
    cut, ok = last_position_logits(model)
    assert ok and cut is not model
    ids = [[3, 141, 59, 26, 5], [7, 8, 9, 10, 11]]
    feeds = _ort_feeds(model, ids[0])
    feeds["input_ids"] = np.array(ids, np.int64)
    for k in list(feeds):
        if k.startswith("past_key_values"):
            feeds[k] = np.zeros((2,) + feeds[k].shape[1:], np.float32)
    feeds["attention_mask"] = np.ones((2, 5), np.int64)
    feeds["position_ids"] = np.tile(np.arange(5, dtype=np.int64), (2, 1))
    full = _ort(model).run(None, feeds)
    last = _ort(cut).run(None, feeds)
    assert last[0].shape == (2, 1, full[0].shape[2])
    np.testing.assert_allclose(last[0][:, 0], full[0][:, -1], rtol=1e-5, atol=1e-5)
    for a, b in zip(full[1:], last[1:]):                 # the presents are the model's own
        np.testing.assert_array_equal(a, b)
    # logits not from a MatMul on a weight: the model is kept whole
    other = type(model)()
    other.CopyFrom(model)
    node = next(n for n in other.graph.node if "logits" in n.output)
    node.op_type, node.input[0] = "Identity", other.graph.input[0].name
    assert last_position_logits(other) == (other, False)


@pytest.mark.parametrize("name, sizes", [
    ("llama_decoder", dict(n_layers=2, hidden=72, heads=4, kv_heads=2, ffn=100, vocab=301, max_position=64)),
    ("gpt2_decoder", dict(n_layers=2, hidden=52, heads=2, vocab=301, n_positions=64)),
])
def test_sizes_off_the_vector_width_generate_the_reference_tokens(name, sizes):
    """Rows, MLP widths and head sizes that are not multiples of 16 lanes: the products', activations' and
    softmax's scalar tails."""
    m = zoo.get_model(name, batch="batch_size", **sizes)
    p, cfg = params_of(m)
    for weights in ("float32", "int8"):
        out = Generator(m, target=TARGET, weights=weights).generate([[5, 17, 200], [9]], max_new_tokens=10)
        if weights == "float32":
            assert out.tokens == [greedy(p, cfg, [5, 17, 200], 10), greedy(p, cfg, [9], 10)]
        else:
            assert [len(t) for t in out.tokens] == [10, 10]
