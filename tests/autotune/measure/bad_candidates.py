"""Candidates for the measurement tests, made honestly: test-only tensor intrinsics whose C micro-kernel
(C[4 x 8] += A[4 x K] * B[K x 8]) is right but sums in another order ("good"), forgets the last k
("wrong"), writes through NULL ("crash"), never returns ("hang") or is not C ("build"), each
tensorized into a small GEMM; plus a trace that does not replay ("invalid")."""
from tessera import te, tir
from tessera.autotune.measure import MeasureCandidate
from tessera.autotune.workload import Workload
from tessera.tir import TensorIntrin
from tessera.tir.tensor_intrin.x86 import address_wrapper, gemm_desc, gemm_impl

M, N, K = 16, 24, 12
SIG = ("(int32_t K, const float* a, int64_t rsa, int64_t csa, const float* b, int64_t ldb, float* c, "
       "int64_t ldc)")
BODIES = {
    # the same sums, k in reverse order: reassociated, so not bitwise equal to the reference
    "good": "for (int i = 0; i < 4; ++i) for (int j = 0; j < 8; ++j) { float s = 0; "
            "for (int32_t k = K - 1; k >= 0; --k) s += a[i * rsa + k * csa] * b[k * ldb + j]; c[i * ldc + j] += s; }",
    "wrong": "for (int i = 0; i < 4; ++i) for (int j = 0; j < 8; ++j) { float s = c[i * ldc + j]; "
             "for (int32_t k = 0; k < K - 1; ++k) s += a[i * rsa + k * csa] * b[k * ldb + j]; c[i * ldc + j] = s; }",
    "crash": "(void)K; (void)a; (void)rsa; (void)csa; (void)b; (void)ldb; (void)c; (void)ldc; "
             "float* p = 0; __asm__ volatile(\"\" : \"+r\"(p)); *p = 1.0f;",  # p opaque: the store stays
    "hang": "(void)K; (void)a; (void)rsa; (void)csa; (void)b; (void)ldb; (void)c; (void)ldc; "
            "volatile int spin = 1; while (spin) {}",
    "build": "this is not C;",
}


def intrin_name(kind: str) -> str:
    return f"test_measure_{kind}_4x8"


def register():
    """Register the five intrinsics (idempotent)."""
    for kind, body in BODIES.items():
        fn = f"test_measure_{kind}_ukr"
        src = f"static void {fn}{SIG} {{\n  {body}\n}}\n" + address_wrapper(f"{fn}_at", fn)
        TensorIntrin.register(intrin_name(kind), gemm_desc(4, 8), gemm_impl(f"{fn}_at", 4, 8), override=True,
                              c_source=src)


def unregister():
    """Remove the five intrinsics again: the design-space rules of later tests in this process
    would otherwise tensorize onto them."""
    for kind in BODIES:
        if TensorIntrin.get(intrin_name(kind), allow_missing=True) is not None:
            TensorIntrin.unregister(intrin_name(kind))


def gemm_func(m=M, n=N, k=K):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def tensorized(func, kind: str) -> MeasureCandidate:
    sch = tir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, i1, j1, k)
    sch.tensorize(i1, intrin_name(kind))
    return MeasureCandidate(Workload(func), sch.trace.as_json())


def plain(func, factor=8) -> MeasureCandidate:
    sch = tir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    _, j1 = sch.split(j, [None, factor])
    sch.vectorize(j1)
    return MeasureCandidate(Workload(func), sch.trace.as_json())


def invalid(func) -> MeasureCandidate:
    good = tensorized(func, "good").trace
    insts = [list(x) for x in good[0]]
    for inst in insts:
        if inst[0] == "Split":            # a factor that does not divide: the tensorize then fails
            inst[1] = [inst[1][0], ["None", 5]]
            break
    return MeasureCandidate(Workload(func), [insts, good[1]])


def candidates(func=None) -> dict:
    """kind -> candidate: good, wrong, crash, hang, build (intrinsics), invalid, plain (vectorized loops)."""
    register()
    func = func or gemm_func()
    out = {kind: tensorized(func, kind) for kind in BODIES}
    out["invalid"] = invalid(func)
    out["plain"] = plain(func)
    return out


EXPECTED = {"good": None, "wrong": "wrong_result", "crash": "crash", "hang": "timeout", "build": "build",
            "invalid": "invalid", "plain": None}
