"""Tile-language kernels on GPU targets: on OpenCL (PoCL on a CPU in CI) against numpy; the lowered
programs on the reference work-group executor, which reports a missing barrier as a data race; and
CUDA source built by nvcc (no GPU is run)."""
import shutil

import numpy as np
import pytest
from tessera.language.examples import add, layer_norm, matmul, softmax

import tessera
import tessera.language as tl
from tessera.backend import get_backend
from tessera.runtime import opencl as rt
from tessera.target import Target

_OK, _WHY = rt.usable()
needs_opencl = pytest.mark.skipif(not _OK, reason=f"OpenCL is not usable here: {_WHY}")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on the PATH")


@needs_opencl
@pytest.mark.parametrize("n", [1, 300, 1024])
def test_vector_add_on_opencl(n):
    rng = np.random.default_rng(n)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    z = np.zeros(n, np.float32)
    add[(tl.cdiv(n, 128),)](x, y, z, n, BLOCK=128, target="opencl")
    np.testing.assert_array_equal(z, x + y)


@needs_opencl
def test_device_arrays_stay_on_the_device():
    x = rt.array(np.arange(500, dtype=np.float32).reshape(5, 100))
    z = rt.empty((5, 100), "float32")
    add[(4,)](x, x, z, 500, BLOCK=128, target="opencl")
    np.testing.assert_array_equal(z.numpy(), 2 * np.arange(500, dtype=np.float32).reshape(5, 100))


@needs_opencl
@pytest.mark.parametrize("rows,cols,block", [(5, 300, 512), (3, 64, 64)])
def test_softmax_on_opencl(rows, cols, block):
    x = np.random.default_rng(cols).standard_normal((rows, cols)).astype(np.float32)
    y = np.zeros_like(x)
    softmax[(rows,)](x, y, cols, cols, cols, BLOCK=block, target="opencl")
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@needs_opencl
def test_layer_norm_on_opencl():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 200)).astype(np.float32)
    w, b = rng.random(200, dtype=np.float32), rng.random(200, dtype=np.float32)
    y = np.zeros_like(x)
    layer_norm[(4,)](x, y, w, b, 200, 1e-5, BLOCK=256, target="opencl")
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


@needs_opencl
@pytest.mark.parametrize("m,n,k", [(100, 70, 50), (32, 32, 16)])
def test_matmul_on_opencl(m, n, k):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    matmul[(tl.cdiv(m, 32), tl.cdiv(n, 32))](a, b, c, m, n, k, k, 1, n, 1, n, 1,
                                             BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, target="opencl")
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@needs_opencl
def test_grids_beyond_the_launch_bucket_walk_their_programs():
    """A build for a grid of 3 launches 4 work-groups; a grid of 9 (next bucket) and a grid of 3 again
    reuse builds, each work-group running its column's programs grid-stride."""
    n = 9 * 64
    x = np.arange(n, dtype=np.float32)
    for g in (3, 9, 3):
        z = np.zeros(n, np.float32)
        add[(g,)](x, x, z, g * 64, BLOCK=64, target="opencl")
        np.testing.assert_array_equal(z[:g * 64], 2 * x[:g * 64])
        np.testing.assert_array_equal(z[g * 64:], 0)


def _lowered(kernel, args, grid, **meta):
    r = kernel.inspect(*args, grid=grid, target="opencl", **meta)
    target = Target("opencl")
    return get_backend(target).lower(r.primfunc, target)


@pytest.mark.parametrize("case", ["softmax", "matmul", "layer_norm"])
def test_gpu_lowering_has_no_data_races(case):
    from gpu_interp import run_gpu

    rng = np.random.default_rng(0)
    if case == "softmax":
        x = rng.standard_normal((2, 20)).astype(np.float32)
        y = np.zeros_like(x)
        func = _lowered(softmax, (x, y, 20, 20, 20), (2,), BLOCK=32, num_warps=1)
        run_gpu(func, [x.reshape(-1), y.reshape(-1), 20, 20, 20, 2, 1, 1])
        ref = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5)
    elif case == "layer_norm":
        x = rng.standard_normal((2, 20)).astype(np.float32)
        w, b, y = np.ones(20, np.float32), np.zeros(20, np.float32), np.zeros_like(x)
        func = _lowered(layer_norm, (x, y, w, b, 20, 1e-5), (2,), BLOCK=32, num_warps=1)
        run_gpu(func, [x.reshape(-1), y.reshape(-1), w, b, 20, np.float32(1e-5), 2, 1, 1])
        ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    else:
        a = rng.standard_normal((20, 12)).astype(np.float32)
        bm = rng.standard_normal((12, 24)).astype(np.float32)
        c = np.zeros((20, 24), np.float32)
        args = (a, bm, c, 20, 24, 12, 12, 1, 24, 1, 24, 1)
        func = _lowered(matmul, args, (2, 2), BLOCK_M=16, BLOCK_N=16, BLOCK_K=8, num_warps=1)
        run_gpu(func, [a.reshape(-1), bm.reshape(-1), c.reshape(-1), 20, 24, 12, 12, 24, 24, 2, 2, 1])
        np.testing.assert_allclose(c, a @ bm, rtol=1e-4, atol=1e-4)


@needs_nvcc
def test_cuda_source_builds_with_nvcc():
    x = np.random.default_rng(1).standard_normal((4, 100)).astype(np.float32)
    r = softmax.inspect(x, np.zeros_like(x), 100, 100, 100, BLOCK=128, target="cuda", grid=(4,))
    assert "__global__" in r.source and "__syncthreads()" in r.source and "blockIdx.x" in r.source
    a = np.zeros((64, 32), np.float32)
    r = matmul.inspect(a, a.T.copy(), np.zeros((64, 64), np.float32), 64, 64, 32, 32, 1, 64, 1, 64, 1,
                       BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, target="cuda", grid=(2, 2))
    assert "__shared__" in r.source


class _FakeCudaArray:
    """An object with the CUDA array interface (what a cupy array shows), without a GPU behind it."""

    def __init__(self, a):
        self.a = a
        self.shape, self.dtype, self.size, self.flags = a.shape, a.dtype, a.size, a.flags
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (0, False), "version": 3}

    def reshape(self, *shape):
        return _FakeCudaArray(self.a.reshape(*shape))


@needs_nvcc
def test_cuda_device_arrays_select_the_cuda_target():
    """A CUDA device array makes the launch build for cuda (nvcc runs); running needs a GPU, which this
    test does not use: the CUDA module says so."""
    from tessera.runtime import cuda

    if cuda.available():
        pytest.skip("a GPU is present: test_cuda_source_builds_with_nvcc and the device check cover it")
    x = _FakeCudaArray(np.zeros(256, np.float32))
    with pytest.raises(tessera.TesseraError, match="running CUDA kernels needs an NVIDIA GPU"):
        add[(2,)](x, x, _FakeCudaArray(np.zeros(256, np.float32)), 256, BLOCK=128)


def test_a_cuda_device_array_selects_the_cuda_target_without_a_build():
    """The target choice itself, checked everywhere (with or without nvcc or a GPU): a CUDA array makes
    the launch's target cuda, and an explicit target wins."""
    x = _FakeCudaArray(np.zeros(256, np.float32))
    assert add.target_of({}, [x, x, 256]).kind == "cuda"
    assert add.target_of({}, [np.zeros(4, np.float32), x]).kind == "cuda"
    assert add.target_of({"target": "c"}, [x]).kind == "c"
