"""flatten_buffer: every access becomes 1-D, params keep their shape, semantics are kept."""
import numpy as np
import pytest

from interp_lowered import run
from tessera import ir
from tessera.errors import TesseraError
from tessera.ir import (Allocate, Buffer, BufferLoad, BufferStore, For, PrimFunc, Ramp, Var, seq)
from tessera.tir.transform import flatten_buffer, lower_blocks
from tir_builders import assert_same, find, loops, matmul


def accesses(func):
    return find(func.body, BufferLoad) + find(func.body, BufferStore)


def assert_flat(func):
    for acc in accesses(func):
        assert acc.buffer.ndim == 1 and len(acc.indices) == 1


def test_matmul_flattened_params_and_semantics():
    f = lower_blocks(matmul(4, 5, 6))
    g = flatten_buffer(f)
    assert_flat(g)
    assert g.params == f.params  # original multi-dim Buffers stay the parameters
    flat = g.attrs["flat_params"]
    assert [fp.shape[0].value for fp in flat] == [24, 30, 20]
    assert [fp.name for fp in flat] == ["A", "B", "C"]
    # one flat Buffer per original: every access to C uses the same object
    c_bufs = {id(a.buffer) for a in accesses(g) if a.buffer.name == "C"}
    assert c_bufs == {id(flat[2])}
    A, B, C = assert_same(f, g)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)


def test_row_major_index():
    A = Buffer((2, 3, 4), "float32", "A")
    i, j, k = Var("i"), Var("j"), Var("k")
    f = PrimFunc([A], loops([(i, 2), (j, 3), (k, 4)], BufferStore(A, A[i, j, k] + 1.0, [i, j, k])))
    g = flatten_buffer(f)
    store = find(g.body, BufferStore)[0]
    a = np.arange(24, dtype="float32").reshape(2, 3, 4)
    # evaluate the flat index at a point: (1, 2, 3) -> 1*12 + 2*4 + 3 = 23
    from interp_lowered import Interp
    it = Interp(g, [a])
    it.vars.update({i: 1, j: 2, k: 3})
    assert it.eval(store.indices[0]) == 23
    assert_same(f, g)


def test_explicit_strides_param():
    # a (3, 4) view with row stride 6 (padded rows), passed as its 1-D storage
    A = Buffer((3, 4), "float32", "A", strides=(6, 1))
    B = Buffer((3, 4), "float32", "B")
    i, j = Var("i"), Var("j")
    f = PrimFunc([A, B], loops([(i, 3), (j, 4)], BufferStore(B, A[i, j] * 3.0, [i, j])))
    g = flatten_buffer(f)
    assert_flat(g)
    assert g.attrs["flat_params"][0].shape[0].value == 2 * 6 + 4  # the span the strides reach
    storage = np.arange(16, dtype="float32")
    b = np.zeros((3, 4), "float32")
    run(g, [storage, b])
    np.testing.assert_allclose(b, 3 * np.lib.stride_tricks.as_strided(storage, (3, 4), (24, 4)))
    assert_same(f, g)


def test_allocate_is_flattened():
    A, B = Buffer((2, 3), "float32", "A"), Buffer((2, 3), "float32", "B")
    T = Buffer((2, 3), "float32", "T", scope="local")
    i, j = Var("i"), Var("j")
    body = Allocate(T, seq(loops([(i, 2), (j, 3)], BufferStore(T, A[i, j] + 1.0, [i, j])),
                           loops([(i, 2), (j, 3)], BufferStore(B, T[i, j] * 2.0, [i, j]))))
    f = PrimFunc([A, B], body)
    g = flatten_buffer(f)
    assert_flat(g)
    alloc = g.body
    assert isinstance(alloc, Allocate) and alloc.buffer.ndim == 1 and alloc.buffer.scope == "local"
    assert alloc.buffer.shape[0].value == 6
    a, b = assert_same(f, g)
    np.testing.assert_allclose(b, (a + 1) * 2)


def test_ramp_in_last_dimension_stays_a_ramp():
    A, B = Buffer((3, 8), "float32", "A"), Buffer((3, 8), "float32", "B")
    i, jo = Var("i"), Var("jo")
    ramp = Ramp(jo * 4, 1, 4)
    f = PrimFunc([A, B], loops([(i, 3), (jo, 2)], BufferStore(B, A[i, ramp] + 1.0, [i, ramp])))
    g = flatten_buffer(f)
    assert_flat(g)
    for acc in accesses(g):
        assert isinstance(acc.indices[0], Ramp) and acc.indices[0].lanes == 4
        assert acc.indices[0].stride.value == 1
    a, b = assert_same(f, g)
    np.testing.assert_allclose(b, a + 1)


def test_ramp_in_outer_dimension_becomes_strided_ramp():
    A, B = Buffer((4, 5), "float32", "A"), Buffer((4, 5), "float32", "B")
    j = Var("j")
    ramp = Ramp(0, 1, 4)
    f = PrimFunc([A, B], For(j, 0, 5, "serial", BufferStore(B, A[ramp, j] * 2.0, [ramp, j])))
    g = flatten_buffer(f)
    store = find(g.body, BufferStore)[0]
    assert isinstance(store.indices[0], Ramp) and store.indices[0].stride.value == 5
    assert_same(f, g)


def test_symbolic_shape_and_scalar_param():
    n = Var("n")
    A, B = Buffer((n, 4), "float32", "A"), Buffer((n, 4), "float32", "B")
    alpha = Var("alpha", "float32")
    i, j = Var("i"), Var("j")
    f = PrimFunc([A, alpha, B], loops([(i, n), (j, 4)], BufferStore(B, A[i, j] * alpha, [i, j])))
    g = flatten_buffer(f)
    assert_flat(g)
    flat = g.attrs["flat_params"]
    assert flat[1] is None and flat[0].shape[0].script().replace(" ", "") == "n*4"
    a = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    b = np.zeros((5, 4), "float32")
    run(g, [a, np.float32(2.5), b])
    np.testing.assert_allclose(b, a * 2.5, rtol=1e-6)


def test_zero_dim_buffer():
    S, A = Buffer((), "float32", "S"), Buffer((4,), "float32", "A")
    i = Var("i")
    f = PrimFunc([A, S], For(i, 0, 4, "serial", BufferStore(S, S[()] + A[i], [])))
    g = flatten_buffer(f)
    assert_flat(g)
    assert g.attrs["flat_params"][1].shape[0].value == 1
    assert g.attrs["flat_params"][0] is A  # compact 1-D buffers are their own flat buffer
    a, s = np.arange(4, dtype="float32"), np.zeros((), "float32")
    run(g, [a, s])
    assert s == 6


def test_flatten_twice_is_stable():
    g = flatten_buffer(lower_blocks(matmul(3, 3, 3)))
    assert flatten_buffer(g) is g


def test_large_buffers_index_in_int64():
    A = Buffer((65536, 65536), "int8", "A")
    i = Var("i")
    f = PrimFunc([A], For(i, 0, 4, "serial", BufferStore(A, ir.const(1, "int8"), [i, i])))
    g = flatten_buffer(f)
    assert find(g.body, BufferStore)[0].indices[0].dtype == "int64"


def test_flatten_refuses_blocks():
    with pytest.raises(TesseraError, match="lower_blocks"):
        flatten_buffer(matmul())
