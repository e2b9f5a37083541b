"""Pooling ops against onnxruntime: max/avg (ceil_mode, padding, dilation, count_include_pad),
lp, max with indices, global pools."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import ort_run
from op_check import infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(3)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def _onnx(kernel, strides, padding, dilation=None, ceil=False, **extra):
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), pads=list(padding), ceil_mode=int(ceil))
    if dilation is not None:
        attrs["dilations"] = list(dilation)
    attrs.update(extra)
    return attrs


POOL_CASES = [
    # name, shape, kernel, strides, padding, dilation, ceil
    ("2d_pad_ceil", (2, 3, 9, 10), (3, 2), (2, 3), (1, 0, 1, 1), (1, 1), True),
    ("2d_floor", (1, 2, 9, 10), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ("1d_ceil", (1, 2, 10), (3,), (3,), (1, 1), (1,), True),
    ("3d", (1, 1, 5, 6, 7), (2, 3, 2), (2, 2, 1), (0, 1, 1, 1, 0, 0), (1, 1, 1), False),
]


@pytest.mark.parametrize("name,shape,kernel,strides,padding,dilation,ceil", POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_max_pool_matches_onnxruntime(name, shape, kernel, strides, padding, dilation, ceil):
    nd = len(shape) - 2
    dil = (2,) + dilation[1:] if nd > 1 else dilation
    x = rand(*shape)
    (y,) = run_op(f"nn.max_pool{nd}d", x, pool_size=kernel, strides=strides, padding=padding, dilation=dil,
                  ceil_mode=ceil)
    (ref,) = ort_run("MaxPool", [x], _onnx(kernel, strides, padding, dil, ceil))
    assert y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("name,shape,kernel,strides,padding,dilation,ceil", POOL_CASES[:3], ids=[c[0] for c in POOL_CASES[:3]])
def test_avg_pool_matches_onnxruntime(name, shape, kernel, strides, padding, dilation, ceil, count_include_pad):
    nd = len(shape) - 2
    x = rand(*shape)
    (y,) = run_op(f"nn.avg_pool{nd}d", x, pool_size=kernel, strides=strides, padding=padding, ceil_mode=ceil,
                  count_include_pad=count_include_pad)
    (ref,) = ort_run("AveragePool", [x], _onnx(kernel, strides, padding, None, ceil,
                                                count_include_pad=int(count_include_pad)))
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


def test_max_pool_int8_and_symbolic_batch():
    x = RNG.integers(-128, 127, (3, 2, 6, 6)).astype(np.int8)
    (y,) = run_op("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2), sym={0: ("N", 2, 6, 6)})
    np.testing.assert_array_equal(y, x.reshape(3, 2, 3, 2, 3, 2).max(axis=(3, 5)))


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices_follow_storage_order(storage_order):
    x = RNG.integers(0, 4, (2, 3, 7, 6)).astype(np.float32)  # many ties: the first maximum wins
    y, ind = run_op("nn.max_pool_with_indices", x, pool_size=(3, 2), strides=(2, 2), padding=(1, 0, 1, 1),
                    ceil_mode=True, storage_order=storage_order)
    ref = ort_run("MaxPool", [x], _onnx((3, 2), (2, 2), (1, 0, 1, 1), None, True, storage_order=storage_order),
                  num_outputs=2)
    np.testing.assert_array_equal(y, ref[0])
    assert ind.dtype == np.int64
    np.testing.assert_array_equal(ind, ref[1])


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_onnxruntime(p):
    x = rand(1, 2, 7, 8)
    (y,) = run_op("nn.lp_pool", x, pool_size=(3, 2), strides=(2, 2), padding=(1, 0, 1, 1), p=p)
    (ref,) = ort_run("LpPool", [x], dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], p=p), opset=18)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_global_pools(dtype):
    x = rand(2, 3, 5, 7, dtype=dtype)
    (a,) = run_op("nn.global_avg_pool", x)
    (m,) = run_op("nn.global_max_pool", x)
    assert a.shape == m.shape == (2, 3, 1, 1) and a.dtype == np.dtype(dtype)
    np.testing.assert_allclose(a.astype(np.float64), x.astype(np.float64).mean(axis=(2, 3), keepdims=True),
                               rtol=1e-3 if dtype == "float16" else 1e-6, atol=1e-3 if dtype == "float16" else 1e-6)
    np.testing.assert_array_equal(m, x.max(axis=(2, 3), keepdims=True))


@pytest.mark.parametrize("op,shape,attrs,error,match", [
    ("nn.max_pool2d", (1, 1, 4, 4), dict(pool_size=(5, 1)), tessera.ShapeError, "larger than the padded input"),
    ("nn.max_pool2d", (1, 1, 4, 4), dict(pool_size=(2, 2), padding=(2, 0, 0, 0)), tessera.ShapeError,
     "smaller than the"),
    ("nn.max_pool2d", (1, 4, 4), dict(pool_size=(2, 2)), tessera.ShapeError, "rank 4"),
    ("nn.avg_pool2d", (1, 1, 4, 4), dict(pool_size=(2,)), tessera.TesseraError, "2 entries"),
    ("nn.max_pool2d", (1, 1, "H", 4), dict(pool_size=(2, 2)), tessera.ShapeError, "static"),
])
def test_pool_infer_refuses_bad_input(op, shape, attrs, error, match):
    with pytest.raises(error, match=match):
        infer(op, (shape, "float32"), **attrs)


def test_avg_pool_refuses_integers():
    with pytest.raises(tessera.DTypeError, match="int8"):
        infer("nn.avg_pool2d", ((1, 1, 4, 4), "int8"), pool_size=(2, 2))
