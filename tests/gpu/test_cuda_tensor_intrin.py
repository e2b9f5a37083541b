"""The CUDA tensor-core intrinsics (wmma 16x16x16 and mma.sync m16n8k16, fp16 -> fp32) through
`sch.tensorize`: the kernels compile with nvcc for sm_90 (skipped without nvcc) and launch one
warp per block; the targets that cannot run them refuse them by name. No GPU ran them here."""
import shutil

import pytest

import tessera
import tessera.backend
from tessera import te, tir
from tessera.errors import BuildError, TesseraError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on the PATH")
INTRINS = {"cuda_wmma_16x16x16_f16f32": (16, 16), "cuda_mma_m16n8k16_f16f32": (16, 8)}


def _fp16_gemm(intrin, m=64, n=64, k=64, warps=None):
    tm, tn = INTRINS[intrin]
    A = te.placeholder((m, k), name="A", dtype="float16")
    B = te.placeholder((k, n), name="B", dtype="float16")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                   name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, tm])
    jo, ji = sch.split(j, [None, tn])
    ko, ki = sch.split(kk, [None, 16])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.bind(io, "blockIdx.y")
    if warps:
        jb, jw = sch.split(jo, [None, warps])
        sch.bind(jb, "blockIdx.x")
        sch.bind(jw, warps_axis := "threadIdx.x")   # noqa: F841 - the wrong axis for warps
    else:
        sch.bind(jo, "blockIdx.x")
    sch.decompose_reduction(c, ko)
    sch.tensorize(ii, intrin)
    return sch


@pytest.mark.parametrize("intrin", sorted(INTRINS))
def test_tensorized_kernel_calls_the_intrinsic_from_one_warp(intrin):
    src = tessera.backend.generate(_fp16_gemm(intrin), "cuda")
    (k,) = src.meta[0]["kernels"]
    assert k["block"] == [32, 1, 1]
    assert f"{intrin}(&A[" in src.text and "__device__" in src.text


@needs_nvcc
def test_tensor_core_kernels_compile_for_sm90_without_spills():
    mod = tessera.ir.IRModule({name.split("_")[1]: _fp16_gemm(name).mod["main"] for name in INTRINS})
    art = tessera.backend.build(mod, "cuda -arch=sm_90")
    for kernel in ("wmma_kernel", "mma_kernel"):
        report = art.module.ptxas[kernel]
        assert report["spill_stores"] == 0 and report["spill_loads"] == 0 and report["registers"] > 0


def test_mma_needs_sm80():
    with pytest.raises(TesseraError, match="needs sm_80 or newer; the target builds for sm_75"):
        tessera.backend.generate(_fp16_gemm("cuda_mma_m16n8k16_f16f32"), "cuda -arch=sm_75")


def test_the_c_target_refuses_the_cuda_intrinsics():
    A = te.placeholder((16, 16), name="A", dtype="float16")
    B = te.placeholder((16, 16), name="B", dtype="float16")
    r = te.reduce_axis((0, 16), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                   name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    sch.decompose_reduction(c, sch.get_loops(c)[0])
    sch.tensorize(sch.get_loops(c)[0], "cuda_wmma_16x16x16_f16f32")
    with pytest.raises(TesseraError, match="cuda_wmma_16x16x16_f16f32.*sm_70"):
        tessera.backend.generate(sch, "c")


def test_a_warp_intrinsic_owns_threadIdx_x():
    with pytest.raises(BuildError, match="warp-level tensor intrinsic.*threadIdx.x to 2 threads"):
        tessera.backend.generate(_fp16_gemm("cuda_wmma_16x16x16_f16f32", warps=2), "cuda")
