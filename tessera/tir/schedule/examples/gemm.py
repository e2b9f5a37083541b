"""A hand-written fast GEMM schedule for x86 CPUs: the GotoBLAS/BLIS structure written as a tessera
schedule (benchmarks/gemm.py measures it; README "From a tensor expression to a fast GEMM").

    func = gemm_program(1024, 1024, 1024, nr=16)           # C = A @ B, B packed in 16-column panels
    sch = schedule_gemm(func, mr=4, nr=16, kc=256, mc=64)  # tiles, parallel, micro-kernel
    lib = tessera.build(sch, target="c -num-threads=2")

The program packs B into `B_pack[j // nr, k, j % nr]` (each nr-column panel contiguous, as the
micro-kernel reads it one row of nr floats per k) -- the layout TVM's tutorial packs in the tensor
expression, and what `cache_read` + `transform_layout` of B produce. The schedule splits
`i -> (i_0, i_1, i_2)` by (mc, mr), `j -> (j_0, j_1)` by nr and `k -> (k_0, k_1)` by kc, orders the
loops `k_0, i_0, j_0, i_1 | i_2, j_1, k_1` (a kc-deep slice of B stays in cache while the threads
sweep their rows of A), runs i_0 in parallel and tensorizes the mr x nr x kc tile with the register-
tiled FMA micro-kernel of the target (tensor_intrin/x86.py). Tile sizes must divide the extents
(an intrinsic computes whole tiles).
"""
from __future__ import annotations

from .... import te
from ....errors import ScheduleError
from ..schedule import Schedule
from ...tensor_intrin import x86


def gemm_program(M: int, N: int, K: int, nr: int = 16, dtype: str = "float32", pack_a: int = 0):
    """The TE GEMM `C[i, j] = sum_k A[i, k] * B[k, j]` with B packed in nr-column panels (and A,
    when pack_a > 0, in k-major panels of pack_a rows). int8: A uint8, B int8 packed in groups of
    four k (`B_pack[j // nr, k // 4, j % nr, k % 4]`, vpdpbusd's layout), C int32."""
    if N % nr or (pack_a and M % pack_a):
        raise ScheduleError(f"gemm_program: the panels ({pack_a or 1} rows, {nr} columns) must divide "
                            f"M={M} and N={N}")
    if dtype in ("int8", "uint8"):
        if K % 4:
            raise ScheduleError(f"gemm_program: the int8 GEMM packs k in groups of 4; K={K} is not a multiple")
        A = te.placeholder((M, K), name="A", dtype="uint8")
        B = te.placeholder((K, N), name="B", dtype="int8")
        Bp = te.compute((N // nr, K // 4, nr, 4), lambda jo, q, ji, r: B[q * 4 + r, jo * nr + ji], name="B_pack")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") *
                                                   Bp[j // nr, k // 4, j % nr, k % 4].astype("int32"), axis=k),
                       name="C")
        return te.create_prim_func([A, B, C])
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    Bp = te.compute((N // nr, K, nr), lambda jo, kk, ji: B[kk, jo * nr + ji], name="B_pack")
    k = te.reduce_axis((0, K), name="k")
    if pack_a:
        Ap = te.compute((M // pack_a, K, pack_a), lambda io, kk, ii: A[io * pack_a + ii, kk], name="A_pack")
        C = te.compute((M, N), lambda i, j: te.sum(Ap[i // pack_a, k, i % pack_a] * Bp[j // nr, k, j % nr], axis=k),
                       name="C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * Bp[j // nr, k, j % nr], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def plain_gemm_program(M: int, N: int, K: int, dtype: str = "float32"):
    """`C[i, j] = sum_k A[i, k] * B[k, j]` as written (for packing by the schedule: pack="cache_read");
    int8: A uint8, B int8, C int32."""
    i8 = dtype in ("int8", "uint8")
    A = te.placeholder((M, K), name="A", dtype="uint8" if i8 else dtype)
    B = te.placeholder((K, N), name="B", dtype="int8" if i8 else dtype)
    k = te.reduce_axis((0, K), name="k")
    if i8:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k),
                       name="C")
    else:
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def schedule_packing(sch: Schedule, name: str, vector: bool = True) -> None:
    """Pack in parallel over panels; the innermost (within-panel) loop vectorized."""
    loops = sch.get_loops(sch.get_block(name))
    sch.parallel(loops[0])
    if vector:
        sch.vectorize(loops[-1])


def schedule_gemm(func_or_sch, *, mr: int, nr: int, kc: int, mc: int, intrin: str | None = None,
                  target="c", pack_a: bool = False, parallel: bool = True, pack: str = "te") -> Schedule:
    """The schedule of the module docstring on gemm_program's function (or a Schedule of it).
    intrin: the micro-kernel (default: the best one `target` has for this tile).
    pack="cache_read": the function is plain_gemm_program's; B is packed by the schedule --
    `cache_read` of B, the copy computed at k_0 (one kc-deep slice of B at a time), and
    `transform_layout` of the copy into nr-column panels."""
    sch = func_or_sch if isinstance(func_or_sch, Schedule) else Schedule(func_or_sch)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    dtype = sch.get(c).writes[0].buffer.dtype
    is_int8 = str(dtype) == "int32"
    if intrin is None:
        intrin = x86.gemm_intrin_for(target, "int8" if is_int8 else "float32", a_kmajor=pack_a, tiles=[(mr, nr)])
    if pack not in ("te", "cache_read"):
        raise ScheduleError(f"schedule_gemm: pack must be 'te' or 'cache_read', got {pack!r}")
    packed = None
    if pack == "cache_read":
        if not hasattr(sch, "cache_read") or not hasattr(sch, "transform_layout"):
            raise ScheduleError("schedule_gemm: pack='cache_read' needs the cache_read and transform_layout "
                                "primitives")
        packed = sch.cache_read(c, 1, "global")
    i0, i1, i2 = sch.split(i, [None, mc // mr, mr])
    j0, j1 = sch.split(j, [None, nr])
    k0, k1 = sch.split(k, [None, kc])
    sch.reorder(k0, i0, j0, i1, i2, j1, k1)
    if packed is not None:
        sch.compute_at(packed, k0)
        if is_int8:
            sch.transform_layout(packed, ("write", 0), lambda kk, jj: (jj // nr, kk // 4, jj % nr, kk % 4))
        else:
            sch.transform_layout(packed, ("write", 0), lambda kk, jj: (jj // nr, kk, jj % nr))
        pk, pj = sch.get_loops(packed)[-2:]
        sch.parallel(pk)
        if not is_int8:
            pj0, pj1 = sch.split(pj, [None, 8])
            sch.vectorize(pj1)
    if parallel:
        sch.parallel(i0)
    sch.tensorize(i2, intrin)
    for name in ("B_pack", "A_pack"):
        try:
            sch.get(sch.get_block(name))
        except ScheduleError:
            continue
        schedule_packing(sch, name, vector=not is_int8)
    return sch


__all__ = ["gemm_program", "plain_gemm_program", "schedule_gemm", "schedule_packing"]
