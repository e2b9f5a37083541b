"""BERT-base and GPT-2 (tessera.zoo, 12 layers) exported with dynamic batch and sequence axes:
compiled once, run at sequence lengths 16, 64, 128 and 384 and batches 1 and 4, every output
matching onnxruntime's. Slow: whole models at every length."""
import numpy as np
import onnxruntime as ort
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.zoo.transformer import bert_base, gpt2_small

pytestmark = pytest.mark.slow


def dynamic_axes(m):
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) >= 2:
            dims[0].dim_param, dims[1].dim_param = "batch", "seq"
    return m


def feeds(name, batch, seq, rng):
    if name == "bert_base":
        mask = np.ones((batch, seq), np.int64)
        mask[:, seq - seq // 4:] = 0
        return {"input_ids": rng.integers(0, 30522, (batch, seq)).astype(np.int64), "attention_mask": mask,
                "token_type_ids": (np.arange(seq)[None, :] >= seq // 2).astype(np.int64).repeat(batch, 0)}
    return {"input_ids": rng.integers(0, 50257, (batch, seq)).astype(np.int64)}


@pytest.mark.parametrize("name", ["bert_base", "gpt2_small"])
def test_model_with_dynamic_axes_compiled_once_matches_onnxruntime_at_every_length(name):
    make = {"bert_base": bert_base, "gpt2_small": gpt2_small}[name]
    m = dynamic_axes(make(batch="batch", dynamic_shapes=True))
    graph, params = from_onnx(m)
    assert {"batch", "seq"} <= {d for v in graph.inputs for d in v.type.shape if isinstance(d, str)}
    exe = tessera.compile(graph, params)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(16)
    for batch in (1, 4):
        for seq in (16, 64, 128, 384):
            f = feeds(name, batch, seq, rng)
            got, want = exe.run(f), sess.run(None, f)
            assert got[0].shape[:2] == (batch, seq)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3, err_msg=f"{name} batch {batch} seq {seq}")
