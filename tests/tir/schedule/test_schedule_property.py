"""Property: random sequences of primitives of every family, applied to random TE programs, never
change what the program computes.

Programs: elementwise chains, broadcasts, reductions (sum/max, with a `where`), matmul with an
epilogue, conv2d with padding, pooling. Primitives: split, fuse, reorder, parallel, vectorize,
unroll, compute_at, reverse_compute_at, compute_inline, reverse_compute_inline, cache_read,
cache_write, set_scope, storage_align, transform_layout, decompose_reduction, rfactor, and
sample_compute_location-driven compute_at. Each attempt either succeeds or raises ScheduleError
leaving IR and trace unchanged; anything else fails the test. The scheduled program is run by the
reference interpreter before and after lowering and compiled to C, and compared with numpy; the
trace must replay through JSON to the same IR.

The default run draws a modest number of schedules; `-m slow` runs many more. The number of
schedules and of primitives applied is printed (pytest -s)."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera
from tessera import te, tir
from tessera.errors import ScheduleError
from tessera.ir import structural_equal
from tessera.tir.schedule import Trace

from interp_lowered import run as interp

STATS = {"schedules": 0, "attempted": 0, "applied": 0}


# ---------------------------------------------------------------------------------------------
# programs: (PrimFunc, input shapes, output shapes, numpy reference)
# ---------------------------------------------------------------------------------------------
def _elementwise_chain(draw):
    n, m = draw(st.integers(1, 7)), draw(st.integers(1, 9))
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((n, m), lambda i, j: te.max(C[i, j], 0.5) * B[i, j], name="D")
    return te.create_prim_func([A, D]), [(n, m)], [(n, m)], lambda a: [np.maximum(a * 2 + 1, 0.5) * (a * 2)]


def _broadcast(draw):
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 9))
    A = te.placeholder((n, m), name="A")
    bias = te.placeholder((m,), name="bias")
    B = te.compute((n, m), lambda i, j: A[i, j] + bias[j], name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] * B[i, j], name="C")
    return te.create_prim_func([A, bias, C]), [(n, m), (m,)], [(n, m)], lambda a, b: [(a + b) ** 2]


def _reduction(draw):
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 9))
    kind = draw(st.sampled_from(["sum", "max", "where"]))
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis((0, m), name="k")
    if kind == "sum":
        C = te.compute((n,), lambda i: te.sum(B[i, k], axis=k), name="C")
        red = lambda b: b.sum(1)  # noqa: E731
    elif kind == "max":
        C = te.compute((n,), lambda i: te.max(B[i, k], axis=k), name="C")
        red = lambda b: b.max(1)  # noqa: E731
    else:
        C = te.compute((n,), lambda i: te.sum(B[i, k], axis=k, where=k % 2 == 0), name="C")
        red = lambda b: b[:, ::2].sum(1)  # noqa: E731
    D = te.compute((n,), lambda i: C[i] + 1.0, name="D")
    return te.create_prim_func([A, D]), [(n, m)], [(n,)], lambda a: [red(a * 2) + 1]


def _matmul(draw):
    n, m, K = draw(st.integers(1, 8)), draw(st.integers(1, 8)), draw(st.integers(1, 8))
    A = te.placeholder((n, K), name="A")
    B = te.placeholder((K, m), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((n, m), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return te.create_prim_func([A, B, D]), [(n, K), (K, m)], [(n, m)], lambda a, b: [np.maximum(a @ b, 0)]


def _pad(X, c, n, p, name="pad"):
    return te.compute((1, c, n + 2 * p, n + 2 * p), lambda b, ch, h, w: te.if_then_else(
        te.all(h >= p, h < n + p, w >= p, w < n + p), X[b, ch, h - p, w - p], 0.0), name=name)


def _conv2d(draw):
    n, ci, co = draw(st.integers(3, 6)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    A = te.placeholder((1, ci, n, n), name="A")
    W = te.placeholder((co, ci, 3, 3), name="W")
    P = _pad(A, ci, n, 1)
    rc, ry, rx = te.reduce_axis((0, ci), name="rc"), te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    C = te.compute((1, co, n, n), lambda b, f, y, x: te.sum(P[b, rc, y + ry, x + rx] * W[f, rc, ry, rx],
                                                             axis=[rc, ry, rx]), name="conv")
    R = te.compute((1, co, n, n), lambda b, f, y, x: te.max(C[b, f, y, x], 0.0), name="relu")

    def ref(a, w):
        p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((1, co, n, n), "float32")
        for y in range(n):
            for x in range(n):
                out[0, :, y, x] = np.einsum("cij,fcij->f", p[0, :, y:y + 3, x:x + 3], w)
        return [np.maximum(out, 0)]

    return te.create_prim_func([A, W, R]), [(1, ci, n, n), (co, ci, 3, 3)], [(1, co, n, n)], ref


def _pool(draw):
    n, c = draw(st.integers(2, 7)), draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["max", "avg"]))
    A = te.placeholder((1, c, n, n), name="A")
    P = _pad(A, c, n, 1)
    o = (n - 1) // 2 + 1  # 3x3 window, stride 2, pad 1
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    if kind == "max":
        Q = te.compute((1, c, o, o), lambda b, ch, y, x: te.max(P[b, ch, y * 2 + ry, x * 2 + rx], axis=[ry, rx]),
                       name="pool")
        R = te.compute((1, c, o, o), lambda b, ch, y, x: Q[b, ch, y, x] * 1.0, name="out")
    else:
        Q = te.compute((1, c, o, o), lambda b, ch, y, x: te.sum(P[b, ch, y * 2 + ry, x * 2 + rx], axis=[ry, rx]),
                       name="pool")
        R = te.compute((1, c, o, o), lambda b, ch, y, x: Q[b, ch, y, x] / 9.0, name="out")

    def ref(a):
        p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((1, c, o, o), "float32")
        for y in range(o):
            for x in range(o):
                win = p[0, :, 2 * y:2 * y + 3, 2 * x:2 * x + 3]
                out[0, :, y, x] = win.max((1, 2)) if kind == "max" else win.sum((1, 2)) / 9.0
        return [out]

    return te.create_prim_func([A, R]), [(1, c, n, n)], [(1, c, o, o)], ref


PROGRAMS = {"chain": _elementwise_chain, "broadcast": _broadcast, "reduction": _reduction, "matmul": _matmul,
            "conv2d": _conv2d, "pool": _pool}


# ---------------------------------------------------------------------------------------------
# random primitive calls
# ---------------------------------------------------------------------------------------------
def _blocks(sch):
    idx = sch.state.index("main")
    return [n for n in idx.blocks if n != "root"]


OPS = ["split", "split", "fuse", "reorder", "parallel", "vectorize", "unroll", "compute_at", "compute_at",
       "reverse_compute_at", "reverse_compute_at", "compute_inline", "compute_inline", "reverse_compute_inline",
       "cache_read", "cache_write", "set_scope", "storage_align", "transform_layout", "decompose_reduction",
       "rfactor", "sample_compute_at"]


def _choose(draw, sch):
    """A random primitive call on sch as (name, closure)."""
    names = _blocks(sch)
    loops = [lp for lp in _loops_of(sch)]
    op = draw(st.sampled_from(OPS))
    if not names:
        return op, None
    bname = draw(st.sampled_from(names))
    get = lambda: sch.get_block(bname)  # noqa: E731
    lp = draw(st.sampled_from(loops)) if loops else None
    if op == "split":
        if lp is None:
            return op, None
        f = draw(st.integers(1, 5))
        factors = draw(st.sampled_from([[None, f], [f, None], [None, f, draw(st.integers(1, 3))]]))
        return op, lambda: sch.split(lp(), factors)
    if op == "fuse":
        other = draw(st.sampled_from(loops)) if loops else None
        return op, (lambda: sch.fuse(lp(), other())) if lp else None
    if op == "reorder":
        if len(loops) < 2:
            return op, None
        picked = draw(st.permutations(loops))[:draw(st.integers(2, 3))]
        return op, lambda: sch.reorder(*[p() for p in picked])
    if op in ("parallel", "vectorize", "unroll"):
        return op, (lambda: getattr(sch, op)(lp())) if lp else None
    if op in ("compute_at", "reverse_compute_at", "decompose_reduction", "rfactor"):
        # mostly a loop of a related block: a consumer / producer / the block itself
        related = _related_loops(sch, bname, op)
        if related and draw(st.integers(0, 3)) > 0:
            lp = draw(st.sampled_from(related))
    if op in ("compute_at", "reverse_compute_at"):
        if lp is None:
            return op, None
        keep = draw(st.booleans())
        index = draw(st.sampled_from([-1, -1, -2]))
        return op, lambda: getattr(sch, op)(get(), lp(), preserve_unit_loops=keep, index=index)
    if op in ("compute_inline", "reverse_compute_inline"):
        return op, lambda: getattr(sch, op)(get())
    if op == "cache_read":
        k = draw(st.integers(0, 2))
        scope = draw(st.sampled_from(["global", "local", "shared"]))
        return op, lambda: sch.cache_read(get(), k, scope)
    if op == "cache_write":
        scope = draw(st.sampled_from(["global", "local"]))
        return op, lambda: sch.cache_write(get(), 0, scope)
    if op == "set_scope":
        scope = draw(st.sampled_from(["global", "local", "shared"]))
        return op, lambda: sch.set_scope(get(), 0, scope)
    if op == "storage_align":
        axis, factor = draw(st.integers(-2, 3)), draw(st.integers(1, 8))
        offset = draw(st.integers(0, factor - 1))
        return op, lambda: sch.storage_align(get(), 0, axis, factor, offset)
    if op == "transform_layout":
        which = draw(st.sampled_from([("write", 0), ("read", 0), ("read", 1)]))
        c = draw(st.integers(1, 4))
        kind = draw(st.sampled_from(["swap", "split", "reverse"]))
        pad = draw(st.sampled_from([None, None, 0.0]))

        def go():
            # intermediate buffers only: a parameter's new layout would need new inputs
            blk = get()
            regions = sch.get(blk).writes if which[0] == "write" else sch.get(blk).reads
            if which[1] >= len(regions) or any(p is regions[which[1]].buffer for p in sch.mod["main"].params):
                return
            nd = len(regions[which[1]].buffer.shape)
            if kind == "swap" and nd >= 2:
                fn = lambda *ix: (ix[-1],) + tuple(ix[1:-1]) + (ix[0],)  # noqa: E731
            elif kind == "split":
                fn = lambda *ix: (ix[0] // c,) + tuple(ix[1:]) + (ix[0] % c,)  # noqa: E731
            else:
                fn = lambda *ix: tuple(reversed(ix))  # noqa: E731
            sch.transform_layout(blk, which, fn, pad_value=pad)

        return op, go
    if op == "decompose_reduction":
        return op, (lambda: sch.decompose_reduction(get(), lp())) if lp else None
    if op == "rfactor":
        axis = draw(st.integers(-1, 1))
        return op, (lambda: sch.rfactor(lp(), axis)) if lp else None
    # sample_compute_location, then compute_at / inline there
    def sampled():
        blk = get()
        loc = sch.sample_compute_location(blk)
        mark = sch.get(loc)
        from tessera.tir.schedule import INLINE_MARK, ROOT_MARK

        if mark is INLINE_MARK:
            sch.compute_inline(blk)
        elif mark is not ROOT_MARK:
            sch.compute_at(blk, loc)

    return op, sampled


def _related_loops(sch, name, op):
    from tessera.tir.schedule.analysis import consumers, producers

    idx = sch.state.index("main")
    realize = idx.blocks[name]
    if op == "compute_at":
        rel = consumers(idx, realize)
    elif op == "reverse_compute_at":
        rel = producers(idx, realize)
    else:
        rel = [realize]
    out = []
    for r in rel:
        rname = r.block.name_hint
        for k in range(len(idx.loops_above(r))):
            out.append(lambda rname=rname, k=k: sch.get_loops(sch.get_block(rname))[k])
    return out


def _loops_of(sch):
    """Closures giving a handle of each current loop (through get_block/get_loops, so the trace
    records how it was found)."""
    idx = sch.state.index("main")
    out = []
    for name, realize in idx.blocks.items():
        if name == "root":
            continue
        for k in range(len(idx.loops_above(realize))):
            out.append(lambda name=name, k=k: sch.get_loops(sch.get_block(name))[k])
    return out


def _effects(sch) -> list:
    """The instructions that changed the IR (lookups done to find handles are pure)."""
    return [id(i) for i in sch.trace.insts if not i.kind.pure]


@st.composite
def scheduled(draw, max_steps=8):
    kind = draw(st.sampled_from(sorted(PROGRAMS)))
    func, in_shapes, out_shapes, ref = PROGRAMS[kind](draw)
    sch = tir.Schedule(func, seed=draw(st.integers(0, 1000)), debug_mask="all")
    for _ in range(draw(st.integers(1, max_steps))):
        op, action = _choose(draw, sch)
        if action is None:
            continue
        before_func, before_trace = sch.mod["main"], _effects(sch)
        STATS["attempted"] += 1
        try:
            action()
            STATS["applied"] += 1
        except ScheduleError:
            assert sch.mod["main"] is before_func, f"{op} failed but changed the IR"
            assert _effects(sch) == before_trace, f"{op} failed but changed the trace"
    return kind, sch, func, in_shapes, out_shapes, ref


def _run_interp(func, ins, out_shapes):
    outs = [np.full(s, np.nan, "float32") for s in out_shapes]
    interp(func, [x.copy() for x in ins] + outs)
    return outs


def _check(case, seed, compile_c=True):
    kind, sch, func, in_shapes, out_shapes, ref = case
    STATS["schedules"] += 1
    rng = np.random.default_rng(seed)
    ins = [rng.uniform(-1, 1, s).astype("float32") for s in in_shapes]
    want = ref(*[x.copy() for x in ins])
    lowered = tessera.lower(sch)
    for f in (sch.mod["main"], lowered):
        got = _run_interp(f, ins, out_shapes)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{kind}\n{sch.trace}")
    if compile_c:
        outs = [np.full(s, np.nan, "float32") for s in out_shapes]
        tessera.build(sch)(*[x.copy() for x in ins], *outs)
        for g, w in zip(outs, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{kind} (compiled)\n{sch.trace}")
    fresh = tir.Schedule(func)
    Trace.apply_json_to_schedule(json.loads(json.dumps(sch.trace.as_json())), fresh)
    assert structural_equal(fresh.mod, sch.mod)


def _check_with_trace(case, seed):
    try:
        _check(case, seed)
    except Exception as e:
        raise AssertionError(f"{case[0]} program, schedule:\n{case[1].trace}\n{case[1].mod.script()}") from e


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scheduled(), st.integers(0, 2 ** 16))
def test_random_schedules_of_every_family_keep_results(case, seed):
    _check_with_trace(case, seed)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scheduled(max_steps=14), st.integers(0, 2 ** 16))
def test_many_random_schedules_of_every_family_keep_results(case, seed):
    _check_with_trace(case, seed)


def teardown_module(module):
    print(f"\nproperty test: {STATS['schedules']} random schedules checked, {STATS['attempted']} primitive calls "
          f"drawn, {STATS['applied']} applied")
