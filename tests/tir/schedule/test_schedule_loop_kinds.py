"""parallel, vectorize, unroll, bind, annotate/unannotate: the IR they make, how it lowers and
what the C code looks like, with results against numpy."""
import numpy as np
import pytest

import tessera
from tessera.errors import TesseraError
from tessera.ir import BlockRealize, For, FloatImm, IntImm, Ramp, StringImm, Var, post_order_visit

from schedule_helpers import (assert_struct_equal, check_gemm, chain, elementwise, gemm, nest, rand,
                              realize_of, run_built, schedule, with_body)


def _kernel(lib) -> str:
    src = lib.get_source()
    start = src.index("static int32_t main_kernel(")
    return src[start:src.index("\n}\n", start)]


def _count(func, cls):
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, cls) else None)
    return len(found)


def test_parallel_sets_the_kind_and_emits_omp():
    f = gemm()
    sch = schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    iv, jv, kv = Var("i"), Var("j"), Var("k")
    body = For(iv, 0, 64, "parallel", For(jv, 0, 48, "serial", For(kv, 0, 32, "serial",
               BlockRealize([iv, jv, kv], True, realize_of(f, "C").block))))
    assert_struct_equal(sch.mod["main"], with_body(f, body))
    assert "for i in T.parallel(0, 64):" in sch.mod.script()
    kernel = _kernel(check_gemm(sch))
    assert "#pragma omp parallel for" in kernel
    assert kernel.index("#pragma omp parallel for") < kernel.index("for (int32_t i = 0")


def test_parallel_fused_outer_loops():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(sch.fuse(i, j))
    assert nest(sch.mod["main"], "C")[0] == ("i_j_fused", "parallel", "3072")
    check_gemm(sch)


def test_vectorize_makes_vector_code():
    sch = schedule(elementwise((16, 32)))
    i, j = sch.get_loops(sch.get_block("B"))
    jo, ji = sch.split(j, factors=[None, 8])
    sch.vectorize(ji)
    assert nest(sch.mod["main"], "B")[-1] == ("i1_1", "vectorized", "8")
    lowered = tessera.lower(sch)
    assert _count(lowered, Ramp) >= 2 and _count(lowered, For) == 2   # the vectorized loop is gone
    a = rand((16, 32))
    b = np.full((16, 32), np.nan, "float32")
    lib = run_built(sch, a, b)
    np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-5, atol=1e-6)
    assert "tsr_vload_float32x8" in _kernel(lib)


def test_vectorize_inner_loop_of_gemm():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    jo, ji = sch.split(j, factors=[None, 16])
    sch.reorder(i, jo, k, ji)
    sch.vectorize(ji)
    check_gemm(sch)


def test_unroll_copies_small_loops_out():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    ko, ki = sch.split(k, factors=[None, 4])
    sch.unroll(ki)
    assert nest(sch.mod["main"], "C")[-1] == ("k_1", "unrolled", "4")
    assert "for k_1 in T.unroll(0, 4):" in sch.mod.script()
    kernel = _kernel(check_gemm(sch))
    assert "k_1" not in kernel                 # copied out: no loop variable left
    assert kernel.count("A[") >= 4


def test_unroll_large_loop_keeps_a_pragma():
    sch = schedule(gemm(n=80, m=8, K=8))
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.unroll(i)
    lib = check_gemm(sch, n=80, m=8, K=8)
    assert "#pragma GCC unroll" in _kernel(lib)


def test_bind_vthread_lowers_to_a_serial_loop():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[4, None])
    sch.bind(io, "vthread.x")
    loop = sch.get(io)
    assert loop.kind == "thread_binding" and loop.thread_binding.thread_tag == "vthread.x"
    assert 'for i_0 in T.thread_binding(0, 4, thread="vthread.x"):' in sch.mod.script()
    lowered = tessera.lower(sch)
    kinds = []
    post_order_visit(lowered.body, lambda n: kinds.append(n.kind) if isinstance(n, For) else None)
    assert "thread_binding" not in kinds
    check_gemm(sch)


def test_bind_gpu_axis_is_refused_at_build_time():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    assert 'T.thread_binding(0, 64, thread="blockIdx.x")' in sch.mod.script()
    with pytest.raises(TesseraError, match=r"loop i is bound to blockIdx.x; build for a GPU target"):
        tessera.build(sch, target="c")


def test_bound_loops_compare_structurally_across_schedules():
    def make():
        sch = schedule(gemm())
        sch.bind(sch.get_loops(sch.get_block("C"))[0], "threadIdx.x")
        return sch
    from tessera.ir import structural_equal

    assert structural_equal(make().mod, make().mod)


def test_annotate_loop_and_block_values():
    sch = schedule(gemm(), seed=1)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    v = sch.sample_categorical([0, 16, 64], [0.0, 1.0, 0.0])
    sch.annotate(i, "pragma_auto_unroll_max_step", v)
    sch.annotate(b, "meta_schedule.tiling_structure", "SSRSRS")
    sch.annotate(b, "weights", [1, 2.5, True])
    sch.annotate(j, "flag", False)
    anns = sch.get(i).annotations
    assert isinstance(anns["pragma_auto_unroll_max_step"], IntImm)
    assert anns["pragma_auto_unroll_max_step"].value == 16
    blk = sch.get(b).annotations
    assert isinstance(blk["meta_schedule.tiling_structure"], StringImm)
    w = blk["weights"]
    assert isinstance(w, tuple) and w[0].value == 1 and isinstance(w[1], FloatImm) and w[2].dtype.is_bool()
    assert sch.get(j).annotations["flag"].value == 0
    text = sch.mod.script()
    assert 'annotations={"pragma_auto_unroll_max_step": 16}' in text
    assert 'T.block_attr({"meta_schedule.tiling_structure": "SSRSRS"' in text
    sch.annotate(i, "pragma_auto_unroll_max_step", 4)     # replaces
    assert sch.get(i).annotations["pragma_auto_unroll_max_step"].value == 4
    sch.unannotate(b, "weights")
    assert "weights" not in sch.get(b).annotations
    sch.unannotate(j, "flag")
    assert not sch.get(j).annotations
    check_gemm(sch)


def test_auto_unroll_pragma_explicit_copies_inner_loops():
    sch = schedule(gemm(n=8, m=8, K=8))
    i, j, k = sch.get_loops(sch.get_block("C"))
    ko, ki = sch.split(k, factors=[None, 4])
    sch.annotate(j, "pragma_auto_unroll_max_step", 16)
    lowered = tessera.lower(sch)
    names = []
    post_order_visit(lowered.body, lambda n: names.append(n.loop_var.name) if isinstance(n, For) else None)
    # k_1 (4 steps) and k_0 (2 * 4 = 8 steps) fit in 16 and are copied out; j (8 * 8) does not
    assert sorted(names) == ["i", "j"]
    check_gemm(sch, n=8, m=8, K=8)


def test_auto_unroll_pragma_not_explicit_emits_gcc_unroll():
    sch = schedule(gemm(n=8, m=8, K=8))
    i, j, k = sch.get_loops(sch.get_block("C"))
    ko, ki = sch.split(k, factors=[None, 4])
    sch.annotate(j, "pragma_auto_unroll_max_step", 16)
    sch.annotate(j, "pragma_unroll_explicit", 0)
    lowered = tessera.lower(sch)
    kinds = {}
    post_order_visit(lowered.body, lambda n: kinds.setdefault(n.loop_var.name, n.kind) if isinstance(n, For) else None)
    assert kinds["k_1"] == "unrolled"
    kernel = _kernel(check_gemm(sch, n=8, m=8, K=8))
    assert "#pragma GCC unroll 4" in kernel
    assert kernel.index("#pragma GCC unroll 4") < kernel.index("for (int32_t k_1 = 0")


def test_auto_unroll_bad_annotation_is_refused_at_lowering():
    sch = schedule(gemm(n=8, m=8, K=8))
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.annotate(i, "pragma_auto_unroll_max_step", 16)
    sch.annotate(i, "pragma_unroll_explicit", 3)
    with pytest.raises(TesseraError, match="pragma_unroll_explicit must be 0 or 1"):
        tessera.lower(sch)


def test_kinds_on_a_chain_of_blocks():
    sch = schedule(chain())
    for name in ("B", "C"):
        i, j = sch.get_loops(sch.get_block(name))
        sch.parallel(i)
        jo, ji = sch.split(j, factors=[None, 8])
        sch.vectorize(ji)
    a = rand((32, 24))
    c = np.full((32, 24), np.nan, "float32")
    run_built(sch, a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
