"""x86 micro-kernel of the blocked int8 convolution (qnn.contrib_conv2d_NCHWc): u8 x s8 -> s32 rows.

The tensor intrinsic `x86_{isa}_qconv2d_nchwc_{ROWS}x{OW}_{V}x{L}o{CB}i_s{sh}x{sw}_d{dh}x{dw}` computes,
for ROWS output rows of OW pixels and V output-channel blocks of L int32 lanes:

    for v < V, r < ROWS, i < OW, j < L; reduce c < CC, kh < KH, kw < KW, ci < CB:
        C[v, r, i, j] += i32(A[c, r * sh + kh * dh, i * sw + kw * dw, ci]) * i32(B[v, c, kh, kw, ci // 4, j, ci % 4])

A: the padded input, uint8 NCHW{CB}c (CB a multiple of 4); B: the weights, int8, each (c, kh, kw)
holding CB / 4 groups of L x 4 bytes (the layout a dot-product instruction reads: four input channels
of one output channel side by side); C: the int32 output tile NCHW{L}c. Per group of four input
channels the kernel loads V weight vectors, broadcasts the four input bytes of each of R pixels and
adds R x V four-term dot products into R x V accumulators held in registers for the whole reduction:

    isa        L   instruction                                   registers   features
    vnni512    16  vpdpbusd zmm                                  32          avx512f, avx512bw, avx512_vnni
    vnni256    8   vpdpbusd ymm (AVX-512VL)                      32          + avx512vl
    avxvnni    8   vpdpbusd ymm (VEX, {vex} AVX-VNNI)            16          avx2, avx_vnni
    avx2       8   vpmovsxbw + vpmaddwd (int16 pairs, exact)     16          avx2

AVX2 has no four-term dot product: the four bytes of a pixel and the weights are widened to int16 and
vpmaddwd adds pairs of products into int32 lanes, which cannot overflow (255 * 128 * 2 < 2**31);
vpmaddubsw would saturate its int16 sums. Every sum is exact, so the result is the integer convolution.
A row is cut into tiles of R pixels (R x V accumulators, V weight vectors and a broadcast fit the
register file). A and C are passed by addresses (A: its first element and the next along c, h and w;
C: block k of row 0 and block 0 of row 1), so the strides follow from the pointers also where lowering
compacted the tile. Registered on first use by name (TensorIntrin.register_family).
"""
from __future__ import annotations

import functools

from ...errors import TesseraError
from ...ir import (Block, BlockRealize, Buffer, BufferRegion, BufferStore, Call, Cast, Evaluate, For, IntImm,
                   IterVar, PrimFunc, Range, Var, min_expr)
from ...target import Target
from .intrin import TensorIntrin
from .x86 import AMX, AMX_HELPERS, VNNI   # AMX_HELPERS: shared with the AMX GEMM kernel (one copy a translation unit)

ISA = {  # isa -> (int32 lanes, vector registers, features, macros, vector type, dot product or None)
    "vnni512": (16, 32, ("avx512f", "avx512bw", "avx512vnni"), ("__AVX512F__", "__AVX512VNNI__"), "__m512i",
                "_mm512_dpbusd_epi32"),
    "vnni256": (8, 32, ("avx512f", "avx512vl", "avx512vnni"), ("__AVX512VL__", "__AVX512VNNI__"), "__m256i",
                "_mm256_dpbusd_epi32"),
    "avxvnni": (8, 16, ("avx2", "avxvnni"), ("__AVX2__", "__AVXVNNI__"), "__m256i", "_mm256_dpbusd_avx_epi32"),
    "avx2": (8, 16, ("avx2",), ("__AVX2__",), "__m256i", None),
    # AMX tiles (amx_c_source): 16 pixels x 16 channels an int32 tile; input blocks of 64 channels
    "amx": (16, 8, AMX + VNNI,
            ("__AMX_TILE__", "__AMX_INT8__", "__AVX512VNNI__"), "__m512i", "_mm512_dpbusd_epi32"),
}
MAX_V = 4
AMX_BLOCK = 64      # the input channels of an AMX A-tile row (one pixel's block)


def amx_for(target) -> bool:
    """Whether `target` runs the AMX convolution kernel (amx_tile, amx_int8, and VNNI for its fallback)."""
    t = Target(target)
    return all(t.has_feature(f) for f in ISA["amx"][2])


def isa_for(target, lanes: int) -> str | None:
    """The int8 conv ISA of `target` for blocks of `lanes` output channels (16 or 8), or None."""
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


def block_lanes(target) -> int | None:
    """The output block of the target's widest int8 conv kernel (16 with AVX512-VNNI, 8 with AVX2), or None."""
    if isa_for(target, 16):
        return 16
    return 8 if isa_for(target, 8) else None


def row_tile(isa: str, v: int) -> int:
    """Pixels a register tile for V output vectors (accumulators, V weights and a broadcast fit); AMX: a
    tile's 16 rows."""
    lanes, regs = ISA[isa][0], ISA[isa][1]
    if isa == "amx":
        return 16
    if isa == "avx2":     # two accumulators a vector (int32 pair sums of the low and high channels)
        return max(1, min(6, (regs - 2 * v - 2) // (2 * v)))
    return max(1, min(14, (regs - v - 1) // v))


def row_tiles(isa, v, ow) -> list:
    """[(tile size, count)]: a row of `ow` pixels in tiles of equal size, at most one pixel apart (AMX:
    full tiles of 16 and one tile of the rest)."""
    R = row_tile(isa, v)
    if isa == "amx":
        return [(r, c) for r, c in ((R, ow // R), (ow % R, 1)) if r and c]
    tiles = -(-ow // R)
    base, longer = divmod(ow, tiles)
    return [(r, c) for r, c in ((base + 1, longer), (base, tiles - longer)) if c]


def intrin_name(isa, v, cb, strides, dilation, ow, rows=1) -> str:
    (sh, sw), (dh, dw) = strides, dilation
    return f"x86_{isa}_qconv2d_nchwc_{rows}x{ow}_{v}x{ISA[isa][0]}o{cb}i_s{sh}x{sw}_d{dh}x{dw}"


def _fn(isa, v, cb, strides, dilation, ow, rows) -> str:
    (sh, sw), (dh, dw) = strides, dilation
    return f"tintrin_{isa}_qconv_{rows}x{ow}_{v}x{ISA[isa][0]}o{cb}i_s{sh}x{sw}_d{dh}x{dw}"


def _rng(n):
    return Range.from_min_extent(0, n)


def _desc(lanes, v, cb, strides, dilation, OW, rows) -> PrimFunc:
    (sh, sw), (dh, dw) = strides, dilation
    CC, KH, KW, HA, WA = (Var(n) for n in ("CC", "KH", "KW", "HA", "WA"))
    A = Buffer((CC, HA, WA, cb), "uint8", "A")
    B = Buffer((v, CC, KH, KW, cb // 4, lanes, 4), "int8", "B")
    C = Buffer((v, rows, OW, lanes), "int32", "C")
    ivs = [IterVar(_rng(v), "vv"), IterVar(_rng(rows), "vr"), IterVar(_rng(OW), "vi"), IterVar(_rng(lanes), "vj"),
           IterVar(_rng(CC), "vc", "reduce"), IterVar(_rng(KH), "vkh", "reduce"),
           IterVar(_rng(KW), "vkw", "reduce"), IterVar(_rng(cb), "vci", "reduce")]
    vv, vr, vi, vj, vc, vkh, vkw, vci = (iv.var for iv in ivs)
    x = Cast("int32", A[vc, vr * sh + vkh * dh, vi * sw + vkw * dw, vci])
    # one group of four channels (cb = 4): the indices as the simplifier leaves a block's (0 and vci)
    q, r = (IntImm("int32", 0), vci) if cb == 4 else (vci // 4, vci % 4)
    w = Cast("int32", B[vv, vc, vkh, vkw, q, vj, r])
    value = C[vv, vr, vi, vj] + x * w
    reads = [BufferRegion(A, [_rng(s) for s in A.shape]), BufferRegion(B, [_rng(s) for s in B.shape])]
    writes = [BufferRegion(C, [_rng(s) for s in C.shape])]
    block = Block(ivs, reads, writes, "update", BufferStore(C, value, [vv, vr, vi, vj]))
    loops = [(Var(n), e) for n, e in (("v", v), ("r", rows), ("i", OW), ("j", lanes), ("c", CC), ("kh", KH),
                                      ("kw", KW), ("ci", cb))]
    body = BlockRealize([var for var, _ in loops], True, block)
    for var, ext in reversed(loops):
        body = For(var, 0, ext, "serial", body)
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], reads, writes, "root", body)))


def _impl(fn, lanes, v, cb, strides, dilation, OW, rows) -> PrimFunc:
    CC, KH, KW, HA, WA = (Var(n) for n in ("CC", "KH", "KW", "HA", "WA"))
    sac, sah, saw = Var("sa_c"), Var("sa_h"), Var("sa_w")
    sbv, sbc, sbh, sbw = Var("sb_v"), Var("sb_c"), Var("sb_h"), Var("sb_w")
    A = Buffer((CC, HA, WA, cb), "uint8", "A", strides=(sac, sah, saw, 1))
    B = Buffer((v, CC, KH, KW, cb // 4, lanes, 4), "int8", "B", strides=(sbv, sbc, sbh, sbw, 4 * lanes, 4, 1))
    C = Buffer((v, rows, OW, lanes), "int32", "C", strides=(Var("sc_v"), Var("sc_h"), lanes, 1))
    (sh, sw), (dh, dw) = strides, dilation
    last = (CC - 1, (rows - 1) * sh + (KH - 1) * dh, (OW - 1) * sw + (KW - 1) * dw)
    one = [min_expr(IntImm("int32", 1), x) for x in last]

    def addr(load):
        return Call("handle", "address_of", [load])

    args = [CC, KH, KW, addr(A[0, 0, 0, 0]), addr(A[one[0], 0, 0, 0]), addr(A[0, one[1], 0, 0]),
            addr(A[0, 0, one[2], 0]), addr(B[0, 0, 0, 0, 0, 0, 0]), sbv, sbc, sbh, sbw]
    args += [addr(C[k, 0, 0, 0]) for k in range(v)]
    if rows > 1:
        args.append(addr(C[0, 1, 0, 0]))
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], [], [], "root", Evaluate(Call("handle", fn, args)))))


@functools.lru_cache(maxsize=256)
def c_source(isa, v, cb, strides, dilation, ow, rows=1) -> str:
    """The kernel's C (module docstring)."""
    lanes, _, feats, macros, vt, dot = ISA[isa]
    (sh, sw), (dh, dw) = strides, dilation
    fn = _fn(isa, v, cb, strides, dilation, ow, rows)
    cond = " || ".join(f"!defined({m})" for m in macros)
    pre = "_mm512" if vt == "__m512i" else "_mm256"
    outs = ", ".join(f"int32_t* restrict c{k}" for k in range(v))
    L = ["#include <immintrin.h>", "#include <string.h>",
         f"#if {cond}", f"#error \"tensor intrinsic {fn} needs {', '.join(feats)}\"", "#endif",
         f"/* {rows} output row(s) of {ow} pixels of a blocked int8 convolution: {v} x {lanes} output channels"
         f" (int32),\n   {cb} input channels (uint8) a block, weights int8 in groups of 4 input channels,"
         f" stride {sh}x{sw}, dilation {dh}x{dw};\n   a row in tiles of "
         + " + ".join(f"{c} x {r}" for r, c in row_tiles(isa, v, ow)) + f" pixels x {v} vectors in registers over"
         " the whole reduction (tessera/tir/tensor_intrin/x86_qconv.py). */"]
    L += ["#ifndef TINTRIN_LD32", "#define TINTRIN_LD32",
          "static inline int32_t tintrin_ld32(const uint8_t* p) { int32_t x; memcpy(&x, p, 4); return x; }",
          "#endif"]
    for r in sorted({r for r, _ in row_tiles(isa, v, ow)}, reverse=True):
        L.append(f"static inline __attribute__((always_inline)) void {fn}_t{r}(int32_t CC, int32_t KH, int32_t KW, "
                 "const uint8_t* restrict a, int64_t sa_c, int64_t sa_h, int64_t sa_w, const int8_t* restrict b, "
                 f"int64_t sb_v, int64_t sb_c, int64_t sb_h, int64_t sb_w, {outs}) {{")
        if dot is not None:
            for i in range(r):
                L.append("  " + " ".join(f"{vt} acc{i}_{k} = {pre}_loadu_si{lanes * 32}(c{k} + {i * lanes});"
                                         for k in range(v)))
        else:
            for i in range(r):
                L.append("  " + " ".join(f"__m256i lo{i}_{k} = _mm256_setzero_si256(), hi{i}_{k} = "
                                         f"_mm256_setzero_si256();" for k in range(v)))
        L += ["  for (int32_t c = 0; c < CC; ++c)",
              "    for (int32_t kh = 0; kh < KH; ++kh)",
              "      for (int32_t kw = 0; kw < KW; ++kw) {",
              f"        const uint8_t* restrict ap = a + c * sa_c + kh * {dh} * sa_h + kw * {dw} * sa_w;",
              "        const int8_t* restrict bp = b + c * sb_c + kh * sb_h + kw * sb_w;",
              f"        for (int32_t q = 0; q < {cb // 4}; ++q) {{"]
        if dot is not None:
            L.append("          " + " ".join(f"const {vt} w{k} = {pre}_loadu_si{lanes * 32}((const void*)(bp + {k} * sb_v + "
                                             f"q * {4 * lanes}));" for k in range(v)))
            for i in range(r):
                L.append(f"          {{ const {vt} x = {pre}_set1_epi32(tintrin_ld32(ap + {i * sw} * sa_w + 4 * q)); "
                         + " ".join(f"acc{i}_{k} = {dot}(acc{i}_{k}, x, w{k});" for k in range(v)) + " }")
        else:
            for k in range(v):
                L.append(f"          const __m256i wl{k} = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)"
                         f"(bp + {k} * sb_v + q * 32))), wh{k} = _mm256_cvtepi8_epi16(_mm_loadu_si128((const "
                         f"__m128i*)(bp + {k} * sb_v + q * 32 + 16)));")
            for i in range(r):
                L.append(f"          {{ const __m256i x = _mm256_cvtepu8_epi16(_mm_set1_epi32(tintrin_ld32(ap + {i * sw}"
                         " * sa_w + 4 * q))); " + " ".join(
                             f"lo{i}_{k} = _mm256_add_epi32(lo{i}_{k}, _mm256_madd_epi16(x, wl{k})); "
                             f"hi{i}_{k} = _mm256_add_epi32(hi{i}_{k}, _mm256_madd_epi16(x, wh{k}));"
                             for k in range(v)) + " }")
        L += ["        }", "      }"]
        for i in range(r):
            if dot is not None:
                L.append("  " + " ".join(f"{pre}_storeu_si{lanes * 32}(c{k} + {i * lanes}, acc{i}_{k});"
                                         for k in range(v)))
            else:
                # (lo, hi): channel pairs of the low / high four channels; hadd + permute puts them in order
                L.append("  " + " ".join(
                    f"{{ __m256i* p = (__m256i*)(c{k} + {i * 8}); _mm256_storeu_si256(p, _mm256_add_epi32("
                    f"_mm256_loadu_si256(p), _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo{i}_{k}, hi{i}_{k}), 0xD8))); }}"
                    for k in range(v)))
        L.append("}")
    # the call: rows, each row's tiles
    L.append(f"static inline __attribute__((always_inline)) void {fn}(int32_t CC, int32_t KH, int32_t KW, "
             "const uint8_t* a, const uint8_t* a_c1, const uint8_t* a_h1, const uint8_t* a_w1, const int8_t* b, "
             f"int64_t sb_v, int64_t sb_c, int64_t sb_h, int64_t sb_w, {outs.replace('restrict ', '')}"
             + (", int32_t* c_row1" if rows > 1 else "") + ") {")
    L += ["  const int64_t sa_c = a_c1 - a, sa_h = a_h1 - a, sa_w = a_w1 - a;",
          f"  const int64_t c_rs = {'c_row1 - c0' if rows > 1 else '0'};",
          f"  for (int32_t r = 0; r < {rows}; ++r) {{",
          f"    const uint8_t* ar = a + r * {sh} * sa_h;",
          "    int32_t x = 0;"]
    for r, cnt in row_tiles(isa, v, ow):
        args = (f"CC, KH, KW, ar + x * {sw} * sa_w, sa_c, sa_h, sa_w, b, sb_v, sb_c, sb_h, sb_w, "
                + ", ".join(f"c{k} + r * c_rs + x * {lanes}" for k in range(v)))
        L.append(f"    for (int32_t t = 0; t < {cnt}; ++t, x += {r}) {fn}_t{r}({args});")
    L += ["  }", "}"]
    return "\n".join(L)


@functools.lru_cache(maxsize=256)
def amx_c_source(v, cb, strides, dilation, ow, rows=1) -> str:
    """The AMX kernel's C: per output row, tiles of 16 pixels (and one of ow % 16) x 16 channels in int32
    accumulator tiles, one for each of the v output vectors; per (c, kh, kw) an A tile of the pixels'
    64-channel blocks (rows sw pixels apart) and, per vector, a B tile of the 16 quads x 16 channels the
    weight layout already holds contiguously; TDPBUSD adds them. The tile configuration is loaded at
    each call and released at its end (another library in the process may configure the thread's tiles
    differently); a process Linux refuses AMX runs the same call on the VNNI kernel."""
    if cb != AMX_BLOCK:
        raise TesseraError(f"AMX int8 conv kernel: input blocks of {AMX_BLOCK} channels (one A-tile row), got {cb}")
    (sh, sw), (dh, dw) = strides, dilation
    fn = _fn("amx", v, cb, strides, dilation, ow, rows)
    fb = _fn("vnni512", v, cb, strides, dilation, ow, rows)
    fallback = c_source("vnni512", v, cb, strides, dilation, ow, rows).replace(fb, fn + "_vnni")
    full, tail = ow // 16, ow % 16
    outs = ", ".join(f"int32_t* c{k}" for k in range(v))
    args = ("CC, KH, KW, a, a_c1, a_h1, a_w1, b, sb_v, sb_c, sb_h, sb_w, " + ", ".join(f"c{k}" for k in range(v))
            + (", c_row1" if rows > 1 else ""))
    L = [fallback, AMX_HELPERS,
         f"#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__)",
         f"#error \"tensor intrinsic {fn} needs amx_tile, amx_int8\"", "#endif",
         f"/* {rows} output row(s) of {ow} pixels of a blocked int8 convolution on AMX tiles: {v} x 16 output "
         f"channels,\n   {cb}-channel input blocks, stride {sh}x{sw}, dilation {dh}x{dw}; a row in {full} tile(s) "
         f"of 16 pixels" + (f" and one of {tail}" if tail else "") + " (tessera/tir/tensor_intrin/x86_qconv.py). */",
         f"static inline __attribute__((always_inline)) void {fn}(int32_t CC, int32_t KH, int32_t KW, "
         "const uint8_t* a, const uint8_t* a_c1, const uint8_t* a_h1, const uint8_t* a_w1, const int8_t* b, "
         f"int64_t sb_v, int64_t sb_c, int64_t sb_h, int64_t sb_w, {outs}" + (", int32_t* c_row1" if rows > 1 else "")
         + ") {",
         f"  if (!tsr_amx_ready()) {{ {fn}_vnni({args}); return; }}",
         "  const int64_t sa_c = a_c1 - a, sa_h = a_h1 - a, sa_w = a_w1 - a;",
         f"  const int64_t c_rs = {'c_row1 - c0' if rows > 1 else '0'};",
         "  tsr_amx_cfg_t cfg = {0};",
         "  cfg.palette = 1;",
         "  /* tiles 0-3: C of the output vectors; 4: A; 5: B; 6, 7: C and A of the last tile's pixels */",
         f"  for (int t = 0; t < 6; ++t) {{ cfg.rows[t] = 16; cfg.colsb[t] = 64; }}"]
    if tail:
        L.append(f"  cfg.rows[6] = {tail}; cfg.colsb[6] = 64; cfg.rows[7] = {tail}; cfg.colsb[7] = 64;")
    L += ["  _tile_loadconfig(&cfg);",
          f"  for (int32_t r = 0; r < {rows}; ++r) {{",
          f"    const uint8_t* ar = a + r * {sh} * sa_h;"]
    if full:
        L += [f"    for (int32_t x = 0; x < {16 * full}; x += 16) {{",
              "      " + " ".join(f"_tile_loadd({k}, c{k} + r * c_rs + x * 16, 64);" for k in range(v)),
              "      for (int32_t c = 0; c < CC; ++c)",
              "        for (int32_t kh = 0; kh < KH; ++kh)",
              "          for (int32_t kw = 0; kw < KW; ++kw) {",
              f"            _tile_loadd(4, ar + x * {sw} * sa_w + c * sa_c + kh * {dh} * sa_h + kw * {dw} * sa_w, "
              f"{sw} * sa_w);",
              "            const int8_t* bp = b + c * sb_c + kh * sb_h + kw * sb_w;"]
        for k in range(v):
            L.append(f"            _tile_loadd(5, bp + {k} * sb_v, 64); _tile_dpbusd({k}, 4, 5);")
        L += ["          }",
              "      " + " ".join(f"_tile_stored({k}, c{k} + r * c_rs + x * 16, 64);" for k in range(v)),
              "    }"]
    if tail:
        for k in range(v):
            L += [f"    _tile_loadd(6, c{k} + r * c_rs + {16 * full} * 16, 64);",
                  "    for (int32_t c = 0; c < CC; ++c)",
                  "      for (int32_t kh = 0; kh < KH; ++kh)",
                  "        for (int32_t kw = 0; kw < KW; ++kw) {",
                  f"          _tile_loadd(7, ar + {16 * full * sw} * sa_w + c * sa_c + kh * {dh} * sa_h + kw * {dw} * sa_w, "
                  f"{sw} * sa_w);",
                  f"          _tile_loadd(5, b + {k} * sb_v + c * sb_c + kh * sb_h + kw * sb_w, 64); _tile_dpbusd(6, 7, 5);",
                  "        }",
                  f"    _tile_stored(6, c{k} + r * c_rs + {16 * full} * 16, 64);"]
    L += ["  }", "  _tile_release();", "}"]
    return "\n".join(L)


def qconv_row_intrin(isa: str, v: int, cb: int, strides, dilation, ow: int, rows: int = 1) -> str:
    """The name of the intrinsic for these parameters, registered on first use."""
    if isa not in ISA:
        raise TesseraError(f"int8 conv micro-kernel: unknown ISA {isa!r} ({', '.join(ISA)})")
    if isa == "amx" and cb != AMX_BLOCK:
        raise TesseraError(f"int8 conv micro-kernel: AMX reads input blocks of {AMX_BLOCK} channels, got {cb}")
    if not 1 <= v <= MAX_V or cb % 4 or cb < 4:
        raise TesseraError(f"int8 conv micro-kernel: {v} output vectors and {cb}-channel input blocks; 1 to {MAX_V} "
                           f"vectors and blocks of a multiple of 4 channels are generated")
    strides, dilation = tuple(strides), tuple(dilation)
    name = intrin_name(isa, v, cb, strides, dilation, ow, rows)
    if TensorIntrin.get(name, allow_missing=True) is None:
        lanes = ISA[isa][0]
        fn = _fn(isa, v, cb, strides, dilation, ow, rows)
        TensorIntrin.register(name, _desc(lanes, v, cb, strides, dilation, ow, rows),
                              _impl(fn, lanes, v, cb, strides, dilation, ow, rows),
                              c_source=(amx_c_source(v, cb, strides, dilation, ow, rows) if isa == "amx" else
                                        c_source(isa, v, cb, strides, dilation, ow, rows)), features=ISA[isa][2],
                              doc=f"{rows} output row(s) of {ow} pixels of a blocked int8 convolution, {v} x {lanes} "
                                  f"channels ({isa})")
    return name


def _make_from_name(m) -> None:
    isa = m.group(1)
    rows, ow, v, lanes, cb, sh, sw, dh, dw = (int(g) for g in m.groups()[1:10])
    if isa in ISA and lanes == ISA[isa][0] and 1 <= v <= MAX_V and cb % 4 == 0 and cb >= 4:
        qconv_row_intrin(isa, v, cb, (sh, sw), (dh, dw), ow, rows)


TensorIntrin.register_family(r"x86_(vnni512|vnni256|avxvnni|avx2|amx)_qconv2d_nchwc_(\d+)x(\d+)_(\d+)x(\d+)o(\d+)i"
                             r"_s(\d+)x(\d+)_d(\d+)x(\d+)", _make_from_name)

__all__ = ["qconv_row_intrin", "isa_for", "amx_for", "block_lanes", "row_tile", "row_tiles", "intrin_name", "c_source",
           "amx_c_source", "ISA", "AMX_BLOCK"]
