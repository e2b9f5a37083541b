"""Ops whose output extents depend on the values (NonZero, Unique, NonMaxSuppression, Compress with a
runtime condition): compiled once, their extents bound when they run, the kernels after them run at
whatever extent came out; checked against onnxruntime on inputs that give different extents."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.errors import TesseraError
from tessera.frontend.onnx import from_onnx

from onnx_family_check import one_node

RNG = np.random.default_rng(150)


def vi(name, dtype=TP.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def make(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def compiled(m):
    graph, params = from_onnx(m)
    exe = tessera.compile(graph, params)
    assert exe.kind == "graph"           # symbolic extents: the graph executor
    return exe


def same_as_ort(exe, m, feeds):
    got = exe.run(feeds)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    return got


def test_detection_head_keeps_a_different_number_of_boxes_per_input():
    """boxes -> NonMaxSuppression -> Gather of the kept boxes -> a kernel on them (scaled)."""
    n = 12
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["sel"]),
        helper.make_node("Gather", ["sel", "col"], ["box_idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"]),
        helper.make_node("Gather", ["boxes2d", "box_idx"], ["kept"], axis=0),
        helper.make_node("Mul", ["kept", "scale"], ["out"]),
    ]
    inits = [numpy_helper.from_array(np.array(10, np.int64), "max_out"),
             numpy_helper.from_array(np.array(2, np.int64), "col"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array(2.0, np.float32), "scale")]
    m = make(nodes, [vi("boxes", shape=[1, n, 4]), vi("scores", shape=[1, 1, n]), vi("iou", shape=[]),
                     vi("score_thr", shape=[])], [vi("out"), vi("sel", TP.INT64)], inits, opset=13)
    exe = compiled(m)
    kept = set()
    for seed, iou, thr in [(0, 0.5, 0.0), (1, 0.1, 0.3), (2, 0.9, 0.0), (3, 0.5, 0.95), (4, 0.0, 0.0)]:
        r = np.random.default_rng(seed)
        xy = r.uniform(0, 10, (1, n, 2)).astype(np.float32)
        wh = r.uniform(1, 4, (1, n, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + wh], axis=2)
        scores = r.uniform(0, 1, (1, 1, n)).astype(np.float32)
        out, sel = same_as_ort(exe, m, {"boxes": boxes, "scores": scores, "iou": np.array(iou, np.float32),
                                        "score_thr": np.array(thr, np.float32)})
        kept.add(len(sel))
    assert len(kept) >= 3, kept         # the inputs really keep different numbers of boxes
    assert 0 in kept or min(kept) < 3


def test_nms_center_point_boxes_several_batches_and_classes():
    b, c, n = 2, 3, 9
    boxes = np.concatenate([RNG.uniform(0, 5, (b, n, 2)), RNG.uniform(0.5, 3, (b, n, 2))], 2).astype(np.float32)
    scores = RNG.uniform(0, 1, (b, c, n)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 5]                       # a tie: the lower index comes first
    m = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores, "max_out": np.array([4], np.int64),
                                       "iou": np.array([0.3], np.float32)},
                 dict(center_point_box=1), opset=11, outputs=("sel",))
    same_as_ort(compiled(m), m, {"boxes": boxes, "scores": scores, "max_out": np.array([4], np.int64),
                                 "iou": np.array([0.3], np.float32)})


def test_nonzero_feeds_a_kernel_compiled_for_its_symbolic_count():
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["t"]),
             helper.make_node("Add", ["t", "t"], ["y"])]
    m = make(nodes, [vi("x", shape=[4, 5])], [vi("y", TP.INT64)])
    exe = compiled(m)
    counts = set()
    for p in (0.0, 0.3, 0.8, 1.0):
        x = (RNG.uniform(0, 1, (4, 5)) < p).astype(np.float32) * RNG.standard_normal((4, 5)).astype(np.float32)
        (y,) = same_as_ort(exe, m, {"x": x})
        counts.add(y.shape[0])
    assert len(counts) >= 3 and 0 in counts and 20 in counts


@pytest.mark.parametrize("attrs", [dict(), dict(sorted=0), dict(axis=0), dict(axis=1, sorted=0), dict(axis=-1)])
def test_unique_values_indices_inverse_and_counts(attrs):
    x = RNG.integers(0, 3, (4, 3)).astype(np.float32)
    x[2] = x[0]
    m = one_node("Unique", {"x": x}, attrs, opset=11, outputs=("y", "idx", "inv", "cnt"))
    exe = compiled(m)
    same_as_ort(exe, m, {"x": x})
    same_as_ort(exe, m, {"x": np.zeros((4, 3), np.float32)})    # one distinct value or slice


def test_compress_with_a_runtime_condition():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    m = one_node("Compress", {"x": x, "c": np.array([True, False, True, True])}, dict(axis=1), opset=11)
    exe = compiled(m)
    for c in ([True, False, True, True], [False] * 4, [True] * 4, [False, True, False, False]):
        same_as_ort(exe, m, {"x": x, "c": np.array(c)})
    m = one_node("Compress", {"x": x, "c": np.array([True, False, True])}, opset=11, shapes={"c": [3]})
    same_as_ort(compiled(m), m, {"x": x, "c": np.array([False, True, True])})   # no axis: the flat tensor


def test_a_model_with_a_host_op_is_not_written_into_a_library(tmp_path):
    m = one_node("NonZero", {"x": np.ones((2, 2), np.float32)}, opset=13)
    with pytest.raises(TesseraError, match="host"):
        compiled(m).export_library(str(tmp_path / "m.so"))
