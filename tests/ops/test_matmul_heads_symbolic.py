"""Batched matmuls with symbolic extents (attention at a dynamic sequence length): one parallel loop
over the batch and heads, each iteration padding its head's rows of A and packing its B before the
micro-kernel runs over them ("heads" in _cpu_schedule), and the copies of a kernel with symbolic
extents parallel over rows with their vectors inside. Exact against numpy at lengths that are and
are not multiples of the micro-kernel's tile, batch 1 to 3, on every ISA the host has."""
import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.graph import Builder
from tessera.ops.registry import ScheduleContext, get_op
from tessera.target import Target

rng = np.random.default_rng(15)


def ints(*shape):
    """Small integers as float32: every product and sum is exact, so results compare exactly."""
    return rng.integers(-4, 5, shape).astype("float32")


def has_kernels(target) -> bool:
    t = Target(target)
    return (t.has_feature("avx2") and t.has_feature("fma")) or t.has_feature("avx512f")


def schedule(a_shape, b_shape, target):
    op = get_op("nn.matmul")
    A = te.placeholder(a_shape, name="A", dtype="float32")
    B = te.placeholder(b_shape, name="B", dtype="float32")
    attrs = op.normalize_attrs({})
    outs = op.compute_for([A, B], attrs, target=Target(target))
    sch = tir.Schedule(te.create_prim_func([A, B, *outs]))
    op.schedule(sch, ScheduleContext(block="matmul", attrs=attrs, target=Target(target)))
    return sch


ATTENTION = {
    # Q @ K^T: rows and columns symbolic (A's rows padded, B's columns packed in zero-padded panels)
    "scores": (lambda bt, n: ((bt, 12, n, 64), (bt, 12, 64, n))),
    # P @ V: rows and the reduction symbolic
    "context": (lambda bt, n: ((bt, 12, n, n), (bt, 12, n, 64))),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_attention_matmul_copies_run_per_head_inside_the_parallel_batch_loop(case, threads, isa_target):
    target = f"{isa_target} -num-threads={threads}"
    if not has_kernels(target):
        pytest.skip("the target has no x86 GEMM micro-kernels")
    sch = schedule(*ATTENTION[case](te.var("bt"), te.var("n")), target)
    gemm_outer = sch.get(sch.get_loops(sch.get_block("matmul_acc_o"))[0])
    assert gemm_outer.kind == ("parallel" if threads > 1 else "serial")
    for copy in ("a_pad", "b_pack"):
        loops = sch.get_loops(sch.get_block(copy))
        assert sch.get(loops[0]) is gemm_outer, f"{copy} is not computed per head"
        assert sch.get(loops[-1]).kind == "vectorized"
        assert all(sch.get(lp).kind == "serial" for lp in loops[1:-1])
    # the copy-out: parallel over (batch, head) fused, a head's rows and their vectors inside it
    kinds = [sch.get(lp).kind for lp in sch.get_loops(sch.get_block("matmul"))]
    assert kinds == (["parallel", "serial", "vectorized"] if threads > 1 else ["serial"] * 3 + ["vectorized"])


@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_attention_matmul_with_symbolic_batch_and_length_is_exact(case, isa_target):
    target = f"{isa_target} -num-threads=2"      # (1 thread: the same loops without the parallel one)
    if not has_kernels(target):
        pytest.skip("the target has no x86 GEMM micro-kernels")
    lib = tessera.build(schedule(*ATTENTION[case](te.var("bt"), te.var("n")), target), target=target)
    assert "tintrin_" in lib.get_source()
    # lengths below, at and past the panels (16, 24, 64 columns) and the tile rows (4, 6)
    for batch, n in ((1, 1), (2, 3), (1, 5), (3, 16), (1, 17), (2, 24), (1, 63), (1, 64), (2, 67), (1, 130)):
        sa, sb = ATTENTION[case](batch, n)
        a, b = ints(*sa), ints(*sb)
        want = a @ b
        c = np.full(want.shape, np.nan, "float32")
        lib(a, b, c)
        np.testing.assert_array_equal(c, want, err_msg=f"{case} batch {batch} length {n}")


def test_heads_structure_needs_two_matrices_a_thread_from_the_static_batch():
    """A symbolic batch alone (a weight-sized matmul with batch and rows symbolic) keeps the panel
    structure: its B panels, not its batch, feed the threads."""
    target = "c -num-threads=2"
    if not has_kernels(target):
        pytest.skip("the host has no x86 GEMM micro-kernels")
    sch = schedule((te.var("bt"), te.var("n"), 64), (te.var("bt"), 64, 128), target)
    assert sch.get(sch.get_loops(sch.get_block("a_pad"))[0]) is not \
        sch.get(sch.get_loops(sch.get_block("matmul_acc_o"))[0])


def test_dynamic_attention_graph_with_scale_and_mask_matches_numpy():
    """softmax(Q.K^T / 8 + mask) . V with batch and sequence symbolic, one compile, every length."""
    threads = 2
    gb = Builder("sym_attention")
    q = gb.input("q", ("batch", 12, "seq", 64))
    kt = gb.input("kt", ("batch", 12, 64, "seq"))
    v = gb.input("v", ("batch", 12, "seq", 64))
    mask = gb.input("mask", ("batch", 1, 1, "seq"))
    scores = gb.op("add", gb.op("divide", gb.op("nn.matmul", q, kt), gb.const(np.float32(8.0), "scale")), mask)
    gb.output(gb.op("nn.matmul", gb.op("nn.softmax", scores, axis=-1), v))
    exe = tessera.compile(gb.finish(), target=f"c -num-threads={threads}")
    for batch, seq in ((1, 5), (2, 16), (1, 67)):
        qv, ktv, vv = (rng.standard_normal(s).astype("float32") for s in
                       ((batch, 12, seq, 64), (batch, 12, 64, seq), (batch, 12, seq, 64)))
        mv = np.where(np.arange(seq) < seq - seq // 4, 0.0, -1e4).astype("float32").reshape(1, 1, 1, seq)
        mv = np.repeat(mv, batch, axis=0)
        s = (qv.astype(np.float64) @ ktv) / 8.0 + mv
        p = np.exp(s - s.max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ vv
        got = np.asarray(exe(qv, ktv, vv, mv))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch} seq {seq}")


def test_symbolic_column_count_takes_the_narrowest_two_vector_panel(isa_target):
    """Q.K^T's columns are the dynamic length: the last panel is zero-padded, so the narrowest tile
    that is still two vectors wide (32 columns on AVX-512, 16 on AVX2) wastes the least at short
    lengths; the kernel runs that tile."""
    from tessera.ops.nn.dense import _symbolic_panel
    from tessera.tir.tensor_intrin.x86 import FP32_GEMM
    target = f"{isa_target} -num-threads=2"
    if not has_kernels(target):
        pytest.skip("the target has no x86 GEMM micro-kernels")
    t = Target(target)
    isa, lanes = ("avx512", 16) if t.has_feature("avx512f") else ("avx2", 8)
    want = min(nr for _, nr in FP32_GEMM[isa] if nr >= 2 * lanes)
    assert _symbolic_panel(target) == want
    src = tessera.build(schedule(*ATTENTION["scores"](te.var("bt"), te.var("n")), target), target=target).get_source()
    assert f"x{want}_f32(" in src and f"tintrin_{isa}_gemm_" in src
