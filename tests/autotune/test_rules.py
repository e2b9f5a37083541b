"""Design-space rules, each on its own on small programs (and the schedule fixes they rely on):
every candidate built is compared with numpy."""
import numpy as np
import pytest
from autotune_programs import bmm_bias_gelu, conv2d_nchw, elementwise_chain, row_sum

import tessera
from tessera import te, tir
from tessera.autotune.rules import (
    AddRFactor,
    AutoInline,
    MultiLevelTiling,
    ParallelizeVectorizeUnroll,
    RandomComputeLocation,
    SpaceContext,
    UseTensorIntrin,
)
from tessera.autotune.space import generate_design_space, sample_candidate
from tessera.errors import ScheduleError
from tessera.ir import ForKind
from tessera.target import Target
from tessera.tir.schedule import INLINE_MARK, ROOT_MARK, Schedule
from tessera.tir.schedule.examples.gemm import gemm_program, schedule_gemm

T = "c -num-threads=2"


def check(func, ref, sch, target=T, seed=0, shapes=None):
    """Build the candidate and compare it with numpy on random inputs."""
    rng = np.random.default_rng(seed)
    bufs = list(func.buffer_map.values()) if hasattr(func, "buffer_map") and func.buffer_map else func.params
    shape = shapes or [tuple(int(s) for s in b.shape) for b in bufs]
    ins = [rng.standard_normal(s).astype("float32") for s in shape[:-1]]
    out = np.zeros(shape[-1], "float32")
    tessera.build(sch, target=target)(*ins, out)
    np.testing.assert_allclose(out, ref(*ins), rtol=1e-4, atol=1e-4)


def blocks(sch):
    return set(sch.state.index("main").blocks)


def spaces_with(func, *rule_types, target=T):
    ctx = SpaceContext(target)
    return generate_design_space(func, target, rules=[r(ctx) for r in rule_types])


# --- AutoInline -------------------------------------------------------------------------------
def test_auto_inline_folds_an_elementwise_chain_into_its_output():
    func, ref = elementwise_chain()
    spaces = spaces_with(func, AutoInline)
    assert blocks(spaces[0]) == {"root", "D"}
    assert blocks(spaces[-1]) == {"root", "B", "C", "D"}  # the untouched program
    check(func, ref, spaces[0])


def test_auto_inline_keeps_a_packing_copy_and_a_padding():
    assert "B_pack" in blocks(spaces_with(gemm_program(32, 32, 32, nr=16), AutoInline)[0])
    assert "pad" in blocks(spaces_with(conv2d_nchw()[0], AutoInline)[0])


# --- MultiLevelTiling -------------------------------------------------------------------------
def test_multi_level_tiling_is_ssrsrs_with_write_cache_variants():
    func = gemm_program(64, 64, 64, nr=16)
    spaces = spaces_with(func, MultiLevelTiling)
    assert len(spaces) == 4  # no cache, cache at level 1, cache at level 2, untouched
    for sch in spaces[:3]:
        tiles = [i for i in sch.trace.insts if i.kind.name == "SamplePerfectTile"]
        assert [i.attrs[0] for i in tiles] == [4, 4, 2] and all(i.attrs[1] == 64 for i in tiles)
        loops = sch.state.index("main").loops_above(sch.state.index("main").blocks["C"])
        assert len(loops) == 10
    assert "C_local" not in blocks(spaces[0])
    assert all(any(b.endswith("_local") for b in blocks(s)) for s in spaces[1:3])
    check(func, lambda a, b: a @ b, sample_candidate(func, spaces[2], T, 0))


def test_multi_level_tiling_fuses_an_elementwise_consumer():
    func, ref = bmm_bias_gelu()
    spaces = spaces_with(func, AutoInline, MultiLevelTiling)
    fused = 0
    for sch in spaces[:-1]:
        idx = sch.state.index("main")
        if "gelu" in idx.blocks:
            outer = idx.loops_above(idx.blocks["bmm"])[0]
            fused += outer in idx.loops_above(idx.blocks["gelu"])
    assert fused == 2  # reverse_compute_at at level 1 and at level 2
    check(func, ref, sample_candidate(func, spaces[0], T, 1))


def test_multi_level_tiling_leaves_symbolic_loops_untiled():
    n = te.var("n")
    A = te.placeholder((n, 32), name="A")
    B = te.placeholder((32, 16), name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((n, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    spaces = spaces_with(func, MultiLevelTiling)
    tiled = [i.inputs[0] for i in spaces[0].trace.insts if i.kind.name == "SamplePerfectTile"]
    assert len(tiled) == 2  # j and k; i is symbolic
    sch = sample_candidate(func, spaces[0], T, 3)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((10, 32)).astype("float32"), rng.standard_normal((32, 16)).astype("float32")
    c = np.zeros((10, 16), "float32")
    tessera.build(sch, target=T)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_multi_level_tiling_tiles_conv2d_nchw():
    func, ref = conv2d_nchw()
    spaces = spaces_with(func, MultiLevelTiling)
    tiles = [i.attrs[0] for i in spaces[0].trace.insts if i.kind.name == "SamplePerfectTile"]
    assert tiles == [4, 4, 4, 4, 2, 2, 2]  # n, f, y, x spatial; rc, ry, rx reductions
    idx = spaces[0].state.index("main")
    assert len(idx.loops_above(idx.blocks["conv"])) == 4 * 4 + 3 * 2
    check(func, ref, sample_candidate(func, spaces[0], T, 1))


# --- AddRFactor -------------------------------------------------------------------------------
def test_add_rfactor_factors_a_long_row_reduction():
    func, ref = row_sum()
    spaces = spaces_with(func, AddRFactor)
    rf = [s for s in spaces if "rowsum_rf" in blocks(s)]
    assert len(rf) == 2 and len(spaces) == 4  # rfactor over the outer and the inner part
    check(func, ref, sample_candidate(func, rf[0], T, 0))


def test_add_rfactor_leaves_a_reduction_with_enough_parallelism():
    func = gemm_program(64, 64, 64, nr=16)
    assert len(spaces_with(func, AddRFactor)) == 2  # the block as it is, and the untouched program


# --- UseTensorIntrin --------------------------------------------------------------------------
def _intrins(sch):
    return [i.attrs[0] for i in sch.trace.insts if i.kind.name == "Tensorize"]


def test_use_tensor_intrin_tensorizes_gemm_with_the_targets_kernels(isa_target):
    target = f"{isa_target} -num-threads=2"
    func = gemm_program(48, 64, 64, nr=16)
    spaces = spaces_with(func, UseTensorIntrin, target=target)
    used = [n for s in spaces for n in _intrins(s)]
    assert used, "no GEMM micro-kernel matched"
    t = Target(target)
    for name in used:
        intrin = tir.TensorIntrin.get(name)
        assert not intrin.missing_features(t)
        mr, nr = map(int, name.split("_gemm_")[1].split("_")[0].split("x"))
        assert 48 % mr == 0 and nr == 16  # the tile divides M; B's 16-column panels
    sch = next(s for s in spaces if _intrins(s))
    check(func, lambda a, b: a @ b, sample_candidate(func, sch, target, 0), target=target)


def test_use_tensor_intrin_tensorizes_an_unpacked_gemm_with_the_widest_kernels(isa_target):
    from tessera.tir.schedule.examples.gemm import plain_gemm_program

    target = f"{isa_target} -num-threads=2"
    func = plain_gemm_program(64, 64, 64)
    used = [n for s in spaces_with(func, UseTensorIntrin, target=target) for n in _intrins(s)]
    wide = "avx512" if Target(target).has_feature("avx512f") else "avx2"
    assert any(n.startswith(f"x86_{wide}_fma_gemm_") for n in used)
    sch = next(s for s in spaces_with(func, UseTensorIntrin, target=target)
               if any(n.startswith(f"x86_{wide}") for n in _intrins(s)))
    check(func, lambda a, b: a @ b, sample_candidate(func, sch, target, 0), target=target)


def test_use_tensor_intrin_int8_gemm(isa_target):
    target = f"{isa_target} -num-threads=2"
    if not Target(target).has_feature("avx2"):
        pytest.skip("no int8 GEMM intrinsic without AVX2")
    func = gemm_program(32, 64, 64, nr=16, dtype="int8")
    spaces = spaces_with(func, UseTensorIntrin, target=target)
    used = [n for s in spaces for n in _intrins(s)]
    assert any("u8s8s32" in n for n in used)
    sch = next(s for s in spaces if _intrins(s))
    cand = sample_candidate(func, sch, target, 0)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (32, 64)).astype("uint8")
    b = rng.integers(-128, 127, (64, 64)).astype("int8")
    c = np.zeros((32, 64), "int32")
    tessera.build(cand, target=target)(a, b, c)
    np.testing.assert_array_equal(c, a.astype("int32") @ b.astype("int32"))


def test_use_tensor_intrin_tries_an_intrinsic_registered_twice_once():
    ctx = SpaceContext(T)
    names = [i.name for i, _, _ in UseTensorIntrin(ctx).intrins]
    assert len(names) == len(set(names))
    if tir.TensorIntrin.get("dot_16x4_vnni").missing_features(ctx.target) == []:
        assert ("dot_16x4_vnni" in names) != ("x86_avx512_vnni_dot_16x4_u8s8s32" in names)


# --- ParallelizeVectorizeUnroll + its postprocessor -------------------------------------------
def _loops(sch):
    return [lp for lp in sch.state.index("main").loops.values()]


def test_parallelize_vectorize_unroll_sizes_vectors_by_the_target(isa_target):
    target = f"{isa_target} -num-threads=2"
    ctx = SpaceContext(target)
    assert ctx.lanes == Target(target).vector_bits // 32 and ctx.max_vectorize_extent == 4 * ctx.lanes
    func, ref = elementwise_chain(32, 8)
    spaces = spaces_with(func, AutoInline, ParallelizeVectorizeUnroll, target=target)
    seen_unroll = set()
    for seed in range(6):
        sch = sample_candidate(func, spaces[0], target, seed)
        kinds = {lp.kind for lp in _loops(sch)}
        vec = [lp for lp in _loops(sch) if lp.kind == ForKind.VECTORIZED]
        assert vec and all(lp.extent.value <= ctx.max_vectorize_extent for lp in vec)
        assert ForKind.PARALLEL in kinds
        seen_unroll |= {lp.annotations.get("pragma_auto_unroll_max_step").value for lp in _loops(sch)
                        if "pragma_auto_unroll_max_step" in lp.annotations}
        assert not any(k.startswith("meta_schedule") for k in sch.state.index("main").blocks["root"].block.annotations)
        if seed == 0:
            check(func, ref, sch, target=target)
    assert seen_unroll <= {16, 64, 512}


# --- RandomComputeLocation --------------------------------------------------------------------
def test_random_compute_location_samples_where_the_padding_goes():
    func, ref = conv2d_nchw()
    spaces = spaces_with(func, RandomComputeLocation)
    assert any(i.kind.name == "SampleComputeLocation" for i in spaces[0].trace.insts)
    decisions = set()
    for seed in range(8):
        sch = sample_candidate(func, spaces[0], T, seed)
        inst = next(i for i in sch.trace.insts if i.kind.name == "SampleComputeLocation")
        decisions.add(sch.trace.decisions[inst])
        if seed == 0:
            check(func, ref, sch)
    assert len(decisions) >= 2


# --- schedule fixes the rules need -------------------------------------------------------------
def test_compute_at_takes_the_location_marks():
    func, _ = elementwise_chain()
    sch = Schedule(func)
    before = sch.mod
    sch.compute_at(sch.get_block("B"), sch._new_mark_rv(ROOT_MARK))
    assert tessera.ir.structural_equal(sch.mod, before)
    sch.compute_at(sch.get_block("C"), sch._new_mark_rv(INLINE_MARK))
    assert "C" not in blocks(sch)
    loc = sch.sample_compute_location(sch.get_block("B"), decision=-2)
    sch.compute_at(sch.get_block("B"), loc)
    assert blocks(sch) == {"root", "D"}


def test_compute_inline_refuses_a_buffer_a_tensorized_block_reads_by_address():
    func = gemm_program(32, 32, 32, nr=16)
    sch = schedule_gemm(func, mr=4, nr=16, kc=32, mc=8, target="c -mcpu=haswell")
    with pytest.raises(ScheduleError, match="address"):
        sch.compute_inline(sch.get_block("B_pack"))
    assert -2 not in [d for d, _ in tir.schedule.locations.compute_locations(
        sch.state.index("main"), sch.state.index("main").blocks["B_pack"])]


@pytest.mark.slow
def test_use_tensor_intrin_tensorizes_the_conv2d_example():
    from tessera.tir.schedule.examples.conv2d import conv2d_program

    func = conv2d_program(1, 16, 8, 8, 32, 3, 3, pad=1, ocb=16)
    spaces = generate_design_space(func, T)
    tensorized = [s for s in spaces if _intrins(s)]
    assert tensorized
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 16, 8, 8)).astype("float32")
    w = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    dp = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = sum(np.einsum("nchw,fc->nfhw", dp[:, :, y:y + 8, x:x + 8], w[:, :, y, x]) for y in range(3) for x in range(3))
    for seed in range(4):
        out = np.zeros((1, 32, 8, 8), "float32")
        tessera.build(sample_candidate(func, tensorized[0], T, seed), target=T)(data, w, out)
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
