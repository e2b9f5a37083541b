"""x86 micro-kernel of the blocked int8 depthwise convolution (qnn.contrib_depthwise_conv2d_NCHWc):
integer dot products over the taps.

The tensor intrinsic `x86_{isa}_qdepthwise_nchwc_{ROWS}x{OW}_k{KH}x{KW}_s{sh}x{sw}_d{dh}x{dw}` computes,
for ROWS output rows of OW pixels of one block of L channels:

    for r < ROWS, i < OW, j < L; reduce kh < KH, kw < KW:
        C[r, i, j] += i32(A[r * sh + kh * dh, i * sw + kw * dw, j]) * i32(W[kh, kw, j])

A: the padded input of the channel block, uint8 (rows, columns, L); W: its filter, int8 (KH, KW, L);
C: the int32 output tile, NCHW{L}c. A depthwise convolution sums no channels, so a dot-product
instruction's four bytes a lane must be four taps of one channel: the kernel interleaves the input.
For each input column it builds, per group of T vertically adjacent taps (T = 4 for vpdpbusd, 2 for
vpmaddwd), one vector of the L channels' T-tap tuples ("quads": bytes (row 0, row 1, row 2, row 3)
of channel c in int32 lane c); every output pixel whose window reads that column then adds, per kw,
one dot product of that column's quads and the weight quads of its kw. Per group of 4 columns
(vpdpbusd on zmm) the interleave is 4 row loads of 64 bytes (a column a 128-bit lane), 8 in-lane
unpacks (bytes, then words) and a 4 x 4 transpose of the 128-bit lanes (8 vshufi32x4): 4 shuffles a
column, shared by the KW outputs that read it. With stride 1 and dilation 1 in h, two output rows
share the quads of 4 rows (KH + 1 <= 4 T-groups' rows): row R weighs them (w0, w1, w2, 0), row R + 1
(0, w0, w1, w2): 2 shuffles and 3 vpdpbusd a 16-channel output vector of a 3x3 filter (the float
path it replaces: 9 x (vpmovzxbd + vcvtdq2ps + vfmadd), ~27 uops). A window taller than a group
(KH + rows - 1 > T) takes several groups, the rows past the window zero.

    isa        L   T  dot product                              features
    vnni512    16  4  vpdpbusd zmm                             avx512f, avx512bw, avx512vnni
    vnni256    8   4  vpdpbusd ymm (AVX-512VL)                 + avx512vl
    avxvnni    8   4  vpdpbusd ymm (VEX, AVX-VNNI)             avx2, avxvnni
    avx2       8   2  vpmaddwd on (row a, row b) int16 pairs   avx2

Every sum is exact (|u8 x s8| < 2**15; vpmaddwd's pair sums < 2**16, no saturation): the result is
the integer convolution. A call builds its weight quads once, then per row (pair) the quads of all
the columns its window spans into a local array (in L1) and runs the outputs over them. A is passed
by the addresses of its first element and of the next row (its column stride must be L: a row's
pixels are contiguous); C by row 0 and row 1. Registered on first use by name
(TensorIntrin.register_family).
"""
from __future__ import annotations

import functools

from ...errors import TesseraError
from ...ir import (Block, BlockRealize, Buffer, BufferRegion, BufferStore, Call, Cast, Evaluate, For, IterVar,
                   PrimFunc, Range, Var)
from .intrin import TensorIntrin

# isa -> (lanes L, taps a group T, pixels a block load P, features, macros, vector type, dot product(acc, q, w))
ISA = {
    "vnni512": (16, 4, 4, ("avx512f", "avx512bw", "avx512vnni"), ("__AVX512F__", "__AVX512BW__", "__AVX512VNNI__"),
                "__m512i", "_mm512_dpbusd_epi32({acc}, {q}, {w})"),
    "vnni256": (8, 4, 4, ("avx512f", "avx512vl", "avx512vnni"), ("__AVX512VL__", "__AVX512VNNI__"), "__m256i",
                "_mm256_dpbusd_epi32({acc}, {q}, {w})"),
    "avxvnni": (8, 4, 4, ("avx2", "avxvnni"), ("__AVX2__", "__AVXVNNI__"), "__m256i",
                "_mm256_dpbusd_avx_epi32({acc}, {q}, {w})"),
    "avx2": (8, 2, 2, ("avx2",), ("__AVX2__",), "__m256i", "_mm256_add_epi32({acc}, _mm256_madd_epi16({q}, {w}))"),
}
MAX_QUAD_BYTES = 64 * 1024    # the local array of a row's interleaved columns (the call's stack)

# the interleaves, one copy a translation unit (guarded): per vector width, a block of P pixels of T
# rows -> P vectors of the pixels' T-tap tuples, one pixel (the row's last columns, the weights)
_HELPERS = {
    "zmm": """#ifndef TSR_QDW_ZMM
#define TSR_QDW_ZMM
/* 4 pixels of 16 channels (128-bit lane j: pixel j) of rows 0-3 -> u[j]: pixel j's channels, int32 lane c
   the bytes (row 0, row 1, row 2, row 3) of channel c */
static inline __attribute__((always_inline)) void tsr_qdw_quads4_zmm(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                                                                     __m512i* u) {
  const __m512i a = _mm512_unpacklo_epi8(r0, r1), b = _mm512_unpackhi_epi8(r0, r1);   /* rows 0, 1: ch 0-7, 8-15 */
  const __m512i c = _mm512_unpacklo_epi8(r2, r3), d = _mm512_unpackhi_epi8(r2, r3);   /* rows 2, 3 */
  const __m512i t0 = _mm512_unpacklo_epi16(a, c), t1 = _mm512_unpackhi_epi16(a, c);   /* lane j: ch 0-3, 4-7 */
  const __m512i t2 = _mm512_unpacklo_epi16(b, d), t3 = _mm512_unpackhi_epi16(b, d);   /* ch 8-11, 12-15 */
  /* the 4 x 4 transpose of 128-bit lanes: u[j] lane k = t_k lane j */
  const __m512i s0 = _mm512_shuffle_i32x4(t0, t1, 0x44), s1 = _mm512_shuffle_i32x4(t0, t1, 0xEE);
  const __m512i s2 = _mm512_shuffle_i32x4(t2, t3, 0x44), s3 = _mm512_shuffle_i32x4(t2, t3, 0xEE);
  u[0] = _mm512_shuffle_i32x4(s0, s2, 0x88); u[1] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
  u[2] = _mm512_shuffle_i32x4(s1, s3, 0x88); u[3] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
}
/* one pixel (16 bytes) of rows 0-3 -> its quads */
static inline __attribute__((always_inline)) __m512i tsr_qdw_quad1_zmm(__m128i x0, __m128i x1, __m128i x2, __m128i x3) {
  const __m128i a = _mm_unpacklo_epi8(x0, x1), b = _mm_unpackhi_epi8(x0, x1);
  const __m128i c = _mm_unpacklo_epi8(x2, x3), d = _mm_unpackhi_epi8(x2, x3);
  __m512i u = _mm512_castsi128_si512(_mm_unpacklo_epi16(a, c));
  u = _mm512_inserti32x4(u, _mm_unpackhi_epi16(a, c), 1);
  u = _mm512_inserti32x4(u, _mm_unpacklo_epi16(b, d), 2);
  return _mm512_inserti32x4(u, _mm_unpackhi_epi16(b, d), 3);
}
#endif""",
    "ymm": """#ifndef TSR_QDW_YMM
#define TSR_QDW_YMM
/* 4 pixels of 8 channels (128-bit lane 0: pixels 0, 1; lane 1: pixels 2, 3) of rows 0-3 -> u[j]: pixel j's
   channels, int32 lane c the bytes (row 0, row 1, row 2, row 3) of channel c */
static inline __attribute__((always_inline)) void tsr_qdw_quads4_ymm(__m256i r0, __m256i r1, __m256i r2, __m256i r3,
                                                                     __m256i* u) {
  const __m256i a = _mm256_unpacklo_epi8(r0, r1), b = _mm256_unpackhi_epi8(r0, r1);   /* pixels 0|2, 1|3 */
  const __m256i c = _mm256_unpacklo_epi8(r2, r3), d = _mm256_unpackhi_epi8(r2, r3);
  const __m256i t0 = _mm256_unpacklo_epi16(a, c), t1 = _mm256_unpackhi_epi16(a, c);   /* pixels 0|2: ch 0-3, 4-7 */
  const __m256i t2 = _mm256_unpacklo_epi16(b, d), t3 = _mm256_unpackhi_epi16(b, d);   /* pixels 1|3 */
  u[0] = _mm256_permute2x128_si256(t0, t1, 0x20); u[2] = _mm256_permute2x128_si256(t0, t1, 0x31);
  u[1] = _mm256_permute2x128_si256(t2, t3, 0x20); u[3] = _mm256_permute2x128_si256(t2, t3, 0x31);
}
/* one pixel (8 bytes) of rows 0-3 -> its quads */
static inline __attribute__((always_inline)) __m256i tsr_qdw_quad1_ymm(__m128i x0, __m128i x1, __m128i x2, __m128i x3) {
  const __m128i a = _mm_unpacklo_epi8(x0, x1), c = _mm_unpacklo_epi8(x2, x3);
  return _mm256_set_m128i(_mm_unpackhi_epi16(a, c), _mm_unpacklo_epi16(a, c));
}
#endif""",
    "pairs": """#ifndef TSR_QDW_PAIRS
#define TSR_QDW_PAIRS
/* 2 pixels of 8 channels of rows a, b -> u[j]: pixel j's channels, int32 lane c the int16 pair (row a, row b) */
static inline __attribute__((always_inline)) void tsr_qdw_pairs2_avx2(__m128i ra, __m128i rb, __m256i* u) {
  u[0] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(ra, rb));
  u[1] = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(ra, rb));
}
/* one pixel (8 bytes) of rows a, b -> its pairs; the weights' pairs sign-extended */
static inline __attribute__((always_inline)) __m256i tsr_qdw_pair1_avx2(__m128i ra, __m128i rb) {
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(ra, rb));
}
static inline __attribute__((always_inline)) __m256i tsr_qdw_wpair1_avx2(__m128i wa, __m128i wb) {
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(wa, wb));
}
#endif""",
}


def _snippets(isa):
    """(helpers key, block fn, one fn, weight one fn, block load, one load, one zero, acc load, acc store)."""
    if isa == "vnni512":
        return ("zmm", "tsr_qdw_quads4_zmm", "tsr_qdw_quad1_zmm", "tsr_qdw_quad1_zmm",
                "_mm512_loadu_si512((const void*)({p}))", "_mm_loadu_si128((const __m128i*)({p}))",
                "_mm512_setzero_si512()", "_mm_setzero_si128()",
                "_mm512_loadu_si512((const void*)({p}))", "_mm512_storeu_si512((void*)({p}), {v});")
    if isa in ("vnni256", "avxvnni"):
        return ("ymm", "tsr_qdw_quads4_ymm", "tsr_qdw_quad1_ymm", "tsr_qdw_quad1_ymm",
                "_mm256_loadu_si256((const __m256i*)({p}))", "_mm_loadl_epi64((const __m128i*)({p}))",
                "_mm256_setzero_si256()", "_mm_setzero_si128()",
                "_mm256_loadu_si256((const __m256i*)({p}))", "_mm256_storeu_si256((__m256i*)({p}), {v});")
    return ("pairs", "tsr_qdw_pairs2_avx2", "tsr_qdw_pair1_avx2", "tsr_qdw_wpair1_avx2",
            "_mm_loadu_si128((const __m128i*)({p}))", "_mm_loadl_epi64((const __m128i*)({p}))",
            "_mm_setzero_si128()", "_mm_setzero_si128()",
            "_mm256_loadu_si256((const __m256i*)({p}))", "_mm256_storeu_si256((__m256i*)({p}), {v});")


def isa_for(target, lanes: int) -> str | None:
    """The depthwise kernel's ISA on `target` for blocks of `lanes` channels (16 or 8), or None."""
    from ...target import Target

    t = Target(target)
    vnni = all(t.has_feature(f) for f in ("avx512f", "avx512bw", "avx512vnni"))
    if lanes == 16:
        return "vnni512" if vnni else None
    if lanes != 8:
        return None
    if vnni and t.has_feature("avx512vl"):
        return "vnni256"
    if t.has_feature("avx2") and t.has_feature("avxvnni"):
        return "avxvnni"
    return "avx2" if t.has_feature("avx2") else None


def paired(strides, dilation, rows) -> bool:
    """Whether output rows go in pairs sharing their input rows' quads (stride and dilation 1 in h)."""
    return strides[0] == 1 and dilation[0] == 1 and rows >= 2


def groups(isa, kh, strides, dilation, rows) -> int:
    """Tap groups a pass: the window rows of a pass (KH, or KH + 1 for a pair) in groups of T."""
    T = ISA[isa][1]
    return -(-(kh + (1 if paired(strides, dilation, rows) else 0)) // T)


def quad_columns(ow, kw, strides, dilation) -> int:
    """The input columns a row's window spans."""
    return (ow - 1) * strides[1] + (kw - 1) * dilation[1] + 1


def fits(isa, rows, ow, kh, kw, strides, dilation) -> bool:
    """Whether the kernel's local array of a row's quads fits MAX_QUAD_BYTES."""
    vec = ISA[isa][0] * 4
    return groups(isa, kh, strides, dilation, rows) * quad_columns(ow, kw, strides, dilation) * vec <= MAX_QUAD_BYTES


def intrin_name(isa, rows, ow, kernel, strides, dilation) -> str:
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    return f"x86_{isa}_qdepthwise_nchwc_{rows}x{ow}_k{kh}x{kw}_s{sh}x{sw}_d{dh}x{dw}"


def _fn(isa, rows, ow, kernel, strides, dilation) -> str:
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    return f"tintrin_{isa}_qdw_{rows}x{ow}_k{kh}x{kw}_s{sh}x{sw}_d{dh}x{dw}"


def _rng(n):
    return Range.from_min_extent(0, n)


def _desc(lanes, rows, ow, kernel, strides, dilation) -> PrimFunc:
    (KH, KW), (sh, sw), (dh, dw) = kernel, strides, dilation
    HA, WA = Var("HA"), Var("WA")
    A = Buffer((HA, WA, lanes), "uint8", "A")
    W = Buffer((KH, KW, lanes), "int8", "W")
    C = Buffer((rows, ow, lanes), "int32", "C")
    ivs = [IterVar(_rng(rows), "vr"), IterVar(_rng(ow), "vi"), IterVar(_rng(lanes), "vj"),
           IterVar(_rng(KH), "vkh", "reduce"), IterVar(_rng(KW), "vkw", "reduce")]
    vr, vi, vj, vkh, vkw = (iv.var for iv in ivs)
    value = C[vr, vi, vj] + Cast("int32", A[vr * sh + vkh * dh, vi * sw + vkw * dw, vj]) * Cast("int32", W[vkh, vkw, vj])
    reads = [BufferRegion(A, [_rng(s) for s in A.shape]), BufferRegion(W, [_rng(s) for s in W.shape])]
    writes = [BufferRegion(C, [_rng(s) for s in C.shape])]
    block = Block(ivs, reads, writes, "update", BufferStore(C, value, [vr, vi, vj]))
    loops = [(Var(n), e) for n, e in (("r", rows), ("i", ow), ("j", lanes), ("kh", KH), ("kw", KW))]
    body = BlockRealize([var for var, _ in loops], True, block)
    for var, ext in reversed(loops):
        body = For(var, 0, ext, "serial", body)
    return PrimFunc([A, W, C], BlockRealize([], True, Block([], reads, writes, "root", body)))


def _impl(fn, lanes, rows, ow, kernel, strides, dilation) -> PrimFunc:
    KH, KW = kernel
    last_row = (rows - 1) * strides[0] + (KH - 1) * dilation[0]     # of the window's rows
    HA, WA = Var("HA"), Var("WA")
    A = Buffer((HA, WA, lanes), "uint8", "A", strides=(Var("sa_h"), lanes, 1))   # a row's pixels contiguous
    W = Buffer((KH, KW, lanes), "int8", "W")
    C = Buffer((rows, ow, lanes), "int32", "C", strides=(Var("sc_h"), lanes, 1))

    def addr(load):
        return Call("handle", "address_of", [load])

    args = [addr(A[0, 0, 0]), addr(A[min(1, last_row), 0, 0]), addr(W[0, 0, 0]),
            addr(C[0, 0, 0]), addr(C[min(1, rows - 1), 0, 0])]
    return PrimFunc([A, W, C], BlockRealize([], True, Block([], [], [], "root", Evaluate(Call("handle", fn, args)))))


@functools.lru_cache(maxsize=256)
def c_source(isa, rows, ow, kernel, strides, dilation) -> str:
    """The kernel's C (module docstring)."""
    lanes, T, P, feats, macros, vt, dot = ISA[isa]
    (KH, KW), (sh, sw), (dh, dw) = kernel, strides, dilation
    helpers, block_fn, one_fn, wone_fn, ld_block, ld_one, zero_block, zero_one, ld_acc, st_acc = _snippets(isa)
    fn = _fn(isa, rows, ow, kernel, strides, dilation)
    pair = paired(strides, dilation, rows)
    G = groups(isa, KH, strides, dilation, rows)
    WQ = quad_columns(ow, KW, strides, dilation)
    phases = 2 if pair else 1
    cond = " || ".join(f"!defined({m})" for m in macros)
    L = ["#include <immintrin.h>", f"#if {cond}", f"#error \"tensor intrinsic {fn} needs {', '.join(feats)}\"",
         "#endif", _HELPERS[helpers]]
    L.append(f"/* {rows} output row(s) of {ow} pixels of an int8 depthwise convolution, {lanes} channels (int32), "
             f"a {KH}x{KW} filter, stride {sh}x{sw}, dilation {dh}x{dw} ({isa}):\n"
             + (f"   rows in pairs ({rows // 2}" + (" and one row" if rows % 2 else "") + ") sharing their input rows'"
                if pair else f"   {rows} row(s) one at a time, each from its own input rows'")
             + f" {T}-tap tuples,\n   {G} group(s) of {T} input rows a pass, {WQ} input columns a row interleaved "
             f"(blocks of {P}) into q, then per output pixel\n   and kw one dot product a group and row "
             "(tessera/tir/tensor_intrin/x86_qdepthwise.py). */")
    L.append(f"static inline __attribute__((always_inline)) void {fn}(const uint8_t* restrict a, const uint8_t* a_h1, "
             "const int8_t* restrict w, int32_t* restrict c, int32_t* c_row1) {")
    L += ["  const int64_t sa_h = a_h1 - a, c_rs = c_row1 - c;",
          f"  /* the weights' {T}-tap tuples: wq<s>_<g>_<kw> (row phase s of a pair, tap group g): taps t of kernel "
          f"row {T}g + t - s, 0 outside the filter */"]
    for s in range(phases):
        for g in range(G):
            for kw in range(KW):
                taps = []
                for t in range(T):
                    kh = T * g + t - s
                    taps.append(ld_one.format(p=f"w + {(kh * KW + kw) * lanes}") if 0 <= kh < KH else zero_one)
                L.append(f"  const {vt} wq{s}_{g}_{kw} = {wone_fn}({', '.join(taps)});")
    L.append(f"  {vt} q[{G}][{WQ}];   /* the interleaved input columns of the pass's rows, per tap group */")

    def pass_code(r0, m, ind):
        """One pass: output rows r0 .. r0 + m - 1 (a loop variable or a constant)."""
        nr = KH + m - 1              # the window rows the pass reads; the group's rows past them are zero
        out = [f"{ind}const uint8_t* ar = a + {r0} * {sh} * sa_h;",
               f"{ind}int32_t x = 0;",
               f"{ind}for (; x + {P} <= {WQ}; x += {P}) {{"]
        for g in range(G):
            rows_ = [ld_block.format(p=f"ar + {(T * g + t) * dh} * sa_h + x * {lanes}") if T * g + t < nr
                     else zero_block for t in range(T)]
            out.append(f"{ind}  {block_fn}({', '.join(rows_)}, &q[{g}][x]);")
        out.append(f"{ind}}}")
        if WQ % P:
            out.append(f"{ind}for (; x < {WQ}; ++x) {{")
            for g in range(G):
                rows_ = [ld_one.format(p=f"ar + {(T * g + t) * dh} * sa_h + x * {lanes}") if T * g + t < nr
                         else zero_one for t in range(T)]
                out.append(f"{ind}  q[{g}][x] = {one_fn}({', '.join(rows_)});")
            out.append(f"{ind}}}")
        out.append(f"{ind}for (int32_t i = 0; i < {ow}; ++i) {{")
        out.append(f"{ind}  " + " ".join(f"{vt} acc{s} = {ld_acc.format(p=f'c + ({r0} + {s}) * c_rs + i * {lanes}')};"
                                          for s in range(m)))
        for g in range(G):
            for kw in range(KW):
                q = f"q[{g}][i * {sw} + {kw * dw}]"
                out.append(f"{ind}  " + " ".join(f"acc{s} = {dot.format(acc=f'acc{s}', q=q, w=f'wq{s}_{g}_{kw}')};"
                                                  for s in range(m)))
        out.append(f"{ind}  " + " ".join(st_acc.format(p=f"c + ({r0} + {s}) * c_rs + i * {lanes}", v=f"acc{s}")
                                          for s in range(m)))
        out.append(f"{ind}}}")
        return out

    if pair:
        L.append(f"  for (int32_t r = 0; r + 2 <= {rows}; r += 2) {{   /* output rows r, r + 1 */")
        L += pass_code("r", 2, "    ")
        L.append("  }")
        if rows % 2:
            L.append("  {   /* the last row alone: phase 0's weights, the pass's rows past its window zero */")
            L += pass_code(rows - 1, 1, "    ")
            L.append("  }")
    else:
        L.append(f"  for (int32_t r = 0; r < {rows}; ++r) {{")
        L += pass_code("r", 1, "    ")
        L.append("  }")
    L.append("}")
    return "\n".join(L)


def qdepthwise_intrin(isa, rows, ow, kernel, strides, dilation) -> str:
    """The name of the intrinsic for these parameters, registered on first use."""
    if isa not in ISA:
        raise TesseraError(f"int8 depthwise micro-kernel: unknown ISA {isa!r} ({', '.join(ISA)})")
    kernel, strides, dilation = (tuple(int(v) for v in x) for x in (kernel, strides, dilation))
    if rows < 1 or ow < 1 or min(kernel) < 1 or min(strides) < 1 or min(dilation) < 1:
        raise TesseraError(f"int8 depthwise micro-kernel: {rows} rows of {ow} pixels, filter {kernel}, strides "
                           f"{strides}, dilation {dilation}: every extent must be positive")
    if not fits(isa, rows, ow, *kernel, strides, dilation):
        raise TesseraError(f"int8 depthwise micro-kernel: a row of {ow} pixels ({quad_columns(ow, kernel[1], strides, dilation)}"
                           f" input columns) does not fit its {MAX_QUAD_BYTES}-byte local array")
    name = intrin_name(isa, rows, ow, kernel, strides, dilation)
    if TensorIntrin.get(name, allow_missing=True) is None:
        lanes = ISA[isa][0]
        fn = _fn(isa, rows, ow, kernel, strides, dilation)
        TensorIntrin.register(name, _desc(lanes, rows, ow, kernel, strides, dilation),
                              _impl(fn, lanes, rows, ow, kernel, strides, dilation),
                              c_source=c_source(isa, rows, ow, kernel, strides, dilation), features=ISA[isa][3],
                              doc=f"{rows} output row(s) of {ow} pixels of an int8 depthwise convolution, {lanes} "
                                  f"channels, {kernel[0]}x{kernel[1]} filter ({isa})")
    return name


def _make_from_name(m) -> None:
    isa = m.group(1)
    rows, ow, kh, kw, sh, sw, dh, dw = (int(g) for g in m.groups()[1:9])
    if isa in ISA and rows >= 1 and ow >= 1 and min(kh, kw, sh, sw, dh, dw) >= 1 and \
            fits(isa, rows, ow, kh, kw, (sh, sw), (dh, dw)):
        qdepthwise_intrin(isa, rows, ow, (kh, kw), (sh, sw), (dh, dw))


TensorIntrin.register_family(r"x86_(vnni512|vnni256|avxvnni|avx2)_qdepthwise_nchwc_(\d+)x(\d+)_k(\d+)x(\d+)"
                             r"_s(\d+)x(\d+)_d(\d+)x(\d+)", _make_from_name)

__all__ = ["qdepthwise_intrin", "isa_for", "paired", "groups", "quad_columns", "fits", "intrin_name", "c_source",
           "ISA", "MAX_QUAD_BYTES"]
