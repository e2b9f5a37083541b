"""ONNX BitCast, Det, CenterCropPad, MaxUnpool, NonZero and the data-dependent refusals, against
onnxruntime and the reference."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from onnx_family_check import check, one_node

from tessera.errors import UnsupportedOpError
from tessera.frontend.onnx import from_onnx

RNG = np.random.default_rng(82)


def test_bitcast_and_det():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    m = one_node("BitCast", {"x": x}, dict(to=TensorProto.UINT32), opset=26)
    check(m, {"x": x}, want=[x.view(np.uint32)])
    d = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    check(one_node("Det", {"d": d}, opset=11), {"d": d}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axes", [([3, 8], [-2, -1]), ([7, 2, 5], None), ([1, 9], [0, 2])])
def test_center_crop_pad_odd_and_even_excess(shape, axes):
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    attrs = {} if axes is None else dict(axes=axes)
    m = one_node("CenterCropPad", {"x": x}, attrs, inits={"s": np.array(shape, np.int64)}, opset=18)
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}))


def test_max_unpool_of_max_pool_indices_with_output_shape():
    # The ONNX reference (and its backend test) scatter into the unpooled shape (here 4x4) and pad
    # that to output_shape (5x5); onnxruntime scatters into output_shape directly. tessera follows ONNX.
    from onnx import helper

    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])
    unpool = helper.make_node("MaxUnpool", ["p", "i", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    g = helper.make_graph([pool, unpool], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_empty_tensor_value_info("y")],
                          initializer=[helper.make_tensor("shape", TensorProto.INT64, [4], [1, 2, 5, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    check(m, {"x": x}, want=ReferenceEvaluator(m).run(None, {"x": x}))


def test_nonzero_folds_constants_and_runs_on_runtime_inputs():
    c = np.array([[1, 0, 2], [0, 3, 0]], np.int32)
    m = one_node("NonZero", {}, inits={"c": c}, opset=13)
    check(m, {}, want=[np.array(np.nonzero(c), np.int64)])
    g = check(one_node("NonZero", {"c": c}, opset=13), {"c": c})      # a host op (tests/frontend/test_onnx_data_dependent.py)
    assert [n.op for n in g.nodes] == ["nonzero"]


def test_swiglu_tensor_scatter_causal_conv_match_the_reference():
    a = RNG.standard_normal((2, 3, 8)).astype(np.float16)
    b = RNG.standard_normal((2, 3, 8)).astype(np.float16)
    m = one_node("SwiGLU", {"a": a, "b": b}, dict(alpha=1.7), opset=28)
    check(m, {"a": a, "b": b}, want=ReferenceEvaluator(m).run(None, {"a": a, "b": b}), rtol=2e-3, atol=2e-3)

    past = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    upd = RNG.standard_normal((2, 3, 3, 4)).astype(np.float32)
    w = np.array([4, 1], np.int64)
    for mode in ("circular", "linear"):
        feeds = {"past": past, "upd": upd, "w": w if mode == "circular" else np.array([3, 0], np.int64)}
        m = one_node("TensorScatter", feeds, dict(axis=2, mode=mode), opset=24)
        check(m, feeds, want=ReferenceEvaluator(m).run(None, feeds))

    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    wt = RNG.standard_normal((3, 1, 4)).astype(np.float32)
    feeds = {"x": x, "w": wt, "b": RNG.standard_normal(3).astype(np.float32),
             "s": RNG.standard_normal((2, 3, 3)).astype(np.float32)}
    m = one_node("CausalConvWithState", feeds, dict(activation="silu"), opset=27, outputs=("y", "state"))
    check(m, feeds, want=ReferenceEvaluator(m).run(None, feeds), rtol=1e-5, atol=1e-5)


def test_tensor_scatter_symbolic_batch_and_refusals():
    past = RNG.standard_normal((3, 5, 2)).astype(np.float32)
    upd = RNG.standard_normal((3, 2, 2)).astype(np.float32)
    w = np.array([0, 3, 2], np.int32)
    feeds = {"past": past, "upd": upd, "w": w}
    m = one_node("TensorScatter", feeds, dict(axis=1), opset=24,
                 shapes={"past": ("B", 5, 2), "upd": ("B", 2, 2), "w": ("B",)})
    check(m, feeds, want=ReferenceEvaluator(m).run(None, feeds))
    bad = one_node("TensorScatter", {"past": past, "upd": upd}, dict(axis=0), opset=24)
    with pytest.raises(Exception, match="axis 0 is the batch axis"):
        from_onnx(bad)


@pytest.mark.parametrize("mode,weights", [("IDF", True), ("TFIDF", True), ("IDF", False), ("TF", False)])
def test_tfidf_vectorizer_modes_and_trigrams_match_onnxruntime(mode, weights):
    x = RNG.integers(1, 6, (3, 9)).astype(np.int32)
    attrs = dict(mode=mode, min_gram_length=1, max_gram_length=3, max_skip_count=2,
                 ngram_counts=[0, 3, 7], ngram_indexes=[0, 1, 2, 3, 4, 5, 1],
                 pool_int64s=[1, 2, 3, 1, 2, 4, 5, 1, 2, 3])          # unigrams 1 2 3, bigrams (1 2) (4 5), trigram
    if weights:
        attrs["weights"] = [0.5, 2.0, 1.5, 3.0, 0.25, 1.0, 7.0]   # one per ngram_indexes entry
    check(one_node("TfIdfVectorizer", {"x": x}, attrs, opset=9), {"x": x})
    v = x[0].astype(np.int64)
    check(one_node("TfIdfVectorizer", {"v": v}, attrs, opset=9), {"v": v})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_flex_attention_gqa_with_score_and_prob_modifiers(dtype):
    from onnx import helper

    b, hq, hk, lq, s, e = 2, 4, 2, 3, 5, 4
    feeds = {"q": RNG.standard_normal((b, hq, lq, e)).astype(dtype),
             "k": RNG.standard_normal((b, hk, s, e)).astype(dtype),
             "v": RNG.standard_normal((b, hk, s, 3)).astype(dtype)}
    cap = helper.make_tensor("cap", TensorProto.FLOAT, [], [2.0])
    score_mod = helper.make_graph(   # soft capping: cap * tanh(s / cap)
        [helper.make_node("Div", ["s", "cap"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
         helper.make_node("Mul", ["t", "cap"], ["o"])], "score_mod",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)], initializer=[cap])
    prob_mod = helper.make_graph(
        [helper.make_node("Sqrt", ["p"], ["o"])], "prob_mod",
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", scale=0.3,
                            score_mod=score_mod, prob_mod=prob_mod)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                                      a.shape) for n, a in feeds.items()],
                          [helper.make_empty_tensor_value_info("y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("ai.onnx.preview", 1)])
    tol = 2e-3 if dtype == np.float16 else 1e-5
    check(m, feeds, want=ReferenceEvaluator(m).run(None, feeds), rtol=tol, atol=tol)
