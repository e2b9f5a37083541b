"""Search spaces: the generated GEMM space holds the hand schedule; sampled candidates of several
programs are all numerically right; candidates replay from their JSON traces; keys deduplicate."""
import json

import numpy as np
import pytest
from autotune_programs import bmm_bias_gelu, conv2d_nchw, softmax

import tessera
from tessera import te
from tessera.autotune.space import (
    SpaceContext,
    candidate_key,
    generate_design_space,
    replay_trace,
    sample_candidate,
)
from tessera.errors import TesseraError
from tessera.ir import structural_equal
from tessera.tir.schedule import Schedule, Trace
from tessera.tir.schedule.examples.gemm import gemm_program, schedule_gemm

T = "c -num-threads=2"


def gemm(M=64, N=64, K=64):
    return gemm_program(M, N, K, nr=16), lambda a, b: a @ b


def check(func, ref, sch, target=T, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [tuple(int(s) for s in p.shape) for p in func.params]
    ins = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
    out = np.zeros(shapes[-1], "float32")
    tessera.build(sch, target=target)(*ins, out)
    np.testing.assert_allclose(out, ref(*ins), rtol=1e-4, atol=1e-4)


def _decide(trace, choose) -> Trace:
    """The trace with every sampling instruction's decision given by choose(inst) (None: keep)."""
    for inst in list(trace.insts):
        if inst.kind.sampling:
            d = choose(inst)
            if d is not None:
                trace = trace.with_decision(inst, d)
    return trace


# --- the hand GEMM schedule is a point of the generated space ----------------------------------
@pytest.mark.parametrize("M,N,K,mr,kc,mc", [(128, 128, 128, 4, 64, 32), (96, 64, 256, 6, 128, 48)])
def test_generated_gemm_space_contains_the_hand_schedule(isa_target, M, N, K, mr, kc, mc):
    target = f"{isa_target} -num-threads=2"
    func = gemm_program(M, N, K, nr=16)
    hand = schedule_gemm(func, mr=mr, nr=16, kc=kc, mc=mc, target=target)
    intrin = next(i.attrs[0] for i in hand.trace.insts if i.kind.name == "Tensorize")

    def choose(inst):
        name = inst.kind.name
        if name == "SampleCategorical":
            cands = inst.attrs[0]
            if cands == [0, 16, 64, 512]:
                return 0                                  # no unroll
            if K in cands and kc in cands and max(cands) == K:
                return cands.index(kc)                    # the kc slice of k
            if max(cands) == M // mr:
                return cands.index(mc // mr)              # i_1: mc / mr row tiles
            return 0                                      # parallel extent: any
        if name == "SampleComputeLocation":
            return -1                                     # B_pack stays at the root
        return None

    matches = []
    for space in generate_design_space(func, target):
        if intrin not in [i.attrs[0] for i in space.trace.insts if i.kind.name == "Tensorize"]:
            continue
        sch = replay_trace(func, _decide(space.trace, choose), target)
        assert sch is not None
        matches.append(structural_equal(sch.mod, hand.mod))
    assert matches == [True]


# --- every sampled candidate is right --------------------------------------------------------
@pytest.mark.parametrize("program", [gemm, softmax, bmm_bias_gelu])
def test_every_sampled_candidate_is_numerically_right(program):
    func, ref = program()
    spaces = generate_design_space(func, T)[:-1]
    rng = np.random.default_rng(7)
    for k, space in enumerate([spaces[0], spaces[-1]]):  # the first and last generated spaces
        sch = sample_candidate(func, space, T, rng)
        assert sch is not None, space.trace
        check(func, ref, sch, seed=k)


@pytest.mark.slow
@pytest.mark.parametrize("program", [gemm, softmax, bmm_bias_gelu, conv2d_nchw])
def test_twenty_candidates_of_each_program_are_numerically_right(program):
    func, ref = program()
    spaces = generate_design_space(func, T)
    rng = np.random.default_rng(11)
    for k in range(20):
        sch = sample_candidate(func, spaces[k % len(spaces)], T, rng)
        if sch is not None:
            check(func, ref, sch, seed=k)


def test_the_untouched_program_is_a_point_of_every_space():
    func, _ = softmax(2, 64)
    spaces = generate_design_space(func, T)
    assert len(spaces[-1].trace) == 0
    sch = sample_candidate(func, spaces[-1], T, 0)
    assert structural_equal(sch.mod, Schedule(func).mod)


def test_a_program_no_rule_handles_still_gets_a_valid_schedule():
    A = te.placeholder((7, 5), name="A")
    B = te.compute((7, 5), lambda i, j: A[i, j] * 3.0, name="B")
    func = te.create_prim_func([A, B])
    spaces = generate_design_space(func, T)
    for space in spaces:
        check(func, lambda a: a * 3, sample_candidate(func, space, T, 1))


# --- replay, determinism, keys ----------------------------------------------------------------
def test_candidates_are_deterministic_per_seed_and_keyed_by_structure():
    func, _ = gemm()
    space = generate_design_space(func, T)[1]
    a, b = sample_candidate(func, space, T, 5), sample_candidate(func, space, T, 5)
    assert candidate_key(a) == candidate_key(b)
    keys = {candidate_key(sample_candidate(func, space, T, s)) for s in range(12)}
    assert len(keys) > 1
    assert candidate_key(Schedule(func)) == candidate_key(Schedule(gemm_program(64, 64, 64, nr=16)))


def test_a_candidate_replays_from_its_json_trace():
    func, _ = bmm_bias_gelu()
    for space in generate_design_space(func, T)[:3]:
        sch = sample_candidate(func, space, T, 2)
        again = Schedule(func)
        Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), again)
        assert structural_equal(again.mod, sch.mod)
        # the design part alone, postprocessed again, is the same candidate
        assert structural_equal(replay_trace(func, sch.trace.simplified(remove_postproc=False), T).mod, sch.mod)


def test_an_invalid_decision_is_rejected_not_raised():
    func, _ = gemm()
    space = generate_design_space(func, T)[1]
    inst = next(i for i in space.trace.insts if i.kind.name == "SamplePerfectTile")
    bad = space.trace.with_decision(inst, [3, 1, 1, 1])  # does not multiply to the extent
    assert replay_trace(func, bad, T) is None


def test_design_spaces_do_not_depend_on_intrinsics_made_on_first_use():
    """A family intrinsic made when a record names it (replaying shipped records makes dozens) is not
    tried by UseTensorIntrin: the spaces a process generates must not depend on what it built before."""
    from tessera.tir.tensor_intrin import TensorIntrin

    func, _ = gemm()
    before = [s.trace.as_json() for s in generate_design_space(func, T)]
    name = "x86_avx2_fma_gemm_4x16_f32_rows64_pf"      # a 64x16 block: it would tile this GEMM whole
    made_here = name not in TensorIntrin.list()
    assert TensorIntrin.get(name) is not None
    try:
        assert name in TensorIntrin.list() and name not in TensorIntrin.list(made=False)
        assert [s.trace.as_json() for s in generate_design_space(func, T)] == before
        made = TensorIntrin.get(name)                  # registered by name, it is an intrinsic like any
        TensorIntrin.register(name, made.desc, made.impl, override=True, c_source=made.c_source,
                              features=made.features)
        assert name in TensorIntrin.list(made=False)
    finally:
        if made_here:
            TensorIntrin.unregister(name)
    assert name not in TensorIntrin.list()


def test_spaces_are_for_cpu_and_gpu_targets():
    with pytest.raises(TesseraError, match="CPU"):
        SpaceContext("vdla")
    with pytest.raises(TesseraError):
        sample_candidate(gemm()[0], 3, T, 0)


def test_symbolic_extents_are_left_untiled_and_candidates_run():
    n = te.var("n")
    A = te.placeholder((n, 32), name="A")
    B = te.placeholder((32, 16), name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((n, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((n, 16), lambda i, j: te.max(C[i, j], 0.0), name="D")
    func = te.create_prim_func([A, B, D])
    spaces = generate_design_space(func, T)
    assert len(spaces) >= 2
    cands = [sample_candidate(func, s, T, seed) for s in spaces for seed in range(3)]
    assert all(c is not None for c in cands)  # each one lowered (VerifyLowers)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((10, 32)).astype("float32"), rng.standard_normal((32, 16)).astype("float32")
    d = np.zeros((10, 16), "float32")
    tessera.build(cands[0], target=T)(a, b, d)
    np.testing.assert_allclose(d, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
