"""nn.softmax, nn.log_softmax, nn.hardmax against onnxruntime (opset 13 semantics)."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import ort_run
from op_check import BF16, infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(9)
X = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)

OPS = {"softmax": "Softmax", "log_softmax": "LogSoftmax", "hardmax": "Hardmax"}


@pytest.mark.parametrize("axis", [0, 2, -1])
@pytest.mark.parametrize("op", sorted(OPS))
def test_matches_onnxruntime_on_every_axis(op, axis):
    (y,) = run_op(f"nn.{op}", X, axis=axis)
    (ref,) = ort_run(OPS[op], [X], dict(axis=axis), opset=13)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


def test_softmax_is_stable_for_large_inputs():
    x = (X * 50 + 1000).astype(np.float32)
    (s,) = run_op("nn.softmax", x, axis=-1)
    (ls,) = run_op("nn.log_softmax", x, axis=-1)
    assert np.isfinite(s).all() and np.isfinite(ls).all()
    np.testing.assert_allclose(s.sum(axis=-1), 1, rtol=1e-5)
    np.testing.assert_allclose(ls, ort_run("LogSoftmax", [x], dict(axis=-1), opset=13)[0], rtol=1e-5, atol=1e-4)


def test_hardmax_picks_the_first_of_tied_maxima():
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
    (y,) = run_op("nn.hardmax", x, axis=1)
    np.testing.assert_array_equal(y, [[0, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_softmax_other_float_dtypes(dtype):
    x = X.astype(BF16 if dtype == "bfloat16" else dtype)
    (y,) = run_op("nn.softmax", x, axis=1, sym={0: ("N", 3, 5, 4)})
    e = np.exp(X.astype(np.float64) - X.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    tol = {"float16": 1e-3, "bfloat16": 8e-3, "float64": 1e-6}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)


def test_softmax_refuses_integers_and_bad_axis():
    with pytest.raises(tessera.DTypeError, match="int32"):
        infer("nn.softmax", ((2, 3), "int32"))
    with pytest.raises(tessera.ShapeError, match="out of range"):
        infer("nn.log_softmax", ((2, 3), "float32"), axis=2)
