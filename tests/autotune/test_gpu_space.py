"""The GPU design space (rules/multi_level_tiling_gpu.py, rules/gpu_bind.py, the GPU postprocessors):
the sampled GEMM programs have the cooperative-fetch structure, every sampled candidate computes
the right answer on PoCL, the limits of the target are enforced, CUDA candidates compile with nvcc
for sm_90, and CUDA measurement without a GPU is refused by name."""
import json
import shutil

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.autotune.measure import (
    BuildResult,
    LocalBuilder,
    LocalRunner,
    MeasureCandidate,
    check_device,
)
from tessera.autotune.postproc import VerifyGPUCode
from tessera.autotune.rules import (
    AutoBind,
    MultiLevelTilingGPU,
    SpaceContext,
    default_rules,
)
from tessera.autotune.rules.base import ANN_COOP_FETCH, META_PREFIX
from tessera.autotune.space import generate_design_space, sample_candidate
from tessera.autotune.task import TuneTask
from tessera.backend import generate
from tessera.errors import TesseraError
from tessera.ir import For, ForKind, post_order_visit, structural_equal
from tessera.ops.gpu import schedule_gemm_gpu
from tessera.runtime import cuda as cuda_rt
from tessera.runtime import opencl as cl_rt
from tessera.tir import Schedule
from tessera.tir.schedule import Trace

from autotune_programs import gemm, softmax

needs_opencl = pytest.mark.skipif(not cl_rt.usable()[0], reason=f"OpenCL: {cl_rt.usable()[1]}")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on the PATH")

SIZES = [(256, 256, 256), (200, 120, 72)]


def candidates(func, target, count, seeds=range(64)):
    """The first `count` accepted candidates of the function's first design space."""
    space = generate_design_space(func, target)[0]
    out = []
    for seed in seeds:
        sch = sample_candidate(func, space, target, seed)
        if sch is not None:
            out.append(sch)
            if len(out) == count:
                break
    assert len(out) == count, f"only {len(out)} of {count} candidates were accepted"
    return out


def is_const_true(e):
    return getattr(e, "value", None) in (1, True)


def loops_of(mod):
    found = []
    post_order_visit(mod["main"].body, lambda n: found.append(n) if type(n) is For else None)
    return found


def scopes(mod):
    """buffer name -> storage scope of the root block's allocations."""
    return {b.name: b.scope for b in mod["main"].body.block.alloc_buffers}


def test_gpu_targets_get_the_gpu_rules_and_limits():
    cuda = SpaceContext("cuda")
    assert cuda.is_gpu and cuda.max_threads_per_block == 1024 and cuda.max_shared_memory == 48 * 1024
    assert [type(r).__name__ for r in default_rules(cuda)] == ["AutoInline", "CrossThreadReduction", "TensorCoreGEMM",
                                                               "MultiLevelTilingGPU", "AutoBind", "AutoUnroll"]
    small = SpaceContext("cuda -max-threads-per-block=128")
    assert small.max_threads_per_block == 128 and max(small.thread_candidates) == 128
    assert not SpaceContext("c").is_gpu


@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_space_has_the_cooperative_fetch_structure(size):
    func = gemm(*size)
    spaces = generate_design_space(func, "opencl")
    assert len(spaces) == 1          # no untouched program: it cannot run on a GPU
    design = spaces[0].mod["main"]
    # the design space itself: shared caches annotated for cooperative fetching, a local accumulator
    names = {b.name: b.scope for b in design.body.block.alloc_buffers}
    assert names == {"A_shared": "shared", "B_shared": "shared", "C_local": "local"}
    m, n, _ = size
    for sch in candidates(func, "opencl", 3):
        mod = sch.mod
        assert scopes(mod) == {"A_shared": "shared", "B_shared": "shared", "C_local": "local"}
        tags = [lp.thread_binding.thread_tag for lp in loops_of(mod) if lp.kind == ForKind.THREAD_BINDING]
        assert {"blockIdx.x", "vthread.x", "threadIdx.x"} <= set(tags)
        # each cache block's copy is shared by the block's threads: a threadIdx.x loop of its own
        for cache in ("A_shared", "B_shared"):
            own = sch.get_loops(sch.get_block(cache))
            assert any(sch.get(lp).kind == ForKind.THREAD_BINDING and
                       sch.get(lp).thread_binding.thread_tag == "threadIdx.x" for lp in own[-3:])
        # the tiles cover the output: blocks x vthreads x threads x serial tiles = M x N
        bound = {lp.thread_binding.thread_tag: lp.extent.value for lp in loops_of(mod)
                 if lp.kind == ForKind.THREAD_BINDING}
        assert (m * n) % (bound["blockIdx.x"] * bound["vthread.x"] * bound["threadIdx.x"]) == 0
        # no meta_schedule annotation survives the postprocessors
        assert not any(k.startswith(META_PREFIX) for lp in loops_of(mod) for k in lp.annotations)
        src = generate(mod, "opencl").text
        assert "__local float A_shared[" in src and "__local float B_shared[" in src
        assert src.count("barrier(CLK_LOCAL_MEM_FENCE)") >= 2      # after the copies, before the next ones
        assert "get_local_id(0)" in src and "get_group_id(0)" in src
        # the accumulator is zeroed before the reduction (decomposed), not under an if in every step
        assert "C_init" in sch.state.index("main").blocks and "== 0)" not in src


def test_a_candidate_replays_from_its_json_trace():
    func = gemm(64, 48, 32)
    for sch in candidates(func, "opencl", 2):
        again = Schedule(func)
        Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), again)
        assert structural_equal(again.mod, sch.mod)


@needs_opencl
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_every_sampled_gemm_candidate_is_right_on_opencl(size):
    m, n, k = size
    func = gemm(*size)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    want = a @ b
    space = generate_design_space(func, "opencl")[0]
    built = 0
    for seed in range(3):
        sch = sample_candidate(func, space, "opencl", seed)
        if sch is None:
            continue
        c = np.full((m, n), np.nan, "float32")
        tessera.build(sch, target="opencl")(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        built += 1
    assert built >= 2


@needs_opencl
def test_elementwise_and_reductions_are_bound_by_autobind():
    A = te.placeholder((300, 70), name="A")
    B = te.compute((300, 70), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((300, 70), lambda i, j: te.max(B[i, j], 0.0), name="C")
    r = te.reduce_axis((0, 70), name="r")
    R = te.compute((300,), lambda i: te.sum(A[i, r], axis=r), name="R")
    a = np.random.default_rng(1).standard_normal((300, 70)).astype("float32")
    for func, want in ((te.create_prim_func([A, C]), np.maximum(a * 2, 0)),
                       (te.create_prim_func([A, R]), a.sum(1))):
        for sch in candidates(func, "opencl", 2):
            loops = loops_of(sch.mod)
            tags = {lp.thread_binding.thread_tag for lp in loops if lp.kind == ForKind.THREAD_BINDING}
            assert tags == {"blockIdx.x", "threadIdx.x"}
            assert len([b for b in sch.state.index("main").blocks if b != "root"]) <= 2  # B inlined
            out = np.full(want.shape, np.nan, "float32")
            tessera.build(sch, target="opencl")(a, out)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@needs_opencl
def test_softmax_rows_get_a_cross_thread_reduction_space_and_every_space_is_right():
    n, d = 24, 256
    func, ref = softmax(n, d)
    x = np.random.default_rng(2).standard_normal((n, d)).astype("float32")
    want = ref(x)
    spaces = generate_design_space(func, "opencl")
    assert len(spaces) == 4          # each of the two reductions: serial per thread, or shared by a block
    shared_by_threads = set()
    for space in spaces:
        sch = next(c for c in (sample_candidate(func, space, "opencl", seed) for seed in range(10)) if c is not None)
        for red in ("maxelem", "expsum"):
            names = [b for b in sch.state.index("main").blocks if b.startswith(red)]
            blk = sch.get_block(names[-1])
            inner = [sch.get(lp) for lp in sch.get_loops(blk)]
            # a cross-thread reduction: a threadIdx.x loop drives the reduction iterator
            if any(lp.kind == ForKind.THREAD_BINDING and lp.thread_binding.thread_tag == "threadIdx.x"
                   and lp.loop_var.name.startswith("k") for lp in inner):
                shared_by_threads.add((id(space), red))
        out = np.full((n, d), np.nan, "float32")
        tessera.build(sch, target="opencl")(x, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert len(shared_by_threads) == 4   # two spaces share the max, two the sum


@needs_opencl
def test_an_elementwise_consumer_of_a_batched_gemm_is_fused_into_its_kernel():
    b, m, n, k = 3, 64, 48, 40
    A = te.placeholder((b, m, k), name="A")
    W = te.placeholder((b, k, n), name="W")
    bias = te.placeholder((n,), name="bias")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((b, m, n), lambda z, i, j: te.sum(A[z, i, r] * W[z, r, j], axis=r), name="C")
    D = te.compute((b, m, n), lambda z, i, j: te.max(C[z, i, j] + bias[j], 0.0), name="D")
    func = te.create_prim_func([A, W, bias, D])
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((b, m, k)).astype("float32"), rng.standard_normal((b, k, n)).astype("float32")
    bb = rng.standard_normal(n).astype("float32")
    for sch in candidates(func, "opencl", 2):
        src = generate(sch.mod, "opencl")
        (meta,) = src.meta
        assert len(meta["kernels"]) == 1 and not meta["workspaces"]      # no global intermediate C
        assert scopes(sch.mod) == {"A_shared": "shared", "W_shared": "shared", "C_local": "local"}
        out = np.full((b, m, n), np.nan, "float32")
        tessera.build(sch, target="opencl")(a, w, bb, out)
        np.testing.assert_allclose(out, np.maximum(a @ w + bb, 0), rtol=1e-4, atol=1e-4)


def test_gemm_with_enough_outputs_gets_no_cross_thread_space():
    assert len(generate_design_space(gemm(64, 64, 512), "opencl")) == 1
    # few outputs, a long reduction (a matrix-vector-like product): both spaces
    assert len(generate_design_space(gemm(4, 16, 1000), "opencl")) == 2


def test_autobind_leaves_bound_blocks_and_multi_level_tiling_gpu_leaves_elementwise_blocks():
    ctx = SpaceContext("opencl")
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    assert MultiLevelTilingGPU(ctx).apply(sch, sch.get_block("B")) == [sch]
    bx, tx = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    assert AutoBind(ctx).apply(sch, sch.get_block("B")) == [sch]


def test_verify_gpu_code_enforces_the_thread_and_shared_memory_limits():
    func = gemm(256, 256, 256)
    schs = candidates(func, "opencl", 6)
    metas = [generate(s.mod, "opencl").meta[0]["kernels"][0] for s in schs]
    threads = [k["block"][0] * k["block"][1] * k["block"][2] for k in metas]
    shared = [k["shared_bytes"] for k in metas]
    few = min(threads)
    strict = VerifyGPUCode(SpaceContext(f"opencl -max-threads-per-block={few}"))
    assert [strict.apply(s) for s in schs] == [t <= few for t in threads]
    cuda = VerifyGPUCode(SpaceContext("cuda"))
    fits = [t <= 1024 and k["shared_bytes"] <= 48 * 1024 and k["local_bytes"] <= VerifyGPUCode.MAX_LOCAL_BYTES
            and (t >= 32 or not k["shared_bytes"] or k["grid"] == [1, 1, 1]) for t, k in zip(threads, metas)]
    assert [cuda.apply(s) for s in schs] == fits
    # and the sampled cuda candidates all fit
    for s in candidates(func, "cuda", 2):
        k = generate(s.mod, "cuda").meta[0]["kernels"][0]
        assert k["block"][0] * k["block"][1] * k["block"][2] <= 1024 and k["shared_bytes"] <= 48 * 1024


def _hand_gemm(threads_i, threads_j, thread_tile):
    """gemm 256^3 under schedule_gemm_gpu with these threads and register tile a thread."""
    func = gemm(256, 256, 256)
    sch = Schedule(func)
    return schedule_gemm_gpu(sch, sch.get_block("C"), tile_m=threads_i * thread_tile, tile_n=threads_j * thread_tile,
                             thread_m=thread_tile, thread_n=thread_tile)


def test_verify_gpu_code_wants_a_warp_a_block_on_cuda_and_a_bounded_register_tile():
    ok, sub_warp, big_tile = _hand_gemm(8, 8, 2), _hand_gemm(4, 4, 4), _hand_gemm(8, 8, 16)
    for target in ("cuda", "opencl"):
        v = VerifyGPUCode(SpaceContext(target))
        assert v.apply(ok)
        assert v.apply(sub_warp) == (target == "opencl")       # 16 threads a block: lanes of a warp idle
        assert not v.apply(big_tile)                           # 256 accumulators a thread spill


def test_most_sampled_cuda_gemm_candidates_pass_verification():
    """The GPU tiling draws each level within bounds: a large GEMM's samples mostly fit a block's
    shared memory, a thread's registers and a warp a block (one five-way draw: about 1 in 100)."""
    func = gemm(4096, 4096, 4096)
    task = TuneTask(func, "cuda")
    rng = np.random.default_rng(0)
    sampled = [s for s in (task.space.sample(rng) for _ in range(40)) if s is not None]
    assert len(sampled) >= 35
    assert sum(task.space.verify(s) for s in sampled) > len(sampled) // 2     # seeded: the same draws anywhere


@pytest.mark.parametrize("vthreads", [8, 16])
def test_verify_gpu_code_allows_at_most_8_virtual_threads(vthreads):
    A = te.placeholder((4096,), name="A")
    B = te.compute((4096,), lambda i: A[i] + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    bx, vx, tx = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, vthreads, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(vx, "vthread.x")
    sch.bind(tx, "threadIdx.x")
    assert VerifyGPUCode(SpaceContext("opencl")).apply(sch) == (vthreads <= 8)


def test_cooperative_fetch_vectorizes_only_where_the_width_divides_the_copy():
    func = gemm(200, 120, 72)
    vectorized = 0
    for sch in candidates(func, "opencl", 8):
        idx = sch.state.index("main")
        for cache in ("A_shared", "B_shared"):
            blk = sch.get_block(cache)
            assert ANN_COOP_FETCH not in sch.get(blk).annotations
            loops = [sch.get(lp) for lp in sch.get_loops(blk)]
            if loops[-1].kind == ForKind.VECTORIZED:
                vectorized += 1
                assert loops[-1].extent.value in (2, 4)
                assert loops[-2].kind == ForKind.THREAD_BINDING and loops[-2].thread_binding.thread_tag == "threadIdx.x"
                # the threads x lanes divide the copy: no guard on a vector lane
                assert is_const_true(idx.blocks[cache].predicate)
    assert vectorized > 0


@needs_nvcc
def test_cuda_candidates_compile_with_nvcc_for_sm_90_in_the_tuners_builder():
    func = gemm(200, 120, 72)
    schs = candidates(func, "cuda", 2)
    for sch in schs:
        src = generate(sch.mod, "cuda").text
        assert "__shared__ float A_shared[" in src and "__syncthreads()" in src
    with LocalBuilder(max_workers=1) as builder:
        results = builder.build([MeasureCandidate(func, s.trace.as_json()) for s in schs], "cuda -arch=sm_90")
    for sch, br in zip(schs, results):
        assert br.ok, br.error_msg
        with open(br.path) as f:
            doc = json.load(f)
        assert doc["arch"] == "sm_90"
        (kernel,) = doc["functions"][0]["kernels"]
        report = doc["ptxas"][kernel["name"]]          # ptxas -v: registers, spills, shared bytes
        assert report["registers"] > 0 and report["smem"] == kernel["shared_bytes"]


@pytest.mark.skipif(cuda_rt.available(), reason="an NVIDIA GPU is present: measurement is possible")
def test_cuda_measurement_without_a_gpu_is_refused_by_name():
    func = gemm(32, 32, 32)
    (sch,) = candidates(func, "cuda", 1)
    cand = MeasureCandidate(func, sch.trace.as_json())
    with pytest.raises(TesseraError, match="NVIDIA GPU"):
        LocalRunner().run([cand], [BuildResult("/nonexistent.cu.json", "main")], "cuda")
    with pytest.raises(TesseraError, match="NVIDIA GPU"):
        check_device("cuda -arch=sm_90")
    check_device("opencl")        # others pass
