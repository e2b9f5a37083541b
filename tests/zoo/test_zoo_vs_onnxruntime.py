"""Every zoo model compiled by tessera (from_onnx -> tessera.compile, target c) gives onnxruntime's
outputs within rtol 1e-4 / atol 1e-4: small versions of each architecture in the default run, the
full-size models in the slow set."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tessera.frontend.onnx", reason="the ONNX frontend (tessera/frontend/onnx.py) is not there yet")

import tessera  # noqa: E402
from tessera import zoo  # noqa: E402
from tessera.frontend.onnx_ops import find_converter  # noqa: E402

RTOL = ATOL = 1e-4

SMALL = {
    "resnet18": dict(image_size=32),
    "resnet50": dict(image_size=32),
    "mobilenet_v2": dict(image_size=32, width_mult=0.5),
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "gpt2_block": dict(seq_len=16, hidden=64, heads=4, n_positions=64),
    "gpt2_small": dict(n_layers=2, seq_len=16, hidden=64, heads=4, vocab=500, n_positions=64),
}
TRANSFORMERS = ("bert_base", "gpt2_block", "gpt2_small")


def _require_converters(model):
    """Skip, naming them, while converters for some of the model's ops have not landed."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    missing = sorted({n.op_type for n in model.graph.node if find_converter(n.op_type, opset) is None})
    if missing:
        pytest.skip(f"tessera has no ONNX converter yet for {', '.join(missing)}")


def _ort_run(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _compile(model):
    graph, params = tessera.frontend.from_onnx(model)
    return tessera.compile(graph, params, target="c")


def _assert_matches(name, model, exe, feeds):
    ref = _ort_run(model, feeds)
    got = exe.run(feeds)
    assert len(got) == len(ref)
    for out, r, g in zip(model.graph.output, ref, got):
        g = np.asarray(g)
        assert g.shape == r.shape and g.dtype == r.dtype, f"{name}/{out.name}: {g.shape} {g.dtype} vs {r.shape} {r.dtype}"
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL, err_msg=f"{name}: output {out.name}")


def _check(name, batch=1, **kw):
    model = zoo.get_model(name, batch=batch, **kw)
    _require_converters(model)
    exe = _compile(model)
    _assert_matches(name, model, exe, zoo.sample_input(name, batch=batch, **kw))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_zoo_model_matches_onnxruntime(name):
    _check(name, batch=1, **SMALL[name])


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_transformer_with_shape_subgraphs_matches_onnxruntime(name):
    _check(name, batch=2, dynamic_shapes=True, **SMALL[name])


@pytest.mark.parametrize("name,dynamic", [
    ("resnet18", False), ("gpt2_block", False), ("bert_base", False),
    ("bert_base", True), ("gpt2_block", True),
])
def test_symbolic_batch_model_matches_onnxruntime_at_two_batch_sizes(name, dynamic):
    kw = dict(SMALL[name])
    if dynamic:
        kw["dynamic_shapes"] = True
    model = zoo.get_model(name, batch="N", **kw)
    _require_converters(model)
    exe = _compile(model)
    for batch in (1, 3):
        _assert_matches(name, model, exe, zoo.sample_input(name, batch=batch, seed=batch, **kw))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2", "bert_base", "gpt2_block", "gpt2_small"])
def test_full_size_zoo_model_matches_onnxruntime(name):
    _check(name, batch=1)
