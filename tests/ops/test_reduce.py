"""Reductions and scans of tessera.ops.reduce against numpy."""
import numpy as np
import pytest
from op_check import infer, npdt, run_op, run_ops

from tessera.errors import DTypeError, ShapeError
from tessera.graph.ir import TensorType

RNG = np.random.default_rng(3)


def _rand(shape, dtype, lo=-3, hi=3):
    d = npdt(dtype)
    if d == np.bool_:
        return RNG.random(shape) > 0.5
    if np.issubdtype(d, np.integer):
        info = np.iinfo(d)
        return RNG.integers(max(info.min, -20), min(info.max, 20), size=shape).astype(d)
    return RNG.uniform(lo, hi, size=shape).astype(np.float32).astype(d)


AXES = [None, (1,), (0, 2), (-1,), ()]
NP = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8"])
def test_reductions_over_axes_with_keepdims(dtype):
    a = _rand((3, 4, 5), dtype, 0.5, 1.5)
    specs, wants = [], []
    for name in ("sum", "prod", "max", "min", "mean"):
        for axis in AXES:
            for keep in (False, True):
                specs.append((name, {"axis": axis, "keepdims": keep}, [0]))
                ref = a.astype(np.float64) if npdt(dtype).kind == "f" or npdt(dtype) == npdt("bfloat16") else a
                with np.errstate(over="ignore"):
                    w = NP[name](ref, axis=axis, keepdims=keep)
                if name == "mean" and npdt(dtype).kind in "iu":  # integer mean: truncated
                    total = np.sum(a.astype(np.int64), axis=axis, keepdims=keep)
                    w = np.trunc(total / (a.size // max(1, np.size(total))))
                wants.append(w)
    outs = run_ops([a], specs)
    tol = {"float16": 3e-3, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12}.get(dtype)
    for (name, attrs, _), want, (got,) in zip(specs, wants, outs):
        assert got.shape == np.shape(want), (name, attrs)
        assert got.dtype == npdt(dtype), (name, attrs)
        if tol is None:
            np.testing.assert_array_equal(got, np.asarray(want).astype(dtype), err_msg=f"{name} {attrs}")
        else:
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, err_msg=f"{name} {attrs}")


def test_bool_max_min_and_empty_reductions():
    b = _rand((3, 4), "bool")
    e = np.zeros((2, 0), "float32")
    outs = run_ops([b, e], [("max", {"axis": (1,)}, [0]), ("min", {"axis": (1,)}, [0]),
                            ("sum", {"axis": (1,)}, [1]), ("prod", {"axis": (1,)}, [1]),
                            ("max", {"axis": (1,)}, [1]), ("min", {"axis": (1,)}, [1])])
    np.testing.assert_array_equal(outs[0][0], b.any(1))
    np.testing.assert_array_equal(outs[1][0], b.all(1))
    np.testing.assert_array_equal(outs[2][0], [0, 0])
    np.testing.assert_array_equal(outs[3][0], [1, 1])
    np.testing.assert_array_equal(outs[4][0], [-np.inf, -np.inf])
    np.testing.assert_array_equal(outs[5][0], [np.inf, np.inf])


def test_float32_sum_of_a_long_row_stays_accurate():
    a = RNG.uniform(0, 1, size=(2, 100000)).astype("float32")
    (got,) = run_op("sum", a, axis=(1,))
    np.testing.assert_allclose(got, a.astype(np.float64).sum(1), rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_argmax_argmin_ties_and_select_last_index(dtype):
    a = RNG.integers(0, 3, size=(4, 7, 3)).astype(dtype)  # many ties
    specs = []
    for name in ("argmax", "argmin"):
        for axis in (0, 1, -1):
            for last in (False, True):
                specs.append((name, {"axis": axis, "keepdims": axis != 1, "select_last_index": last}, [0]))
    outs = run_ops([a], specs)
    for (name, attrs, _), (got,) in zip(specs, outs):
        f = np.argmax if name == "argmax" else np.argmin
        ax = attrs["axis"]
        if attrs["select_last_index"]:
            flipped = np.flip(a, axis=ax)
            want = a.shape[ax] - 1 - f(flipped, axis=ax)
        else:
            want = f(a, axis=ax)
        if attrs["keepdims"]:
            want = np.expand_dims(want, ax)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {attrs}")


def test_logsumexp_is_stable():
    a = _rand((3, 6), "float32") * 100
    a[1, :] = -np.inf
    outs = run_ops([a], [("logsumexp", {"axis": (1,)}, [0]), ("logsumexp", {"keepdims": True}, [0])])
    with np.errstate(divide="ignore"):
        m = np.max(a, axis=1, keepdims=True)
        ms = np.where(np.isinf(m), 0, m)
        want = (np.log(np.exp(a - ms).sum(1, keepdims=True)) + ms)[:, 0]
        finite = a[np.isfinite(a)]
        want_all = np.log(np.exp(finite - finite.max()).sum()) + finite.max()
    np.testing.assert_allclose(outs[0][0], want, rtol=1e-6)
    np.testing.assert_allclose(outs[1][0], [[want_all]], rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_cumsum_cumprod_exclusive_reverse(dtype):
    a = _rand((3, 5), dtype, 0.5, 1.5)
    specs = [(n, {"axis": ax, "exclusive": ex, "reverse": rv}, [0])
             for n in ("cumsum", "cumprod") for ax in (0, -1) for ex in (False, True) for rv in (False, True)]
    outs = run_ops([a], specs)
    for (n, attrs, _), (got,) in zip(specs, outs):
        ax = attrs["axis"] % 2
        x = a.astype(np.float64) if npdt(dtype).kind == "f" else a
        if attrs["reverse"]:
            x = np.flip(x, ax)
        f = np.cumsum if n == "cumsum" else np.cumprod
        r = f(x, axis=ax)
        if attrs["exclusive"]:
            ident = np.zeros_like(np.take(r, [0], ax)) if n == "cumsum" else np.ones_like(np.take(r, [0], ax))
            r = np.concatenate([ident, np.take(r, range(r.shape[ax] - 1), ax)], ax)
        if attrs["reverse"]:
            r = np.flip(r, ax)
        tol = 2e-3 if dtype == "float16" else 1e-6
        np.testing.assert_allclose(got.astype(np.float64), r.astype(np.float64), rtol=tol, err_msg=f"{n} {attrs}")


def test_symbolic_reductions_and_errors():
    assert infer("sum", (("N", 4, 5), "float32"), axis=(1, 2))[0] == TensorType(("N",))
    assert infer("mean", (("N", 4), "float32"), axis=(0,), keepdims=True)[0] == TensorType((1, 4))
    a = _rand((6, 4), "float32")
    (got,) = run_op("mean", a, sym={0: ("N", 4)}, axis=(0,))
    np.testing.assert_allclose(got, a.mean(0), rtol=1e-6)
    with pytest.raises(ShapeError, match="out of range"):
        infer("sum", ((3, 4), "float32"), axis=(2,))
    with pytest.raises(ShapeError, match="twice"):
        infer("sum", ((3, 4), "float32"), axis=(1, -1))
    with pytest.raises(DTypeError, match=r"sum.*bool"):
        infer("sum", ((3, 4), "bool"))
    with pytest.raises(DTypeError, match=r"logsumexp.*int32"):
        infer("logsumexp", ((3, 4), "int32"))
    with pytest.raises(ShapeError, match="empty"):
        infer("argmax", ((3, 0), "float32"), axis=1)
