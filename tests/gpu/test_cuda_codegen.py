"""CUDA code generation: every GPU case of the suite compiles with nvcc for sm_90 (skipped where
nvcc is absent; artifacts are cached on disk), the GEMM kernel spills nothing to local memory,
and running needs a GPU (skipped without one)."""
import shutil

import numpy as np
import pytest
from gpu_cases import CASES

import tessera
import tessera.backend
from tessera.runtime import cuda as rt

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on the PATH")


def test_cuda_source_uses_cuda_spellings():
    sch, _, _ = CASES["gemm_shared"]()
    src = tessera.backend.generate(sch, "cuda").text
    (k,) = tessera.backend.generate(sch, "cuda").meta[0]["kernels"]
    threads = k["block"][0] * k["block"][1] * k["block"][2]
    assert f'extern "C" __global__ void __launch_bounds__({threads}) main_kernel(const float* __restrict__ A' in src
    assert "__shared__ float A_shared[64] __attribute__((aligned(16)));" in src
    assert src.count("__syncthreads();") == 2
    assert "(int32_t)threadIdx.y" in src and "(int32_t)blockIdx.x" in src


@pytest.fixture(scope="module")
def all_cases_built():
    """Every GPU case as one function of one CUDA module: one nvcc run (its cubin cached on disk)."""
    mod = tessera.ir.IRModule({case: CASES[case]()[0].mod["main"] for case in sorted(CASES)})
    return tessera.backend.build(mod, "cuda -arch=sm_90")


@needs_nvcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_gpu_case_compiles_for_sm90(case, all_cases_built):
    art = all_cases_built
    (meta,) = [m for m in art.source.meta if m["name"] == case]
    names = [k["name"] for k in meta["kernels"]]
    assert names and all(n in art.module.ptxas for n in names)


@needs_nvcc
@pytest.mark.parametrize("case", ["gemm_shared", "gemm_local_acc", "gemm_tiled"])
def test_gemm_kernels_have_no_local_memory_spills(case, all_cases_built):
    report = all_cases_built.module.ptxas[f"{case}_kernel"]
    assert report["spill_stores"] == 0 and report["spill_loads"] == 0
    assert report["registers"] > 0 and report["smem"] > 0   # the shared tiles


def test_ptxas_report_is_parsed():
    text = ("ptxas info    : Compiling entry function 'k0' for 'sm_90'\n"
            "ptxas info    : Function properties for k0\n"
            "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
            "ptxas info    : Used 40 registers, used 0 barriers, 2048 bytes smem, 368 bytes cmem[0]\n")
    assert rt.parse_ptxas(text) == {"k0": {"registers": 40, "spill_stores": 4, "spill_loads": 12, "smem": 2048}}


@needs_nvcc
def test_nvcc_errors_carry_the_source_path():
    from tessera.backend.gpu import GPUSource
    from tessera.backend.cuda import CUDABackend
    from tessera.errors import BuildError
    from tessera.target import Target
    bad = GPUSource('extern "C" __global__ void broken() { undefined_name; }', (), Target("cuda"), "broken", meta=())
    with pytest.raises(BuildError, match=r"nvcc failed[\s\S]*source: .*\.cu[\s\S]*undefined"):
        CUDABackend().compile(bad)


@pytest.mark.skipif(not rt.available(), reason="no NVIDIA GPU with cupy here")
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_runs_every_case(case):
    sch, args, want = CASES[case]()
    tessera.build(sch, "cuda")(*args)
    for i, w in want.items():
        np.testing.assert_allclose(args[i], w, rtol=1e-4, atol=1e-4)


@needs_nvcc
@pytest.mark.skipif(rt.available(), reason="a GPU is present")
def test_calling_without_a_gpu_says_so():
    sch, args, _ = CASES["elementwise"]()
    mod = tessera.build(sch, "cuda")
    with pytest.raises(tessera.TesseraError, match="needs an NVIDIA GPU"):
        mod(*args)


def test_aligned_vector_copies_are_float4_and_the_rest_lane_by_lane():
    sch, _, _ = CASES["gemm_shared_float4"]()
    src = tessera.backend.generate(sch, "cuda").text
    assert src.count("*(float4*)(") == 2 and "__attribute__((aligned(16)))" in src
    # K = 10: row starts of A are not multiples of 4 floats, so no float4 may touch them
    from gpu_cases import gemm_shared
    sch, _, _ = gemm_shared(m=8, n=16, k=10, tile=4, vector=True)
    src = tessera.backend.generate(sch, "cuda").text
    assert "*(const float4*)(A" not in src
