"""Tile-language kernels compiled for the C target against numpy: vector add, row softmax, layer
norm and a blocked matmul, with sizes the blocks do not divide (every mask boundary)."""
import numpy as np
import pytest
from tessera.language.examples import add, layer_norm, matmul, softmax

import tessera.language as tl

TARGET = "c -num-threads=2"


@pytest.mark.parametrize("n", [1, 127, 128, 1000])
def test_vector_add_matches_numpy(n):
    rng = np.random.default_rng(n)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    z = np.full(n, -1.0, np.float32)
    add[(tl.cdiv(n, 128),)](x, y, z, n, BLOCK=128, target=TARGET)
    np.testing.assert_array_equal(z, x + y)


def test_vector_add_leaves_memory_past_the_mask_alone():
    x = np.arange(300, dtype=np.float32)
    z = np.full(400, -7.0, np.float32)
    add[(3,)](x, x, z[:300], 300, BLOCK=128, target=TARGET)
    np.testing.assert_array_equal(z[:300], 2 * x)
    np.testing.assert_array_equal(z[300:], -7.0)


@pytest.mark.parametrize("rows,cols,block", [(5, 1000, 1024), (3, 64, 64), (4, 17, 32)])
def test_row_softmax_matches_numpy(rows, cols, block):
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32) * 4
    y = np.zeros_like(x)
    softmax[(rows,)](x, y, cols, x.strides[0] // 4, y.strides[0] // 4, BLOCK=block, target=TARGET)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_softmax_on_a_strided_view_reads_only_its_rows():
    big = np.random.default_rng(1).standard_normal((6, 200)).astype(np.float32)
    x = big[:, :150]                                  # rows 200 floats apart
    y = np.zeros((6, 150), np.float32)
    softmax[(6,)](x, y, 150, 200, 150, BLOCK=256, target=TARGET)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cols", [1000, 256])
def test_layer_norm_matches_numpy(cols):
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((7, cols)).astype(np.float32)
    w, b = rng.random(cols, dtype=np.float32), rng.random(cols, dtype=np.float32)
    y = np.zeros_like(x)
    layer_norm[(7,)](x, y, w, b, cols, 1e-5, BLOCK=1024, target=TARGET)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("m,n,k", [(100, 70, 50), (64, 64, 64), (1, 33, 7)])
def test_matmul_matches_numpy(m, n, k):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    grid = lambda meta: (tl.cdiv(m, meta["BLOCK_M"]), tl.cdiv(n, meta["BLOCK_N"]))  # noqa: E731
    matmul[grid](a, b, c, m, n, k, k, 1, n, 1, n, 1, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, target=TARGET)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_uses_the_targets_micro_kernel(isa_target):
    """The dot runs on the GEMM micro-kernel of the target's ISA (AVX-512 or AVX2+FMA), and matches numpy."""
    from tessera.target import Target

    target = f"{isa_target} -num-threads=2"
    m, n, k = 64, 96, 40
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    meta = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    grid = (tl.cdiv(m, 32), tl.cdiv(n, 32))
    matmul[grid](a, b, c, m, n, k, k, 1, n, 1, n, 1, **meta, target=target)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    src = matmul.inspect(a, b, c, m, n, k, k, 1, n, 1, n, 1, **meta, target=target, grid=grid).source
    isa = "avx512" if Target(isa_target).has_feature("avx512f") else "avx2"
    assert f"tintrin_{isa}_gemm_" in src
