"""Block-level tensor-core GEMM intrinsics for CUDA: the whole thread block computes a BM x BN tile

    C[BM, BN] (f32) = C + f32(A[BM, K]) * f32(B[K, BN])      (A, B float16; K any extent)

over the full reduction, with its accumulators in registers from the first product to the one store.
One intrinsic per shape, made on first use from its name (TensorIntrin.register_family):

    cuda_tc_gemm_f16f32_{BM}x{BN}x{BK}_w{WM}x{WN}_s{STAGES}      e.g. cuda_tc_gemm_f16f32_128x128x32_w64x64_s4

BM x BN is the block's tile, WM x WN each warp's (so (BM/WM)*(BN/WN) warps, on threadIdx.x), BK the
reduction slice a pipeline stage holds and STAGES the depth of the global -> shared copy pipeline
(cp.async: the copy of slice k + STAGES - 1 overlaps the products of slice k). Each warp reads its
operands with ldmatrix (B transposed) and multiplies with mma.sync.m16n8k16 (sm_80 and newer); the
shared tiles are XOR-swizzled by 16-byte chunks so that ldmatrix's eight rows hit eight different
bank groups. The shared memory is dynamic (STAGES * (BM*BK + BK*BN) halves): the call is wrapped in
`tsr.dynamic_shared` with its bytes, and in `tsr.block_execution` with its thread count, so
split_host_device launches the kernel with threadIdx.x = that many threads and the runtime raises
the kernel's dynamic shared-memory limit.

The call needs A and B rows 16-byte aligned (lda, ldb and the tile origins multiples of 8 halves:
ops/gpu/tensorcore.py checks this before tensorizing); a K that is not a multiple of BK is read
zero-filled. Its EpilogueHook offers the zero-start variant (`_z`): lowering (fuse_intrin_epilogue)
folds the tile's zero init, a loop nest over C that every thread would run, into the call, whose
accumulators then start at zero and which never reads C.
"""
from __future__ import annotations


from ...errors import TesseraError
from ...ir import AttrStmt, Block, BlockRealize, Buffer, Call, Evaluate, IntImm, PrimFunc, StringImm, Var
from ...ir import expr as E
from .epilogue import EpilogueHook, Tile
from .gemm_desc import gemm_tile_desc
from .intrin import TensorIntrin

BLOCK_EXEC = "tsr.block_execution"   # split_host_device: the call runs on every thread of the block
DYN_SHARED = "tsr.dynamic_shared"    # split_host_device: the call needs this many bytes of dynamic shared memory
PATTERN = r"cuda_tc_gemm_f16f32_(\d+)x(\d+)x(\d+)_w(\d+)x(\d+)_s(\d+)"


def intrin_name(bm: int, bn: int, bk: int, wm: int, wn: int, stages: int) -> str:
    return f"cuda_tc_gemm_f16f32_{bm}x{bn}x{bk}_w{wm}x{wn}_s{stages}"


def check_shape(bm: int, bn: int, bk: int, wm: int, wn: int, stages: int) -> None:
    """Refuse a tile shape the micro-kernel cannot take, naming the rule it breaks."""
    name = intrin_name(bm, bn, bk, wm, wn, stages)
    rules = [(wm % 16 == 0 and wn % 16 == 0, "a warp tile is a multiple of 16 x 16"),
             (bm % wm == 0 and bn % wn == 0, "the warp tiles divide the block tile"),
             (bk % 16 == 0 and bk >= 16, "BK is a multiple of 16"),
             (bn % 64 == 0 or bn in (16, 32), "BN is a multiple of 64 (or 16, 32): a B row is whole 128-byte lines"),
             (bk in (16, 32) or bk % 64 == 0, "BK is 16, 32 or a multiple of 64"),
             (2 <= stages <= 8, "2 to 8 pipeline stages"),
             (threads(bm, bn, wm, wn) <= 1024, "at most 1024 threads (32 warps)")]
    for ok, rule in rules:
        if not ok:
            raise TesseraError(f"tensor-core GEMM intrinsic {name}: {rule}")
    t = threads(bm, bn, wm, wn)
    if (bm * bk // 8) % t or (bk * bn // 8) % t:
        raise TesseraError(f"tensor-core GEMM intrinsic {name}: the {t} threads must split the A tile "
                           f"({bm * bk // 8} chunks of 16 bytes) and the B tile ({bk * bn // 8}) evenly")


def threads(bm: int, bn: int, wm: int, wn: int) -> int:
    return (bm // wm) * (bn // wn) * 32


def shared_bytes(bm: int, bn: int, bk: int, stages: int) -> int:
    return stages * (bm * bk + bk * bn) * 2


def gemm_desc(bm: int, bn: int) -> PrimFunc:
    K = Var("K")
    A, B, C = Buffer((bm, K), "float16", "A"), Buffer((K, bn), "float16", "B"), Buffer((bm, bn), "float32", "C")
    return gemm_tile_desc(A, B, C, bm, bn, K, lambda i, k: A[i, k], lambda k, j: B[k, j], "float32")


def block_gemm_impl(fn: str, bm: int, bn: int, n_threads: int, smem: int) -> PrimFunc:
    """The call of a block-level GEMM micro-kernel `fn(K, A, lda, B, ldb, C, ldc)` by every thread of a
    block of n_threads, with smem bytes of dynamic shared memory."""
    K, lda, ldb, ldc = Var("K"), Var("lda"), Var("ldb"), Var("ldc")
    A = Buffer((bm, K), "float16", "A", strides=(lda, 1))
    B = Buffer((K, bn), "float16", "B", strides=(ldb, 1))
    C = Buffer((bm, bn), "float32", "C", strides=(ldc, 1))

    def addr(load):
        return Call("handle", "address_of", [load])

    call = Call("handle", fn, [K, addr(A[0, 0]), lda, addr(B[0, 0]), ldb, addr(C[0, 0]), ldc])
    body = AttrStmt(StringImm("block"), BLOCK_EXEC, IntImm("int32", n_threads),
                    AttrStmt(StringImm("smem"), DYN_SHARED, IntImm("int32", smem), Evaluate(call)))
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], [], [], "root", body)))


# what the block-level GEMMs (this family, cuda_wgmma's) share, defined once per translation unit
CP_ASYNC = r"""#ifndef TSR_CP_ASYNC
#define TSR_CP_ASYNC
namespace tsr_cp {
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
/* 16 bytes global -> shared, asynchronously; zero-filled where `full` is false (nothing read) */
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(full ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
}  // namespace tsr_cp
#endif
"""

# the shared part of every variant, defined once per translation unit (#ifndef)
TEMPLATE = CP_ASYNC + r"""#ifndef TSR_TC_GEMM_F16F32
#define TSR_TC_GEMM_F16F32
#include <cuda_fp16.h>
/* The block-level tensor-core GEMM of the cuda_tc_gemm_f16f32_* intrinsics (tir/tensor_intrin/cuda_gemm.py):
   C[BM x BN] (f32, row stride ldc) = (ZERO ? 0 : C) + A[BM x K] (f16, row stride lda) * B[K x BN] (f16, row
   stride ldb), by every thread of the block: (BM / WM) x (BN / WN) warps, each a WM x WN tile of
   mma.sync.m16n8k16 products. Slices of A (BM x BK) and B (BK x BN) are copied global -> shared by cp.async,
   STAGES deep; ldmatrix reads them (B transposed). A K that is not a multiple of BK is zero-filled. */
namespace tsr_tc {

using tsr_cp::cp_async16;
using tsr_cp::cp_async_commit;
using tsr_cp::cp_async_wait;
using tsr_cp::smem_addr;

/* Where 16-byte chunk c of row r of a tile with CHUNKS chunks a row is stored: XOR-swizzled, so that
   one chunk column of 8 consecutive rows (what ldmatrix reads) lies in 8 different bank groups. */
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int r, int c) {
  if (CHUNKS >= 8) return (c & ~7) | ((c ^ r) & 7);
  return c ^ ((r / (8 / CHUNKS)) % CHUNKS);
}

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool ZERO>
__device__ __forceinline__ void gemm(int K, const __half* __restrict__ A, long long lda,
                                     const __half* __restrict__ B, long long ldb, float* __restrict__ C,
                                     long long ldc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "the cuda_tc_gemm intrinsics need sm_80 or newer (cp.async, ldmatrix, mma.sync.m16n8k16)"
#endif
  constexpr int WARPS_N = BN / WN, THREADS = (BM / WM) * WARPS_N * 32;
  constexpr int MI = WM / 16, NI = WN / 8;                 // mma tiles (16 x 8) of a warp
  constexpr int A_CHUNKS = BK / 8, B_CHUNKS = BN / 8;      // 16-byte chunks a tile row
  constexpr int A_TILE = BM * BK, B_TILE = BK * BN;        // halves a stage
  constexpr int A_COPIES = BM * A_CHUNKS / THREADS, B_COPIES = BK * B_CHUNKS / THREADS;
  extern __shared__ __align__(128) unsigned char tsr_dynamic_smem[];
  __half* sA = reinterpret_cast<__half*>(tsr_dynamic_smem);
  __half* sB = sA + STAGES * A_TILE;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
  const int ktiles = (K + BK - 1) / BK;

  // the copy of reduction slice kt into pipeline stage `stage`: each thread its A_COPIES + B_COPIES chunks
  auto load = [&](int kt, int stage) {
    const int k0 = kt * BK;
    __half* a = sA + stage * A_TILE;
    __half* b = sB + stage * B_TILE;
#pragma unroll
    for (int i = 0; i < A_COPIES; ++i) {
      const int q = tid + i * THREADS, r = q / A_CHUNKS, c = q % A_CHUNKS;
      const bool in = k0 + c * 8 < K;
      cp_async16(smem_addr(a + r * BK + swizzle<A_CHUNKS>(r, c) * 8), in ? A + r * lda + k0 + c * 8 : A, in);
    }
#pragma unroll
    for (int i = 0; i < B_COPIES; ++i) {
      const int q = tid + i * THREADS, r = q / B_CHUNKS, c = q % B_CHUNKS;
      const bool in = k0 + r < K;
      cp_async16(smem_addr(b + r * BN + swizzle<B_CHUNKS>(r, c) * 8), in ? B + (k0 + r) * ldb + c * 8 : B, in);
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {   // the pipeline's prologue: slices 0 .. STAGES - 2 in flight
    if (s < ktiles) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<STAGES - 2>();            // slice kt has landed ...
    __syncthreads();                        // ... for every thread, and stage (kt - 1) % STAGES is free
    if (kt + STAGES - 1 < ktiles) load(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
    cp_async_commit();
    const __half* a = sA + (kt % STAGES) * A_TILE;
    const __half* b = sB + (kt % STAGES) * B_TILE;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned fa[MI][4], fb[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {   // A: rows 0-15 of the mma tile, k 0-7 then 8-15
        const int r = wm0 + mi * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
        ldsm_x4(fa[mi], smem_addr(a + r * BK + swizzle<A_CHUNKS>(r, c) * 8));
      }
#pragma unroll
      for (int ni = 0; ni < NI; ni += 2) {  // B: k 0-7, k 8-15 of two 8-column tiles, transposed
        const int r = kk * 16 + (lane & 15), c = (wn0 + ni * 8) / 8 + (lane >> 4);
        unsigned t[4];
        ldsm_x4_trans(t, smem_addr(b + r * BN + swizzle<B_CHUNKS>(r, c) * 8));
        fb[ni][0] = t[0]; fb[ni][1] = t[1]; fb[ni + 1][0] = t[2]; fb[ni + 1][1] = t[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma16816(acc[mi][ni], fa[mi], fb[ni][0], fb[ni][1]);
    }
  }
  cp_async_wait<0>();

  // the store: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile
  const int g = lane >> 2, t4 = lane & 3;
  const bool pairs = (ldc & 1) == 0 && (reinterpret_cast<unsigned long long>(C) & 7) == 0;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* p = C + (long long)(wm0 + mi * 16 + g + 8 * h) * ldc + wn0 + ni * 8 + 2 * t4;
        float2 v = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
        if (!ZERO) { v.x += p[0]; v.y += p[1]; }
        if (pairs) *reinterpret_cast<float2*>(p) = v;
        else { p[0] = v.x; p[1] = v.y; }
      }
}

}  // namespace tsr_tc
#endif"""


def _fn(bm, bn, bk, wm, wn, stages, zero: bool) -> str:
    return intrin_name(bm, bn, bk, wm, wn, stages) + ("_z" if zero else "")


def c_source(bm, bn, bk, wm, wn, stages, zero: bool = False) -> str:
    fn = _fn(bm, bn, bk, wm, wn, stages, zero)
    start = "zero" if zero else "C"
    return (TEMPLATE + "\n"
            f"/* C[{bm} x {bn}] = {start} + A[{bm} x K] * B[K x {bn}]: {threads(bm, bn, wm, wn) // 32} warps of "
            f"{wm} x {wn}, {stages} stages of K slices of {bk} */\n"
            f"static __device__ __forceinline__ void {fn}(int64_t K, const __half* a, int64_t lda, const __half* b, "
            f"int64_t ldb, float* c, int64_t ldc) {{\n"
            f"  tsr_tc::gemm<{bm}, {bn}, {bk}, {wm}, {wn}, {stages}, {'true' if zero else 'false'}>((int)K, a, lda, b, "
            f"ldb, c, ldc);\n}}")


def _address(arg):
    """(buffer, flat index) of an `address_of(buf[index])` argument, or None."""
    if type(arg) is E.Call and arg.op == "address_of" and len(arg.args) == 1 and type(arg.args[0]) is E.BufferLoad \
            and len(arg.args[0].indices) == 1:
        return arg.args[0].buffer, arg.args[0].indices[0]
    return None


def _tile_of(bm, bn, call):
    """The C tile a call writes (EpilogueHook.tile): BM rows ldc apart, BN contiguous columns."""
    got = _address(call.args[5]) if len(call.args) == 7 else None
    ldc = call.args[6] if len(call.args) == 7 else None
    if got is None or type(ldc) is not E.IntImm or str(got[0].dtype) != "float32":
        return None
    return Tile(got[0], got[1], ((int(ldc.value), bm), (1, bn)), 1, "float32")


def register_block_gemm(name: str, bm: int, bn: int, n_threads: int, smem: int, source, features, doc: str) -> None:
    """Register a block-level GEMM micro-kernel (this family's shape, C[bm, bn] f32 += A[bm, K] f16 *
    B[K, bn] f16 by n_threads threads with smem bytes of dynamic shared memory) under name, once.
    source(zero) gives the C source of the call `name` (zero False) or of its zero-start variant
    `name_z` (the EpilogueHook: fuse_intrin_epilogue folds the tile's zero init into the call)."""
    if TensorIntrin.get(name, allow_missing=True) is not None:
        return

    def zero_variant(call, epi):
        if not epi.zero_init or epi.out is not None or epi.first is not None:
            return None          # only the init folds in; an epilogue stays its own nest
        return Call("handle", name + "_z", list(call.args)), (name + "_z",), source(True)

    TensorIntrin.register(name, gemm_desc(bm, bn), block_gemm_impl(name, bm, bn, n_threads, smem),
                          c_source=source(False), features=features,
                          epilogue=EpilogueHook(lambda call: _tile_of(bm, bn, call), zero_variant, global_tile=True),
                          doc=doc)


def register(bm: int, bn: int, bk: int, wm: int, wn: int, stages: int) -> str:
    """Register the intrinsic of this shape (once); its name."""
    check_shape(bm, bn, bk, wm, wn, stages)
    name = intrin_name(bm, bn, bk, wm, wn, stages)
    shape = (bm, bn, bk, wm, wn, stages)
    register_block_gemm(name, bm, bn, threads(bm, bn, wm, wn), shared_bytes(bm, bn, bk, stages),
                        lambda zero: c_source(*shape, zero), ("sm_80",),
                        f"C[{bm}x{bn}] f32 += A[{bm}xK] f16 * B[Kx{bn}] f16 by a block of {threads(bm, bn, wm, wn)} "
                        f"threads (mma.sync m16n8k16, {stages}-stage cp.async pipeline, K slices of {bk})")
    return name


def _make_from_name(m) -> None:
    register(*(int(g) for g in m.groups()))


TensorIntrin.register_family(PATTERN, _make_from_name)


__all__ = ["BLOCK_EXEC", "CP_ASYNC", "DYN_SHARED", "PATTERN", "block_gemm_impl", "check_shape", "c_source", "gemm_desc",
           "intrin_name", "register", "register_block_gemm",
           "shared_bytes", "threads"]
