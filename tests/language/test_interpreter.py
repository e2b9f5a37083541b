"""The interpreter (TESSERA_INTERPRET=1) against numpy and against the compiled kernels, on shapes
hypothesis draws with blocks that do not divide them (every mask boundary)."""
import inspect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tessera.language.examples import add, layer_norm, matmul, softmax

import tessera.language as tl
from tessera.language import KernelError

TARGET = "c -num-threads=2"
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _both(kernel, grid, make_args, **meta):
    """Outputs of the interpreted and of the compiled kernel (fresh arrays from make_args)."""
    a, b = make_args(), make_args()
    kernel[grid](*a, **meta, interpret=True)
    kernel[grid](*b, **meta, target=TARGET)
    return a, b


@SETTINGS
@given(n=st.integers(1, 3000), block=st.sampled_from([16, 128, 1024]))
def test_vector_add_interpreter_and_compiled_agree(n, block):
    rng = np.random.default_rng(n)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a, b = _both(add, (tl.cdiv(n, block),), lambda: (x, y, np.zeros(n, np.float32), n), BLOCK=block)
    np.testing.assert_array_equal(a[2], x + y)
    np.testing.assert_array_equal(b[2], x + y)


@SETTINGS
@given(rows=st.integers(1, 6), cols=st.integers(1, 700))
def test_softmax_interpreter_and_compiled_agree(rows, cols):
    x = np.random.default_rng(cols).standard_normal((rows, cols)).astype(np.float32)
    block = 1 << max(0, (cols - 1).bit_length())
    a, b = _both(softmax, (rows,), lambda: (x, np.zeros_like(x), cols, cols, cols), BLOCK=block)
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(a[1], ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b[1], a[1], rtol=1e-5, atol=1e-7)


@SETTINGS
@given(cols=st.integers(2, 600))
def test_layer_norm_interpreter_and_compiled_agree(cols):
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    w, bias = rng.random(cols, dtype=np.float32), rng.random(cols, dtype=np.float32)
    a, b = _both(layer_norm, (3,), lambda: (x, np.zeros_like(x), w, bias, cols, 1e-5), BLOCK=1024)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + bias
    np.testing.assert_allclose(a[1], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b[1], a[1], rtol=1e-4, atol=1e-5)


@SETTINGS
@given(m=st.integers(1, 80), n=st.integers(1, 80), k=st.integers(1, 70))
def test_matmul_interpreter_and_compiled_agree(m, n, k):
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    grid = (tl.cdiv(m, 32), tl.cdiv(n, 32))
    a, b = _both(matmul, grid, lambda: (A, B, np.zeros((m, n), np.float32), m, n, k, k, 1, n, 1, n, 1),
                 BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    np.testing.assert_allclose(a[2], A @ B, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b[2], a[2], rtol=1e-4, atol=1e-4)


def test_interpreter_refuses_an_out_of_range_store_naming_the_line():
    x = np.ones(300, np.float32)
    z = np.zeros(10, np.float32)
    with pytest.raises(KernelError) as e:
        add[(3,)](x, x, z, 300, BLOCK=128, interpret=True)
    msg = str(e.value)
    lines, first = inspect.getsourcelines(add.fn)
    line = first + next(i for i, t in enumerate(lines) if "tl.store(Z + offs" in t)
    assert f"examples.py:{line}" in msg and "tl.store(Z + offs, x + y, mask=mask)" in msg
    assert "offset 10 of argument 'Z', which has 10 elements" in msg


def test_environment_variable_selects_the_interpreter(monkeypatch):
    monkeypatch.setenv("TESSERA_INTERPRET", "1")
    x = np.arange(50, dtype=np.float32)
    z = np.zeros(10, np.float32)
    with pytest.raises(KernelError, match="out-of-range"):   # only the interpreter checks accesses
        add[(1,)](x, x, z, 50, BLOCK=64)
    z = np.zeros(50, np.float32)
    add[(1,)](x, x, z, 50, BLOCK=64)
    np.testing.assert_array_equal(z, 2 * x)
