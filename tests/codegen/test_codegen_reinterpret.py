"""The C backend's `reinterpret` call (the bits of a value read as another dtype of the same width)
against numpy's view, scalar and in a vectorized loop; a width mismatch is refused."""
import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.errors import TesseraError
from tessera.ir import expr as E

RNG = np.random.default_rng(71)
PAIRS = [("float32", "int32"), ("int32", "float32"), ("float64", "uint64"), ("int64", "float64"),
         ("float16", "int16"), ("uint16", "float16"), ("bfloat16", "uint16"), ("int16", "bfloat16"),
         ("float16", "bfloat16"), ("uint32", "int32"), ("int8", "uint8")]


def _np(dt):
    return np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)


def _data(dt, n):
    if dt in ("uint16", "int16"):
        # bit patterns that are finite as float16 and as bfloat16 (a NaN's payload is not a value)
        bits = RNG.integers(0, 0x3C00, n) | (RNG.integers(0, 2, n) << 15)
        return bits.astype(np.uint16).view(_np(dt))
    if np.issubdtype(_np(dt), np.integer):
        info = np.iinfo(_np(dt))
        return RNG.integers(info.min, info.max, n, dtype=_np(dt), endpoint=True)
    return (RNG.standard_normal(n) * 1e3).astype(np.float32).astype(_np(dt))


@pytest.mark.parametrize("src,dst", PAIRS)
def test_reinterpret_matches_numpy_view(src, dst):
    n = 64
    A = te.placeholder((n,), src, "A")
    B = te.compute((n,), lambda i: E.Call(dst, "reinterpret", (A[i],)), name="B")
    func = te.create_prim_func([A, B])
    sch = tir.Schedule(func)
    _, inner = sch.split(sch.get_loops(sch.get_block("B"))[0], factors=[None, 8])
    sch.vectorize(inner)
    a = _data(src, n)
    want = a.view(_np(dst))
    for f in (func, sch):
        lib = tessera.build(f)
        b = np.zeros(n, _np(dst))
        lib(a, b)
        np.testing.assert_array_equal(b.view(np.uint8), want.view(np.uint8))
    if src not in ("int8", "uint32"):
        assert f"tsr_reinterpret_{src}_{dst}" in lib.get_source()


def test_reinterpret_refuses_different_widths():
    A = te.placeholder((4,), "float32", "A")
    B = te.compute((4,), lambda i: E.Call("int64", "reinterpret", (A[i],)), name="B")
    with pytest.raises(TesseraError, match="one width"):
        tessera.build(te.create_prim_func([A, B]))
