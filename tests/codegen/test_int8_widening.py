"""Widening casts of 8- and 16-bit integer vectors (int8 kernels: u8 data x s8 weights in int32) go
through tsr_widen_src_* (an empty asm keeping the loaded lanes in a register, so gcc converts them with
one vpmovzx/vpmovsx instead of a load per lane); the values are numpy's."""
import numpy as np
import pytest

import tessera
from tessera import te, tir


@pytest.mark.parametrize("src,lanes", [("uint8", 16), ("int8", 16), ("uint8", 8), ("int16", 8), ("uint16", 4)])
def test_vectorized_widening_product_equals_numpy(src, lanes, isa_target):
    n = 96
    A = te.placeholder((n,), name="A", dtype=src)
    B = te.placeholder((n,), name="B", dtype="int8")
    C = te.compute((n,), lambda i: A[i].astype("int32") * B[i].astype("int32") + A[i].astype("int32"), name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    _, ii = sch.split(i, [None, lanes])
    sch.vectorize(ii)
    lib = tessera.build(sch.mod, target=isa_target)
    rng = np.random.default_rng(3)
    info = np.iinfo(src)
    a = rng.integers(info.min, info.max + 1, n).astype(src)
    b = rng.integers(-128, 128, n).astype("int8")
    c = np.zeros(n, "int32")
    lib(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) * b + a)
    source = lib.get_source()
    if info.bits * lanes in (64, 128):      # (a vector wider than the target's is cast in halves)
        assert f"tsr_widen_src_{src}x" in source


@pytest.mark.parametrize("src", ["uint8", "int8", "int16", "uint16"])
def test_vectorized_small_int_to_float_equals_numpy(src, isa_target):
    # through int32 lanes (gcc converts 8/16-bit lanes to float one at a time otherwise)
    n = 64
    A = te.placeholder((n,), name="A", dtype=src)
    W = te.placeholder((n,), name="W", dtype="float32")
    C = te.compute((n,), lambda i: A[i].astype("float32") * W[i] + 0.5, name="C")
    sch = tir.Schedule(te.create_prim_func([A, W, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    _, ii = sch.split(i, [None, 16])
    sch.vectorize(ii)
    lib = tessera.build(sch.mod, target=isa_target)
    info = np.iinfo(src)
    a = np.random.default_rng(4).integers(info.min, info.max + 1, n).astype(src)
    w = np.random.default_rng(5).standard_normal(n).astype("float32")
    c = np.zeros(n, "float32")
    lib(a, w, c)
    np.testing.assert_allclose(c, a.astype(np.float32) * w + np.float32(0.5), rtol=1e-6)


@pytest.mark.parametrize("dst", ["uint8", "int8", "int16", "uint16"])
def test_vectorized_float_to_small_int_equals_numpy(dst, isa_target):
    # through int32 lanes (gcc converts a float vector to 8/16-bit lanes one at a time otherwise);
    # values in the type's range truncate toward zero as C's conversion does
    n = 64
    info = np.iinfo(dst)
    A = te.placeholder((n,), name="A", dtype="float32")
    C = te.compute((n,), lambda i: te.max(te.min(A[i], float(info.max)), float(info.min)).astype(dst), name="C")
    sch = tir.Schedule(te.create_prim_func([A, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    _, ii = sch.split(i, [None, 16])
    sch.vectorize(ii)
    lib = tessera.build(sch.mod, target=isa_target)
    a = np.random.default_rng(6).uniform(info.min - 50, info.max + 50, n).astype("float32")
    c = np.zeros(n, dst)
    lib(a, c)
    np.testing.assert_array_equal(c, np.trunc(np.clip(a, info.min, info.max)).astype(dst))
