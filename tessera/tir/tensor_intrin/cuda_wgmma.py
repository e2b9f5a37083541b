"""Block-level tensor-core GEMM intrinsics on Hopper's warpgroup MMA (sm_90a): the whole thread block
computes a BM x BN tile

    C[BM, BN] (f32) = C + f32(A[BM, K]) * f32(B[K, BN])      (A, B float16; K any extent)

as cuda_gemm's family does (the same call, the same zero-start variant), but each group of four warps
(a warpgroup, 128 threads) multiplies a 64 x BN slab with `wgmma.mma_async.m64n{BN}k16`, reading
both operands straight from shared memory through matrix descriptors (no ldmatrix, no fragments in
registers but the accumulators). One intrinsic per shape, made on first use from its name:

    cuda_wgmma_gemm_f16f32_{BM}x{BN}x64_s{STAGES}      e.g. cuda_wgmma_gemm_f16f32_128x256x64_s4

BM / 64 warpgroups; K slices of 64 (one 128-byte row of A a slice); STAGES slices in flight through
cp.async. The shared tiles are in the layouts wgmma reads with 128-byte swizzling: A K-major (a row
of 64 halves is 128 bytes, 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8 rows a 1024-byte
atom), B N-major (the same within blocks of 64 columns: row k of block nb at nb * 8 KiB + k * 128),
every tile 1024-byte aligned. wgmma needs the arch-specific target `cuda -arch=sm_90a`.
"""
from __future__ import annotations


from ...errors import TesseraError
from .cuda_gemm import CP_ASYNC, register_block_gemm
from .intrin import TensorIntrin

PATTERN = r"cuda_wgmma_gemm_f16f32_(\d+)x(\d+)x(\d+)_s(\d+)"
BK = 64                    # halves a K slice: one 128-byte swizzled row of A
MAX_REGISTERS = 65536      # a multiprocessor's 32-bit registers: what one block may use at most


def intrin_name(bm: int, bn: int, bk: int, stages: int) -> str:
    return f"cuda_wgmma_gemm_f16f32_{bm}x{bn}x{bk}_s{stages}"


def threads(bm: int) -> int:
    return bm // 64 * 128


def shared_bytes(bm: int, bn: int, bk: int, stages: int) -> int:
    """Dynamic shared memory: the stages' tiles and 1 KiB to align them to 1024 bytes."""
    return stages * (bm * bk + bk * bn) * 2 + 1024


def check_shape(bm: int, bn: int, bk: int, stages: int) -> None:
    """Refuse a tile shape the micro-kernel cannot take, naming the rule it breaks."""
    name = intrin_name(bm, bn, bk, stages)
    rules = [(bk == BK, f"BK is {BK} (a 128-byte swizzled row of A)"),
             (bm % 64 == 0 and 64 <= bm <= 256, "BM is 64, 128, 192 or 256 (a warpgroup a 64-row slab)"),
             (bn % 64 == 0 and 64 <= bn <= 256, "BN is 64, 128, 192 or 256 (wgmma's N, whole 64-column blocks of B)"),
             (2 <= stages <= 8, "2 to 8 pipeline stages"),
             # bn / 2 accumulators a thread, about 40 registers besides
             (threads(bm) * (bn // 2 + 40) <= MAX_REGISTERS, "the accumulators fit a multiprocessor's registers")]
    for ok, rule in rules:
        if not ok:
            raise TesseraError(f"wgmma GEMM intrinsic {name}: {rule}")


def _wgmma_call(bn: int) -> str:
    """The C++ function issuing one wgmma.mma_async.m64n{bn}k16 (f32 += f16 * f16, A K-major, B
    N-major) on the bn / 2 accumulators of a thread."""
    n = bn // 2
    regs = ", ".join(f"%{i}" for i in range(n))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n))
    return (f"__device__ __forceinline__ void wgmma_m64n{bn}k16(float (&d)[{n}], unsigned long long a, "
            f"unsigned long long b) {{\n"
            f"  asm volatile(\n"
            f"      \"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n\"\n"
            f"      \"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.f16.f16 {{{regs}}}, %{n}, %{n + 1}, p, 1, 1, 0, 1;\\n}}\\n\"\n"
            f"      : {outs}\n"
            f"      : \"l\"(a), \"l\"(b), \"r\"(1));\n"
            f"}}\n")


# the shared part of every variant, defined once per translation unit (#ifndef)
TEMPLATE = CP_ASYNC + r"""#ifndef TSR_WGMMA_GEMM_F16F32
#define TSR_WGMMA_GEMM_F16F32
#include <cuda_fp16.h>
/* The block-level GEMM of the cuda_wgmma_gemm_f16f32_* intrinsics (tir/tensor_intrin/cuda_wgmma.py):
   C[BM x BN] (f32, row stride ldc) = (ZERO ? 0 : C) + A[BM x K] (f16, row stride lda) * B[K x BN] (f16, row
   stride ldb), by BM / 64 warpgroups, each 64 rows of C with wgmma.mma_async.m64nBNk16 on operands in
   shared memory. Slices of A (BM x 64) and B (64 x BN) are copied global -> shared by cp.async, STAGES
   deep, into wgmma's 128-byte-swizzled layouts. A K that is not a multiple of 64 is zero-filled. */
namespace tsr_wg {

using tsr_cp::cp_async16;
using tsr_cp::cp_async_commit;
using tsr_cp::cp_async_wait;
using tsr_cp::smem_addr;

/* A shared-memory matrix descriptor: start address, leading and stride byte offsets (16-byte units),
   128-byte swizzle (layout type 1 in bits 62-63). */
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lead, unsigned stride) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16)
         | ((unsigned long long)(stride >> 4) << 32) | (1ull << 62);
}
/* shared memory written by this thread's copies is visible to wgmma (the async proxy) */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* keeps the compiler from moving reads or writes of an accumulator across the asynchronous wgmma */
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }

}  // namespace tsr_wg
#endif
"""

GEMM = r"""
namespace tsr_wg {
#ifndef TSR_WGMMA_GEMM_F16F32_{BN}
#define TSR_WGMMA_GEMM_F16F32_{BN}
{WGMMA}
template <int BM, int STAGES, bool ZERO>
__device__ __forceinline__ void gemm_n{BN}(int K, const __half* __restrict__ A, long long lda,
                                          const __half* __restrict__ B, long long ldb, float* __restrict__ C,
                                          long long ldc) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the cuda_wgmma_gemm intrinsics need the arch-specific target sm_90a (cuda -arch=sm_90a)"
#endif
  constexpr int BN = {BN}, BK = 64, THREADS = BM / 64 * 128, NACC = BN / 2;
  constexpr int A_BYTES = BM * BK * 2, B_BYTES = BK * BN * 2, STAGE = A_BYTES + B_BYTES;
  constexpr int A_COPIES = BM * 8 / THREADS, B_COPIES = BK * (BN / 8) / THREADS;   // 16-byte chunks a thread
  static_assert(BM * 8 % THREADS == 0 && BK * (BN / 8) % THREADS == 0, "the threads split the tiles evenly");
  extern __shared__ __align__(1024) unsigned char tsr_dynamic_smem[];
  const unsigned base = (smem_addr(tsr_dynamic_smem) + 1023u) & ~1023u;   // swizzle atoms are 1024-aligned
  const int tid = threadIdx.x, wg = tid / 128, ktiles = (K + BK - 1) / BK;

  // slice kt into stage `stage`: A row r (128 bytes) at r * 128, chunk c at (c ^ r % 8) * 16; B row k
  // of 64-column block nb at nb * BK * 128 + k * 128, chunk c the same way
  auto load = [&](int kt, int stage) {
    const int k0 = kt * BK;
    const unsigned a = base + stage * STAGE, b = a + A_BYTES;
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) {
      const int q = tid + i * THREADS, r = q / 8, c = q % 8;
      const bool in = k0 + c * 8 < K;
      cp_async16(a + r * 128 + ((c ^ (r & 7)) << 4), in ? A + r * lda + k0 + c * 8 : A, in);
    }
#pragma unroll
    for (int i = 0; i < B_COPIES; ++i) {
      const int q = tid + i * THREADS, r = q / (BN / 8), cc = q % (BN / 8), nb = cc / 8, c = cc % 8;
      const bool in = k0 + r < K;
      cp_async16(b + nb * (BK * 128) + r * 128 + ((c ^ (r & 7)) << 4), in ? B + (long long)(k0 + r) * ldb + cc * 8 : B,
                 in);
    }
  };

  float acc[NACC];
#pragma unroll
  for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {   // the prologue: slices 0 .. STAGES - 2 in flight
    if (s < ktiles) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<STAGES - 2>();            // this thread's copies of slice kt landed ...
    fence_proxy_async();                    // ... are visible to wgmma ...
    __syncthreads();                        // ... and every thread's are (stage (kt - 1) % STAGES is free)
    if (kt + STAGES - 1 < ktiles) load(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
    cp_async_commit();
    const unsigned a = base + (kt % STAGES) * STAGE + wg * (64 * 128), b = base + (kt % STAGES) * STAGE + A_BYTES;
#pragma unroll
    for (int i = 0; i < NACC; ++i) fence_operand(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)    // A: 16 columns further is 32 bytes into the swizzled rows;
      // B: 16 rows further is two atoms; A's 8-row groups 1024 bytes apart, B's 64-column blocks BK * 128
      wgmma_m64n{BN}k16(acc, desc(a + kk * 32, 16, 1024), desc(b + kk * 16 * 128, BK * 128, 1024));
    wgmma_commit();
    wgmma_wait_all();                       // the stage is read before the next iteration refills it
#pragma unroll
    for (int i = 0; i < NACC; ++i) fence_operand(acc[i]);
  }
  cp_async_wait<0>();

  // the store: warp w of the warpgroup holds rows 16w + g and 16w + g + 8 (g = lane / 4), columns
  // 8j + 2t and 8j + 2t + 1 (t = lane % 4) of each 8-column block j, in acc[4j .. 4j + 3]
  const int lane = tid & 31, row0 = wg * 64 + ((tid & 127) >> 5) * 16 + (lane >> 2), col0 = 2 * (lane & 3);
  const bool pairs = (ldc & 1) == 0 && (reinterpret_cast<unsigned long long>(C) & 7) == 0;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* p = C + (long long)(row0 + 8 * h) * ldc + 8 * j + col0;
      float2 v = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      if (!ZERO) { v.x += p[0]; v.y += p[1]; }
      if (pairs) *reinterpret_cast<float2*>(p) = v;
      else { p[0] = v.x; p[1] = v.y; }
    }
}
#endif
}  // namespace tsr_wg
"""


def c_source(bm: int, bn: int, bk: int, stages: int, zero: bool = False) -> str:
    fn = intrin_name(bm, bn, bk, stages) + ("_z" if zero else "")
    start = "zero" if zero else "C"
    gemm = GEMM.replace("{BN}", str(bn)).replace("{WGMMA}", _wgmma_call(bn))
    return (TEMPLATE + gemm + "\n"
            f"/* C[{bm} x {bn}] = {start} + A[{bm} x K] * B[K x {bn}]: {bm // 64} warpgroups of 64 x {bn} "
            f"(wgmma m64n{bn}k16), {stages} stages of K slices of {bk} */\n"
            f"static __device__ __forceinline__ void {fn}(int64_t K, const __half* a, int64_t lda, const __half* b, "
            f"int64_t ldb, float* c, int64_t ldc) {{\n"
            f"  tsr_wg::gemm_n{bn}<{bm}, {stages}, {'true' if zero else 'false'}>((int)K, a, lda, b, ldb, c, ldc);\n}}")


def register(bm: int, bn: int, bk: int, stages: int) -> str:
    """Register the intrinsic of this shape (once); its name."""
    check_shape(bm, bn, bk, stages)
    name = intrin_name(bm, bn, bk, stages)
    register_block_gemm(name, bm, bn, threads(bm), shared_bytes(bm, bn, bk, stages),
                        lambda zero: c_source(bm, bn, bk, stages, zero), ("sm_90a",),
                        f"C[{bm}x{bn}] f32 += A[{bm}xK] f16 * B[Kx{bn}] f16 by {bm // 64} warpgroups (wgmma "
                        f"m64n{bn}k16 from shared memory, {stages}-stage cp.async pipeline, K slices of {bk})")
    return name


def _make_from_name(m) -> None:
    register(*(int(g) for g in m.groups()))


TensorIntrin.register_family(PATTERN, _make_from_name)


__all__ = ["BK", "PATTERN", "check_shape", "c_source", "intrin_name", "register", "shared_bytes",
           "threads"]
