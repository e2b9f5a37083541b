"""The hand-written example schedules (tessera/tir/schedule/examples): GEMM (B packed in the tensor
expression or by cache_read + compute_at + transform_layout, fp32 and int8) and conv2d, on small
problems against numpy, and their refusals."""
import numpy as np
import pytest

import tessera
from tessera import tir
from tessera.errors import ScheduleError
from tessera.target import Target
from tessera.tir.schedule.examples.conv2d import conv2d_program, schedule_conv2d
from tessera.tir.schedule.examples.gemm import gemm_program, plain_gemm_program, schedule_gemm

HAS_AVX2 = Target("c").has_feature("avx2") and Target("c").has_feature("fma")
HAS_CACHE_READ = hasattr(tir.Schedule, "cache_read") and hasattr(tir.Schedule, "transform_layout")
pytestmark = pytest.mark.skipif(not HAS_AVX2, reason="the examples use the AVX2 micro-kernels")
RNG = np.random.default_rng(5)


@pytest.mark.parametrize("pack,pack_a", [("te", False), ("te", True), ("cache_read", False)])
def test_gemm_example_fp32(pack, pack_a):
    if pack == "cache_read" and not HAS_CACHE_READ:
        pytest.skip("needs cache_read / transform_layout")
    M, N, K = 48, 64, 96
    prog = plain_gemm_program(M, N, K) if pack == "cache_read" else gemm_program(M, N, K, nr=16, pack_a=4 if pack_a else 0)
    sch = schedule_gemm(prog, mr=4, nr=16, kc=32, mc=16, pack=pack, pack_a=pack_a)
    a, b = RNG.standard_normal((M, K), dtype=np.float32), RNG.standard_normal((K, N), dtype=np.float32)
    c = np.full((M, N), np.nan, np.float32)
    lib = tessera.build(sch, target="c -num-threads=2")
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert "tintrin_avx2_gemm_4x16_f32(32, " in lib.get_source()


@pytest.mark.parametrize("pack", ["te", "cache_read"])
def test_gemm_example_int8(pack):
    if pack == "cache_read" and not HAS_CACHE_READ:
        pytest.skip("needs cache_read / transform_layout")
    M, N, K = 16, 16, 40
    prog = plain_gemm_program(M, N, K, "int8") if pack == "cache_read" else gemm_program(M, N, K, nr=8, dtype="int8")
    sch = schedule_gemm(prog, mr=4, nr=8, kc=20, mc=8, pack=pack, target="c -mcpu=haswell -mattr=+avx2,+fma")
    a = RNG.integers(0, 256, (M, K), dtype=np.uint8)
    b = RNG.integers(-128, 128, (K, N), dtype=np.int8)
    c = np.zeros((M, N), np.int32)
    tessera.build(sch)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_gemm_example_refusals():
    with pytest.raises(ScheduleError, match=r"the panels \(1 rows, 16 columns\) must divide M=8 and N=20"):
        gemm_program(8, 20, 8, nr=16)
    with pytest.raises(ScheduleError, match=r"K=6 is not a multiple"):
        gemm_program(8, 16, 6, nr=8, dtype="int8")
    with pytest.raises(ScheduleError, match=r"pack must be 'te' or 'cache_read'"):
        schedule_gemm(gemm_program(8, 16, 8), mr=4, nr=16, kc=8, mc=8, pack="nope")
    with pytest.raises(ScheduleError, match=r"runs under the predicate"):   # 6-row tiles of 8 rows
        schedule_gemm(gemm_program(8, 16, 8), mr=6, nr=16, kc=8, mc=6)


def _conv_ref(x, w, pad):
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, oc, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out


@pytest.mark.parametrize("owb,ocb", [(4, 16), (14, 8)])
def test_conv2d_example(owb, ocb):
    x = RNG.standard_normal((1, 8, 14, 28), dtype=np.float32)
    w = RNG.standard_normal((32, 8, 3, 3), dtype=np.float32)
    sch = schedule_conv2d(conv2d_program(1, 8, 14, 28, 32, 3, 3, pad=1, ocb=ocb), owb=owb, ocb=ocb)
    y = np.full((1, 32, 14, 28), np.nan, np.float32)
    tessera.build(sch, target="c -num-threads=2")(x, w, y)
    np.testing.assert_allclose(y, _conv_ref(x, w, 1), rtol=1e-4, atol=1e-4)
    with pytest.raises(ScheduleError, match=r"ocb=12 must divide the 32 output channels"):
        conv2d_program(1, 8, 14, 28, 32, 3, 3, pad=1, ocb=12)
