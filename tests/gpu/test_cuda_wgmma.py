"""The wgmma GEMM intrinsics (tir/tensor_intrin/cuda_wgmma.py) through schedule_gemm_wgmma: what nvcc
makes of them for sm_90a here, what the schedule and the renderer refuse, and on a Hopper GPU (the
device check runs these) their results against numpy."""
import shutil

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError, TesseraError
from tessera.ops.gpu import schedule_gemm_wgmma
from tessera.backend.cuda import MAX_SHARED
from tessera.runtime import cuda as rt
from tessera.tir.tensor_intrin import cuda_wgmma

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on the PATH")
SM90A = "cuda -arch=sm_90a"


def _hopper() -> bool:
    if not rt.available():
        return False
    import cupy
    return cupy.cuda.Device().compute_capability == "90"


def _fp16_gemm(m, n, k, batch=0):
    lead = (batch,) if batch else ()
    A = te.placeholder(lead + (m, k), name="A", dtype="float16")
    B = te.placeholder(lead + (k, n), name="B", dtype="float16")
    r = te.reduce_axis((0, k), name="k")
    if batch:
        C = te.compute((batch, m, n), lambda b, i, j: te.sum(A[b, i, r].astype("float32") * B[b, r, j].astype("float32"),
                                                             axis=r), name="C")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                       name="C")
    return te.create_prim_func([A, B, C])


def _scheduled(m, n, k, bm, bn, stages, batch=0):
    sch = tir.Schedule(_fp16_gemm(m, n, k, batch))
    return schedule_gemm_wgmma(sch, sch.get_block("C"), bm, bn, stages)


@needs_nvcc
@pytest.mark.parametrize("bm,bn,stages", [(128, 256, 4), (128, 128, 4), (64, 64, 3), (256, 128, 3)])
def test_wgmma_gemms_compile_for_sm90a_without_spills(bm, bn, stages):
    mod = tessera.build(_scheduled(512, 512, 256, bm, bn, stages), target=SM90A)
    (report,) = mod.ptxas.values()
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0 and report["registers"] > 0
    src = mod.source
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.f16.f16" in src
    assert f"__launch_bounds__({cuda_wgmma.threads(bm)})" in src
    assert f"cuda_wgmma_gemm_f16f32_{bm}x{bn}x64_s{stages}_z(256, " in src     # the zero start folded in


def test_wgmma_needs_the_arch_specific_target():
    sch = _scheduled(256, 256, 128, 128, 128, 4)
    for target in ("cuda", "cuda -arch=sm_90", "cuda -arch=sm_80"):
        with pytest.raises(TesseraError, match=r"needs the arch-specific target sm_90a \(cuda -arch=sm_90a\)"):
            tessera.backend.generate(sch, target)
    assert "wgmma" in tessera.backend.generate(sch, SM90A).text


def test_wgmma_schedule_refuses_what_it_cannot_tile():
    with pytest.raises(ScheduleError, match="BN is 64, 128, 192 or 256"):
        _scheduled(256, 512, 128, 128, 512, 4)
    with pytest.raises(ScheduleError, match="the accumulators fit"):
        _scheduled(256, 256, 128, 256, 256, 3)         # 512 threads x 128 accumulators
    with pytest.raises(ScheduleError, match="M a multiple of 128"):
        _scheduled(200, 256, 128, 128, 256, 4)
    with pytest.raises(TesseraError, match="BK is 64"):
        cuda_wgmma.check_shape(128, 128, 32, 4)


def test_wgmma_shared_memory_fits_hopper_and_is_checked():
    assert cuda_wgmma.shared_bytes(128, 256, 64, 4) <= MAX_SHARED[90]
    sch = _scheduled(512, 512, 128, 128, 256, 5)        # 5 stages of 48 KiB
    with pytest.raises(TesseraError, match="shared memory"):
        tessera.build(sch, target=SM90A)


@pytest.mark.skipif(not _hopper(), reason="needs a Hopper GPU (sm_90) with cupy")
@pytest.mark.parametrize("m,n,k,bm,bn,stages,batch", [
    (128, 256, 64, 128, 256, 4, 0),       # one block, one K slice
    (256, 512, 1024, 128, 256, 4, 0),     # many slices through the pipeline
    (384, 256, 200, 128, 128, 3, 0),      # K not a multiple of 64: a zero-filled tail
    (512, 256, 136, 256, 128, 3, 0),      # four warpgroups
    (128, 128, 96, 64, 64, 2, 3),         # batches on blockIdx.z
])
def test_wgmma_gemm_matches_numpy_on_hopper(m, n, k, bm, bn, stages, batch):
    rng = np.random.default_rng(0)
    lead = (batch,) if batch else ()
    a = rng.standard_normal(lead + (m, k)).astype("float16")
    b = rng.standard_normal(lead + (k, n)).astype("float16")
    c = np.full(lead + (m, n), np.nan, "float32")
    tessera.build(_scheduled(m, n, k, bm, bn, stages, batch), target=SM90A)(a, b, c)
    np.testing.assert_allclose(c, np.matmul(a.astype("float32"), b.astype("float32")), rtol=1e-3, atol=1e-3)
