"""The x86 tensor intrinsics: every micro-kernel this machine can run is tensorized into a GEMM and
checked against numpy; those it cannot run (AVX-512, VNNI) are compiled for a target naming their
features, and refused for targets without them."""
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.codegen.c import generate
from tessera.errors import BuildError, TesseraError, UnsupportedOpError
from tessera.runtime.c_compiler import compile_source
from tessera.target import Target
from tessera.tir import TensorIntrin
from tessera.tir.tensor_intrin import x86
from tessera.tir.transform import lower

HOST = Target("c")
HAS_AVX2 = HOST.has_feature("avx2") and HOST.has_feature("fma")
HAS_AVX512 = HOST.has_feature("avx512f")
HAS_VNNI = all(HOST.has_feature(f) for f in x86.VNNI)
AVX512_TARGET = Target("c -mcpu=skylake-avx512 -mattr=+avx512f,+avx512bw,+avx512vnni")
AVX2_TARGET = Target("c -mcpu=haswell")
RNG = np.random.default_rng(11)


def fp32_gemm(M, N, K, nr, pack_a=0):
    """C = A @ B with B packed in nr-column panels (and A in k-major pack_a-row panels)."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    Bp = te.compute((N // nr, K, nr), lambda jo, k, ji: B[k, jo * nr + ji], name="B_pack")
    k = te.reduce_axis((0, K), name="k")
    if pack_a:
        Ap = te.compute((M // pack_a, K, pack_a), lambda io, kk, ii: A[io * pack_a + ii, kk], name="A_pack")
        C = te.compute((M, N), lambda i, j: te.sum(Ap[i // pack_a, k, i % pack_a] * Bp[j // nr, k, j % nr], axis=k),
                       name="C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * Bp[j // nr, k, j % nr], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def int8_gemm(M, N, K, nr):
    """C (int32) = A (uint8) @ B (int8) with B packed as [N / nr][K / 4][nr][4]."""
    A = te.placeholder((M, K), name="A", dtype="uint8")
    B = te.placeholder((K, N), name="B", dtype="int8")
    Bq = te.compute((N // nr, (K + 3) // 4, nr, 4),
                    lambda jo, q, ji, r: te.if_then_else(q * 4 + r < K, B[te.min(q * 4 + r, K - 1), jo * nr + ji],
                                                         tir.const(0, "int8")), name="B_quad")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") *
                                               Bq[j // nr, k // 4, j % nr, k % 4].astype("int32"), axis=k), name="C")
    return te.create_prim_func([A, B, C])


def tile(func, mr, nr, kc, intrin):
    sch = tir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, nr])
    k0, k1 = sch.split(k, [None, kc])
    sch.reorder(k0, j0, i0, i1, j1, k1)
    sch.tensorize(i1, intrin)
    return sch


FP32_AVX2 = [(mr, nr, km) for mr, nr in x86.FP32_GEMM["avx2"] for km in (False, True)]


@pytest.mark.skipif(not HAS_AVX2, reason="needs AVX2 and FMA")
@pytest.mark.parametrize("mr,nr,kmajor", FP32_AVX2)
def test_avx2_fp32_micro_kernels_match_numpy(mr, nr, kmajor):
    M, N, K = 2 * mr, 2 * nr, 37                      # K not a multiple of the unroll
    name = x86.fp32_gemm_name("avx2", mr, nr, kmajor)
    sch = tile(fp32_gemm(M, N, K, nr, pack_a=mr if kmajor else 0), mr, nr, K, name)
    a, b = RNG.standard_normal((M, K), dtype=np.float32), RNG.standard_normal((K, N), dtype=np.float32)
    c = np.full((M, N), np.nan, np.float32)
    lib = tessera.build(sch, target=AVX2_TARGET)       # AVX2 flags only, on any host that has AVX2
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert lib.get_source().count(f"void tintrin_avx2_gemm_{mr}x{nr}_f32(") == 1


@pytest.mark.skipif(not HAS_AVX2, reason="needs AVX2")
@pytest.mark.parametrize("K,kc", [(64, 32), (30, 30)])
def test_avx2_int8_gemm_is_exact_at_the_extremes(K, kc):
    # 255 * -128 products in every lane: vpmaddubsw would saturate, the widening kernel must not
    M, N = 12, 16
    sch = tile(int8_gemm(M, N, K, 8), 6, 8, kc, "x86_avx2_gemm_6x8_u8s8s32")
    lib = tessera.build(sch, target=AVX2_TARGET)
    for a, b in ((np.full((M, K), 255, np.uint8), np.full((K, N), -128, np.int8)),
                 (RNG.integers(0, 256, (M, K), dtype=np.uint8), RNG.integers(-128, 128, (K, N), dtype=np.int8))):
        c = np.zeros((M, N), np.int32)
        lib(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("intrin", ["x86_avx2_dot_16x4_u8s8s32", "dot_16x4_vnni"])
def test_dot_16x4(intrin):
    # C[i, j] = sum_k A[i, k] * B[j, k] with j in lanes of 16 and k in groups of 4 (TVM's dot_16x4),
    # B packed as [N / 16][K / 4][16][4]
    M, N, K = 3, 32, 8
    A = te.placeholder((M, K), name="A", dtype="uint8")
    B = te.placeholder((N, K), name="B", dtype="int8")
    Bp = te.compute((N // 16, K // 4, 16, 4), lambda jo, q, ji, r: B[jo * 16 + ji, q * 4 + r], name="B_pack")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") *
                                               Bp[j // 16, k // 4, j % 16, k % 4].astype("int32"), axis=k), name="C")
    sch = tir.Schedule(te.create_prim_func([A, B, C]))
    i, j, kk = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(kk, [None, 4])
    sch.reorder(i, j0, k0, j1, k1)
    sch.tensorize(j1, intrin)
    runs = HAS_VNNI if "vnni" in intrin else HAS_AVX2
    if not runs:                       # compile for a target that has the features, do not run
        assert _compile_for(sch, AVX512_TARGET if "vnni" in intrin else "c -mcpu=haswell -mattr=+avx2").endswith(".so")
        return
    a = RNG.integers(0, 256, (M, K), dtype=np.uint8)
    b = RNG.integers(-128, 128, (N, K), dtype=np.int8)
    c = np.zeros((M, N), np.int32)
    tessera.build(sch, target="c" if "vnni" in intrin else AVX2_TARGET)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32).T)


def _compile_for(sch, target):
    t = Target(target)
    return compile_source(generate(lower(sch.mod["main"], t), t), t)


@pytest.mark.parametrize("mr,nr", x86.FP32_GEMM["avx512"])
def test_avx512_fp32_micro_kernels_compile(mr, nr):
    for km in (False, True):
        sch = tile(fp32_gemm(2 * mr, 2 * nr, 24, nr, pack_a=mr if km else 0), mr, nr, 24,
                   x86.fp32_gemm_name("avx512", mr, nr, km))
        assert _compile_for(sch, AVX512_TARGET).endswith(".so")
        if HAS_AVX512:                                  # and run where the machine has AVX-512
            a, b = RNG.standard_normal((2 * mr, 24), dtype=np.float32), RNG.standard_normal((24, 2 * nr), dtype=np.float32)
            c = np.zeros((2 * mr, 2 * nr), np.float32)
            tessera.build(sch)(a, b, c)
            np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_avx512_vnni_intrinsics_compile_and_are_refused_without_the_features():
    sch = tile(int8_gemm(12, 64, 36, 64), 6, 64, 36, "x86_avx512_vnni_gemm_6x64_u8s8s32")
    assert _compile_for(sch, AVX512_TARGET).endswith(".so")
    with pytest.raises(UnsupportedOpError, match=r"needs the CPU features? .*avx512_vnni.* which target "
                                                 r"'c -mcpu=skylake-avx512 -mattr=\+avx512f' lacks"):
        _compile_for(sch, "c -mcpu=skylake-avx512 -mattr=+avx512f")
    if HAS_VNNI:
        a = RNG.integers(0, 256, (12, 36), dtype=np.uint8)
        b = RNG.integers(-128, 128, (36, 64), dtype=np.int8)
        c = np.zeros((12, 64), np.int32)
        tessera.build(sch)(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_c_sources_refuse_to_compile_without_their_isa():
    # the #error guard: the C source alone names the missing feature (outside tessera's own check)
    src = "#include <stdint.h>\n" + TensorIntrin.get("x86_avx512_fma_gemm_8x32_f32").c_source
    with pytest.raises(BuildError) as e:
        compile_source(src, "c -mcpu=haswell")
    assert "tensor intrinsic tintrin_avx512_gemm_8x32_f32 needs avx512f" in str(e.value.args) + str(e.value.__dict__)


def test_gemm_intrin_for_picks_by_target_features():
    assert x86.gemm_intrin_for(AVX512_TARGET) == "x86_avx512_fma_gemm_6x64_f32"
    assert x86.gemm_intrin_for(AVX512_TARGET, "int8") == "x86_avx512_vnni_gemm_6x64_u8s8s32"
    haswell = "c -mcpu=haswell -mattr=+avx2,+fma"
    assert x86.gemm_intrin_for(haswell) == "x86_avx2_fma_gemm_6x16_f32"
    assert x86.gemm_intrin_for(haswell, tiles=[(4, 16)], a_kmajor=True) == "x86_avx2_fma_gemm_4x16_f32_a_kmajor"
    assert x86.gemm_intrin_for(haswell, "int8") == "x86_avx2_gemm_6x8_u8s8s32"
    with pytest.raises(TesseraError, match=r"has no x86 GEMM intrinsic for float32 \(needs AVX2\+FMA or AVX-512\)"):
        x86.gemm_intrin_for("c -mcpu=x86-64")
    with pytest.raises(TesseraError, match=r"dtype must be 'float32' or 'int8'"):
        x86.gemm_intrin_for(haswell, "float16")


def rows_tile(func, mr, nr, rows, kc, isa):
    """C in calls of `rows` rows (the rows intrinsic): (j_0, k_0 | i, j_1, k_1), B's blocks in order."""
    sch = tir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, nr])
    k0, k1 = sch.split(k, [None, kc])
    sch.reorder(j0, k0, i, j1, k1)
    sch.tensorize(i, x86.fp32_gemm_rows_name(isa, mr, nr, rows))
    return sch


ROWS_CASES = [("avx2", 6, 16, 3, 37, 37), ("avx2", 4, 24, 2, 64, 16), ("avx2", 14, 8, 5, 30, 10),
              ("avx512", 4, 64, 3, 37, 37), ("avx512", 8, 32, 2, 96, 32), ("avx512", 6, 64, 4, 20, 5)]


@pytest.mark.parametrize("isa,mr,nr,tiles,K,kc", ROWS_CASES)
def test_rows_intrinsic_matches_numpy(isa, mr, nr, tiles, K, kc):
    # a call takes tiles x mr rows and prefetches the next k block (or past the last one, past B);
    # K's lines split unevenly over the tiles, and a k block shorter than the lines a tile prefetches
    M, N = tiles * mr, 2 * nr
    sch = rows_tile(fp32_gemm(M, N, K, nr), mr, nr, M, kc, isa)
    target = AVX2_TARGET if isa == "avx2" else AVX512_TARGET
    src = generate(lower(sch.mod["main"], target), target)
    assert f"tintrin_{isa}_gemm_{mr}x{nr}_f32_rows{M}_pf(" in src and "_mm_prefetch" in src
    if not (HAS_AVX2 if isa == "avx2" else HAS_AVX512):
        assert compile_source(src, target).endswith(".so")      # compiles; this machine cannot run it
        return
    a, b = RNG.standard_normal((M, K), dtype=np.float32), RNG.standard_normal((K, N), dtype=np.float32)
    c = np.full((M, N), np.nan, np.float32)
    tessera.build(sch, target=target)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_rows_intrinsic_names_only_whole_tiles():
    # rows must be a multiple of the tile's and at least one tile; the tile must exist
    assert TensorIntrin.get(x86.fp32_gemm_rows_name("avx512", 4, 64, 128), allow_missing=True) is not None
    for isa, mr, nr, rows in (("avx512", 4, 64, 6), ("avx512", 4, 64, 0), ("avx512", 5, 64, 10), ("avx2", 6, 64, 12)):
        assert TensorIntrin.get(x86.fp32_gemm_rows_name(isa, mr, nr, rows), allow_missing=True) is None


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_micro_kernel_on_a_compacted_tile_of_c(isa):
    # the epilogue computed per column panel makes C's panel a buffer of its own (compacted to the
    # panel's width): the call must address C's rows with the compacted stride, not the original
    (mr, nr), K = x86.FP32_GEMM[isa][0], 32
    M, N = 2 * mr, 2 * nr
    A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: C[i, j] + 1.0, name="D")
    sch = tir.Schedule(te.create_prim_func([A, B, D]))
    i, j, kk = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, nr])
    i0, i1 = sch.split(i, [None, mr])
    sch.reorder(j0, i0, i1, j1, kk)
    sch.reverse_compute_at(sch.get_block("D"), j0)
    sch.tensorize(i1, x86.fp32_gemm_name(isa, mr, nr))
    target = AVX2_TARGET if isa == "avx2" else AVX512_TARGET
    src = generate(lower(sch.mod["main"], target), target)
    assert f"C[i_0 * {mr * nr}" in src               # C is the panel: mr rows of nr a tile
    if not (HAS_AVX2 if isa == "avx2" else HAS_AVX512):
        assert compile_source(src, target).endswith(".so")
        return
    a, b = RNG.standard_normal((M, K), dtype=np.float32), RNG.standard_normal((K, N), dtype=np.float32)
    d = np.zeros((M, N), np.float32)
    tessera.build(sch, target=target)(a, b, d)
    np.testing.assert_allclose(d, a @ b + 1, rtol=1e-4, atol=1e-4)


def test_fp32_gemm_parts_inverts_the_names():
    for isa, tiles in x86.FP32_GEMM.items():
        for mr, nr in tiles:
            for km in (False, True):
                assert x86.fp32_gemm_parts(x86.fp32_gemm_name(isa, mr, nr, km)) == (isa, mr, nr)
    with pytest.raises(TesseraError, match="not the name of an x86 fp32 GEMM micro-kernel"):
        x86.fp32_gemm_parts("x86_avx512_vnni_gemm_4x64_u8s8s32")
