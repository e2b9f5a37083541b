"""The zoo's decoders with past key/values (GPT-2, LLaMA-style), in the exporters' form: valid ONNX, compiled
by tessera once and run at every (batch, past, new) length, padded attention masks included, each output
matching onnxruntime's."""
import json

import numpy as np
import onnx
import pytest

import tessera
from tessera import zoo
from tessera.errors import TesseraError
from tessera.zoo.decoder import CONFIG_KEY

ort = pytest.importorskip("onnxruntime")

SMALL = {"gpt2_decoder": dict(n_layers=2, hidden=64, heads=4, vocab=300, n_positions=64),
         "llama_decoder": dict(n_layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=300, max_position=64)}


def _feeds(name, batch, past, new, rng, pad=0):
    """Inputs with `past` cached and `new` positions; rows after the first have their first `pad`
    positions masked out (left padding, as a batch of prompts of different lengths has)."""
    o = zoo.model_info(name, **SMALL[name]).options
    kvh, dh = o.get("kv_heads", o["heads"]), o["hidden"] // o["heads"]
    mask = np.ones((batch, past + new), np.int64)
    mask[1:, :pad] = 0
    f = {"input_ids": rng.integers(0, o["vocab"], (batch, new)),
         "attention_mask": mask,
         "position_ids": np.broadcast_to(np.arange(past, past + new), (batch, new)).copy()}
    for i in range(o["n_layers"]):
        for kv in ("key", "value"):
            f[f"past_key_values.{i}.{kv}"] = rng.standard_normal((batch, kvh, past, dh)).astype(np.float32)
    return f


@pytest.mark.parametrize("name", sorted(SMALL))
def test_decoder_with_past_compiled_once_matches_onnxruntime_at_every_length(name):
    model = zoo.get_model(name, batch="batch_size", **SMALL[name])
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    exe = tessera.compile(*tessera.frontend.from_onnx(model))
    assert exe.kind == "graph"                 # one compile: symbolic lengths, no specialization
    rng = np.random.default_rng(3)
    for batch, past, new, pad in [(1, 0, 5, 0), (1, 7, 1, 0), (3, 4, 2, 3), (2, 9, 3, 0), (2, 0, 6, 2)]:
        f = _feeds(name, batch, past, new, rng, pad)
        got, want = exe.run(f), sess.run(None, f)
        assert [g.shape for g in got] == [w.shape for w in want]
        for out, g, w in zip(model.graph.output, got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} {out.name} batch {batch} past {past} new {new} pad {pad}")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_decoder_without_past_returns_the_prompts_keys_and_values(name):
    """with_past=False (optimum's decoder_model.onnx): no past inputs; the presents equal what the
    model with past returns for an empty past."""
    kw = SMALL[name]
    plain = zoo.get_model(name, with_past=False, **kw)
    assert not [i.name for i in plain.graph.input if i.name.startswith("past_key_values")]
    exe = tessera.compile(*tessera.frontend.from_onnx(plain))
    full = ort.InferenceSession(zoo.get_model(name, **kw).SerializeToString(), providers=["CPUExecutionProvider"])
    f = _feeds(name, 1, 0, 6, np.random.default_rng(4))
    got = exe.run({k: f[k] for k in ("input_ids", "attention_mask", "position_ids")})
    for g, w in zip(got, full.run(None, f)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_decoders_carry_their_transformers_config():
    g = json.loads(next(p.value for p in zoo.get_model("gpt2_decoder", **SMALL["gpt2_decoder"]).metadata_props
                        if p.key == CONFIG_KEY))
    assert (g["model_type"], g["n_head"], g["n_layer"], g["n_embd"]) == ("gpt2", 4, 2, 64)
    m = json.loads(next(p.value for p in zoo.get_model("llama_decoder", **SMALL["llama_decoder"]).metadata_props
                        if p.key == CONFIG_KEY))
    assert (m["model_type"], m["num_attention_heads"], m["num_key_value_heads"]) == ("llama", 4, 2)


def test_llama_decoder_refuses_heads_it_cannot_group_or_rotate():
    with pytest.raises(TesseraError, match="multiple of kv_heads"):
        zoo.get_model("llama_decoder", hidden=64, heads=4, kv_heads=3)
    with pytest.raises(TesseraError, match="must be even"):
        zoo.get_model("llama_decoder", hidden=60, heads=4, kv_heads=2)
