"""Shape and data-movement ops of tessera.ops.transform against numpy."""
import numpy as np
import pytest
from op_check import infer, npdt, run_op, run_ops

from tessera.errors import DTypeError, ShapeError, TesseraError
from tessera.graph.ir import TensorType

RNG = np.random.default_rng(5)


def _rand(shape, dtype="float32"):
    d = npdt(dtype)
    if d == np.bool_:
        return RNG.random(shape) > 0.5
    if np.issubdtype(d, np.integer):
        return RNG.integers(0, 100, size=shape).astype(d)
    return RNG.uniform(-5, 5, size=shape).astype(np.float32).astype(d)


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "bfloat16", "uint64"])
def test_reshape_transpose_squeeze_expand_across_dtypes(dtype):
    a = _rand((2, 1, 3, 4), dtype)
    outs = run_ops([a], [("reshape", {"newshape": (0, -1, 4)}, [0]),
                         ("reshape", {"newshape": (4, 6)}, [0]),
                         ("transpose", {"axes": (2, 0, 3, 1)}, [0]),
                         ("transpose", {}, [0]),
                         ("squeeze", {}, [0]),
                         ("squeeze", {"axes": (-3,)}, [0]),
                         ("expand_dims", {"axis": 1, "num_newaxis": 2}, [0]),
                         ("expand_dims", {"axis": -1}, [0]),
                         ("reverse", {"axis": 2}, [0])])
    want = [a.reshape(2, -1, 4), a.reshape(4, 6), a.transpose(2, 0, 3, 1), a.transpose(),
            a.squeeze(), a.squeeze(1), a.reshape(2, 1, 1, 1, 3, 4), a[..., None], a[:, :, ::-1]]
    for (got,), w in zip(outs, want):
        assert got.dtype == w.dtype
        np.testing.assert_array_equal(got, w)


def test_reshape_resolves_symbolic_dims():
    assert infer("reshape", (("N", 3, 4), "float32"), newshape=(0, -1))[0].shape == ("N", 12)
    assert infer("reshape", (("N", 3, 4), "float32"), newshape=(-1, 12))[0].shape == ("N", 12)
    assert infer("reshape", (("N", 12), "float32"), newshape=("N", 3, 4))[0].shape == ("N", 3, 4)
    with pytest.raises(ShapeError, match="single"):
        infer("reshape", (("N", "M"), "float32"), newshape=(-1,))
    with pytest.raises(ShapeError, match="elements"):
        infer("reshape", ((3, 4), "float32"), newshape=(5, 3))
    with pytest.raises(ShapeError, match="more than one -1"):
        infer("reshape", ((3, 4), "float32"), newshape=(-1, -1))
    a = _rand((5, 3, 4))
    (got,) = run_op("reshape", a, sym={0: ("N", 3, 4)}, newshape=(-1, 12))
    np.testing.assert_array_equal(got, a.reshape(5, 12))


def test_broadcast_to_concat_split_tile():
    a, b, c = _rand((2, 3)), _rand((2, 5)), _rand((2, 1))
    outs = run_ops([a, b, c], [("broadcast_to", {"shape": (4, 2, 3)}, [0]),
                               ("broadcast_to", {"shape": (2, 7)}, [2]),
                               ("concatenate", {"axis": 1}, [0, 1, 2]),
                               ("concatenate", {"axis": -2}, [0, 0]),
                               ("split", {"indices_or_sections": (1, 4), "axis": 1}, [1]),
                               ("split", {"indices_or_sections": 2}, [0]),
                               ("tile", {"reps": (2, 3)}, [0]),
                               ("tile", {"reps": (2, 1, 2)}, [2])])
    np.testing.assert_array_equal(outs[0][0], np.broadcast_to(a, (4, 2, 3)))
    np.testing.assert_array_equal(outs[1][0], np.broadcast_to(c, (2, 7)))
    np.testing.assert_array_equal(outs[2][0], np.concatenate([a, b, c], 1))
    np.testing.assert_array_equal(outs[3][0], np.concatenate([a, a], 0))
    for got, want in zip(outs[4], np.split(b, [1, 4], axis=1)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(outs[5], np.split(a, 2)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(outs[6][0], np.tile(a, (2, 3)))
    np.testing.assert_array_equal(outs[7][0], np.tile(c, (2, 1, 2)))


def test_concat_and_split_refuse_mismatches():
    with pytest.raises(ShapeError, match="dimension 0"):
        infer("concatenate", ((2, 3), "float32"), ((3, 3), "float32"), axis=1)
    with pytest.raises(DTypeError):
        infer("concatenate", ((2, 3), "float32"), ((2, 3), "int32"))
    # a symbolic extent along the axis: the result's is the symbol of the sum (static part last)
    assert infer("concatenate", (("N", 3), "float32"), ((2, 3), "float32"), axis=0)[0].shape == ("N_plus_2", 3)
    assert infer("concatenate", (("P", 3), "float32"), (("L", 3), "float32"), (("N_plus_2", 3), "float32"),
                 axis=0)[0].shape == ("L_plus_N_plus_P_plus_2", 3)
    assert infer("concatenate", (("N", 3), "float32"), (("N", 2), "float32"), axis=1)[0].shape == ("N", 5)
    with pytest.raises(ShapeError, match="equal parts"):
        infer("split", ((5, 3), "float32"), indices_or_sections=2)


SLICES = [((1,), (3,), None, None), ((-1,), (-100,), (-1,), None), ((0, 1), (100, -1), (2, 1), (2, 0)),
          ((5,), (1,), (-2,), (1,)), ((3,), (1,), (1,), (0,)), ((-200,), (200,), (3,), (-1,)),
          ((2,), (2,), None, (2,))]


def _np_slice(a, begin, end, strides, axes):
    sl = [slice(None)] * a.ndim
    strides = strides or [1] * len(begin)
    axes = axes if axes is not None else range(len(begin))
    for b, e, s, ax in zip(begin, end, strides, axes):
        d = a.shape[ax]
        if e < -d and s < 0:
            e = None
        sl[ax] = slice(b, e, s)
    return a[tuple(sl)]


def test_strided_slice_has_onnx_clamping_semantics():
    a = _rand((6, 5, 7))
    specs = [("strided_slice", {"begin": b, "end": e, "strides": s, "axes": ax}, [0]) for b, e, s, ax in SLICES]
    outs = run_ops([a], specs)
    for (b, e, s, ax), (got,) in zip(SLICES, outs):
        np.testing.assert_array_equal(got, _np_slice(a, b, e, s, ax), err_msg=str((b, e, s, ax)))
    assert infer("strided_slice", (("N", 5), "float32"), begin=(0, 1), end=(2 ** 63 - 1, 3))[0].shape == ("N", 2)
    with pytest.raises(ShapeError, match="symbolic"):
        infer("strided_slice", (("N", 5), "float32"), begin=(1,), end=(3,))
    with pytest.raises(ShapeError, match="stride 0"):
        infer("strided_slice", ((4,), "float32"), begin=(1,), end=(3,), strides=(0,))


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_gathers_with_negative_indices(idx_dtype):
    data = _rand((4, 5, 3))
    ind = np.array([[0, -1], [2, -3]], idx_dtype)
    ge_ind = RNG.integers(-4, 4, size=(2, 5, 3)).astype(idx_dtype)
    nd_ind = np.array([[[1, -2], [0, 4]]], idx_dtype)  # shape (1, 2, 2) addresses data[i, j]
    nd_batch = np.array([[1], [0], [2], [-1]], idx_dtype)  # batch_dims=1: data[b, ind[b]]
    outs = run_ops([data, ind, ge_ind, nd_ind, nd_batch],
                   [("take", {"axis": 0}, [0, 1]), ("take", {"axis": -1}, [0, 1]),
                    ("gather_elements", {"axis": 0}, [0, 2]), ("gather_nd", {}, [0, 3]),
                    ("gather_nd", {"batch_dims": 1}, [0, 4])])
    np.testing.assert_array_equal(outs[0][0], np.take(data, ind % 4, axis=0))
    np.testing.assert_array_equal(outs[1][0], np.take(data, ind % 3, axis=2))
    np.testing.assert_array_equal(outs[2][0], np.take_along_axis(data, ge_ind % 4, axis=0))
    np.testing.assert_array_equal(outs[3][0], data[nd_ind[..., 0] % 4, nd_ind[..., 1] % 5])
    np.testing.assert_array_equal(outs[4][0], data[np.arange(4), nd_batch[:, 0] % 5])


def test_gather_refuses_out_of_range_indices():
    # (issue 27: they were clamped; ONNX Runtime refuses them. OpenCL still clamps: test_index_bounds.py)
    data = _rand((4, 2))
    with pytest.raises(TesseraError, match=r"index 7 is out of range \[-4, 4\)"):
        run_op("take", data, np.array([7, -9], "int64"))
    (got,) = run_op("take", data, np.array([3, -4], "int64"))
    np.testing.assert_array_equal(got, data[[3, 0]])


def _np_scatter_elements(data, ind, upd, axis, reduction):
    out = data.copy()
    for pos in np.ndindex(*ind.shape):
        tgt = list(pos)
        tgt[axis] = ind[pos] % data.shape[axis]
        tgt = tuple(tgt)
        v = upd[pos]
        out[tgt] = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum,
                    "min": np.minimum}[reduction](out[tgt], v)
    return out


def _np_scatter_nd(data, ind, upd, reduction):
    out = data.copy()
    for m in np.ndindex(*ind.shape[:-1]):
        tgt = tuple(int(i) % data.shape[j] for j, i in enumerate(ind[m]))
        out[tgt] = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum,
                    "min": np.minimum}[reduction](out[tgt], upd[m])
    return out


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_scatters_with_every_reduction(dtype):
    data = _rand((4, 5), dtype)
    ind = np.array([[1, 0, 3], [-1, 1, 1]], "int64")  # smaller than data along axis 1 too; repeats
    upd = _rand((2, 3), dtype)
    nd_ind = np.array([[1, 2], [3, -1], [1, 2]], "int64")
    nd_upd = _rand((3,), dtype)
    row_ind = np.array([[2], [-4]], "int64")
    row_upd = _rand((2, 5), dtype)
    reds = ["none", "add", "mul", "max", "min"]
    specs = [("scatter_elements", {"axis": 0, "reduction": r}, [0, 1, 2]) for r in reds]
    specs += [("scatter_nd", {"reduction": r}, [0, 3, 4]) for r in reds]
    specs += [("scatter_nd", {}, [0, 5, 6])]
    outs = run_ops([data, ind, upd, nd_ind, nd_upd, row_ind, row_upd], specs)
    for r, (got,) in zip(reds, outs[:5]):
        np.testing.assert_allclose(got, _np_scatter_elements(data, ind, upd, 0, r), rtol=1e-6, err_msg=r)
    for r, (got,) in zip(reds, outs[5:10]):
        np.testing.assert_allclose(got, _np_scatter_nd(data, nd_ind, nd_upd, r), rtol=1e-6, err_msg=r)
    np.testing.assert_array_equal(outs[10][0], _np_scatter_nd(data, row_ind, row_upd, "none"))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_modes_match_numpy(mode):
    a = _rand((3, 4))
    pws = [((1, 2), (3, 0)), ((0, 0), (5, 6)), ((2, 1), (0, 0))]
    if mode == "constant":
        pws.append(((-1, 1), (2, -2)))
    outs = run_ops([a], [("nn.pad", {"pad_width": pw, "pad_mode": mode, "pad_value": 1.5}, [0]) for pw in pws])
    for pw, (got,) in zip(pws, outs):
        if min(min(p) for p in pw) < 0:
            crop = a[1:, :2]
            want = np.pad(crop, ((0, 1), (2, 0)), constant_values=1.5)
        else:
            kw = {"constant_values": 1.5} if mode == "constant" else {}
            want = np.pad(a, pw, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap",
                                       "constant": "constant"}[mode], **kw)
        np.testing.assert_array_equal(got, want, err_msg=str(pw))


def test_depth_space_round_trip_and_modes():
    x = _rand((2, 8, 3, 2))
    outs = run_ops([x], [("nn.depth_to_space", {"block_size": 2}, [0]),
                         ("nn.depth_to_space", {"block_size": 2, "mode": "CRD"}, [0])])
    n, c, h, w = x.shape
    b = 2
    dcr = x.reshape(n, b, b, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // 4, h * b, w * b)
    crd = x.reshape(n, c // 4, b, b, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // 4, h * b, w * b)
    np.testing.assert_array_equal(outs[0][0], dcr)
    np.testing.assert_array_equal(outs[1][0], crd)
    outs = run_ops([dcr, crd], [("nn.space_to_depth", {"block_size": 2}, [0]),
                                ("nn.space_to_depth", {"block_size": 2, "mode": "CRD"}, [1])])
    np.testing.assert_array_equal(outs[0][0], x)
    np.testing.assert_array_equal(outs[1][0], x)
    with pytest.raises(ShapeError, match="block_size"):
        infer("nn.depth_to_space", ((1, 6, 2, 2), "float32"), block_size=2)


def test_one_hot_trilu_eye_like():
    ind = np.array([[0, 2], [-1, 5]], "int64")
    vals = np.array([-1.0, 3.0], "float32")
    m = _rand((2, 4, 5))
    outs = run_ops([ind, vals, m], [("one_hot", {"depth": 4, "axis": -1}, [0, 1]),
                                    ("one_hot", {"depth": 4, "axis": 0}, [0, 1]),
                                    ("trilu", {"upper": True, "k": 1}, [2]),
                                    ("trilu", {"upper": False, "k": -1}, [2]),
                                    ("eye_like", {"k": 2, "dtype": "int32"}, [2])] if False else
                   [("one_hot", {"depth": 4, "axis": -1}, [0, 1]), ("one_hot", {"depth": 4, "axis": 0}, [0, 1]),
                    ("trilu", {"upper": True, "k": 1}, [2]), ("trilu", {"upper": False, "k": -1}, [2])])
    hot = np.where(np.arange(4) == (ind % 4 + (ind >= 4) * 100)[..., None], 3.0, -1.0).astype("float32")
    np.testing.assert_array_equal(outs[0][0], hot)
    np.testing.assert_array_equal(outs[1][0], np.moveaxis(hot, -1, 0))
    np.testing.assert_array_equal(outs[2][0], np.triu(m, 1))
    np.testing.assert_array_equal(outs[3][0], np.tril(m, -1))
    (eye,) = run_op("eye_like", m[0], k=2, dtype="int32")
    np.testing.assert_array_equal(eye, np.eye(4, 5, 2, dtype="int32"))


def test_layout_transform_nchw_to_nchwc_and_back():
    x = _rand((1, 16, 3, 5))
    (packed,) = run_op("layout_transform", x, src_layout="NCHW", dst_layout="NCHW8c")
    np.testing.assert_array_equal(packed, x.reshape(1, 2, 8, 3, 5).transpose(0, 1, 3, 4, 2))
    (back,) = run_op("layout_transform", packed, src_layout="NCHW8c", dst_layout="NCHW")
    np.testing.assert_array_equal(back, x)
    (repacked,) = run_op("layout_transform", packed, src_layout="NCHW8c", dst_layout="NCHW4c")
    np.testing.assert_array_equal(repacked, x.reshape(1, 4, 4, 3, 5).transpose(0, 1, 3, 4, 2))
    with pytest.raises(ShapeError, match="split"):
        infer("layout_transform", ((1, 12, 2, 2), "float32"), src_layout="NCHW", dst_layout="NCHW8c")
    with pytest.raises(ShapeError, match="layout"):
        infer("layout_transform", ((1, 12, 2, 2), "float32"), src_layout="NCHW", dst_layout="NC?W")


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_layout_transform_reblocks_an_axis_both_ways(dtype):
    # NCHW16c <-> NCHW64c (AMX convolutions read 64-channel blocks): scheduled as vector copies of the
    # 16 channels both blocks share
    x = _rand((2, 128, 3, 5), dtype)
    b16 = np.ascontiguousarray(x.reshape(2, 8, 16, 3, 5).transpose(0, 1, 3, 4, 2))
    (b64,) = run_op("layout_transform", b16, src_layout="NCHW16c", dst_layout="NCHW64c")
    np.testing.assert_array_equal(b64, x.reshape(2, 2, 64, 3, 5).transpose(0, 1, 3, 4, 2))
    (back,) = run_op("layout_transform", b64, src_layout="NCHW64c", dst_layout="NCHW16c")
    np.testing.assert_array_equal(back, b16)
    y = _rand((1, 48, 2, 3), dtype)                                   # a shared run of 4
    (b12,) = run_op("layout_transform", np.ascontiguousarray(y.reshape(1, 6, 8, 2, 3).transpose(0, 1, 3, 4, 2)),
                    src_layout="NCHW8c",
                    dst_layout="NCHW12c")
    np.testing.assert_array_equal(b12, y.reshape(1, 4, 12, 2, 3).transpose(0, 1, 3, 4, 2))


def test_transform_errors_are_clear():
    with pytest.raises(ShapeError, match="permutation"):
        infer("transpose", ((2, 3), "float32"), axes=(0, 0))
    with pytest.raises(ShapeError, match="extent 3, not 1"):
        infer("squeeze", ((2, 3), "float32"), axes=(1,))
    with pytest.raises(ShapeError, match="out of range"):
        infer("take", ((2, 3), "float32"), ((2,), "int64"), axis=2)
    with pytest.raises(DTypeError, match="indices"):
        infer("take", ((2, 3), "float32"), ((2,), "float32"))
    with pytest.raises(ShapeError, match="not broadcast"):
        infer("broadcast_to", ((2, 3), "float32"), shape=(3, 3))
    with pytest.raises(TesseraError, match="pad_mode"):
        infer("nn.pad", ((2, 3), "float32"), pad_width=((0, 0), (1, 1)), pad_mode="mirror")
    with pytest.raises(TesseraError, match="reduction"):
        infer("scatter_nd", ((4,), "float32"), ((1, 1), "int64"), ((1,), "float32"), reduction="avg")
    assert infer("take", (("N", 3), "float32"), (("B", 2), "int64"), axis=1)[0] == TensorType(("N", "B", 2))
