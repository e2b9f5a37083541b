"""CUDA tensor-core intrinsics: one warp computes a GEMM tile `C[M, N] += f32(A[M, K]) * f32(B[K, N])`
with A, B float16 and C float32, registered so `sch.tensorize(loop, name)` targets them exactly as
it targets the x86 micro-kernels:

    cuda_wmma_16x16x16_f16f32     nvcuda::wmma (load_matrix_sync, mma_sync, store_matrix_sync), sm_70+
    cuda_mma_m16n8k16_f16f32      PTX mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, sm_80+: each
                                  lane loads its fragment elements itself (the PTX ISA's layout)

Both are warp-level: the 32 lanes of a warp call them together with the same arguments. Their
implementation wraps the call in `AttrStmt("warp", "tsr.warp_execution", 32)`: split_host_device
gives a kernel holding one threadIdx.x = 32 (a kernel that binds threadIdx.x otherwise is refused).
A, B and C rows are addressed with their leading dimensions (lda, ldb, ldc; wmma needs them
multiples of 8 halves / 4 floats and the tile 32-byte aligned). The `features` name the
architecture (sm_70 / sm_80), which the CUDA renderer checks against the target's -arch; a C
target refuses them. Compile-tested with nvcc here (no GPU ran them).
"""
from __future__ import annotations

from ...ir import AttrStmt, Block, BlockRealize, Buffer, Call, Evaluate, IntImm, PrimFunc, StringImm, Var
from .gemm_desc import gemm_tile_desc
from .intrin import TensorIntrin

WARP = "tsr.warp_execution"


def tile_desc(m: int, n: int, k: int) -> PrimFunc:
    """`C[i, j] = C[i, j] + f32(A[i, k]) * f32(B[k, j])` over an m x n x k tile (A, B float16)."""
    A, B, C = Buffer((m, k), "float16", "A"), Buffer((k, n), "float16", "B"), Buffer((m, n), "float32", "C")
    return gemm_tile_desc(A, B, C, m, n, k, lambda i, kk: A[i, kk], lambda kk, j: B[kk, j], "float32")


def tile_impl(fn: str, m: int, n: int, k: int) -> PrimFunc:
    """A warp's call of fn(a, lda, b, ldb, c, ldc) on the tile's regions."""
    lda, ldb, ldc = Var("lda"), Var("ldb"), Var("ldc")
    A = Buffer((m, k), "float16", "A", strides=(lda, 1))
    B = Buffer((k, n), "float16", "B", strides=(ldb, 1))
    C = Buffer((m, n), "float32", "C", strides=(ldc, 1))

    def addr(load):
        return Call("handle", "address_of", [load])

    call = Call("handle", fn, [addr(A[0, 0]), lda, addr(B[0, 0]), ldb, addr(C[0, 0]), ldc])
    body = AttrStmt(StringImm("warp"), WARP, IntImm("int32", 32), Evaluate(call))
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], [], [], "root", body)))


WMMA_SOURCE = r"""#include <mma.h>
/* C[16 x 16] (f32, row stride ldc) += A[16 x 16] (f16, row stride lda) * B[16 x 16] (f16, row
   stride ldb) by one warp on the tensor cores (nvcuda::wmma). All 32 lanes call it together. */
static __device__ __forceinline__ void cuda_wmma_16x16x16_f16f32(const __half* a, int64_t lda, const __half* b,
                                                                int64_t ldb, float* c, int64_t ldc) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  __syncwarp();
  wmma::load_matrix_sync(fc, c, (unsigned)ldc, wmma::mem_row_major);
  wmma::load_matrix_sync(fa, a, (unsigned)lda);
  wmma::load_matrix_sync(fb, b, (unsigned)ldb);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, (unsigned)ldc, wmma::mem_row_major);
  __syncwarp();
}"""

MMA_SOURCE = r"""#include <cuda_fp16.h>
/* C[16 x 8] (f32) += A[16 x 16] (f16, row-major) * B[16 x 8] (f16) by one warp with PTX
   mma.sync.m16n8k16; every lane loads and stores its own fragment elements (PTX ISA, "Matrix
   fragments for mma.m16n8k16"): g = lane / 4 (the row group), t = lane % 4. */
static __device__ __forceinline__ void cuda_mma_m16n8k16_f16f32(const __half* a, int64_t lda, const __half* b,
                                                               int64_t ldb, float* c, int64_t ldc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "cuda_mma_m16n8k16_f16f32 needs sm_80 or newer"
#endif
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  __half2 ra[4], rb[2];
  ra[0] = __halves2half2(a[g * lda + 2 * t], a[g * lda + 2 * t + 1]);
  ra[1] = __halves2half2(a[(g + 8) * lda + 2 * t], a[(g + 8) * lda + 2 * t + 1]);
  ra[2] = __halves2half2(a[g * lda + 2 * t + 8], a[g * lda + 2 * t + 9]);
  ra[3] = __halves2half2(a[(g + 8) * lda + 2 * t + 8], a[(g + 8) * lda + 2 * t + 9]);
  rb[0] = __halves2half2(b[(2 * t) * ldb + g], b[(2 * t + 1) * ldb + g]);
  rb[1] = __halves2half2(b[(2 * t + 8) * ldb + g], b[(2 * t + 9) * ldb + g]);
  float d[4] = {c[g * ldc + 2 * t], c[g * ldc + 2 * t + 1], c[(g + 8) * ldc + 2 * t], c[(g + 8) * ldc + 2 * t + 1]};
  const unsigned* ua = reinterpret_cast<const unsigned*>(ra);
  const unsigned* ub = reinterpret_cast<const unsigned*>(rb);
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(ua[0]), "r"(ua[1]), "r"(ua[2]), "r"(ua[3]), "r"(ub[0]), "r"(ub[1]));
  c[g * ldc + 2 * t] = d[0]; c[g * ldc + 2 * t + 1] = d[1];
  c[(g + 8) * ldc + 2 * t] = d[2]; c[(g + 8) * ldc + 2 * t + 1] = d[3];
}"""

TensorIntrin.register("cuda_wmma_16x16x16_f16f32", tile_desc(16, 16, 16),
                      tile_impl("cuda_wmma_16x16x16_f16f32", 16, 16, 16), c_source=WMMA_SOURCE, features=("sm_70",),
                      doc="C[16x16] f32 += A[16x16] f16 * B[16x16] f16, one warp, nvcuda::wmma")
TensorIntrin.register("cuda_mma_m16n8k16_f16f32", tile_desc(16, 8, 16),
                      tile_impl("cuda_mma_m16n8k16_f16f32", 16, 8, 16), c_source=MMA_SOURCE, features=("sm_80",),
                      doc="C[16x8] f32 += A[16x16] f16 * B[16x8] f16, one warp, PTX mma.sync.m16n8k16")

__all__ = ["tile_desc", "tile_impl", "WARP", "WMMA_SOURCE", "MMA_SOURCE"]
