"""Property: random sequences of primitives on random programs never change the results.

Every attempted primitive either succeeds or raises ScheduleError leaving the schedule as it was;
the scheduled program (run by the reference interpreter, before and after lowering, and a sample
compiled to C) computes what numpy computes; the trace replays, through JSON, to the same IR."""
import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import structural_equal
from tessera.tir.schedule import Trace

from interp_lowered import run as interp
from schedule_helpers import schedule


def _program(draw):
    kind = draw(st.sampled_from(["gemm", "elementwise3", "chain", "sym"]))
    if kind == "gemm":
        n, m, K = (draw(st.integers(1, 9)) for _ in range(3))
        A = te.placeholder((n, K), name="A")
        B = te.placeholder((K, m), name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return te.create_prim_func([A, B, C]), [(n, K), (K, m)], [(n, m)], lambda a, b: [a @ b], {}
    if kind == "elementwise3":
        shape = tuple(draw(st.integers(1, 6)) for _ in range(3))
        A = te.placeholder(shape, name="A")
        B = te.compute(shape, lambda i, j, l: A[i, j, l] * 2.0 - 1.0, name="B")
        return te.create_prim_func([A, B]), [shape], [shape], lambda a: [a * 2 - 1], {}
    if kind == "chain":
        n, m = draw(st.integers(1, 8)), draw(st.integers(1, 8))
        A = te.placeholder((n, m), name="A")
        B = te.compute((n, m), lambda i, j: A[i, j] + 1.0, name="B")
        k = te.reduce_axis((0, m), name="k")
        C = te.compute((n,), lambda i: te.sum(B[i, k] * B[i, k], axis=k), name="C")
        return te.create_prim_func([A, C]), [(n, m)], [(n,)], lambda a: [((a + 1) ** 2).sum(1)], {}
    rows = draw(st.integers(1, 9))
    nv = te.var("n")
    A = te.placeholder((nv, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((nv,), lambda i: te.max(A[i, k], axis=k), name="C")
    return te.create_prim_func([A, C]), [(rows, 5)], [(rows,)], lambda a: [a.max(1)], {}


def _all_loops(sch):
    out = []
    for name in ("B", "C"):
        try:
            b = sch.get_block(name)
        except ScheduleError:
            continue
        out.extend(sch.get_loops(b))
    return out


def _choose(draw, sch):
    """A random primitive call on sch, as a closure (the lookups it needs are done here)."""
    loops = _all_loops(sch)
    if not loops:
        return None
    op = draw(st.sampled_from(["split", "split", "fuse", "reorder", "parallel", "vectorize", "unroll",
                               "vthread", "annotate"]))
    lp = draw(st.sampled_from(loops))
    if op == "split":
        f = draw(st.integers(1, 5))
        shape = draw(st.sampled_from(["inner", "outer", "three", "sampled"]))
        if shape == "inner":
            factors = [None, f]
        elif shape == "outer":
            factors = [f, None]
        elif shape == "three":
            factors = [None, f, draw(st.integers(1, 3))]
        else:
            try:
                factors = sch.sample_perfect_tile(lp, n=2, max_innermost_factor=4)
            except ScheduleError:  # a symbolic extent
                factors = [None, f]
        return lambda: sch.split(lp, factors)
    if op == "fuse":
        other = draw(st.sampled_from(loops))
        return lambda: sch.fuse(lp, other)
    if op == "reorder":
        picked = draw(st.permutations(loops))[:draw(st.integers(2, 3))]
        return lambda: sch.reorder(*picked)
    if op == "parallel":
        return lambda: sch.parallel(lp)
    if op == "vectorize":
        return lambda: sch.vectorize(lp)
    if op == "unroll":
        return lambda: sch.unroll(lp)
    if op == "vthread":
        return lambda: sch.bind(lp, "vthread")
    step = draw(st.sampled_from([0, 4, 16]))
    return lambda: sch.annotate(lp, "pragma_auto_unroll_max_step", step)


def _run_interp(func, ins, out_shapes):
    outs = [np.full(s, np.nan, "float32") for s in out_shapes]
    interp(func, [x.copy() for x in ins] + outs)
    return outs


@st.composite
def scheduled(draw):
    func, in_shapes, out_shapes, ref, extra = _program(draw)
    sch = schedule(func, seed=draw(st.integers(0, 1000)))
    for _ in range(draw(st.integers(0, 7))):
        action = _choose(draw, sch)
        if action is None:
            break
        before_func, before_trace = sch.mod["main"], str(sch.trace)
        try:
            action()
        except ScheduleError:
            assert sch.mod["main"] is before_func and str(sch.trace) == before_trace
    return sch, func, in_shapes, out_shapes, ref, extra


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheduled(), st.integers(0, 2 ** 16))
def test_random_schedules_keep_results(case, seed):
    sch, func, in_shapes, out_shapes, ref, extra = case
    rng = np.random.default_rng(seed)
    ins = [rng.uniform(-1, 1, s).astype("float32") for s in in_shapes]
    want = ref(*ins)
    for f in (sch.mod["main"], tessera.lower(sch)):
        got = _run_interp(f, ins, out_shapes)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    fresh = tir.Schedule(func)
    Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), fresh)
    assert structural_equal(fresh.mod, sch.mod)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheduled(), st.integers(0, 2 ** 16))
def test_random_schedules_compile_and_match_numpy(case, seed):
    sch, func, in_shapes, out_shapes, ref, extra = case
    rng = np.random.default_rng(seed)
    ins = [rng.uniform(-1, 1, s).astype("float32") for s in in_shapes]
    outs = [np.full(s, np.nan, "float32") for s in out_shapes]
    tessera.build(sch)(*ins, *outs)
    for g, w in zip(outs, ref(*ins)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
