"""Schedule state and handles: construction, lookups, copies, seeds, invalidated handles."""
import pytest

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError, TesseraError
from tessera.ir import Block, BlockRealize, Buffer, For, IRModule, IterVar, PrimFunc, Range, Var
from tessera.tir.schedule import ROOT_MARK

from schedule_helpers import chain, check_gemm, gemm, schedule


def test_schedule_accepts_primfunc_and_module_and_exposes_mod():
    f = gemm()
    sch = tir.Schedule(f)
    assert isinstance(sch.mod, IRModule) and list(sch.mod.functions) == ["main"]
    assert sch.mod["main"] is f and sch.func is f
    mod = IRModule({"main": f, "other": chain()})
    sch2 = tir.Schedule(mod)
    assert sch2.mod["other"] is mod["other"]
    b = sch2.get_block("C", func_name="other")
    assert sch2.get(b) is mod["other"].body.block.body.seq[1].body.body.block
    i, j = sch2.get_loops(b)
    sch2.parallel(i)
    assert sch2.mod["main"] is f and sch2.mod["other"] is not mod["other"]
    with pytest.raises(TesseraError, match="PrimFunc or an IRModule"):
        tir.Schedule("nope")
    with pytest.raises(ScheduleError, match="no function 'third'"):
        sch2.get_block("C", func_name="third")


def test_tir_exports():
    assert tir.Schedule is tir.schedule.Schedule
    assert tir.BlockRV and tir.LoopRV and tir.ExprRV


def test_get_block_and_loops_return_handles_to_current_nodes():
    sch = schedule(gemm())
    b = sch.get_block("C")
    assert isinstance(b, tir.BlockRV)
    blk = sch.get(b)
    assert isinstance(blk, Block) and blk.name_hint == "C"
    loops = sch.get_loops(b)
    assert all(isinstance(lp, tir.LoopRV) for lp in loops)
    assert [sch.get(lp).loop_var.name for lp in loops] == ["i", "j", "k"]
    assert [sch.get(lp).extent.value for lp in loops] == [64, 48, 32]
    root = sch.get_block("root")
    assert sch.get_loops(root) == []
    assert [sch.get(x).name_hint for x in sch.get_child_blocks(root)] == ["C"]
    assert [sch.get(x).name_hint for x in sch.get_child_blocks(loops[1])] == ["C"]
    assert sch.get(loops) == [sch.get(lp) for lp in loops]


def test_get_block_errors_name_the_block():
    sch = schedule(gemm())
    with pytest.raises(ScheduleError, match=r"no block 'D'.*blocks: C"):
        sch.get_block("D")
    with pytest.raises(ScheduleError, match="did you mean 'C'"):
        sch.get_block("c")
    assert len(sch.trace) == 0


def test_handles_survive_changes_and_report_removed_loops():
    sch = schedule(gemm())
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, [None, 8])
    assert sch.get(j).loop_var.name == "j"          # untouched loops keep their handles
    assert sch.get(b).name_hint == "C"
    sch.reorder(k, j)
    assert sch.get(j).loop_var.name == "j" and sch.get(k).loop_var.name == "k"
    with pytest.raises(ScheduleError, match=r"loop 'i' is no longer valid: it was split into 'i_0', 'i_1'"):
        sch.get(i)
    with pytest.raises(ScheduleError, match=r"loop 'i' is no longer valid"):
        sch.parallel(i)
    f = sch.fuse(io, ii)
    with pytest.raises(ScheduleError, match=r"'i_0' is no longer valid: it was fused into 'i_0_i_1_fused'"):
        sch.vectorize(io)
    assert sch.get(f).extent.value == 64


def test_handles_of_another_schedule_are_refused():
    a, b = schedule(gemm()), schedule(gemm())
    blk = a.get_block("C")
    with pytest.raises(ScheduleError, match="does not belong to this schedule"):
        b.get_loops(blk)
    with pytest.raises(ScheduleError, match="expected a BlockRV"):
        b.get_loops("C")
    with pytest.raises(ScheduleError, match="expected a LoopRV"):
        a.parallel(blk)
    with pytest.raises(TesseraError, match="BlockRV, LoopRV or ExprRV"):
        a.get(3)


def test_remove_rv():
    sch = schedule(gemm())
    b = sch.get_block("C")
    sch.remove_rv(b)
    with pytest.raises(ScheduleError, match="does not belong"):
        sch.get(b)


def test_producers_and_consumers():
    sch = schedule(chain())
    b, c = sch.get_block("B"), sch.get_block("C")
    assert [sch.get(x).name_hint for x in sch.get_consumers(b)] == ["C"]
    assert [sch.get(x).name_hint for x in sch.get_producers(c)] == ["B"]
    assert sch.get_producers(b) == [] and sch.get_consumers(c) == []
    root = sch.get_block("root")
    assert [sch.get(x).name_hint for x in sch.get_child_blocks(root)] == ["B", "C"]
    # a reduction's consumers: the block reading its output
    A = te.placeholder((8, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="S")
    T2 = te.compute((8,), lambda i: S[i] * 2.0, name="T")
    s2 = schedule(te.create_prim_func([A, T2]))
    assert [s2.get(x).name_hint for x in s2.get_consumers(s2.get_block("S"))] == ["T"]
    assert [s2.get(x).name_hint for x in s2.get_producers(s2.get_block("T"))] == ["S"]


def test_copy_is_independent_and_keeps_handles_and_trace():
    sch = schedule(gemm(), seed=5)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, [None, 16])
    cp = sch.copy()
    assert cp.mod["main"] is sch.mod["main"]
    assert str(cp.trace) == str(sch.trace)
    cp.parallel(io)                        # handles are valid in the copy
    assert sch.get(io).kind == "serial" and cp.get(io).kind == "parallel"
    assert len(cp.trace) == len(sch.trace) + 1
    sch.vectorize(ii)
    assert cp.get(ii).kind == "serial"
    check_gemm(cp)
    check_gemm(sch)


def _draws(sch):
    i = sch.get_loops(sch.get_block("C"))[0]
    return [tuple(sch.get(sch.sample_perfect_tile(i, n=3, max_innermost_factor=64))) for _ in range(8)]


def test_seed_makes_sampling_reproducible_and_copy_forks():
    s1, s2 = schedule(gemm(), seed=11), schedule(gemm(), seed=11)
    d1 = _draws(s1)
    assert d1 == _draws(s2)
    assert len(set(d1)) > 1                       # really random
    s3 = schedule(gemm(), seed=11)
    s3.seed(12)
    assert _draws(s3) != d1                       # another seed, other draws
    s3.seed(11)
    assert _draws(s3) == d1                       # reseeding restarts the sequence
    # forking is deterministic: same seed, same fork; the copy and its parent draw differently
    a, b = schedule(gemm(), seed=3), schedule(gemm(), seed=3)
    ca, cb = a.copy(), b.copy()
    da = _draws(ca)
    assert da == _draws(cb)
    assert da != _draws(a)
    with pytest.raises(TesseraError, match="seed"):
        tir.Schedule(gemm(), seed=-5)
    with pytest.raises(TesseraError, match="seed"):
        tir.Schedule(gemm(), seed="x")


def test_fork_seed_and_copy_differ_from_parent():
    s = schedule(gemm(), seed=9)
    c = s.copy()
    i_s = s.get_loops(s.get_block("C"))[0]
    i_c = c.get_loops(c.get_block("C"))[0]
    ds = [tuple(s.get(s.sample_perfect_tile(i_s, n=3, max_innermost_factor=-1))) for _ in range(12)]
    dc = [tuple(c.get(c.sample_perfect_tile(i_c, n=3, max_innermost_factor=-1))) for _ in range(12)]
    assert ds != dc
    assert isinstance(s.fork_seed(), int)


def test_duplicate_block_names_or_loop_vars_are_refused():
    A = Buffer((4,), "float32", "A")
    vi = IterVar(Range(0, 4), Var("vi"), "data_par")
    i = Var("i")
    from tessera.ir import BufferStore, seq

    def blk(name):
        return BlockRealize([i], True, Block([vi], [], [A.full_region()], name,
                                             BufferStore(A, A[vi.var] * 2.0, [vi.var])))
    f = PrimFunc([A], seq(For(i, 0, 4, "serial", blk("X")), For(Var("i"), 0, 4, "serial", blk("X"))))
    with pytest.raises(ScheduleError, match="block name 'X' appears twice"):
        tir.Schedule(f)
    j = Var("j")
    loop = For(j, 0, 4, "serial", BufferStore(A, 1.0, [j]))
    g = PrimFunc([A], seq(loop, loop))
    with pytest.raises(ScheduleError, match="loop variable 'j' is defined by two loops"):
        tir.Schedule(g)


def test_debug_mask_checks_well_formedness():
    with pytest.raises(TesseraError, match="debug_mask"):
        tir.Schedule(gemm(), debug_mask="some")
    A = Buffer((4,), "float32", "A")
    vi = IterVar(Range(0, 4), Var("vi"), "data_par")
    stray = Var("stray")
    from tessera.ir import BufferStore

    bad = PrimFunc([A], BlockRealize([stray], True, Block([vi], [], [], "X",
                                                          BufferStore(A, 1.0, [vi.var]))))
    tir.Schedule(bad)  # not checked by default
    with pytest.raises(ScheduleError, match="'stray', which no enclosing loop or block defines"):
        tir.Schedule(bad, debug_mask="all")


def test_get_of_marks_and_exprs():
    sch = schedule(chain())
    loc = sch.sample_compute_location(sch.get_block("C"), decision=-1)
    assert sch.get(loc) is ROOT_MARK
    v = sch.sample_categorical([3, 5], [0.0, 1.0])
    assert sch.get(v) == 5 and sch.show(v) == "5"
    with pytest.raises(ScheduleError, match="location mark"):
        sch.parallel(loc)


def test_schedule_is_accepted_by_build_and_lower():
    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    lowered = tessera.lower(sch)
    assert isinstance(lowered, PrimFunc)
    lib = check_gemm(sch)
    assert "#pragma omp parallel for" in lib.get_source()
    assert tessera.lower(sch.mod).script() == lowered.script()


def test_function_without_root_block():
    from tessera.ir import BufferStore
    from schedule_helpers import rand, run_built
    import numpy as np

    A, B = Buffer((6, 10), "float32", "A"), Buffer((6, 10), "float32", "B")
    i, j = Var("i"), Var("j")
    vi, vj = IterVar(Range(0, 6), Var("vi"), "data_par"), IterVar(Range(0, 10), Var("vj"), "data_par")
    blk = Block([vi, vj], [A.full_region()], [B.full_region()], "B",
                BufferStore(B, A[vi.var, vj.var] * 2.0, [vi.var, vj.var]))
    f = PrimFunc([A, B], For(i, 0, 6, "serial", For(j, 0, 10, "serial", BlockRealize([i, j], True, blk))))
    sch = schedule(f)
    b = sch.get_block("B")
    li, lj = sch.get_loops(b)
    jo, ji = sch.split(lj, [None, 4])
    fused = sch.fuse(li, jo)
    sch.parallel(fused)
    assert [sch.get(x).loop_var.name for x in sch.get_loops(b)] == ["i_j_0_fused", "j_1"]
    assert sch.get_producers(b) == [] and sch.get_child_blocks(fused) != []
    a = rand((6, 10))
    out = np.full((6, 10), np.nan, "float32")
    run_built(sch, a, out)
    np.testing.assert_allclose(out, a * 2, rtol=1e-6)


def test_module_with_two_functions_builds_both():
    import numpy as np
    from schedule_helpers import rand

    mod = IRModule({"main": gemm(8, 8, 8), "double": chain(4, 4)})
    sch = schedule(mod)
    sch.parallel(sch.get_loops(sch.get_block("C"))[0])
    i, j = sch.get_loops(sch.get_block("B", func_name="double"))
    sch.vectorize(j)
    lib = tessera.build(sch)
    a = rand((4, 4))
    c = np.full((4, 4), np.nan, "float32")
    lib["double"](a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    check_gemm(sch, 8, 8, 8)


def test_numpy_scalars_and_tuples_are_accepted_and_recorded_as_python():
    import numpy as np

    sch = schedule(gemm())
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=(None, np.int64(8)))
    sch.annotate(io, "pragma_auto_unroll_max_step", np.int32(16))
    v = sch.sample_categorical([np.int64(1), 2], [np.float32(0.5), 0.5], decision=np.int64(1))
    assert sch.get(v) == 2 and type(sch.trace.decisions[sch.trace.insts[-1]]) is int
    assert sch.get(io).annotations["pragma_auto_unroll_max_step"].value == 16
    assert "factors=[None, 8]" in str(sch.trace)
    import json

    json.dumps(sch.trace.as_json())
    check_gemm(sch)
