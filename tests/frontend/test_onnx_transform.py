"""ONNX converters of the shape / data-movement family: the attribute forms of older opsets, the
constant inputs of newer ones, symbolic shapes, and constant-only ops (Range, Compress)."""
import numpy as np
import pytest
from onnx_family_check import check, one_node, run_tessera

from tessera.errors import UnsupportedOpError

RNG = np.random.default_rng(3)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-3, 3, size=shape).astype(dtype)


def i64(*v):
    return np.array(v, np.int64)


def test_reshape_forms_and_symbolic_batch():
    x = rand(2, 3, 4)
    check(one_node("Reshape", {"x": x}, dict(shape=[4, -1]), opset=1), {"x": x}, want=[x.reshape(4, -1)])
    check(one_node("Reshape", {"x": x}, inits={"s": i64(0, -1)}, opset=13), {"x": x})
    g = check(one_node("Reshape", {"x": x}, inits={"s": i64(0, 12)}, opset=14, shapes={"x": ("N", 3, 4)}), {"x": x})
    assert g.outputs[0].type.shape == ("N", 12)
    e = np.zeros((0, 3), np.float32)
    check(one_node("Reshape", {"x": e}, dict(allowzero=1), inits={"s": i64(3, 0)}, opset=14), {"x": e})


def test_flatten_squeeze_unsqueeze_across_opsets():
    x = rand(2, 1, 3, 1)
    check(one_node("Flatten", {"x": x}, dict(axis=2)), {"x": x})
    g = check(one_node("Flatten", {"x": x}, dict(axis=1), shapes={"x": ("N", 1, 3, 1)}), {"x": x})
    assert g.outputs[0].type.shape == ("N", 3)
    check(one_node("Squeeze", {"x": x}, dict(axes=[1]), opset=11), {"x": x})
    check(one_node("Squeeze", {"x": x}, opset=13), {"x": x})
    check(one_node("Squeeze", {"x": x}, inits={"a": i64(-1, 1)}, opset=13), {"x": x})
    check(one_node("Unsqueeze", {"x": x}, dict(axes=[0, 5]), opset=11), {"x": x})
    check(one_node("Unsqueeze", {"x": x}, inits={"a": i64(-1)}, opset=13, shapes={"x": ("N", 1, 3, 1)}), {"x": x})


def test_split_sizes_equal_parts_and_uneven_num_outputs():
    x = rand(7, 4)
    check(one_node("Split", {"x": x}, dict(axis=0, split=[2, 5]), opset=11, outputs=("a", "b")), {"x": x})
    check(one_node("Split", {"x": x}, dict(axis=1), opset=13, outputs=("a", "b")), {"x": x})
    check(one_node("Split", {"x": x}, inits={"s": i64(3, 1, 3)}, opset=13, outputs=("a", "b", "c")), {"x": x})
    check(one_node("Split", {"x": x}, dict(num_outputs=3), opset=18, outputs=("a", "b", "c")), {"x": x})


def test_slice_attribute_and_input_forms():
    x = rand(5, 6, 7)
    check(one_node("Slice", {"x": x}, dict(starts=[1, -3], ends=[100, -1], axes=[0, 2]), opset=9), {"x": x})
    check(one_node("Slice", {"x": x}, inits={"s": i64(-1, 0), "e": i64(-1000, 5), "a": i64(1, 2),
                                              "st": i64(-2, 3)}, opset=13), {"x": x})


def test_expand_tile_pad_transpose_concat():
    x = rand(3, 1)
    check(one_node("Expand", {"x": x}, inits={"s": i64(2, 1, 4)}), {"x": x})
    check(one_node("Expand", {"x": x}, inits={"s": i64(1, 1)}), {"x": x})
    check(one_node("Tile", {"x": x}, inits={"r": i64(2, 3)}), {"x": x})
    y = rand(2, 3)
    check(one_node("Pad", {"x": y}, dict(pads=[0, 1, 1, 2], mode="reflect"), opset=2), {"x": y})
    check(one_node("Pad", {"x": y}, dict(mode="edge"), inits={"p": i64(1, 0, 0, 1)}, opset=13), {"x": y})
    check(one_node("Pad", {"x": y}, inits={"p": i64(1, 2), "v": np.array(9.5, np.float32), "ax": i64(-1)},
                   opset=18), {"x": y})
    check(one_node("Transpose", {"x": y}), {"x": y})
    z = rand(2, 1)
    check(one_node("Concat", {"a": y, "b": z}, dict(axis=-1)), {"a": y, "b": z})


def test_gathers_scatters_with_int32_indices():
    data = rand(4, 5)
    ind = np.array([[1, -1], [0, 3]], np.int32)
    check(one_node("Gather", {"d": data, "i": ind}, dict(axis=1)), {"d": data, "i": ind})
    check(one_node("GatherElements", {"d": data, "i": ind}, dict(axis=0)), {"d": data, "i": ind})
    upd = rand(2, 2)
    check(one_node("ScatterElements", {"d": data, "i": ind, "u": upd}, dict(axis=1, reduction="add"), opset=16),
          {"d": data, "i": ind, "u": upd})
    nd = np.array([[0, 1], [3, 4]], np.int64)
    u = np.array([9.0, -9.0], np.float32)
    check(one_node("ScatterND", {"d": data, "i": nd, "u": u}, dict(reduction="max"), opset=18),
          {"d": data, "i": nd, "u": u})
    check(one_node("GatherND", {"d": data, "i": nd}), {"d": data, "i": nd})


def test_constant_only_ops_and_their_refusals():
    g = check(one_node("Range", {}, inits={"s": np.array(1.5, np.float32), "l": np.array(4.0, np.float32),
                                           "d": np.array(0.5, np.float32)}, opset=11), {})
    assert not g.nodes  # a constant
    x = rand(3, 4)
    check(one_node("Compress", {"x": x}, dict(axis=1), inits={"c": np.array([1, 0, 1], bool)}), {"x": x})
    check(one_node("Compress", {"x": x}, inits={"c": np.array([0, 1, 1, 0, 1], bool)}), {"x": x})
    c = np.array([True, False, True])
    g = check(one_node("Compress", {"x": x, "c": c}, dict(axis=1)), {"x": x, "c": c})   # runtime c: nonzero + take
    assert "nonzero" in [n.op for n in g.nodes]
    check(one_node("Compress", {"x": x, "c": c}, dict(axis=1)), {"x": x, "c": c}, const_inputs={"c": c})


def test_one_hot_trilu_eye_like_depth_space():
    idx = np.array([0, 3, -1], np.int64)
    vals = np.array([0.0, 2.0], np.float32)
    check(one_node("OneHot", {"i": idx}, dict(axis=0), inits={"d": np.array(4, np.int64), "v": vals}, opset=11),
          {"i": idx})
    m = rand(2, 4, 5)
    check(one_node("Trilu", {"x": m}, dict(upper=0), inits={"k": np.array(1, np.int64)}, opset=14), {"x": m})
    check(one_node("EyeLike", {"x": m[0]}, dict(k=-1, dtype=7)), {"x": m[0]})
    x = rand(1, 8, 2, 3)
    check(one_node("DepthToSpace", {"x": x}, dict(blocksize=2, mode="CRD")), {"x": x})
    s2d = rand(1, 2, 4, 6)
    check(one_node("SpaceToDepth", {"x": s2d}, dict(blocksize=2)), {"x": s2d})
