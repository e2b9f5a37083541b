"""ai.onnx.ml (Binarizer, ArrayFeatureExtractor against onnxruntime, TreeEnsemble against the
reference), and the ai.onnx.preview.training optimizer updates (Adagrad, Adam, Momentum) against the
ONNX reference, several tensors at once, with the first step (T = 0) and a later one."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_family_check import check

RNG = np.random.default_rng(83)


def _model(op, feeds, attrs, domain, opset, outputs):
    node = helper.make_node(op, list(feeds), list(outputs), domain=domain, **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in feeds.items()]
    g = helper.make_graph([node], "g", ins, [helper.make_empty_tensor_value_info(o) for o in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, opset)])


def test_binarizer_and_array_feature_extractor():
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    check(_model("Binarizer", {"x": x}, dict(threshold=0.3), "ai.onnx.ml", 1, ["y"]), {"x": x})
    feeds = {"x": x, "i": np.array([4, 0, 4], np.int64)}
    check(_model("ArrayFeatureExtractor", feeds, {}, "ai.onnx.ml", 1, ["z"]), feeds)
    v = {"x": RNG.standard_normal(6).astype(np.float32), "i": np.array([[1, 5]], np.int64)}
    check(_model("ArrayFeatureExtractor", v, {}, "ai.onnx.ml", 1, ["z"]), v)


@pytest.mark.parametrize("op,per,attrs", [
    ("Adagrad", 3, dict(decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.01)),
    ("Adam", 4, dict(alpha=0.85, beta=0.95, epsilon=1e-7, norm_coefficient=0.02, norm_coefficient_post=0.01)),
    ("Momentum", 3, dict(alpha=0.9, beta=0.1, mode="standard", norm_coefficient=0.01)),
    ("Momentum", 3, dict(alpha=0.9, beta=0.1, mode="nesterov", norm_coefficient=0.01)),
])
@pytest.mark.parametrize("step", [0, 3])
def test_optimizer_updates_match_the_reference(op, per, attrs, step):
    shapes = [(3, 2), (4,)]
    feeds = {"r": np.array(0.1, np.float32), "t": np.array(step, np.int64)}
    for k in range(per):
        for j, s in enumerate(shapes):
            v = RNG.uniform(0.1, 1, s) if k == per - 1 else RNG.standard_normal(s)   # accumulators positive
            feeds[f"in{k}_{j}"] = v.astype(np.float32)
    outs = [f"out{k}_{j}" for k in range(per - 1) for j in range(len(shapes))]
    m = _model(op, feeds, attrs, "ai.onnx.preview.training", 1, outs)
    check(m, feeds, want=ReferenceEvaluator(m).run(None, feeds), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("agg", [0, 1, 2, 3])
def test_tree_ensemble_two_trees_every_aggregate_and_missing_values(agg):
    from onnx import numpy_helper

    x = np.array([[0.5, 2.0], [3.0, -1.0], [np.nan, 4.0], [1.5, 1.5], [7.0, 0.0]], np.float32)
    # tree 0 (root 0): x0 <= 1 ? leaf 0 : (x1 > 1 ? leaf 1 : leaf 2); tree 1 (root 2): x1 == 1.5 ? leaf 3 : leaf 4
    attrs = dict(
        n_targets=3, aggregate_function=agg, tree_roots=[0, 2],
        nodes_modes=numpy_helper.from_array(np.array([0, 3, 4], np.uint8), "nodes_modes"),
        nodes_featureids=[0, 1, 1],
        nodes_splits=numpy_helper.from_array(np.array([1.0, 1.0, 1.5], np.float32), "nodes_splits"),
        nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
        nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0],
        leaf_targetids=[0, 1, 2, 0, 1],
        leaf_weights=numpy_helper.from_array(np.array([1.5, -2.0, 4.0, 10.0, 0.25], np.float32), "leaf_weights"))
    m = _model("TreeEnsemble", {"x": x}, attrs, "ai.onnx.ml", 5, ["y"])
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}), rtol=1e-6)
    attrs["post_transform"] = 2
    from tessera.errors import UnsupportedOpError
    from tessera.frontend.onnx import from_onnx
    with pytest.raises(UnsupportedOpError, match="post_transform"):
        from_onnx(_model("TreeEnsemble", {"x": x}, attrs, "ai.onnx.ml", 5, ["y"]))
