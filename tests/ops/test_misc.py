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


def _scatter_numpy(past, upd, w, axis, circular):
    out = past.copy()
    m, s = past.shape[axis], upd.shape[axis]
    for b in range(past.shape[0]):
        for k in range(s):
            pos = w[b] + k
            if circular:
                pos %= m
            if 0 <= pos < m:
                dst = [slice(None)] * past.ndim
                src = [slice(None)] * past.ndim
                dst[0] = src[0] = b
                dst[axis], src[axis] = pos, k
                out[tuple(dst)] = upd[tuple(src)]
    return out


@pytest.mark.parametrize("circular", [False, True])
def test_tensor_scatter_writes_each_batch_entry_at_its_index(circular):
    past = RNG.standard_normal((3, 2, 7, 4)).astype(np.float32)
    upd = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    w = np.array([0, 5, 6], np.int64)      # linear: the writes past the end are dropped
    (got,) = run_op("tensor_scatter", past, upd, w, axis=2, mode="circular" if circular else "linear")
    np.testing.assert_array_equal(got, _scatter_numpy(past, upd, w, 2, circular))
    (got0,) = run_op("tensor_scatter", past, upd, axis=-2)
    np.testing.assert_array_equal(got0, _scatter_numpy(past, upd, np.zeros(3, np.int64), 2, False))


def test_tensor_scatter_refusals():
    f = "float32"
    with pytest.raises(ShapeError, match="longer than the cache"):
        infer("tensor_scatter", ((2, 3, 4), f), ((2, 5, 4), f), axis=1)
    with pytest.raises(ShapeError, match="differs from past"):
        infer("tensor_scatter", ((2, 3, 4), f), ((2, 2, 5), f), axis=1)
    with pytest.raises(DTypeError):
        infer("tensor_scatter", ((2, 3, 4), f), ((2, 2, 4), "float16"), axis=1)


def test_tfidf_vectorizer_refusals():
    i, f = "int64", "float32"
    tables = (((3, 2), i), ((3,), "int32"), ((3,), i))
    with pytest.raises(DTypeError):
        infer("tfidf_vectorizer", ((4, 5), f), *tables, output_size=3)
    with pytest.raises(ShapeError, match="weights must be"):
        infer("tfidf_vectorizer", ((4, 5), i), *tables, ((2,), f), output_size=3)
    with pytest.raises(ShapeError, match="tokens"):
        infer("tfidf_vectorizer", ((4, 5), i), ((3, 2), i), ((2,), "int32"), ((3,), i), output_size=3)
    assert infer("tfidf_vectorizer", ((7,), i), *tables, output_size=3)[0].shape == (3,)
