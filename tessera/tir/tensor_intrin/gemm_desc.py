"""The description every GEMM tensor intrinsic shares: the loop nest tensorize matches for one tile
`C[i, j] = C[i, j] + A(i, k) * B(k, j)` (x86 micro-kernels, CUDA tensor cores, the VDLA GEMM core)."""
from __future__ import annotations

from ...ir import Block, BlockRealize, BufferRegion, BufferStore, Cast, For, IterVar, PrimFunc, Range, Var


def _rng(n):
    return Range.from_min_extent(0, n)


def gemm_tile_desc(A, B, C, m, n, K, a_at, b_at, cast_to=None) -> PrimFunc:
    """Loops i < m, j < n, k < K (an int or a Var) around the block "update"
    `C[vi, vj] = C[vi, vj] + a_at(vi, vk) * b_at(vk, vj)`, both factors cast to `cast_to` when given;
    a_at / b_at are the elements of A and B read (their layouts are the intrinsic's). The block reads
    all of A and B and writes all of C."""
    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = IterVar(_rng(m), "vi"), IterVar(_rng(n), "vj"), IterVar(_rng(K), "vk", "reduce")
    a, b = a_at(vi.var, vk.var), b_at(vk.var, vj.var)
    if cast_to is not None:
        a, b = Cast(cast_to, a), Cast(cast_to, b)
    value = C[vi.var, vj.var] + a * b
    reads = [BufferRegion(A, [_rng(x) for x in A.shape]), BufferRegion(B, [_rng(x) for x in B.shape])]
    writes = [BufferRegion(C, [_rng(x) for x in C.shape])]
    block = Block([vi, vj, vk], reads, writes, "update", BufferStore(C, value, [vi.var, vj.var]))
    body = For(i, 0, m, "serial", For(j, 0, n, "serial", For(k, 0, K, "serial",
                                                              BlockRealize([i, j, k], True, block))))
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], reads, writes, "root", body)))


__all__ = ["gemm_tile_desc"]
