/* The fixed C of the x86 blocked-convolution row micro-kernel (tessera/tir/tensor_intrin/x86_conv.py, which
 * reads this file at import and documents the kernel). Not C on its own: a template. Each section starts
 * at a `//@ name` line (tessera/codegen/c_files.py) and holds `$name` / `${name}` placeholders that
 * x86_conv.c_source fills (string.Template); a line that is only a placeholder disappears when its value
 * is empty. What repeats per accumulator (R x V registers: declarations, loads, FMAs, stores, the calls
 * of the tiles) is generated there, line by line, and filled in here. */

//@ vector_type
#ifndef TINTRIN_F32X$lanes
#define TINTRIN_F32X$lanes
typedef float $vt __attribute__((vector_size($bytes), aligned(4)));
#endif

//@ isa_guard
#if $cond
#error "tensor intrinsic $fn needs $features"
#endif

//@ minmax_helpers
#ifndef TINTRIN_MINMAX_F32X$lanes
#define TINTRIN_MINMAX_F32X$lanes
$functions
#endif

//@ minmax_function
static inline $vt tintrin_${op}_f32x$lanes($vt x, float c) {
  const $vt cv = ($vt){0} + c;
$branches
#endif
}

//@ comment
/* $rows output row(s) of $ow pixels of a blocked convolution: $v x $lanes output channels, $cb
   input channels a block, stride ${sh}x${sw}, dilation ${dh}x${dw}; a row in tiles of $tiles pixels x $v vectors held in registers
   while a block of input channels is reduced (tessera/ops/nn/_x86_conv.py)$flat. a: input at the
   first tap (a[c * sa_c + h * sa_h + w * sa_w + ci]; a_c1, a_h1, a_w1: its next element along c, h
   and w, or a itself along an axis of one), b: weights of the first output block
   (b[v * sb_v + c * sb_c + kh * sb_h + kw * sb_w + ci * L + j]), c0..: the output blocks of row 0
   (pixel i at c + i * L), c_row1: block 0 of row 1$prefetch. */

//@ comment_flat
; rows whose pixels are contiguous (input rows
   as long as the output's) in tiles of $tiles pixels across the rows

//@ comment_prefetch
. The first tile of each input-channel chunk also prefetches
   the weights that come next (the next chunk's; after the last, the next output blocks') while they stream from memory

//@ variant_comment
/* this variant: $what */

//@ variant_zero
accumulators start at zero (no init pass before the call)

//@ variant_epilogue
after the last chunk, o[pixel] = $formula in registers (in{j}: e{j}, $inputs), one store a vector; o, e{j}: block k at + k * s_v, row r at + r * s_r, pixel i at + i * $lanes

//@ tile
static inline __attribute__((always_inline)) void ${fn}_t$r(int32_t c_lo, int32_t c_hi, int32_t KH, int32_t KW, const float* restrict a, int64_t sa_c, int64_t sa_h, int64_t sa_w, const float* restrict b, int64_t sb_v, int64_t sb_c, int64_t sb_h, int64_t sb_w, $outs$flag_args$epi_args$pf_arg) {
$accumulators
$start
  const int64_t px = sa_w * $sw;
  for (int32_t c = c_lo; c < c_hi; ++c) {
    for (int32_t kh = 0; kh < KH; ++kh) {
      const float* restrict ah = a + c * sa_c + kh * $dh * sa_h;
      const float* restrict bh = b + c * sb_c + kh * sb_h;
$prefetch
$taps
    }
  }
$epilogue
$stores
}

//@ tile_start_zero
  if (first) {  /* the first chunk starts from zero (the tile is not read) */
$zeros
  } else {
$loads
  }

//@ tile_prefetch
      if (pf) {  /* the same taps of the weights that come next, a cache line at a time */
        const uintptr_t ph = pf + 4 * (uintptr_t)((c - c_lo) * sb_c + kh * sb_h);
        for (int32_t o = 0; o < KW * $floats; o += 16) {
          $prefetches
        }
      }

//@ taps_contiguous
      const int32_t taps = KW * $cb;
      #pragma GCC unroll $unroll
      for (int32_t t = 0; t < taps; ++t) {
$step
      }

//@ taps_by_kw
      for (int32_t kw = 0; kw < KW; ++kw) {
        const float* restrict ak = ah + kw * $dw * sa_w;
        const float* restrict bk = bh + kw * sb_w;
        #pragma GCC unroll $unroll
        for (int32_t ci = 0; ci < $cb; ++ci) {
$step
        }
      }

//@ tile_epilogue
  if (last) {  /* the epilogue in registers, one store to the output */
$inputs
$stores
    return;
  }

//@ kernel
static inline void $fn(int32_t CC, int32_t KH, int32_t KW, const float* restrict a, const float* a_c1, const float* a_h1, const float* a_w1, const float* restrict b, int64_t sb_v, int64_t sb_c, int64_t sb_h, int64_t sb_w, $outs$row_arg$epi_params$split_args) {
  const int64_t sa_c = a_c1 - a, sa_h = a_h1 - a, sa_w = a_w1 - a;  /* input strides */
  const int64_t px = sa_w * $sw;
  const int64_t c_rs = $row_stride;  /* output row stride */
  /* input-channel blocks whose weights fit L1 go through every tile of the rows in turn; the
     tile's accumulators are loaded from and stored back to the output (in L1) around each */
  const int64_t per_block = (int64_t)KH * KW * $block_bytes;
  int32_t step = (int32_t)($l1_bytes / (per_block > 0 ? per_block : 1));
  if (step < 1) step = 1;
$flat_test
  for (int32_t c_lo = 0; c_lo < CC; c_lo += step) {
    const int32_t c_hi = c_lo + step < CC ? c_lo + step : CC;
$prefetch
$flat_sweep
    for (int32_t r = 0; r < $rows; ++r) {
      const float* restrict ar = a + r * $sh * sa_h;
$sweep
    }
  }
}

//@ kernel_flat_test
  const int flat = sa_h == $ow * sa_w && c_rs == $row_floats$same;  /* the rows' pixels contiguous */

//@ kernel_prefetch
    const uintptr_t pf = (uintptr_t)b + 4 * (uintptr_t)(c_hi < CC ? c_hi * sb_c : $v * sb_v);  /* the next weights */

//@ kernel_flat_sweep
    if (flat) {
$sweep
      continue;
    }
