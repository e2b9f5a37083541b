"""@tessera.jit: constexpr specialization and caching, the arguments a launch takes, the grid as a
function of the arguments, and kernel.inspect."""
import glob
import os

import numpy as np
import pytest
from tessera.language.examples import add, softmax

import tessera
import tessera.language as tl
from tessera.language.jit import JITFunction

TARGET = "c -num-threads=2"


@tessera.jit
def scale(X, Y, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=mask) * alpha, mask=mask)


@tessera.jit
def strided_copy(X, Y, n, sx, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs * sx, mask=mask), mask=mask)


def test_each_constexpr_set_compiles_once():
    k = JITFunction(scale.fn)
    x = np.arange(100, dtype=np.float32)
    for block in (32, 32, 64, 32):
        y = np.zeros_like(x)
        k[(tl.cdiv(100, block),)](x, y, 100, 2.5, BLOCK=block, target=TARGET)
        np.testing.assert_array_equal(y, 2.5 * x)
    assert len(k.cache) == 2
    k[(4,)](x, np.zeros_like(x), 100, 0.5, BLOCK=32, target=TARGET)   # another runtime scalar: no new build
    assert len(k.cache) == 2


def test_compiled_kernel_is_reused_from_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    x = np.arange(64, dtype=np.float32)
    JITFunction(scale.fn)[(1,)](x, np.zeros_like(x), 64, 1.5, BLOCK=64, target=TARGET)
    built = sorted(glob.glob(os.path.join(tmp_path, "**", "*.so"), recursive=True))
    assert built
    stamps = {p: os.stat(p).st_mtime_ns for p in built}
    y = np.zeros_like(x)
    JITFunction(scale.fn)[(1,)](x, y, 64, 1.5, BLOCK=64, target=TARGET)   # a fresh process's view: no memory cache
    np.testing.assert_array_equal(y, 1.5 * x)
    again = sorted(glob.glob(os.path.join(tmp_path, "**", "*.so"), recursive=True))
    assert again == built and {p: os.stat(p).st_mtime_ns for p in again} == stamps


def test_unit_stride_is_specialized_and_others_stay_runtime():
    k = JITFunction(strided_copy.fn)
    x = np.arange(300, dtype=np.float32)
    y = np.zeros(100, np.float32)
    k[(4,)](x, y, 100, 1, BLOCK=32, target=TARGET)
    np.testing.assert_array_equal(y, x[:100])
    k[(4,)](x, y, 100, 3, BLOCK=32, target=TARGET)
    np.testing.assert_array_equal(y, x[:300:3])
    k[(4,)](x, y, 100, 2, BLOCK=32, target=TARGET)
    np.testing.assert_array_equal(y, x[:200:2])
    assert len(k.cache) == 2      # sx == 1 is its own kernel (contiguous loads); 2 and 3 share one
    src = k.inspect(x, y, 100, 1, BLOCK=32, target=TARGET).source
    assert "sx" not in src.split("tessera_call_")[0]


def test_grid_may_be_a_function_of_the_arguments():
    x = np.arange(1000, dtype=np.float32)
    z = np.zeros_like(x)
    add[lambda meta: (tl.cdiv(meta["n"], meta["BLOCK"]),)](x, x, z, 1000, BLOCK=256, target=TARGET)
    np.testing.assert_array_equal(z, 2 * x)


def test_empty_grid_runs_nothing():
    z = np.full(8, 3.0, np.float32)
    add[(0,)](z, z, z, 8, BLOCK=8, target=TARGET)
    np.testing.assert_array_equal(z, 3.0)


def test_ndarray_and_non_contiguous_arguments():
    x = tessera.nd.array(np.arange(256, dtype=np.float32))
    z = tessera.nd.empty((256,), "float32")
    add[(2,)](x, x, z, 256, BLOCK=128, target=TARGET)
    np.testing.assert_array_equal(z.numpy(), 2 * np.arange(256, dtype=np.float32))
    big = np.arange(600, dtype=np.float32).reshape(3, 200)
    out = np.zeros((3, 100), np.float32)
    softmax[(3,)](big[:, 50:150], out, 100, 200, 100, BLOCK=128, target=TARGET)
    ref = np.exp(big[:, 50:150] - big[:, 50:150].max(1, keepdims=True))
    np.testing.assert_allclose(out, ref / ref.sum(1, keepdims=True), rtol=1e-5)


def test_cpu_torch_tensors_are_taken_through_dlpack():
    torch = pytest.importorskip("torch")
    x = torch.arange(300, dtype=torch.float32)
    z = torch.zeros(300)
    add[(3,)](x, x, z, 300, BLOCK=128, target=TARGET)
    assert torch.equal(z, 2 * x)


def test_inspect_shows_tile_ir_loop_program_and_source():
    x = np.zeros(100, np.float32)
    r = add.inspect(x, x, x, 100, BLOCK=64, target=TARGET)
    assert "arange {start=0, end=64} : <64 x i32>" in r.tile_ir
    assert "load" in r.tile_ir and "store" in r.tile_ir
    assert "T.parallel(0, grid_x * grid_y * grid_z)" in r.loop_program
    assert "T.Ramp(" in r.loop_program        # the unmasked tile is vector code
    assert "tessera_call_add" in r.source and "#pragma omp" in r.source
