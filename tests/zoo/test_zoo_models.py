"""tessera.zoo builds valid ONNX models that onnxruntime runs to finite, unit-scale outputs of the
documented shapes; the same seed gives the same weights; options and errors behave."""
import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")

from tessera import TesseraError  # noqa: E402
from tessera import zoo  # noqa: E402

# small versions of each architecture (same graph structure, fewer/smaller layers): fast to build and run
SMALL = {
    "resnet18": dict(image_size=64),
    "resnet50": dict(image_size=32),
    "mobilenet_v2": dict(image_size=32),
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "gpt2_block": dict(seq_len=16, hidden=64, heads=4, n_positions=64),
    "gpt2_small": dict(n_layers=2, seq_len=16, hidden=64, heads=4, vocab=500, n_positions=64),
}
TRANSFORMERS = ("bert_base", "gpt2_block", "gpt2_small")


def _session(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run_checked(name, batch=2, seed=0, model_batch=None, **kw):
    """Build, check with onnx's checker (full shape inference), run in ORT; check shapes and values."""
    model = zoo.get_model(name, batch=batch if model_batch is None else model_batch, seed=seed, **kw)
    onnx.checker.check_model(model, full_check=True)
    feeds = zoo.sample_input(name, batch=batch, seed=seed, **kw)
    info = zoo.model_info(name, batch=batch, **kw)
    assert [s.name for s in info.inputs] == [i.name for i in model.graph.input]
    assert [s.name for s in info.outputs] == [o.name for o in model.graph.output]
    for spec in info.inputs:
        assert feeds[spec.name].shape == spec.shape and feeds[spec.name].dtype == np.dtype(spec.dtype)
    outs = _session(model).run(None, feeds)
    for spec, y in zip(info.outputs, outs):
        assert y.shape == spec.shape and y.dtype == np.dtype(spec.dtype)
        assert np.isfinite(y).all(), f"{name}: {spec.name} has non-finite values"
        # neither blown up nor vanished through the depth
        assert 0.05 < float(y.std()) < 20, f"{name}: {spec.name} std {y.std()}"
    return model, feeds, outs


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_model_is_valid_onnx_and_runs_in_onnxruntime(name):
    _run_checked(name, **SMALL[name])


def test_list_models_names_every_architecture():
    assert zoo.list_models() == ["bert_base", "gpt2_block", "gpt2_decoder", "gpt2_small", "llama_decoder",
                                 "mobilenet_v2", "resnet18", "resnet50"]


def test_resnet18_full_size_runs_and_has_torchvision_structure():
    model, _, (y,) = _run_checked("resnet18", batch=1)
    ops = [n.op_type for n in model.graph.node]
    # unfolded BatchNormalization after every conv (20 convs incl. 3 downsamples), 8 residual adds
    assert ops.count("Conv") == 20 and ops.count("BatchNormalization") == 20 and ops.count("Add") == 8
    assert {"MaxPool", "GlobalAveragePool", "Flatten", "Gemm", "Relu"} <= set(ops)
    n_params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert 11_600_000 < n_params < 11_800_000          # torchvision's ResNet-18 has 11.69M parameters
    names = {t.name for t in model.graph.initializer}
    assert {"conv1.weight", "layer4.1.bn2.running_var", "fc.weight"} <= names
    assert y.shape == (1, 1000)


@pytest.mark.slow
@pytest.mark.parametrize("name,n_params", [("resnet50", 25_557_032), ("mobilenet_v2", 3_504_872)])
def test_full_size_cnn_matches_torchvision_parameter_count(name, n_params):
    model, _, _ = _run_checked(name, batch=1)
    # torchvision counts the BN running stats as buffers, not parameters
    bn_stats = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name.endswith(("running_mean",
                                                                                                "running_var")))
    consts = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name.startswith("onnx::"))
    total = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert total - bn_stats - consts == n_params


@pytest.mark.slow
@pytest.mark.parametrize("name", TRANSFORMERS)
def test_full_size_transformer_runs_in_onnxruntime(name):
    model, _, outs = _run_checked(name, batch=1)
    if name == "bert_base":
        n = sum(int(np.prod(t.dims)) for t in model.graph.initializer if not t.name.startswith("onnx::")
                and t.name != "embeddings.position_ids")
        assert n == 109_482_240          # Hugging Face bert-base-uncased
        assert sum(n.op_type == "Softmax" for n in model.graph.node) == 12


def test_mobilenet_v2_uses_depthwise_convs_and_relu6_as_clip():
    model = zoo.get_model("mobilenet_v2", **SMALL["mobilenet_v2"])
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    grouped = [n for n in convs if onnx.helper.get_attribute_value(
        next(a for a in n.attribute if a.name == "group")) > 1]
    assert len(grouped) == 17                             # one depthwise conv per inverted residual
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert clips and all(len(n.input) == 3 for n in clips)   # min and max as inputs (opset >= 11)
    assert sum(n.op_type == "Add" for n in model.graph.node) == 10


def test_bert_uses_erf_gelu_and_additive_padding_mask():
    kw = SMALL["bert_base"]
    model = zoo.get_model("bert_base", **kw)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Erf") == kw["n_layers"] and ops.count("LayerNormalization") == 2 * kw["n_layers"] + 1
    assert "Cast" in ops and "Where" not in ops
    # the padding mask matters: masking a position changes the unmasked positions' outputs
    feeds = zoo.sample_input("bert_base", batch=1, **kw)
    sess = _session(model)
    full = sess.run(None, feeds)[0]
    feeds["attention_mask"][0, -4:] = 0
    masked = sess.run(None, feeds)[0]
    assert not np.allclose(full[0, :-4], masked[0, :-4], atol=1e-3)


def test_gpt2_block_is_causal():
    kw = SMALL["gpt2_block"]
    sess = _session(zoo.get_model("gpt2_block", **kw))
    x = zoo.sample_input("gpt2_block", batch=1, **kw)["hidden_states"]
    y = sess.run(None, {"hidden_states": x})[0]
    x2 = x.copy()
    x2[0, -1] += 1.0                                   # change only the last position
    y2 = sess.run(None, {"hidden_states": x2})[0]
    np.testing.assert_array_equal(y[0, :-1], y2[0, :-1])
    assert not np.allclose(y[0, -1], y2[0, -1])
    ops = [n.op_type for n in zoo.get_model("gpt2_block", **kw).graph.node]
    assert {"Where", "Split", "Pow", "Tanh", "Slice"} <= set(ops)


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_dynamic_shape_subgraphs_give_the_same_outputs(name):
    kw = SMALL[name]
    static = zoo.get_model(name, batch=2, **kw)
    dynamic = zoo.get_model(name, batch=2, dynamic_shapes=True, **kw)
    dyn_ops = [n.op_type for n in dynamic.graph.node]
    assert "Shape" not in [n.op_type for n in static.graph.node] and "Shape" in dyn_ops and "Concat" in dyn_ops
    feeds = zoo.sample_input(name, batch=2, **kw)
    for a, b in zip(_session(static).run(None, feeds), _session(dynamic).run(None, feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name,dynamic", [("resnet18", False), ("bert_base", False), ("bert_base", True),
                                          ("gpt2_small", False), ("gpt2_small", True)])
def test_symbolic_batch_runs_at_several_batch_sizes(name, dynamic):
    kw = dict(SMALL[name])
    if dynamic:
        kw["dynamic_shapes"] = True
    model = zoo.get_model(name, batch="N", **kw)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    sess = _session(model)
    feeds = zoo.sample_input(name, batch=3, **kw)
    three = sess.run(None, feeds)[0]
    one = sess.run(None, {k: v[:1] for k, v in feeds.items()})[0]
    assert one.shape[0] == 1 and three.shape[0] == 3
    # row 0 of a batch is computed as it is alone (batch rows are independent)
    np.testing.assert_allclose(three[0], one[0], rtol=1e-4, atol=1e-4)


def test_same_seed_same_weights_other_seed_other_weights():
    for name in ("resnet18", "gpt2_block"):
        kw = dict(SMALL[name], image_size=32) if name == "resnet18" else SMALL[name]
        a = zoo.get_model(name, seed=3, **kw).SerializeToString()
        assert a == zoo.get_model(name, seed=3, **kw).SerializeToString()
        assert a != zoo.get_model(name, seed=4, **kw).SerializeToString()
    x1 = zoo.sample_input("bert_base", seed=1, **SMALL["bert_base"])
    x2 = zoo.sample_input("bert_base", seed=1, **SMALL["bert_base"])
    for k in x1:
        np.testing.assert_array_equal(x1[k], x2[k])


def test_bert_sample_input_pads_rows_after_the_first():
    kw = dict(SMALL["bert_base"], seq_len=64)
    feeds = zoo.sample_input("bert_base", batch=8, **kw)
    mask = feeds["attention_mask"]
    assert mask[0].all() and not mask.all()
    # padding is a suffix: each row is ones then zeros
    for row in mask:
        n = int(row.sum())
        assert row[:n].all() and not row[n:].any()
    assert feeds["input_ids"].max() < kw["vocab"] and set(np.unique(feeds["token_type_ids"])) <= {0, 1}


def test_model_info_describes_without_building():
    info = zoo.model_info("bert_base", batch="N", seq_len=64)
    assert info.options["seq_len"] == 64 and info.options["n_layers"] == 12
    assert [(s.name, s.shape, s.dtype) for s in info.outputs] == [
        ("last_hidden_state", ("N", 64, 768), "float32"), ("pooler_output", ("N", 768), "float32")]
    assert zoo.model_info("resnet50").inputs[0].shape == (1, 3, 224, 224)


@pytest.mark.parametrize("call,match", [
    (lambda: zoo.get_model("resnet19"), "no model 'resnet19'.*resnet18"),
    (lambda: zoo.get_model("resnet18", image_sz=32), "no option 'image_sz'.*image_size=224"),
    (lambda: zoo.get_model("resnet18", image_size=0), "image_size must be a positive int"),
    (lambda: zoo.get_model("bert_base", pooler="yes"), "pooler must be True or False"),
    (lambda: zoo.get_model("resnet18", batch=0), "batch must be"),
    (lambda: zoo.get_model("resnet18", batch="2 x"), "batch must be"),
    (lambda: zoo.sample_input("resnet18", batch="N"), "batch must be a positive int"),
    (lambda: zoo.get_model("resnet18", seed=-1), "seed must be"),
    (lambda: zoo.get_model("bert_base", hidden=100, heads=12), "multiple of heads"),
    (lambda: zoo.get_model("gpt2_block", seq_len=2048), "seq_len must be in 1..n_positions"),
    (lambda: zoo.get_model("mobilenet_v2", width_mult=-1.0), "width_mult must be a positive number"),
])
def test_bad_arguments_raise_tessera_errors(call, match):
    with pytest.raises(TesseraError, match=match):
        call()
