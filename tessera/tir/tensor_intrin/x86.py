"""x86 tensor intrinsics: register-tiled GEMM micro-kernels and int8 dot products, in C.

fp32 GEMM tiles `C[MR, NR] += A[MR, K] * B[K, NR]` (the BLIS/GotoBLAS micro-kernel: MR x NR
accumulators stay in vector registers for the whole K loop; per k, NR/lanes vector loads of B, MR
broadcasts of A and MR*NR/lanes FMAs):

    x86_avx2_fma_gemm_{6x16, 4x16, 8x8, 4x24, 14x8}_f32  AVX2 + FMA (16 ymm registers)
    x86_avx512_fma_gemm_{6x64, 14x32, 8x32, 4x64}_f32   AVX-512F (32 zmm registers)

each also as `..._f32_a_kmajor`, whose A is addressed A[k, i] (a packed A panel, k-major). A is read
with any strides, B rows and C rows need unit column stride (their leading dimension is free).
`..._f32_rows{M}_pf` (made on first use) computes M rows of C a call, M / MR micro-kernel tiles on
one K x NR block of B, and prefetches the block that follows it in memory meanwhile: for weights
that stream from memory (fp32_gemm_rows_source).

A call passes addresses, not strides: of each region's first element and of its neighbours along
i and k (gemm_impl); the C function it names derives the strides (address_wrapper), so a call stays
right where lowering has compacted a buffer it reaches into a smaller one.

int8 GEMM tiles `C[MR, NR] += i32(A[MR, K]) * i32(B[K, NR])` with A uint8 (row-major, any row
stride), B int8 packed in groups of four k: `B[k // 4, j, k % 4]` (the layout vpdpbusd reads), C int32:

    x86_amx_gemm_16x64_u8s8s32          AMX TDPBUSD on 16 x 16 int32 tiles (amx_gemm_source)
    x86_avx512_vnni_gemm_{6x64, 8x32, 4x64}_u8s8s32  AVX512-VNNI vpdpbusd: 64 u8 x s8 products
                                        into 16 int32 lanes
    x86_avx2_gemm_{6x8, 4x8}_u8s8s32    AVX2, exact: u8 and s8 widened to int16, vpmaddwd (int16
                                        pairs into int32; no saturation, unlike vpmaddubsw)

and TVM's single dot-product intrinsic `C[16] += sum_k i32(A[4]) * i32(B[16, 4])`:

    x86_avx512_vnni_dot_16x4_u8s8s32    (also registered as TVM's name "dot_16x4_vnni")
    x86_avx2_dot_16x4_u8s8s32

Each C function starts with an `#error` guard, so the source refuses to compile without its ISA
even outside tessera's own check. `gemm_intrin_for(target, dtype)` picks the best one a target has.
"""
from __future__ import annotations

import re

from ...errors import TesseraError
from ...ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    Call,
    Cast,
    Evaluate,
    For,
    IterVar,
    PrimFunc,
    Range,
    Var,
)
from ...target import Target
from .gemm_desc import gemm_tile_desc
from .intrin import TensorIntrin

AVX2 = ("avx2", "fma")
AVX512 = ("avx512f",)
VNNI = ("avx512f", "avx512bw", "avx512vnni")
AMX = ("amx_tile", "amx_int8")


def _addr(load):
    return Call("handle", "address_of", [load])


def _rng(n):
    return Range.from_min_extent(0, n)


def _guard(fn: str, macros, features) -> str:
    fn = fn.removesuffix("_strided")  # the micro-kernel behind its address wrapper: name the intrinsic
    cond = " || ".join(f"!defined({m})" for m in macros)
    return (f"#if {cond}\n#error \"tensor intrinsic {fn} needs {', '.join(features)} "
            f"(a target with -mattr=+{',+'.join(features)})\"\n#endif")


# ---------------------------------------------------------------------------------------------
# descriptions: one GEMM tile, the loops in (i, j, k) order
# ---------------------------------------------------------------------------------------------
def gemm_desc(mr: int, nr: int, a_dtype="float32", b_dtype="float32", c_dtype="float32",
              a_kmajor=False, b_quads=False) -> PrimFunc:
    """`C[i, j] = C[i, j] + A[i, k] * B[k, j]` over an mr x nr x K tile (K symbolic); casts to
    c_dtype when the inputs are narrower. a_kmajor: A is (K, mr) read A[k, i]; b_quads: B is
    (K/4, nr, 4) read B[k // 4, j, k % 4]."""
    K = Var("K")
    A = Buffer((K, mr) if a_kmajor else (mr, K), a_dtype, "A")
    B = Buffer((Var("K4"), nr, 4) if b_quads else (K, nr), b_dtype, "B")
    C = Buffer((mr, nr), c_dtype, "C")
    return gemm_tile_desc(A, B, C, mr, nr, K,
                          (lambda i, k: A[k, i]) if a_kmajor else (lambda i, k: A[i, k]),
                          (lambda k, j: B[k // 4, j, k % 4]) if b_quads else (lambda k, j: B[k, j]),
                          c_dtype if a_dtype != c_dtype else None)


def dot_desc(lanes=16, group=4) -> PrimFunc:
    """TVM's dot_16x4: `C[i] = C[i] + i32(A[k]) * i32(B[i, k])`, i < 16, k < 4 (u8 A, s8 B)."""
    A = Buffer((group,), "uint8", "A")
    B = Buffer((lanes, group), "int8", "B")
    C = Buffer((lanes,), "int32", "C")
    i, k = Var("i"), Var("k")
    vi, vk = IterVar(_rng(lanes), "vi"), IterVar(_rng(group), "vk", "reduce")
    value = C[vi.var] + Cast("int32", A[vk.var]) * Cast("int32", B[vi.var, vk.var])
    reads = [BufferRegion(A, [_rng(group)]), BufferRegion(B, [_rng(lanes), _rng(group)])]
    writes = [BufferRegion(C, [_rng(lanes)])]
    block = Block([vi, vk], reads, writes, "update", BufferStore(C, value, [vi.var]))
    body = For(i, 0, lanes, "serial", For(k, 0, group, "serial", BlockRealize([i, k], True, block)))
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], reads, writes, "root", body)))


# ---------------------------------------------------------------------------------------------
# implementations: a call of the micro-kernel with the regions' addresses and strides
# ---------------------------------------------------------------------------------------------
def gemm_impl(fn: str, mr: int, nr: int, a_dtype="float32", b_dtype="float32", c_dtype="float32",
              a_kmajor=False, b_quads=False) -> PrimFunc:
    """The call fn(K, a, a_i1, a_k1, b, b_k1, c, c_i1): the addresses of each region's first element
    and of its neighbours along i and k (address_wrapper turns them into strides for a micro-kernel
    that takes (K, a, rsa, csa, b, ldb, c, ldc)). Addresses, not strides fixed at tensorize time:
    lowering may compact a buffer the call reaches (C computed per panel for an epilogue there: its
    row stride shrinks to the panel's width), and it rewrites the indices of addresses with it."""
    K = Var("K")
    rsa, csa, ldb, ldc = Var("rsa"), Var("csa"), Var("ldb"), Var("ldc")
    if a_kmajor:
        A = Buffer((K, mr), a_dtype, "A", strides=(csa, rsa))
        a_i1, a_k1 = A[0, 1], A[1, 0]
    else:
        A = Buffer((mr, K), a_dtype, "A", strides=(rsa, csa))
        a_i1, a_k1 = A[1, 0], A[0, 1]
    if b_quads:
        B = Buffer((Var("K4"), nr, 4), b_dtype, "B", strides=(ldb, 4, 1))
        b0, b_k1 = B[0, 0, 0], B[1, 0, 0]
    else:
        B = Buffer((K, nr), b_dtype, "B", strides=(ldb, 1))
        b0, b_k1 = B[0, 0], B[1, 0]
    C = Buffer((mr, nr), c_dtype, "C", strides=(ldc, 1))
    call = Call("handle", fn, [K, _addr(A[0, 0]), _addr(a_i1), _addr(a_k1), _addr(b0), _addr(b_k1),
                               _addr(C[0, 0]), _addr(C[1, 0])])
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], [], [], "root", Evaluate(call))))


def address_wrapper(fn: str, kernel: str, a_t="float", b_t="float", c_t="float") -> str:
    """C source of fn, the function gemm_impl's call names: the strides from the addresses, then
    `kernel(K, a, rsa, csa, b, ldb, c, ldc)` (a micro-kernel taking strides) with them."""
    return (f"/* {fn}: strides from the addresses of neighbouring elements (gemm_impl's call) */\n"
            f"static inline __attribute__((always_inline)) void {fn}(int32_t K, const {a_t}* a, const {a_t}* a_i1, "
            f"const {a_t}* a_k1,\n    const {b_t}* b, const {b_t}* b_k1, {c_t}* c, {c_t}* c_i1) {{\n"
            f"  {kernel}(K, a, a_i1 - a, a_k1 - a, b, b_k1 - b, c, c_i1 - c);\n}}")


def dot_impl(fn: str, lanes=16, group=4) -> PrimFunc:
    A = Buffer((group,), "uint8", "A")
    B = Buffer((lanes, group), "int8", "B")
    C = Buffer((lanes,), "int32", "C")
    call = Call("handle", fn, [_addr(A[0]), _addr(B[0, 0]), _addr(C[0])])
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], [], [], "root", Evaluate(call))))


# ---------------------------------------------------------------------------------------------
# C sources
# ---------------------------------------------------------------------------------------------
_ISA = {  # name -> (vector type, lanes, load, store, broadcast, fma, macros, features)
    "avx2": ("__m256", 8, "_mm256_loadu_ps", "_mm256_storeu_ps", "_mm256_broadcast_ss", "_mm256_fmadd_ps",
             ("__AVX2__", "__FMA__"), AVX2),
    "avx512": ("__m512", 16, "_mm512_loadu_ps", "_mm512_storeu_ps", "_mm512_set1_ps", "_mm512_fmadd_ps",
               ("__AVX512F__",), AVX512),
}


def fp32_gemm_source(fn: str, mr: int, nr: int, isa: str, prefetch: bool = False) -> str:
    """C source of an mr x nr fp32 micro-kernel taking strides (see the module docstring). prefetch:
    it also takes (pf, l0, npf, pfs) and, at every pfs-th of its first npf k steps, prefetches the
    next cache line of B-shaped rows at pf (ldb floats apart), from line l0 on."""
    vt, lanes, load, store, bcast, fma, macros, feats = _ISA[isa]
    if nr % lanes:
        raise TesseraError(f"{fn}: NR={nr} is not a multiple of the {lanes} lanes of {isa}")
    nv = nr // lanes
    accs = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
    L = ["#include <immintrin.h>", _guard(fn, macros, feats),
         f"/* C[{mr} x {nr}] += A[{mr} x K] * B[K x {nr}], fp32 ({isa}): {mr * nv} accumulators in registers",
         f"   for the whole K loop; per k: {nv} loads of B, {mr} broadcasts of A, {mr * nv} FMAs.",
         "   A is a[i * rsa + k * csa] (row-major: csa == 1; packed k-major panel: rsa == 1), row k",
         "   of B is b + k * ldb, row i of C is c + i * ldc (columns of B and C contiguous)."
         + ("\n   At every pfs-th step k < npf it also prefetches the next cache line from line l0 on of the"
            "\n   B-shaped rows at pf (ldb floats apart)." if prefetch else "") + " */",
         f"static inline __attribute__((always_inline)) void {fn}(int32_t K, const float* restrict a, "
         f"int64_t rsa, int64_t csa,",
         "    const float* restrict b, int64_t ldb, float* restrict c, int64_t ldc"
         + (", uintptr_t pf, int32_t l0, int32_t npf, int32_t pfs) {" if prefetch else ") {")]
    # the accumulators start at zero and C is added at the end: the tile of C is prefetched now
    # and arrives while the k loop runs (loading it first would stall on a cache miss)
    zero = "_mm256_setzero_ps()" if isa == "avx2" else "_mm512_setzero_ps()"
    for i in range(mr):
        L.append("  " + " ".join(f"_mm_prefetch((const char*)(c + {i} * ldc + {v * 16}), _MM_HINT_T0);"
                                 for v in range((nr + 15) // 16)))
    for i in range(mr):
        L.append("  " + " ".join(f"{vt} {accs[i][v]} = {zero};" for v in range(nv)))

    def step(a_expr, pf_line=False):
        out = ["      " + " ".join(f"const {vt} b{v} = {load}(b + {v * lanes});" for v in range(nv)),
               f"      {vt} av;"]
        if pf_line:  # addresses as integers: past the last block they lie beyond B (harmless to prefetch)
            lpr = (nr + 15) // 16
            out.append(f"      if (--wait == 0) {{ wait = pfs; _mm_prefetch((const char*)(pf + 4 * (uintptr_t)("
                       f"(l / {lpr}) * ldb + (l % {lpr}) * 16)), _MM_HINT_T0); ++l; }}")
        for i in range(mr):
            out.append(f"      av = {bcast}({a_expr(i)}); " +
                       " ".join(f"{accs[i][v]} = {fma}(av, b{v}, {accs[i][v]});" for v in range(nv)))
        return out

    def k_loops(advance, a_expr, unroll=True):
        """The k loop (with prefetch: first its npf prefetching steps, then the rest)."""
        out = ["    int32_t k = 0;" + (" int32_t l = l0, wait = 1;" if prefetch else "")]
        parts = [("npf", True), ("K", False)] if prefetch else [("K", False)]
        for bound, pf_line in parts:
            if unroll:
                out.append("    #pragma GCC unroll 4")
            out.append(f"    for (; k < {bound}; ++k{advance}) {{")
            out += step(a_expr, pf_line)
            out.append("    }")
        return out
    # _mm256_broadcast_ss takes a pointer, _mm512_set1_ps a value
    deref = (lambda p: p) if isa == "avx2" else (lambda p: f"*({p})")
    L.append("  if (csa == 1) {  /* row-major A: one pointer per row, indexed by k */")
    L.append("    " + " ".join(f"const float* restrict a{i} = a + {i} * rsa;" for i in range(mr)))
    L += k_loops(", b += ldb", lambda i: deref(f"a{i} + k"))
    L.append("  } else if (rsa == 1) {  /* packed A: the rows of one k next to each other */")
    L += k_loops(", a += csa, b += ldb", lambda i: deref(f"a + {i}"))
    L.append("  } else {")
    L += k_loops(", a += csa, b += ldb", lambda i: deref(f"a + {i} * rsa"), unroll=False)
    L.append("  }")
    add = "_mm256_add_ps" if isa == "avx2" else "_mm512_add_ps"
    for i in range(mr):
        L.append("  " + " ".join(f"{store}(c + {i} * ldc + {v * lanes}, {add}({load}(c + {i} * ldc + {v * lanes}), "
                                 f"{accs[i][v]}));" for v in range(nv)))
    L.append("}")
    return "\n".join(L)


def vnni_gemm_source(fn: str, mr: int, nr: int) -> str:
    """C source of an mr x nr int8 micro-kernel with AVX512-VNNI (vpdpbusd)."""
    nv = nr // 16
    accs = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
    L = ["#include <immintrin.h>", "#include <string.h>", _guard(fn, ("__AVX512F__", "__AVX512VNNI__"), VNNI),
         f"/* C[{mr} x {nr}] (int32) += A[{mr} x K] (uint8) * B[K x {nr}] (int8) with AVX512-VNNI: B packed",
         "   as B[k / 4][j][k % 4] (one 64-byte row of quads per 4 k: 16 columns a register), A row i at",
         "   a + i * rsa (k contiguous), C row i at c + i * ldc. vpdpbusd adds four u8 x s8 products into",
         "   each int32 lane, exactly (the products of one lane cannot saturate int32). A tail of K % 4",
         "   is added in scalar code. */",
         f"static inline __attribute__((always_inline)) void {fn}(int32_t K, const uint8_t* restrict a, "
         f"int64_t rsa, int64_t csa,",
         "    const int8_t* restrict b, int64_t ldb, int32_t* restrict c, int64_t ldc) {",
         "  (void)csa;"]
    for i in range(mr):
        L.append("  " + " ".join(f"__m512i {accs[i][v]} = _mm512_loadu_si512(c + {i} * ldc + {v * 16});"
                                 for v in range(nv)))
    L.append("  const int32_t K4 = K / 4;")
    L.append("  for (int32_t q = 0; q < K4; ++q) {")
    L.append("    const int8_t* bq = b + q * ldb;")
    L.append("    " + " ".join(f"const __m512i b{v} = _mm512_loadu_si512(bq + {v * 64});" for v in range(nv)))
    L.append("    int32_t w;")
    for i in range(mr):
        L.append(f"    memcpy(&w, a + {i} * rsa + 4 * q, 4);")
        L.append("    { const __m512i av = _mm512_set1_epi32(w); " +
                 " ".join(f"{accs[i][v]} = _mm512_dpbusd_epi32({accs[i][v]}, av, b{v});" for v in range(nv)) + " }")
    L.append("  }")
    for i in range(mr):
        L.append("  " + " ".join(f"_mm512_storeu_si512(c + {i} * ldc + {v * 16}, {accs[i][v]});" for v in range(nv)))
    L += _int8_tail(mr, nr)
    L.append("}")
    return "\n".join(L)


# whether this process may use AMX tiles (asked of Linux once: arch_prctl ARCH_REQ_XCOMP_PERM for
# XTILEDATA; 1 yes, -1 no, 0 not asked yet) and the tile configuration's layout; guarded, so that the
# dense and the convolution kernels share one copy in a translation unit
AMX_HELPERS = "\n".join([
    "#ifndef TINTRIN_AMX_HELPERS",
    "#define TINTRIN_AMX_HELPERS",
    "#include <unistd.h>",
    "#include <sys/syscall.h>",
    "static int tsr_amx_permitted = 0;",
    "static inline int tsr_amx_ready(void) {",
    "  int s = __atomic_load_n(&tsr_amx_permitted, __ATOMIC_ACQUIRE);",
    "  if (s == 0) {",
    "    s = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0 ? 1 : -1;",
    "    __atomic_store_n(&tsr_amx_permitted, s, __ATOMIC_RELEASE);",
    "  }",
    "  return s > 0;",
    "}",
    "typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tsr_amx_cfg_t;",
    "#endif"])


def amx_gemm_source(fn: str, fallback: str) -> str:
    """C source of a 16 x 64 int8 micro-kernel on AMX tiles (TDPBUSD: a 16 x 16 int32 tile += a 16 x 64
    uint8 tile times a 16-quad x 16 int8 tile): C in four accumulator tiles, A one tile and B one tile
    per 64 k, both loaded straight from the layouts the VNNI kernel reads (B's quads are AMX's B rows).
    The K % 64 left, and every call where the kernel may not use AMX (Linux grants it per process on
    request; a seccomp filter or an old kernel refuses), go to `fallback`, the 4 x 64 VNNI kernel. The
    tile configuration is loaded at each call and released at its end: another library in the process
    (ONNX Runtime, oneDNN) may configure the thread's tiles differently between two calls."""
    feats = AMX + VNNI
    L = ["#include <immintrin.h>", _guard(fn, ("__AMX_TILE__", "__AMX_INT8__", "__AVX512VNNI__"), feats),
         AMX_HELPERS,
         "/* palette 1: tiles 0-3 C (16 rows of 16 int32), tile 4 A (16 rows of 64 uint8), tile 5 B (16 quads",
         "   of 16 columns x 4 int8) */",
         f"static inline __attribute__((always_inline)) void {fn}(int32_t K, const uint8_t* restrict a, "
         "int64_t rsa, int64_t csa,",
         "    const int8_t* restrict b, int64_t ldb, int32_t* restrict c, int64_t ldc) {",
         "  const int32_t K64 = K / 64;",
         "  if (K64 == 0 || !tsr_amx_ready()) {",
         f"    for (int32_t r = 0; r < 16; r += 4) {fallback}(K, a + r * rsa, rsa, csa, b, ldb, c + r * ldc, ldc);",
         "    return;",
         "  }",
         "  tsr_amx_cfg_t cfg = {0};",
         "  cfg.palette = 1;",
         "  for (int t = 0; t < 6; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }",
         "  _tile_loadconfig(&cfg);",
         "  _tile_loadd(0, c, ldc * 4); _tile_loadd(1, c + 16, ldc * 4);",
         "  _tile_loadd(2, c + 32, ldc * 4); _tile_loadd(3, c + 48, ldc * 4);",
         "  for (int32_t s = 0; s < K64; ++s) {",
         "    const int8_t* bs = b + (int64_t)s * 16 * ldb;",
         "    _tile_loadd(4, a + 64 * s, rsa);",
         "    _tile_loadd(5, bs, ldb); _tile_dpbusd(0, 4, 5);",
         "    _tile_loadd(5, bs + 64, ldb); _tile_dpbusd(1, 4, 5);",
         "    _tile_loadd(5, bs + 128, ldb); _tile_dpbusd(2, 4, 5);",
         "    _tile_loadd(5, bs + 192, ldb); _tile_dpbusd(3, 4, 5);",
         "  }",
         "  _tile_stored(0, c, ldc * 4); _tile_stored(1, c + 16, ldc * 4);",
         "  _tile_stored(2, c + 32, ldc * 4); _tile_stored(3, c + 48, ldc * 4);",
         "  _tile_release();",
         "  if (K > 64 * K64)  /* the K % 64 left */",
         f"    for (int32_t r = 0; r < 16; r += 4)",
         f"      {fallback}(K - 64 * K64, a + r * rsa + 64 * K64, rsa, csa, b + (int64_t)K64 * 16 * ldb, ldb, c + r * ldc, ldc);",
         "}"]
    return "\n".join(L)


def _int8_tail(mr, nr):
    return ["  for (int32_t k = K4 * 4; k < K; ++k)  /* K % 4 leftover products */",
            f"    for (int32_t i = 0; i < {mr}; ++i)",
            f"      for (int32_t j = 0; j < {nr}; ++j)",
            "        c[i * ldc + j] += (int32_t)a[i * rsa + k] * (int32_t)b[(k / 4) * ldb + j * 4 + k % 4];"]


def avx2_int8_gemm_source(fn: str, mr: int, nr: int) -> str:
    """C source of an exact mr x nr int8 micro-kernel with AVX2 (widen to int16, vpmaddwd)."""
    if nr % 8:
        raise TesseraError(f"{fn}: NR={nr} must be a multiple of 8")
    if mr > 6:
        raise TesseraError(f"{fn}: MR={mr} needs more than the 16 ymm registers (at most 6 rows)")
    ng = nr // 8
    L = ["#include <immintrin.h>", "#include <string.h>", _guard(fn, ("__AVX2__",), ("avx2",)),
         f"/* C[{mr} x {nr}] (int32) += A[{mr} x K] (uint8) * B[K x {nr}] (int8) with AVX2, exactly: B packed",
         "   as B[k / 4][j][k % 4]. Per 4 k and 8 columns, the 32 bytes of B are sign-extended to int16",
         "   (vpmovsxbw, two registers of 4 columns x 4 k) and A's 4 bytes zero-extended and repeated;",
         "   vpmaddwd multiplies int16 pairs and adds each pair into an int32 lane, which cannot saturate",
         "   (255 * 128 * 2 < 2^31) -- vpmaddubsw would (255 * 127 * 2 > 2^15). Lane pairs (k 0-1, k 2-3)",
         "   of a column are added at the end (vphaddd). A tail of K % 4 is added in scalar code. */",
         f"static inline __attribute__((always_inline)) void {fn}(int32_t K, const uint8_t* restrict a, "
         f"int64_t rsa, int64_t csa,",
         "    const int8_t* restrict b, int64_t ldb, int32_t* restrict c, int64_t ldc) {",
         "  (void)csa;",
         "  const int32_t K4 = K / 4;"]
    for g in range(ng):
        L.append(f"  {{  /* columns {g * 8}..{g * 8 + 7} */")
        rows = mr
        for r in range(rows):
            L.append(f"    __m256i lo{r} = _mm256_setzero_si256(), hi{r} = _mm256_setzero_si256();")
        L.append("    for (int32_t q = 0; q < K4; ++q) {")
        L.append(f"      const int8_t* bq = b + q * ldb + {g * 32};")
        L.append("      const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)bq));")
        L.append("      const __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(bq + 16)));")
        L.append("      int32_t w;")
        for r in range(rows):
            L.append(f"      memcpy(&w, a + {r} * rsa + 4 * q, 4);")
            L.append(f"      {{ const __m256i av = _mm256_cvtepu8_epi16(_mm_set1_epi32(w));"
                     f" lo{r} = _mm256_add_epi32(lo{r}, _mm256_madd_epi16(av, b0));"
                     f" hi{r} = _mm256_add_epi32(hi{r}, _mm256_madd_epi16(av, b1)); }}")
        L.append("    }")
        for r in range(rows):
            L.append(f"    {{ int32_t* cr = c + {r} * ldc + {g * 8};"
                     f" const __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo{r}, hi{r}), 0xD8);"
                     f" _mm256_storeu_si256((__m256i*)cr, _mm256_add_epi32(_mm256_loadu_si256((const __m256i*)cr), s)); }}")
        L.append("  }")
    L += _int8_tail(mr, nr)
    L.append("}")
    return "\n".join(L)


def dot_source(fn: str, isa: str) -> str:
    if isa == "vnni":
        return "\n".join([
            "#include <immintrin.h>", "#include <string.h>", _guard(fn, ("__AVX512F__", "__AVX512VNNI__"), VNNI),
            "/* C[16] (int32) += sum over k < 4 of A[k] (uint8) * B[i][k] (int8): one vpdpbusd. */",
            f"static inline __attribute__((always_inline)) void {fn}(const uint8_t* restrict a, "
            f"const int8_t* restrict b, int32_t* restrict c) {{",
            "  int32_t w;", "  memcpy(&w, a, 4);",
            "  _mm512_storeu_si512(c, _mm512_dpbusd_epi32(_mm512_loadu_si512(c), _mm512_set1_epi32(w), "
            "_mm512_loadu_si512(b)));",
            "}"])
    return "\n".join([
        "#include <immintrin.h>", "#include <string.h>", _guard(fn, ("__AVX2__",), ("avx2",)),
        "/* C[16] (int32) += sum over k < 4 of A[k] (uint8) * B[i][k] (int8) with AVX2, exactly: int16",
        "   products summed in pairs by vpmaddwd, the pairs of a lane added by vphaddd. */",
        f"static inline __attribute__((always_inline)) void {fn}(const uint8_t* restrict a, "
        f"const int8_t* restrict b, int32_t* restrict c) {{",
        "  int32_t w;", "  memcpy(&w, a, 4);",
        "  const __m256i av = _mm256_cvtepu8_epi16(_mm_set1_epi32(w));",
        "  for (int h = 0; h < 2; ++h) {  /* 8 lanes of C at a time */",
        "    const __m256i p0 = _mm256_madd_epi16(av, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(b + 32 * h))));",
        "    const __m256i p1 = _mm256_madd_epi16(av, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(b + 32 * h + 16))));",
        "    const __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(p0, p1), 0xD8);",
        "    _mm256_storeu_si256((__m256i*)(c + 8 * h), _mm256_add_epi32(_mm256_loadu_si256((const __m256i*)(c + 8 * h)), s));",
        "  }",
        "}"])


# ---------------------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------------------
FP32_GEMM = {"avx2": [(6, 16), (4, 16), (8, 8), (4, 24), (14, 8)], "avx512": [(6, 64), (14, 32), (8, 32), (4, 64)]}
AMX_TILE = (16, 64)   # the one AMX tile; the "amx" ISA's other tiles are VNNI's (rows 16 does not divide)
INT8_GEMM = {"vnni": [(6, 64), (8, 32), (4, 64)], "avx2": [(6, 8), (4, 8)]}
INT8_GEMM["amx"] = [AMX_TILE] + INT8_GEMM["vnni"]


def fp32_gemm_name(isa, mr, nr, a_kmajor=False):
    pre = "x86_avx2_fma" if isa == "avx2" else "x86_avx512_fma"
    return f"{pre}_gemm_{mr}x{nr}_f32" + ("_a_kmajor" if a_kmajor else "")


def fp32_gemm_parts(name):
    """(isa, mr, nr) of an fp32 micro-kernel intrinsic's name (fp32_gemm_name's inverse)."""
    m = re.fullmatch(r"x86_(avx2|avx512)_fma_gemm_(\d+)x(\d+)_f32(_a_kmajor)?", name)
    if m is None:
        raise TesseraError(f"{name!r} is not the name of an x86 fp32 GEMM micro-kernel")
    return m.group(1), int(m.group(2)), int(m.group(3))


def fp32_gemm_rows_name(isa, mr, nr, rows):
    """The intrinsic computing `rows` rows (a multiple of mr) of C a call with the mr x nr
    micro-kernel, prefetching the next block of B as it goes (fp32_gemm_rows_source)."""
    return fp32_gemm_name(isa, mr, nr) + f"_rows{rows}_pf"


def fp32_gemm_rows_source(fn: str, mr: int, nr: int, rows: int, isa: str) -> str:
    """C source of the rows intrinsic: C[rows x nr] += A[rows x K] * B[K x nr] as rows / mr calls of
    the mr x nr micro-kernel down the rows, all on the same K x nr block of B. The block that comes
    next in memory (b + K * ldb: the next k block of these columns, or with B packed in panels,
    the next panel's first) is prefetched meanwhile, each tile a share of its cache lines spread
    evenly over its k steps: weights too large for the cache arrive while this block is computed,
    not when the first tile reads them (bunched at the start of each tile, the prefetches gained
    a third as much)."""
    tiles = rows // mr
    lpr = (nr + 15) // 16
    tile_fn = f"{fn}_tile"
    L = [fp32_gemm_source(tile_fn, mr, nr, isa, prefetch=True),
         f"/* C[{rows} x {nr}] += A[{rows} x K] * B[K x {nr}]: {tiles} tiles of {mr} rows; tile t also",
         f"   prefetches lines t * P .. t * P + P - 1 (P = ceil(lines / {tiles})) of the K x {nr} block at",
         f"   b + K * ldb ({lpr} cache line(s) a row), one every pfs = K / P of its k steps (at most one a step):",
         "   spread over the whole block's time, the next block streams in at the pace it is used. */",
         f"static inline __attribute__((always_inline)) void {fn}_strided(int32_t K, const float* restrict a, "
         f"int64_t rsa, int64_t csa,",
         "    const float* restrict b, int64_t ldb, float* restrict c, int64_t ldc) {",
         "  const uintptr_t next = (uintptr_t)b + 4 * (uintptr_t)K * (uintptr_t)ldb;",
         f"  const int32_t lines = K * {lpr}, P = (lines + {tiles - 1}) / {tiles}, pfs = P < K ? K / P : 1;",
         f"  for (int32_t t = 0; t < {tiles}; ++t) {{",
         "    const int32_t left = lines - t * P, n = left < P ? (left > 0 ? left : 0) : P;",
         f"    {tile_fn}(K, a + t * {mr} * rsa, rsa, csa, b, ldb, c + t * {mr} * ldc, ldc, next, t * P,",
         "        n * pfs < K ? n * pfs : K, pfs);",
         "  }",
         "}",
         address_wrapper(fn, fn + "_strided")]
    return "\n".join(L)


def _make_rows(m) -> None:
    """Register the rows intrinsic a name of fp32_gemm_rows_name's form spells (register_family)."""
    isa = "avx2" if m.group(1) == "avx2" else "avx512"
    mr, nr, rows = (int(g) for g in m.groups()[1:])
    if (mr, nr) not in FP32_GEMM[isa] or rows % mr or rows < mr:
        return
    fn = f"tintrin_{isa}_gemm_{mr}x{nr}_f32_rows{rows}_pf"
    TensorIntrin.register(fp32_gemm_rows_name(isa, mr, nr, rows), gemm_desc(rows, nr), gemm_impl(fn, rows, nr),
                          c_source=fp32_gemm_rows_source(fn, mr, nr, rows, isa),
                          features=AVX2 if isa == "avx2" else AVX512,
                          doc=f"fp32 {rows}x{nr} GEMM block: {rows // mr} calls of the {mr}x{nr} micro-kernel "
                              f"({isa}), the next block of B prefetched")


def int8_gemm_name(isa, mr, nr):
    if isa == "amx" and (mr, nr) == AMX_TILE:
        return f"x86_amx_gemm_{mr}x{nr}_u8s8s32"
    return f"x86_{'avx512_vnni' if isa in ('vnni', 'amx') else 'avx2'}_gemm_{mr}x{nr}_u8s8s32"


def _register_all():
    for isa, tiles in FP32_GEMM.items():
        feats = AVX2 if isa == "avx2" else AVX512
        for mr, nr in tiles:
            fn = f"tintrin_{isa}_gemm_{mr}x{nr}_f32"
            src = fp32_gemm_source(fn + "_strided", mr, nr, isa) + "\n" + address_wrapper(fn, fn + "_strided")
            for km in (False, True):
                TensorIntrin.register(fp32_gemm_name(isa, mr, nr, km), gemm_desc(mr, nr, a_kmajor=km),
                                      gemm_impl(fn, mr, nr, a_kmajor=km), override=True, c_source=src,
                                      features=feats, doc=f"fp32 {mr}x{nr} GEMM micro-kernel ({isa})")
    for isa, tiles in INT8_GEMM.items():
        if isa == "amx":
            continue
        feats = VNNI if isa == "vnni" else ("avx2",)
        for mr, nr in tiles:
            fn = f"tintrin_{isa}_gemm_{mr}x{nr}_u8s8s32"
            src = ((vnni_gemm_source if isa == "vnni" else avx2_int8_gemm_source)(fn + "_strided", mr, nr) + "\n"
                   + address_wrapper(fn, fn + "_strided", "uint8_t", "int8_t", "int32_t"))
            args = ("uint8", "int8", "int32")
            TensorIntrin.register(int8_gemm_name(isa, mr, nr), gemm_desc(mr, nr, *args, b_quads=True),
                                  gemm_impl(fn, mr, nr, *args, b_quads=True), override=True, c_source=src,
                                  features=feats, doc=f"int8 {mr}x{nr} GEMM micro-kernel ({isa})")
    mr, nr = AMX_TILE
    fn, fallback = f"tintrin_amx_gemm_{mr}x{nr}_u8s8s32", "tintrin_amx_fallback_4x64_u8s8s32"
    src = (vnni_gemm_source(fallback, 4, 64) + "\n" + amx_gemm_source(fn + "_strided", fallback) + "\n"
           + address_wrapper(fn, fn + "_strided", "uint8_t", "int8_t", "int32_t"))
    args = ("uint8", "int8", "int32")
    TensorIntrin.register(int8_gemm_name("amx", mr, nr), gemm_desc(mr, nr, *args, b_quads=True),
                          gemm_impl(fn, mr, nr, *args, b_quads=True), override=True, c_source=src,
                          features=AMX + VNNI, doc=f"int8 {mr}x{nr} GEMM micro-kernel (AMX tiles, VNNI for K % 64)")
    for isa, name in (("vnni", "x86_avx512_vnni_dot_16x4_u8s8s32"), ("avx2", "x86_avx2_dot_16x4_u8s8s32")):
        fn = f"tintrin_{isa}_dot_16x4_u8s8s32"
        feats = VNNI if isa == "vnni" else ("avx2",)
        for n in (name, "dot_16x4_vnni") if isa == "vnni" else (name,):
            TensorIntrin.register(n, dot_desc(), dot_impl(fn), override=True, c_source=dot_source(fn, isa),
                                  features=feats, doc="u8 x s8 -> s32 dot product of 16 lanes x 4")


_register_all()
TensorIntrin.register_family(r"x86_(avx2|avx512)_fma_gemm_(\d+)x(\d+)_f32_rows(\d+)_pf", _make_rows)


def gemm_intrin_for(target, dtype="float32", a_kmajor=False, tiles=None) -> str:
    """The name of the best GEMM micro-kernel intrinsic `target` supports for dtype "float32" or
    "int8" (u8 x s8 -> s32): AVX-512 (VNNI) where available, else AVX2. tiles: allowed (mr, nr)
    pairs (e.g. those dividing the problem), in preference order."""
    t = Target(target)
    if dtype == "float32":
        order = [("avx512", AVX512), ("avx2", AVX2)]
        for isa, feats in order:
            if all(t.has_feature(f) for f in feats):
                for mr, nr in (tiles or FP32_GEMM[isa]):
                    if (mr, nr) in FP32_GEMM[isa]:
                        return fp32_gemm_name(isa, mr, nr, a_kmajor)
    elif dtype in ("int8", "uint8"):
        for isa, feats in (("vnni", VNNI), ("avx2", ("avx2",))):
            if all(t.has_feature(f) for f in feats):
                for mr, nr in (tiles or INT8_GEMM[isa]):
                    if (mr, nr) in INT8_GEMM[isa]:
                        return int8_gemm_name(isa, mr, nr)
    else:
        raise TesseraError(f"gemm_intrin_for: dtype must be 'float32' or 'int8', got {dtype!r}")
    raise TesseraError(f"target {str(t)!r} has no x86 GEMM intrinsic for {dtype}"
                       + (f" with tiles {tiles}" if tiles else "") + " (needs AVX2+FMA or AVX-512)")


__all__ = ["gemm_desc", "gemm_impl", "address_wrapper", "dot_desc", "dot_impl", "gemm_intrin_for",
           "fp32_gemm_name", "fp32_gemm_parts", "fp32_gemm_rows_name", "int8_gemm_name", "FP32_GEMM", "INT8_GEMM",
           "AMX_TILE"]
