"""reinterpret against numpy's view; det against numpy.linalg.det (pivoting, singular and batched
matrices, NaN)."""
import numpy as np
import pytest
from op_check import infer, run_op

from tessera.errors import DTypeError, ShapeError

RNG = np.random.default_rng(81)


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int64", "float64"), ("float16", "uint16"),
                                     ("bool", "uint8"), ("uint8", "bool")])
def test_reinterpret_is_numpy_view(src, dst):
    if src == "bool":
        a = RNG.random((3, 16)) > 0.5
    elif src == "uint8":
        a = RNG.integers(0, 2, (3, 16)).astype(np.uint8)
    else:
        a = (RNG.standard_normal((3, 16)) * 100).astype(src)
    (got,) = run_op("reinterpret", a, dtype=dst)
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got, a.view(dst))


def test_reinterpret_refuses_other_widths():
    with pytest.raises(DTypeError, match="different widths"):
        infer("reinterpret", ((2,), "float32"), dtype="int64")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_det_batched_with_pivoting(dtype):
    x = RNG.standard_normal((2, 3, 5, 5)).astype(dtype)
    x[0, 0, :, 0] = [0, 0, 1e-3, 5, 0]            # the first pivot is not on the diagonal
    x[1, 2, 3] = x[1, 2, 1]                         # singular
    (got,) = run_op("det", x)
    assert got.shape == (2, 3) and got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-5, atol=1e-10)


def test_det_small_sizes_and_nan():
    for n in (1, 2, 3):
        x = RNG.standard_normal((4, n, n)).astype(np.float32)
        np.testing.assert_allclose(run_op("det", x)[0], np.linalg.det(x), rtol=1e-5)
    x = np.eye(3, dtype=np.float32)
    x[1, 1] = np.nan
    assert np.isnan(run_op("det", x)[0])


def test_det_refusals():
    with pytest.raises(ShapeError, match=r"\(\.\.\., n, n\)"):
        infer("det", ((2, 3), "float32"))
    with pytest.raises(ShapeError, match="static n"):
        infer("det", (("n", "n"), "float32"))
    with pytest.raises(DTypeError):
        infer("det", ((2, 2), "int32"))
