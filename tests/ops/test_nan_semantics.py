"""NaN and infinity as ONNX Runtime and numpy define them: ArgMax/ArgMin return the index of a NaN
(the first; the last with select_last_index, as onnx's reference), MaxPool and GlobalMaxPool skip NaN
as ONNX Runtime does (NaN only where every tap is NaN), Tanh(+-inf) and Tanh of large values are
exactly +-1 on the vector path as on the scalar one."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import tessera

RNG = np.random.default_rng(13)
_TYPES = {np.dtype("float16"): TP.FLOAT16, np.dtype("float32"): TP.FLOAT, np.dtype("float64"): TP.DOUBLE}


def _model(op, x, attrs, outputs=1, opset=18):
    node = helper.make_node(op, ["x"], [f"y{k}" for k in range(outputs)], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _TYPES[x.dtype], x.shape)],
                          [helper.make_empty_tensor_value_info(f"y{k}") for k in range(outputs)])
    return helper.make_model_gen_version(g, opset_imports=[helper.make_opsetid("", opset)])


def _tessera(model, x, opt_level=2, target="c"):
    graph, params = tessera.frontend.from_onnx(model)
    return tessera.compile(graph, params, target=target, opt_level=opt_level).run({"x": x})


def _ort(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


# ------------------------------------------------------------------------------------------------
# ArgMax / ArgMin
# ------------------------------------------------------------------------------------------------
def _with_nans(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, flat.size // 4, replace=False)] = np.nan
    x[0] = np.nan                                   # a row / column of NaN only
    x[..., 1] = x[..., 2] = 7.0                     # ties
    return x


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_return_the_index_of_a_nan(op, dtype, axis, last):
    x = _with_nans((6, 37), dtype, seed=axis + 1 + 3 * last)
    attrs = dict(axis=axis, keepdims=0, select_last_index=last)
    model = _model(op, x, attrs)
    (got,) = _tessera(model, x)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})     # numpy's argmax/argmin, NaN first
    np.testing.assert_array_equal(got, want)
    if not last:
        np.testing.assert_array_equal(got, (np.argmax if op == "ArgMax" else np.argmin)(x, axis=axis))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reductions_agree_with_onnxruntime_where_it_keeps_a_nan(op):
    # ONNX Runtime starts from the first element and replaces it by a larger one: a leading NaN wins there
    # too (a NaN further on it skips, unlike numpy and onnx's reference)
    x = RNG.standard_normal((5, 16)).astype(np.float32)
    x[:, 0] = np.nan
    model = _model(op, x, dict(axis=1))
    np.testing.assert_array_equal(_tessera(model, x)[0], _ort(model, x)[0])


def test_arg_reductions_of_numbers_are_unchanged():
    x = RNG.integers(-3, 3, (7, 40)).astype(np.float32)
    for op, fn in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
        model = _model(op, x, dict(axis=1, keepdims=0))
        np.testing.assert_array_equal(_tessera(model, x)[0], fn(x, axis=1))
        np.testing.assert_array_equal(_tessera(model, x)[0], _ort(model, x)[0])


# ------------------------------------------------------------------------------------------------
# MaxPool / GlobalMaxPool
# ------------------------------------------------------------------------------------------------
def _fmax_pool2d(x, k, s):
    """Windows k x k at stride s (no padding), NaN skipped unless every tap is NaN."""
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            win = x[:, :, i * s:i * s + k, j * s:j * s + k].reshape(n, c, -1)
            out[:, :, i, j] = np.fmax.reduce(win, axis=-1)
    return out


# ONNX Runtime's pools (MLAS) keep the larger of the running max and the next tap with x86 MAXPS, which
# returns the tap where either is NaN: a NaN tap is dropped by the next one, and with it every tap
# scanned before it (which taps depends on the kernel's vector lanes). Where a NaN is the first tap
# scanned, or every tap is NaN, that is C's fmax over the window, which tessera computes everywhere.
@pytest.mark.parametrize("opt_level", [2, 3])       # 3: the blocked NCHW{x}c layout
def test_max_pool_skips_nan_as_onnxruntime(opt_level):
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    x[0, 0, 0, 0] = x[0, 1, 2, 4] = x[0, 5, 6, 6] = np.nan      # the first tap of their 2x2 windows
    x[0, 3, 4:6, 6:8] = np.nan                                   # a window of NaN only
    model = _model("MaxPool", x, dict(kernel_shape=[2, 2], strides=[2, 2]))
    (got,) = _tessera(model, x, opt_level)
    np.testing.assert_array_equal(got, _ort(model, x)[0])
    np.testing.assert_array_equal(got, _fmax_pool2d(x, 2, 2))
    assert np.isnan(got[0, 3, 2, 3]) and np.isnan(got).sum() == 1


@pytest.mark.parametrize("opt_level", [2, 3])
def test_max_pool_skips_nan_at_any_tap(opt_level):
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float32)
    x[0, 1, 2, 3] = x[0, 2, 5, 4] = x[0, 4, 7, 7] = np.nan       # second, third and last taps
    model = _model("MaxPool", x, dict(kernel_shape=[2, 2], strides=[2, 2]))
    np.testing.assert_array_equal(_tessera(model, x, opt_level)[0], _fmax_pool2d(x, 2, 2))


def test_max_pool_with_padding_and_a_large_window_skips_nan():
    x = RNG.standard_normal((2, 3, 12, 12)).astype(np.float32)
    x[0, 0, 3, 3] = x[1, 2, 7, 0] = np.nan
    x[1, 1] = np.nan                                     # a whole plane: every window NaN
    for attrs in (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                  dict(kernel_shape=[9, 9], strides=[3, 3])):   # 81 taps: a reduction loop
        model = _model("MaxPool", x, attrs)
        (got,) = _tessera(model, x)
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=np.nan) if "pads" in attrs else x
        k, s = attrs["kernel_shape"][0], attrs["strides"][0]
        np.testing.assert_array_equal(got, _fmax_pool2d(xp, k, s))
        assert np.isnan(got[1, 1]).all() and not np.isnan(np.delete(got, 1, axis=1)).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("padded", [False, True])
def test_max_pool_with_indices_skips_nan_as_onnxruntime(dtype, padded):
    # MaxPool's Indices output: ONNX Runtime scans each window from its first tap inside the input and
    # takes a larger one, so a NaN after that tap is skipped (tessera skips a first one too: its value
    # is then the one MaxPool gives without Indices); an all-NaN window is NaN at its first index
    x = RNG.standard_normal((1, 4, 6, 6)).astype(dtype)
    if padded:                                    # windows start at odd rows and columns
        x[0, 0, 2, 1] = x[0, 0, 4, 3] = np.nan
        x[0, 3, 0, 0] = -np.inf                   # the corner window: one tap, -inf
    else:
        x[0, 0, 0, 1] = x[0, 0, 3, 2] = x[0, 1, 1, 1] = np.nan
        x[0, 2, 0:2, 2:4] = np.nan
        x[0, 3, 2:4, 2:4] = -np.inf               # all -inf: -inf at its first index
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1] if padded else [0, 0, 0, 0])
    model = _model("MaxPool", x, attrs, outputs=2)
    got, want = _tessera(model, x), _ort(model, x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    (plain,) = _tessera(_model("MaxPool", x, attrs), x)
    np.testing.assert_array_equal(got[0], plain)


def test_max_pool_of_infinities_is_unchanged():
    x = np.full((1, 2, 4, 4), -np.inf, np.float32)
    x[0, 1, 1, 1] = np.inf
    model = _model("MaxPool", x, dict(kernel_shape=[2, 2], strides=[2, 2]))
    np.testing.assert_array_equal(_tessera(model, x)[0], _ort(model, x)[0])


@pytest.mark.parametrize("shape", [(1, 8, 7, 7), (2, 4, 5), (1, 3, 2, 3, 4)])
def test_global_max_pool_skips_nan_as_onnxruntime(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    planes = x.reshape(shape[0] * shape[1], -1)
    planes[0, 0] = np.nan                                 # the first pixel of a plane
    planes[2] = np.nan                                    # a plane of NaN only
    model = _model("GlobalMaxPool", x, {})
    (got,) = _tessera(model, x)
    np.testing.assert_array_equal(got, _ort(model, x)[0])
    planes[1, 3] = planes[-1, -1] = np.nan                # inside and at the end of a plane
    (got,) = _tessera(model, x)
    want = np.fmax.reduce(planes, axis=1).reshape(shape[:2] + (1,) * (len(shape) - 2))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opt_level", [2, 3])
def test_global_max_pool_of_a_blocked_layout_skips_nan(opt_level):
    # after a convolution at opt_level 3 the pool runs on NCHW{x}c data
    from onnx import numpy_helper
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    x[0, 2, 1, 1] = np.nan                         # through the 1x1 conv: pixel (1, 1) of every channel
    w = RNG.standard_normal((16, 8, 1, 1)).astype(np.float32)

    def model(nodes, out):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, x.shape)],
                              [helper.make_empty_tensor_value_info(out)], initializer=[numpy_helper.from_array(w, "w")])
        return helper.make_model_gen_version(g, opset_imports=[helper.make_opsetid("", 18)])

    conv = helper.make_node("Conv", ["x", "w"], ["c"])
    (got,) = _tessera(model([conv, helper.make_node("GlobalMaxPool", ["c"], ["y0"])], "y0"), x, opt_level)
    (c,) = _ort(model([conv], "c"), x)
    want = np.fmax.reduce(c.reshape(16, -1), axis=1).reshape(1, 16, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.isnan(got).any()


def _opencl_ok():
    from tessera.runtime import opencl as rt
    return rt.usable()[0]


@pytest.mark.skipif(not _opencl_ok(), reason="OpenCL is not usable here")
def test_max_pools_and_argmax_on_opencl_treat_nan_as_on_the_cpu():
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 0:2, 0:2] = np.nan
    got = _tessera(_model("MaxPool", x, dict(kernel_shape=[2, 2], strides=[2, 2])), x, target="opencl")[0]
    np.testing.assert_array_equal(got, _fmax_pool2d(x, 2, 2))
    got = _tessera(_model("GlobalMaxPool", x, {}), x, target="opencl")[0]
    np.testing.assert_array_equal(got.ravel(), np.fmax.reduce(x.reshape(4, -1), axis=1))
    a = x.reshape(4, 64)
    np.testing.assert_array_equal(_tessera(_model("ArgMax", a, dict(axis=1, keepdims=0)), a, target="opencl")[0],
                                  np.argmax(a, axis=1))


# ------------------------------------------------------------------------------------------------
# Tanh
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 67, 1024])          # scalar only, a vector tail, whole vectors
def test_tanh_of_infinity_and_large_values_is_exactly_one(n):
    big = np.array([np.inf, -np.inf, 9.02, -9.02, 9.5, -10.0, 20.0, -88.0, 1e30, -3.4e38], np.float32)
    x = np.concatenate([big, RNG.uniform(-12, 12, n).astype(np.float32)])[:n]
    model = _model("Tanh", x, {})
    (got,) = _tessera(model, x)
    head = x[:len(big)]
    np.testing.assert_array_equal(got[:len(head)], np.sign(head))          # was +-0.99999994
    np.testing.assert_array_equal(got[:len(head)], _ort(model, x)[0][:len(head)])
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64)).astype(np.float32), rtol=2e-7, atol=0)
