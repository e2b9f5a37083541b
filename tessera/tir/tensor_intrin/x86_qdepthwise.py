"""x86 micro-kernel of the blocked int8 depthwise convolution (qnn.contrib_depthwise_conv2d_NCHWc):
integer dot products over the taps, the padding and the requantization in the kernel.

The tensor intrinsic `x86_{isa}_qdepthwise_nchwc_{H}x{W}x{L}_k{KH}x{KW}_s{sh}x{sw}_d{dh}x{dw}_p{pt}x{pl}x{pb}x{pr}
_v{pad_value}_z{zp}_r{lo}x{hi}_{out_dtype}` computes one channel plane (one block of L channels of one image):

    for oh < OH, ow < OW, j < L:
        C[oh, ow, j] = requantize(B[j] + sum over kh < KH, kw < KW of
                                  i32(A~[oh * sh + kh * dh - pt, ow * sw + kw * dw - pl, j]) * i32(W[kh, kw, j]), M[j])

A: the unpadded input plane, uint8 (H, W, L), A~ it read with the pad value (the input zero point)
outside; W: the filter, int8 (KH, KW, L); B: the bias, int32 (L); M: the multiplier, float32 (L);
C: the output plane, uint8 or int8 (OH, OW, L); requantize: ops/integer.py's requantize_expr
(clip(rint(f32(acc) * M) + zp, lo, hi)). Its desc is the op's own elementwise expression (the taps
read through clamped indices and selects, ops/nn/qconv_nchwc.py), which registers the family.

A depthwise convolution sums no channels, so a dot-product instruction's four bytes a lane must be four
taps of one channel: the kernel interleaves the input. For each input column it builds, per group of T
vertically adjacent taps (T = 4 for vpdpbusd, 2 for vpmaddwd), one vector of the L channels' T-tap
tuples ("quads": bytes (row 0, row 1, row 2, row 3) of channel c in int32 lane c); every output pixel
whose window reads that column then adds, per kw, one dot product of that column's quads and the weight
quads of its kw. Per group of 4 columns (vpdpbusd on zmm) the interleave is 4 row loads of 64 bytes (a
column a 128-bit lane), 8 in-lane unpacks (bytes, then words) and a 4 x 4 transpose of the 128-bit lanes
(8 vshufi32x4): 4 shuffles a column, shared by the KW outputs that read it. With stride 1 and dilation 1
in h, two output rows share the quads of 4 rows (KH + 1 <= 4 T-groups' rows): row R weighs them (w0, w1,
w2, 0), row R + 1 (0, w0, w1, w2): 2 shuffles and 3 vpdpbusd a 16-channel output vector of a 3x3 filter.
A window taller than a group (KH + rows - 1 > T) takes several groups, the rows past the window zero.

The padding: a row outside the input is read from a row of pad values on the stack (its pointer chosen
once a pass), a column outside it is the pad value broadcast (no load); no padded copy of the input is
made. The requantization in registers: the accumulators start at the bias; then f32 conversion, the
product with M, the clamp to [lo - zp, hi - zp] in float, vcvtps2dq (round to nearest even under the
default MXCSR, as the loop code's rint), + zp, the bytes stored (vpmovdb; AVX2: a byte shuffle). Equal
to requantize_expr bit for bit: rint is monotone and fixed on integers, so clamping to the integer
bounds before or after it gives the same integer, and the float + zp of the loop code is exact inside
[lo, hi] and on the right side of a bound outside it; f32(acc) is finite, M finite (a scale), so no NaN.

    isa        L   T  dot product                              features
    vnni512    16  4  vpdpbusd zmm                             avx512f, avx512bw, avx512vnni
    vnni256    8   4  vpdpbusd ymm (AVX-512VL)                 + avx512vl
    avxvnni    8   4  vpdpbusd ymm (VEX, AVX-VNNI)             avx2, avxvnni
    avx2       8   2  vpmaddwd on (row a, row b) int16 pairs   avx2

Every sum is exact (|u8 x s8| < 2**15; vpmaddwd's pair sums < 2**16, no saturation). A call builds its
weight quads once, then per row (pair) the quads of all the columns its window spans into a local array
(in L1) and runs the outputs over them. A is passed by the addresses of its first element and of the next
row (its column stride must be L: a row's pixels are contiguous); C likewise. Registered on first use
(qdepthwise_intrin, given the desc) or by name (the family ops/nn/qconv_nchwc.py registers).
"""
from __future__ import annotations

import functools

from ...errors import TesseraError
from ...ir import Block, BlockRealize, Buffer, Call, Evaluate, PrimFunc, Var
from .intrin import TensorIntrin
from .x86_qconv import isa_for   # the same ISA choice as the blocked convolution's (lanes 16 or 8)

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
MAX_LOCAL_BYTES = 64 * 1024    # the local arrays (a row's interleaved columns, a pad row) on the call's stack
OUT_DTYPES = {"uint8": "uint8_t", "int8": "int8_t"}

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


# the requantization of an int32 vector (the accumulators from the bias) and its bytes' store, one copy a
# translation unit: f32, * m, clamp to [lo - zp, hi - zp], vcvtps2dq (MXCSR's round to nearest even), + zp
_REQUANT = {
    "zmm": """#ifndef TSR_QDW_RQ_ZMM
#define TSR_QDW_RQ_ZMM
static inline __attribute__((always_inline)) void tsr_qdw_requant_zmm(__m512i acc, __m512 m, __m512 flo, __m512 fhi,
                                                                      __m512i zp, void* p) {
  const __m512 f = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), m), flo), fhi);
  _mm_storeu_si128((__m128i*)p, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), zp)));
}
#endif""",
    "ymm_vl": """#ifndef TSR_QDW_RQ_YMM_VL
#define TSR_QDW_RQ_YMM_VL
static inline __attribute__((always_inline)) void tsr_qdw_requant_ymm_vl(__m256i acc, __m256 m, __m256 flo, __m256 fhi,
                                                                         __m256i zp, void* p) {
  const __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), m), flo), fhi);
  _mm_storel_epi64((__m128i*)p, _mm256_cvtepi32_epi8(_mm256_add_epi32(_mm256_cvtps_epi32(f), zp)));
}
#endif""",
    "ymm": """#ifndef TSR_QDW_RQ_YMM
#define TSR_QDW_RQ_YMM
/* the low byte of each int32 lane (the value, clamped into the byte's range): a shuffle in each 128-bit
   lane, the two lanes' 4 bytes side by side */
static inline __attribute__((always_inline)) void tsr_qdw_requant_ymm(__m256i acc, __m256 m, __m256 flo, __m256 fhi,
                                                                      __m256i zp, void* p) {
  const __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), m), flo), fhi);
  const __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(f), zp);
  const __m256i s = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                            -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                            -1, -1));
  _mm_storel_epi64((__m128i*)p, _mm_unpacklo_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
}
#endif""",
}


ZERO_ONE = "_mm_setzero_si128()"   # a single pixel's row past the window (every ISA's one-pixel load is an xmm)


def _snippets(isa):
    """(helpers key, requant key, block fn, one fn, weight one fn, block load, one load, block zero, pad
    tuples); the float and int32 vectors of the requantization follow from ISA's vector type."""
    if isa == "vnni512":
        return ("zmm", "zmm", "tsr_qdw_quads4_zmm", "tsr_qdw_quad1_zmm", "tsr_qdw_quad1_zmm",
                "_mm512_loadu_si512((const void*)({p}))", "_mm_loadu_si128((const __m128i*)({p}))",
                "_mm512_setzero_si512()", "_mm512_set1_epi8((char){v})")
    if isa in ("vnni256", "avxvnni"):
        return ("ymm", "ymm_vl" if isa == "vnni256" else "ymm", "tsr_qdw_quads4_ymm", "tsr_qdw_quad1_ymm",
                "tsr_qdw_quad1_ymm", "_mm256_loadu_si256((const __m256i*)({p}))",
                "_mm_loadl_epi64((const __m128i*)({p}))", "_mm256_setzero_si256()", "_mm256_set1_epi8((char){v})")
    return ("pairs", "ymm", "tsr_qdw_pairs2_avx2", "tsr_qdw_pair1_avx2", "tsr_qdw_wpair1_avx2",
            "_mm_loadu_si128((const __m128i*)({p}))", "_mm_loadl_epi64((const __m128i*)({p}))",
            "_mm_setzero_si128()", "_mm256_set1_epi16((short){v})")


def out_size(size, k, stride, pad_before, pad_after, dilation) -> int:
    return (size + pad_before + pad_after - dilation * (k - 1) - 1) // stride + 1


class Plane:
    """The parameters of one plane kernel: geometry (H, W, L, KH, KW, strides, dilation, padding
    (top, left, bottom, right)) and requantization (pad value, output zero point, lo, hi, out dtype)."""

    __slots__ = ("H", "W", "L", "KH", "KW", "sh", "sw", "dh", "dw", "pt", "pl", "pb", "pr", "pv", "zp", "lo", "hi",
                 "odt", "OH", "OW")

    def __init__(self, H, W, L, kernel, strides, dilation, padding, pad_value, zp, lo, hi, out_dtype):
        self.H, self.W, self.L = int(H), int(W), int(L)
        self.KH, self.KW = (int(v) for v in kernel)
        self.sh, self.sw = (int(v) for v in strides)
        self.dh, self.dw = (int(v) for v in dilation)
        self.pt, self.pl, self.pb, self.pr = (int(v) for v in padding)
        self.pv, self.zp, self.lo, self.hi = int(pad_value), int(zp), int(lo), int(hi)
        self.odt = str(out_dtype)
        self.OH = out_size(self.H, self.KH, self.sh, self.pt, self.pb, self.dh)
        self.OW = out_size(self.W, self.KW, self.sw, self.pl, self.pr, self.dw)

    def key(self) -> tuple:
        return tuple(getattr(self, k) for k in self.__slots__[:-2])

    def __eq__(self, other):
        return isinstance(other, Plane) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def check(self, isa) -> None:
        if isa not in ISA:
            raise TesseraError(f"int8 depthwise micro-kernel: unknown ISA {isa!r} ({', '.join(ISA)})")
        if ISA[isa][0] != self.L:
            raise TesseraError(f"int8 depthwise micro-kernel: {isa} takes blocks of {ISA[isa][0]} channels, not "
                               f"{self.L}")
        if min(self.H, self.W, self.KH, self.KW, self.sh, self.sw, self.dh, self.dw, self.OH, self.OW) < 1 or \
                min(self.pt, self.pl, self.pb, self.pr) < 0:
            raise TesseraError(f"int8 depthwise micro-kernel: a {self.H}x{self.W} input, filter {self.KH}x{self.KW}, "
                               f"strides {self.sh}x{self.sw}, dilation {self.dh}x{self.dw}, padding "
                               f"{(self.pt, self.pl, self.pb, self.pr)}: every extent must be positive")
        if self.odt not in OUT_DTYPES or not 0 <= self.pv <= 255 or not -128 <= self.lo <= self.hi <= 255 \
                or not -128 <= self.zp <= 255:
            raise TesseraError(f"int8 depthwise micro-kernel: out dtype {self.odt}, pad value {self.pv}, zero point "
                               f"{self.zp}, range [{self.lo}, {self.hi}]: unsupported")
        if not fits(isa, self):
            raise TesseraError(f"int8 depthwise micro-kernel: a row of {self.OW} pixels ({quad_columns(self)} input "
                               f"columns) does not fit its {MAX_LOCAL_BYTES}-byte local arrays")


def paired(p: Plane) -> bool:
    """Whether output rows go in pairs sharing their input rows' quads (stride and dilation 1 in h)."""
    return p.sh == 1 and p.dh == 1 and p.OH >= 2


def groups(isa, p: Plane) -> int:
    """Tap groups a pass: the window rows of a pass (KH, or KH + 1 for a pair) in groups of T."""
    return -(-(p.KH + (1 if paired(p) else 0)) // ISA[isa][1])


def quad_columns(p: Plane) -> int:
    """The (padded) input columns a row's window spans."""
    return (p.OW - 1) * p.sw + (p.KW - 1) * p.dw + 1


def pad_rows(p: Plane) -> bool:
    """Whether a window row can lie outside the input (then read from a row of pad values)."""
    return p.pt > 0 or (p.OH - 1) * p.sh + (p.KH - 1) * p.dh - p.pt >= p.H


def fits(isa, p: Plane) -> bool:
    """Whether the kernel's local arrays (a row's quads, a pad row) fit MAX_LOCAL_BYTES."""
    quads = groups(isa, p) * quad_columns(p) * ISA[isa][0] * 4
    return quads + (p.W * p.L if pad_rows(p) else 0) <= MAX_LOCAL_BYTES


def _num(v) -> str:
    return f"m{-v}" if v < 0 else str(v)


def intrin_name(isa, p: Plane) -> str:
    return (f"x86_{isa}_qdepthwise_nchwc_{p.H}x{p.W}x{p.L}_k{p.KH}x{p.KW}_s{p.sh}x{p.sw}_d{p.dh}x{p.dw}"
            f"_p{p.pt}x{p.pl}x{p.pb}x{p.pr}_v{p.pv}_z{_num(p.zp)}_r{_num(p.lo)}x{_num(p.hi)}_{p.odt}")


NAME_PATTERN = (r"x86_(vnni512|vnni256|avxvnni|avx2)_qdepthwise_nchwc_(\d+)x(\d+)x(\d+)_k(\d+)x(\d+)_s(\d+)x(\d+)"
                r"_d(\d+)x(\d+)_p(\d+)x(\d+)x(\d+)x(\d+)_v(\d+)_z(m?\d+)_r(m?\d+)x(m?\d+)_(uint8|int8)")


def plane_of_name(m) -> tuple:
    """(isa, Plane) of a match of NAME_PATTERN."""
    g = m.groups()
    H, W, L, KH, KW, sh, sw, dh, dw, pt, pl, pb, pr, pv = (int(v) for v in g[1:15])
    zp, lo, hi = (-int(v[1:]) if v.startswith("m") else int(v) for v in g[15:18])
    return g[0], Plane(H, W, L, (KH, KW), (sh, sw), (dh, dw), (pt, pl, pb, pr), pv, zp, lo, hi, g[18])


def _fn(isa, p: Plane) -> str:
    return "tintrin_" + intrin_name(isa, p)[4:].replace("qdepthwise_nchwc", "qdw")


def _impl(fn, p: Plane) -> PrimFunc:
    """A plane by the addresses of its first element and next row (A and C), the weights, bias, multiplier."""
    A = Buffer((p.H, p.W, p.L), "uint8", "A", strides=(Var("sa_h"), p.L, 1))   # a row's pixels contiguous
    Wt = Buffer((p.KH, p.KW, p.L), "int8", "W")
    B = Buffer((p.L,), "int32", "B")
    M = Buffer((p.L,), "float32", "M")
    C = Buffer((p.OH, p.OW, p.L), p.odt, "C", strides=(Var("sc_h"), p.L, 1))

    def addr(load):
        return Call("handle", "address_of", [load])

    args = [addr(A[0, 0, 0]), addr(A[min(1, p.H - 1), 0, 0]), addr(Wt[0, 0, 0]), addr(B[0]), addr(M[0]),
            addr(C[0, 0, 0]), addr(C[min(1, p.OH - 1), 0, 0])]
    body = Evaluate(Call("handle", fn, args))
    return PrimFunc([A, Wt, B, M, C], BlockRealize([], True, Block([], [], [], "root", body)))


@functools.lru_cache(maxsize=256)
def c_source(isa, p: Plane) -> str:
    """The kernel's C (module docstring)."""
    lanes, T, P, feats, macros, vt, dot = ISA[isa]
    helpers, rq, block_fn, one_fn, wone_fn, ld_block, ld_one, zero_block, pad_set = _snippets(isa)
    bits = 512 if vt == "__m512i" else 256     # the accumulators' width: the requantization's vectors
    fn = _fn(isa, p)
    pair = paired(p)
    G = groups(isa, p)
    WQ = quad_columns(p)
    KH, KW, sh, sw, dh, dw = p.KH, p.KW, p.sh, p.sw, p.dh, p.dw
    phases = 2 if pair else 1
    ot = OUT_DTYPES[p.odt]
    padrow = pad_rows(p)
    cond = " || ".join(f"!defined({m})" for m in macros)
    L = ["#include <immintrin.h>", "#include <string.h>", f"#if {cond}",
         f"#error \"tensor intrinsic {fn} needs {', '.join(feats)}\"", "#endif", _HELPERS[helpers], _REQUANT[rq]]
    L.append(f"/* a {p.OH}x{p.OW} plane of an int8 depthwise convolution, {lanes} channels, from a {p.H}x{p.W} input "
             f"padded ({p.pt}, {p.pl}, {p.pb}, {p.pr}) with {p.pv}, a {KH}x{KW} filter, stride {sh}x{sw}, dilation "
             f"{dh}x{dw} ({isa}):\n"
             + (f"   rows in pairs ({p.OH // 2}" + (" and one row" if p.OH % 2 else "") + ") sharing their input rows'"
                if pair else f"   {p.OH} row(s) one at a time, each from its own input rows'")
             + f" {T}-tap tuples,\n   {G} group(s) of {T} input rows a pass, {WQ} input columns a row interleaved "
             f"(blocks of {P}) into q, then per output pixel\n   and kw one dot product a group and row, from the "
             "bias; "
             f"requantized in registers to {p.odt} (zero point {p.zp}, [{p.lo}, {p.hi}])\n"
             "   (tessera/tir/tensor_intrin/x86_qdepthwise.py). */")
    L.append(f"static inline __attribute__((always_inline)) void {fn}(const uint8_t* restrict a, const uint8_t* a_h1, "
             f"const int8_t* restrict w, const int32_t* restrict bias, const float* restrict mult, {ot}* restrict c, "
             f"{ot}* c_row1) {{")
    L += ["  const int64_t sa_h = a_h1 - a, c_rs = c_row1 - c;",
          f"  /* the weights' {T}-tap tuples: wq<s>_<g>_<kw> (row phase s of a pair, tap group g): taps t of kernel "
          f"row {T}g + t - s, 0 outside the filter */"]
    for s in range(phases):
        for g in range(G):
            for kw in range(KW):
                taps = []
                for t in range(T):
                    kh = T * g + t - s
                    taps.append(ld_one.format(p=f"w + {(kh * KW + kw) * lanes}") if 0 <= kh < KH else ZERO_ONE)
                L.append(f"  const {vt} wq{s}_{g}_{kw} = {wone_fn}({', '.join(taps)});")
    L.append(f"  const {vt} bv = _mm{bits}_loadu_si{bits}((const {vt}*)(bias)), zpv = _mm{bits}_set1_epi32({p.zp});")
    L.append(f"  const __m{bits} mv = _mm{bits}_loadu_ps(mult), flo = _mm{bits}_set1_ps({float(p.lo - p.zp)!r}f), "
             f"fhi = _mm{bits}_set1_ps({float(p.hi - p.zp)!r}f);")
    L.append(f"  const {vt} padq = {pad_set.format(v=p.pv)};   /* the tuples of a column in the padding */")
    if padrow:
        L.append(f"  uint8_t padrow[{p.W * lanes}];   /* a row in the padding */")
        L.append(f"  memset(padrow, {p.pv}, sizeof padrow);")
    L.append(f"  {vt} q[{G}][{WQ}];   /* the interleaved input columns of the pass's rows, per tap group */")
    left = min(p.pl, WQ)
    inner_end = min(p.pl + p.W, WQ)

    def pass_code(r0, m, ind):
        """One pass: output rows r0 .. r0 + m - 1 (a loop variable or a constant)."""
        nr = KH + m - 1              # the window rows the pass reads; the group's rows past them are zero
        out = []
        for g in range(G):
            for t in range(T):
                k = T * g + t
                if k >= nr:
                    continue
                h = f"{r0} * {sh} + {k * dh - p.pt}"
                if padrow:
                    out.append(f"{ind}const int32_t h{g}_{t} = {h};")
                    out.append(f"{ind}const uint8_t* a{g}_{t} = (uint32_t)h{g}_{t} < {p.H}u ? a + h{g}_{t} * sa_h "
                               f": padrow;")
                else:
                    out.append(f"{ind}const uint8_t* a{g}_{t} = a + ({h}) * sa_h;")
        out.append(f"{ind}int32_t x = 0;")

        def columns(end, step, fill):
            """The loop over q's columns up to `end`, `step` at a time; fill(g): tap group g's statement."""
            head = f"x + {step} <= {end}; x += {step}" if step > 1 else f"x < {end}; ++x"
            out.append(f"{ind}for (; {head}) {{")
            out.extend(f"{ind}  {fill(g)}" for g in range(G))
            out.append(f"{ind}}}")

        def rows(g, load, zero):
            """Tap group g's T rows at column x (`load` of a{g}_{t}), its rows past the window `zero`."""
            return ", ".join(load.format(p=f"a{g}_{t} + (x - {p.pl}) * {lanes}") if T * g + t < nr else zero
                             for t in range(T))

        if left:
            columns(left, 1, lambda g: f"q[{g}][x] = padq;")
        if inner_end > left:
            columns(inner_end, P, lambda g: f"{block_fn}({rows(g, ld_block, zero_block)}, &q[{g}][x]);")
            columns(inner_end, 1, lambda g: f"q[{g}][x] = {one_fn}({rows(g, ld_one, ZERO_ONE)});")
        if WQ > inner_end:
            columns(WQ, 1, lambda g: f"q[{g}][x] = padq;")
        out.append(f"{ind}for (int32_t i = 0; i < {p.OW}; ++i) {{")
        out.append(f"{ind}  " + " ".join(f"{vt} acc{s} = bv;" for s in range(m)))
        for g in range(G):
            for kw in range(KW):
                q = f"q[{g}][i * {sw} + {kw * dw}]"
                out.append(f"{ind}  " + " ".join(f"acc{s} = {dot.format(acc=f'acc{s}', q=q, w=f'wq{s}_{g}_{kw}')};"
                                                  for s in range(m)))
        out.append(f"{ind}  " + " ".join(f"tsr_qdw_requant_{rq}(acc{s}, mv, flo, fhi, zpv, c + ({r0} + {s}) * c_rs + "
                                          f"i * {lanes});" for s in range(m)))
        out.append(f"{ind}}}")
        return out

    if pair:
        L.append(f"  for (int32_t r = 0; r + 2 <= {p.OH}; r += 2) {{   /* output rows r, r + 1 */")
        L += pass_code("r", 2, "    ")
        L.append("  }")
        if p.OH % 2:
            L.append("  {   /* the last row alone: phase 0's weights, the pass's rows past its window zero */")
            L += pass_code(p.OH - 1, 1, "    ")
            L.append("  }")
    else:
        L.append(f"  for (int32_t r = 0; r < {p.OH}; ++r) {{")
        L += pass_code("r", 1, "    ")
        L.append("  }")
    L.append("}")
    return "\n".join(L)


def qdepthwise_intrin(isa, p: Plane, desc=None) -> str:
    """The name of the plane kernel's intrinsic for `p`, registered on first use with `desc` (a callable
    giving the op's elementwise expression as a PrimFunc of A, W, B, M, C, see the module docstring)."""
    p.check(isa)
    name = intrin_name(isa, p)
    if TensorIntrin.get(name, allow_missing=True) is None:
        if desc is None:
            raise TesseraError(f"int8 depthwise micro-kernel {name}: not registered and no desc given")
        fn = _fn(isa, p)
        TensorIntrin.register(name, desc(p), _impl(fn, p), c_source=c_source(isa, p), features=ISA[isa][3],
                              doc=f"a {p.OH}x{p.OW} plane of an int8 depthwise convolution, {p.L} channels, "
                                  f"{p.KH}x{p.KW} filter, the padding and the requantization in it ({isa})")
    return name


__all__ = ["qdepthwise_intrin", "isa_for", "Plane", "paired", "groups", "quad_columns", "pad_rows", "fits",
           "intrin_name", "plane_of_name", "NAME_PATTERN", "c_source", "ISA", "MAX_LOCAL_BYTES"]
