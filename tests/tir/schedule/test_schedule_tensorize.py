"""tensorize: matching a block against an intrinsic's desc, binding impl to the real buffers'
regions (offsets, strides, extents), the C micro-kernel emitted once, the target's CPU features
checked, and a clear reason for every mismatch."""
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError, TesseraError, UnsupportedOpError
from tessera.ir import (AttrStmt, Block, BlockRealize, Buffer, BufferRegion, Call, Evaluate, For, IterVar,
                        PrimFunc, Range, StringImm, Var, structural_equal)
from tessera.target import Target
from tessera.tir import TensorIntrin
from tessera.tir.tensor_intrin.x86 import address_wrapper, gemm_desc, gemm_impl

from schedule_helpers import assert_struct_equal, gemm, rand, schedule, with_body

HAS_AVX2 = Target("c").has_feature("avx2") and Target("c").has_feature("fma")

# a portable 4x8 micro-kernel in plain C: C[4 x 8] += A[4 x K] * B[K x 8], any strides
SCALAR_SRC = r"""
static void test_ukr_4x8(int32_t K, const float* a, int64_t rsa, int64_t csa, const float* b, int64_t ldb,
                         float* c, int64_t ldc) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      float s = c[i * ldc + j];
      for (int32_t k = 0; k < K; ++k) s += a[i * rsa + k * csa] * b[k * ldb + j];
      c[i * ldc + j] = s;
    }
}
""" + address_wrapper("test_ukr_4x8_at", "test_ukr_4x8")  # gemm_impl's call passes addresses


@pytest.fixture(scope="module", autouse=True)
def scalar_intrin():
    TensorIntrin.register("test_scalar_gemm_4x8", gemm_desc(4, 8), gemm_impl("test_ukr_4x8_at", 4, 8),
                          override=True, c_source=SCALAR_SRC)
    TensorIntrin.register("test_scalar_gemm_4x8_kmajor", gemm_desc(4, 8, a_kmajor=True),
                          gemm_impl("test_ukr_4x8_at", 4, 8, a_kmajor=True), override=True, c_source=SCALAR_SRC)
    yield
    for name in ("test_scalar_gemm_4x8", "test_scalar_gemm_4x8_kmajor", "test_compact_4x8"):
        if TensorIntrin.get(name, allow_missing=True) is not None:
            TensorIntrin.unregister(name)  # later tests' design-space rules try every registered intrinsic


def _gemm_prog(M=16, N=24, K=12, pack_b=0, pack_a=0):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    a, b = A, B
    if pack_b:
        b = te.compute((N // pack_b, K, pack_b), lambda jo, kk, ji: B[kk, jo * pack_b + ji], name="B_pack")
    if pack_a:
        a = te.compute((M // pack_a, K, pack_a), lambda io, kk, ii: A[io * pack_a + ii, kk], name="A_pack")
    ld_a = (lambda i, kk: a[i // pack_a, kk, i % pack_a]) if pack_a else (lambda i, kk: a[i, kk])
    ld_b = (lambda kk, j: b[j // pack_b, kk, j % pack_b]) if pack_b else (lambda kk, j: b[kk, j])
    C = te.compute((M, N), lambda i, j: te.sum(ld_a(i, k) * ld_b(k, j), axis=k), name="C")
    return te.create_prim_func([A, B, C])


def _tile(sch, mr=4, nr=8, kc=None, order="ijk"):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, nr])
    if kc:
        k0, k1 = sch.split(k, [None, kc])
        sch.reorder(k0, i0, j0, i1, j1, k1)
    else:
        sch.reorder(i0, j0, i1, j1, k)
    return i1


def _run(sch, M=16, N=24, K=12, target="c"):
    a, b = rand((M, K)), rand((K, N))
    c = np.full((M, N), np.nan, "float32")
    lib = tessera.build(sch, target=target)
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    return lib


def test_tensorize_gemm_tile_against_hand_built_program():
    f = _gemm_prog()
    sch = schedule(f)
    i1 = _tile(sch)
    sch.tensorize(i1, "test_scalar_gemm_4x8")
    got = sch.mod["main"]
    A, B, C = f.params
    i0, j0 = Var("i_0"), Var("j_0")
    vio, vjo, vko = Var("vi_o"), Var("vj_o"), Var("vk_o")
    ia, ja, ib, jb = Var("i_1_init"), Var("j_1_init"), Var("vi_i_init"), Var("vj_i_init")
    from tessera.ir import BufferStore, const
    init = For(ia, 0, 4, "serial", For(ja, 0, 8, "serial", BlockRealize([ia, ja], True, Block(
        [IterVar(Range.from_min_extent(0, 4), ib), IterVar(Range.from_min_extent(0, 8), jb)], [],
        [BufferRegion(C, [Range.from_min_extent(vio * 4 + ib, 1), Range.from_min_extent(vjo * 8 + jb, 1)])],
        "C_init", BufferStore(C, const(0.0, "float32"), [vio * 4 + ib, vjo * 8 + jb])))))
    def at(buf, i, j):
        return Call("handle", "address_of", [buf[i, j]])
    # the addresses of each region's corner and of its neighbours along i and k (gemm_impl's call)
    call = Call("handle", "test_ukr_4x8_at", [12, at(A, vio * 4, 0), at(A, vio * 4 + 1, 0), at(A, vio * 4, 1),
                                              at(B, 0, vjo * 8), at(B, 1, vjo * 8),
                                              at(C, vio * 4, vjo * 8), at(C, vio * 4 + 1, vjo * 8)])
    body = AttrStmt(StringImm("test_scalar_gemm_4x8"), "tensor_intrin", StringImm(""),
                    AttrStmt(StringImm("test_ukr_4x8_at"), "pragma_import_c", StringImm(SCALAR_SRC), Evaluate(call)))
    R = Range.from_min_extent
    ob = Block([IterVar(R(0, 4), vio), IterVar(R(0, 3), vjo), IterVar(R(0, 1), vko, "reduce")],
               [BufferRegion(A, [R(vio * 4, 4), R(0, 12)]), BufferRegion(B, [R(0, 12), R(vjo * 8, 8)])],
               [BufferRegion(C, [R(vio * 4, 4), R(vjo * 8, 8)])], "C_o", body, init=init)
    want = For(i0, 0, 4, "serial", For(j0, 0, 3, "serial", BlockRealize([i0, j0, 0], True, ob)))
    assert_struct_equal(got, with_body(f, want))
    lib = _run(sch)
    src = lib.get_source()
    assert src.count("static void test_ukr_4x8(") == 1                  # emitted once
    assert "extern void test_ukr_4x8" not in src                       # defined, not declared
    assert ("test_ukr_4x8_at(12, &A[i_0 * 48], &A[i_0 * 48 + 12], &A[i_0 * 48 + 1], &B[j_0 * 8], &B[j_0 * 8 + 24], "
            "&C[i_0 * 96 + j_0 * 8], &C[i_0 * 96 + j_0 * 8 + 24]);") in src
    assert "/* tensor intrinsic test_scalar_gemm_4x8 */" in src


def test_tensorize_block_after_blockize_and_the_k_split():
    sch = schedule(_gemm_prog(K=24))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    k0, k1 = sch.split(k, [None, 8])
    sch.reorder(k0, i0, j0, i1, j1, k1)
    ob = sch.blockize(i1)
    sch.tensorize(ob, "test_scalar_gemm_4x8")           # K of the desc matches the tile's 8
    assert "test_ukr_4x8_at(8, " in tessera.build(sch).get_source()
    _run(sch, K=24)
    # handles of what the intrinsic replaced are retired with a reason
    with pytest.raises(ScheduleError, match=r"loop 'k_1' is no longer valid: it was replaced by tensor intrinsic"):
        sch.get(k1)
    with pytest.raises(ScheduleError, match=r"block 'C' is no longer valid: it was replaced by tensor intrinsic"):
        sch.get(c)


def test_tensorize_packed_operands_map_to_trailing_dimensions():
    # B packed in 8-column panels (3-D), A packed k-major in 4-row panels: the 2-D desc buffers
    # match the last two dimensions; the leading panel index is fixed per tile
    sch = schedule(_gemm_prog(pack_b=8, pack_a=4))
    i1 = _tile(sch)
    sch.tensorize(i1, "test_scalar_gemm_4x8_kmajor")
    src = _run(sch).get_source()
    # (the addresses of the tile's corner and of its neighbours along i and k: strides 1 and 4 of A, 8 of B)
    assert ("test_ukr_4x8_at(12, &A_pack[i_0 * 48], &A_pack[i_0 * 48 + 1], &A_pack[i_0 * 48 + 4], &B_pack[j_0 * 96], "
            "&B_pack[j_0 * 96 + 8], ") in src
    # the row-major intrinsic does not match a k-major A: the offset would depend on the tile
    sch = schedule(_gemm_prog(pack_b=8, pack_a=4))
    i1 = _tile(sch)
    with pytest.raises(ScheduleError, match=r"A_pack\[vi_o, vk_i, vi_i\] does not follow the intrinsic's access A\[vi, vk\] \(dimension 0 of "
                       r"'A': index vk_i is not the intrinsic's index plus an offset fixed per tile\)"):
        sch.tensorize(i1, "test_scalar_gemm_4x8")


def test_tensorize_trace_round_trip():
    f = _gemm_prog()
    sch = schedule(f)
    i1 = _tile(sch)
    sch.tensorize(i1, "test_scalar_gemm_4x8")
    assert 'sch.tensorize(block_or_loop=l' in str(sch.trace) and '"test_scalar_gemm_4x8"' in str(sch.trace)
    replay = tir.Schedule(f)
    tir.schedule.Trace.apply_json_to_schedule(sch.trace.as_json(), replay)
    assert structural_equal(replay.mod, sch.mod)


def _refused(sch, action, message):
    mod, n = sch.mod, len(sch.trace)
    with pytest.raises(ScheduleError, match=message):
        action()
    assert structural_equal(sch.mod, mod) and len(sch.trace) == n


def test_tensorize_mismatches_name_the_part_that_differs():
    sch = schedule(_gemm_prog())
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, i1, k, j1)
    _refused(sch, lambda: sch.tensorize(i1, "test_scalar_gemm_4x8"),
             r"loop 'k' \(the intrinsic's 'j'\): the loop's extent: the intrinsic has 8, the block has 12")
    sch.reorder(j1, k)
    _refused(sch, lambda: sch.tensorize(j0, "test_scalar_gemm_4x8"),
             r"tensorize: block 'C_o' does not match tensor intrinsic 'test_scalar_gemm_4x8': loop 'j_0'")
    _refused(sch, lambda: sch.tensorize(c, "test_scalar_gemm_4x8"),
             r"block 'C' does not match .*: the statements differ")
    _refused(sch, lambda: sch.tensorize(i1, "no_such_intrin"), r"tensorize: no tensor intrinsic named 'no_such_intrin'")
    _refused(sch, lambda: sch.tensorize(i1, "test_scalar_gemm_4x7"),
             r"no tensor intrinsic named 'test_scalar_gemm_4x7'; did you mean 'test_scalar_gemm_4x8")
    sch.tensorize(i1, "test_scalar_gemm_4x8")


def test_tensorize_refuses_other_computations_dtypes_and_predicates():
    A = te.placeholder((8, 8), name="A")
    B = te.placeholder((8, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 8), lambda i, j: te.max(A[i, k] * B[k, j], axis=k), name="C")
    sch = schedule(te.create_prim_func([A, B, C]))
    i1 = _tile(sch)
    _refused(sch, lambda: sch.tensorize(i1, "test_scalar_gemm_4x8"),
             r"block 'C': the stored value: the intrinsic has C\[vi, vj\] \+ A\[vi, vk\] \* B\[vk, vj\], the block "
             r"has T.max\(C\[vi_o \* 4 \+ vi_i")

    sch = schedule(gemm(n=16, m=16, K=8, dtype="float64"))
    i1 = _tile(sch)
    _refused(sch, lambda: sch.tensorize(i1, "test_scalar_gemm_4x8"),
             r"buffer 'C' of the intrinsic is float32 but the block's 'C' is float64")

    sch = schedule(gemm(n=18, m=16, K=8))                  # 18 rows: the 4-row split has a tail
    i1 = _tile(sch)
    _refused(sch, lambda: sch.tensorize(i1, "test_scalar_gemm_4x8"),
             r"block 'C' runs under the predicate .* an intrinsic computes whole tiles")


def test_tensorize_strides_and_compactness():
    # impl without strides wants a compact region: a desc matched inside a wider buffer is refused
    desc = gemm_desc(4, 8)
    K = Var("K")
    A, B, C = (Buffer((4, K), "float32", "A"), Buffer((K, 8), "float32", "B"), Buffer((4, 8), "float32", "C"))
    call = Call("handle", "test_ukr_4x8", [K, Call("handle", "address_of", [A[0, 0]]), K, 1,
                                           Call("handle", "address_of", [B[0, 0]]), 8,
                                           Call("handle", "address_of", [C[0, 0]]), 8])
    impl = PrimFunc([A, B, C], Evaluate(call))
    TensorIntrin.register("test_compact_4x8", desc, impl, override=True, c_source=SCALAR_SRC)
    sch = schedule(_gemm_prog())
    i1 = _tile(sch)
    _refused(sch, lambda: sch.tensorize(i1, "test_compact_4x8"),
             r"the intrinsic needs 'A' as a compact \[4, 12\] block, but buffer 'A' has stride 12 in dimension 0 "
             r"\(the block needs 12\)|needs 'B' as a compact")
    # a constant stride must equal the real one
    A2 = Buffer((4, K), "float32", "A", strides=(Var("lda"), 1))
    B2 = Buffer((K, 8), "float32", "B", strides=(16, 1))
    C2 = Buffer((4, 8), "float32", "C", strides=(Var("ldc"), 1))
    call2 = Call("handle", "test_ukr_4x8", [K, Call("handle", "address_of", [A2[0, 0]]), A2.strides[0], 1,
                                            Call("handle", "address_of", [B2[0, 0]]), 16,
                                            Call("handle", "address_of", [C2[0, 0]]), C2.strides[0]])
    TensorIntrin.register("test_ldb16_4x8", desc, PrimFunc([A2, B2, C2], Evaluate(call2)), override=True,
                          c_source=SCALAR_SRC)
    _refused(sch, lambda: sch.tensorize(i1, "test_ldb16_4x8"),
             r"the intrinsic needs 'B' with stride 16 in dimension 0, but buffer 'B' has stride 24 there")
    sch2 = schedule(_gemm_prog(N=16))
    sch2.tensorize(_tile(sch2), "test_ldb16_4x8")
    _run(sch2, N=16)


def test_tensor_intrin_registry():
    names = TensorIntrin.list()
    assert "x86_avx2_fma_gemm_6x16_f32" in names and "x86_avx512_vnni_gemm_6x64_u8s8s32" in names
    assert "dot_16x4_vnni" in names
    it = TensorIntrin.get("x86_avx512_fma_gemm_6x64_f32")
    assert it.features == ("avx512f",) and it.c_functions == ("tintrin_avx512_gemm_6x64_f32",)
    assert TensorIntrin.get("nope", allow_missing=True) is None
    with pytest.raises(TesseraError, match=r"tensor intrinsic 'test_scalar_gemm_4x8' is already registered"):
        TensorIntrin.register("test_scalar_gemm_4x8", gemm_desc(4, 8), gemm_impl("test_ukr_4x8_at", 4, 8))
    with pytest.raises(TesseraError, match=r"parameter B has shape \['K', '8'\] in desc but \['K', '4'\] in impl"):
        TensorIntrin.register("bad", gemm_desc(4, 8), gemm_impl("f", 4, 4))
    with pytest.raises(TesseraError, match=r"c_source defines none of the functions its impl calls \(f, address_of\)"):
        TensorIntrin.register("bad", gemm_desc(4, 8), gemm_impl("f", 4, 8), c_source="int g(void) { return 0; }")
    with pytest.raises(TesseraError, match=r"feature 'avx 2!' is not a CPU feature name"):
        TensorIntrin.register("bad", gemm_desc(4, 8), gemm_impl("f", 4, 8), features=["avx 2!"])
    assert "bad" not in TensorIntrin.list()
    TensorIntrin.register("test_gone_4x8", gemm_desc(4, 8), gemm_impl("test_ukr_4x8_at", 4, 8), c_source=SCALAR_SRC)
    TensorIntrin.unregister("test_gone_4x8")
    assert TensorIntrin.get("test_gone_4x8", allow_missing=True) is None
    with pytest.raises(TesseraError, match="no tensor intrinsic named 'test_gone_4x8'"):
        TensorIntrin.unregister("test_gone_4x8")
    assert it.missing_features("c -mcpu=skylake-avx512 -mattr=+avx512f") == []
    assert it.missing_features("c -mcpu=haswell") == ["avx512f"]


@pytest.mark.skipif(not HAS_AVX2, reason="this machine has no AVX2+FMA")
def test_tensorize_with_the_avx2_micro_kernel():
    sch = schedule(_gemm_prog(M=24, N=32, K=40, pack_b=16))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 6])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 20])
    sch.reorder(k0, j0, i0, i1, j1, k1)
    sch.parallel(j0)
    sch.tensorize(i1, "x86_avx2_fma_gemm_6x16_f32")
    lib = _run(sch, M=24, N=32, K=40)
    assert "_mm256_fmadd_ps" in lib.get_source()


def test_building_for_a_target_without_the_feature_is_refused():
    sch = schedule(_gemm_prog(M=12, N=64, K=8))
    i1 = _tile(sch, mr=6, nr=64)
    sch.tensorize(i1, "x86_avx512_fma_gemm_6x64_f32")
    with pytest.raises(UnsupportedOpError, match=r"tensor intrinsic 'x86_avx512_fma_gemm_6x64_f32' in main needs "
                                                 r"the CPU feature avx512f, which target 'c -mcpu=haswell' lacks"):
        tessera.build(sch, target="c -mcpu=haswell")
    # a target naming the features compiles (it cannot run on a machine without them)
    from tessera.codegen.c import generate
    from tessera.runtime.c_compiler import compile_source
    from tessera.tir.transform import lower
    t = Target("c -mcpu=skylake-avx512 -mattr=+avx512f,+avx512bw,+avx512vnni")
    path = compile_source(generate(lower(sch.mod["main"], t), t), t)
    assert path.endswith(".so")


# property: tensorizing randomly sized tiles of random GEMMs computes what numpy computes
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 20), st.integers(1, 20), st.booleans(), st.booleans(),
       st.booleans())
def test_random_tensorized_gemms_keep_results(a, b, K, kc, pack_b, pack_a, k_outer):
    M, N = 4 * a, 8 * b
    kc = min(kc, K)
    sch = schedule(_gemm_prog(M, N, K, pack_b=8 if pack_b else 0, pack_a=4 if pack_a else 0))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    k0, k1 = sch.split(k, [None, kc])
    sch.reorder(*((k0, i0, j0) if k_outer else (i0, j0, k0)), i1, j1, k1)
    name = "test_scalar_gemm_4x8_kmajor" if pack_a else "test_scalar_gemm_4x8"
    if K % kc:
        with pytest.raises(ScheduleError, match=r"runs under the predicate"):
            sch.tensorize(i1, name)
        return
    sch.tensorize(i1, name)
    _run(sch, M, N, K)


def test_tensorize_a_reduction_of_one_step():
    # K = 1: the tile's reduction iterator has extent 1 (or is gone once simplified); desc's K is 1
    for K, kc in ((1, 1), (3, 1)):
        sch = schedule(_gemm_prog(4, 8, K))
        c = sch.get_block("C")
        i, j, k = sch.get_loops(c)
        i0, i1 = sch.split(i, [None, 4])
        j0, j1 = sch.split(j, [None, 8])
        k0, k1 = sch.split(k, [None, kc])
        sch.reorder(k0, i0, j0, i1, j1, k1)
        sch.tensorize(i1, "test_scalar_gemm_4x8")
        assert "test_ukr_4x8_at(1, " in tessera.build(sch).get_source()
        _run(sch, 4, 8, K)


COPY16_SRC = "static void test_copy16(float* d, const float* s) { for (int i = 0; i < 16; ++i) d[i] = s[i] * 2.0f; }"


def _register_copy16():
    """An intrinsic writing 16 floats (B = A * 2) that its call reaches through T.address_of."""
    from tessera.ir import BufferStore as Store
    R = Range.from_min_extent
    A, B = Buffer((16,), "float32", "A"), Buffer((16,), "float32", "B")
    i, vi = Var("i"), IterVar(R(0, 16), "vi")
    blk = Block([vi], [BufferRegion(A, [R(0, 16)])], [BufferRegion(B, [R(0, 16)])], "u",
                Store(B, A[vi.var] * 2.0, [vi.var]))
    desc = PrimFunc([A, B], BlockRealize([], True, Block([], [], [], "root", For(i, 0, 16, "serial",
                                                                                 BlockRealize([i], True, blk)))))
    A2, B2 = Buffer((16,), "float32", "A"), Buffer((16,), "float32", "B")
    impl = PrimFunc([A2, B2], Evaluate(Call("handle", "test_copy16", [Call("handle", "address_of", [B2[0]]),
                                                                      Call("handle", "address_of", [A2[0]])])))
    TensorIntrin.register("test_copy16", desc, impl, override=True, c_source=COPY16_SRC)


def test_allocation_compaction_keeps_the_region_an_intrinsic_writes():
    _register_copy16()
    X = te.placeholder((64,), name="X")
    T = te.compute((64,), lambda j: X[j] * 2.0, name="T")
    Y = te.compute((8,), lambda j: T[j] + 1.0, name="Y")      # reads T[0:8]; the intrinsic writes T[0:64]
    sch = schedule(te.create_prim_func([X, Y]))
    (j,) = sch.get_loops(sch.get_block("T"))
    j0, j1 = sch.split(j, [None, 16])
    sch.tensorize(j1, "test_copy16")
    mod = tessera.build(sch)
    src = mod.get_source()
    assert "float T[64]" in src or "tsr_alloc(256)" in src
    assert "tsr.access_region" not in src                     # the markers are gone after sizing
    x = np.random.default_rng(0).standard_normal(64).astype("float32")
    y = np.empty(8, "float32")
    mod(x, y)
    np.testing.assert_allclose(y, x[:8] * 2 + 1, rtol=1e-6)


def test_allocation_compaction_shifts_a_tile_an_intrinsic_writes():
    """T computed per tile of Y by the intrinsic: compacted to one tile, the call's address shifted."""
    _register_copy16()
    X = te.placeholder((64,), name="X")
    T = te.compute((64,), lambda j: X[j] * 2.0, name="T")
    Y = te.compute((64,), lambda j: T[j] + 1.0, name="Y")
    sch = schedule(te.create_prim_func([X, Y]))
    (j,) = sch.get_loops(sch.get_block("Y"))
    j0, _ = sch.split(j, [None, 16])
    sch.compute_at(sch.get_block("T"), j0)
    sch.tensorize(sch.get_loops(sch.get_block("T"))[-1], "test_copy16")
    mod = tessera.build(sch)
    src = mod.get_source()
    assert "float T[16]" in src or "tsr_alloc(64)" in src     # one tile, not the whole of T
    x = np.random.default_rng(1).standard_normal(64).astype("float32")
    y = np.empty(64, "float32")
    mod(x, y)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
