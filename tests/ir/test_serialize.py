"""IR to JSON and back (tessera.ir.serialize): the round trip of every kind of program is the same
program (structural_equal, same structural_hash, shared objects stay shared, it still builds and
computes the same), and malformed documents are refused with a TesseraError."""
import json
import math

import numpy as np
import pytest

import tessera
import tessera.backend
from tessera import ir, te, tir
from tessera.errors import TesseraError
from tessera.ir import (
    from_json,
    load_json,
    save_json,
    structural_equal,
    structural_hash,
    to_json,
)
from tessera.target import Target
from tessera.tir.schedule.examples.conv2d import conv2d_program, schedule_conv2d
from tessera.tir.schedule.examples.gemm import (
    gemm_program,
    plain_gemm_program,
    schedule_gemm,
)
from tessera.tir.transform import lower

HAS_AVX2 = Target("c").has_feature("avx2") and Target("c").has_feature("fma")


def roundtrip(node, free_vars=False):
    """node through to_json, JSON text and from_json; checked equal and hashed alike. free_vars: node
    refers to variables or buffers it does not define (equal up to their renaming)."""
    text = json.dumps(to_json(node), allow_nan=False)      # strict JSON: no NaN literals
    back = from_json(json.loads(text))
    assert type(back) is type(node)
    assert structural_equal(node, back, map_free_vars=free_vars), type(node).__name__
    assert structural_hash(node) == structural_hash(back)
    assert back.script() == node.script()
    return back


def _gemm(n=None, dtype="float32"):
    M = n if n is not None else 16
    A = te.placeholder((M, 8), name="A", dtype=dtype)
    B = te.placeholder((8, 12), name="B", dtype=dtype)
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((M, 12), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def _argmax():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return ir.Select(keep, x[0], y[0]), ir.Select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


def _programs():
    out = {"gemm": _gemm(), "gemm_symbolic": _gemm(te.var("n"))}
    for dt in ("float16", "bfloat16", "float64", "int8", "uint8", "int16", "int64", "uint32"):
        out[f"gemm_{dt}"] = _gemm(dtype=dt)
    # elementwise math, select, casts, bools, float constants that are not exactly representable
    n = te.size_var("n")
    X = te.placeholder((n, 5), name="X")
    Y = te.compute((n, 5), lambda i, j: te.if_then_else(X[i, j] > 0.1, te.exp(X[i, j]) * 0.3,
                                                        te.sigmoid(X[i, j]) - 1e-7), name="Y")
    M = te.compute((n, 5), lambda i, j: (X[i, j] > 0).astype("bool") & (Y[i, j] < 2.5), name="M")
    out["elementwise"] = te.create_prim_func([X, Y, M])
    # max reduction with a condition and an integer index computation
    Z = te.placeholder((6, 10), name="Z", dtype="int32")
    r = te.reduce_axis((0, 10), name="r")
    R = te.compute((6,), lambda i: te.max(Z[i, r] * 3 // 2 % 7, axis=r, where=r > 2), name="R")
    out["max_where"] = te.create_prim_func([Z, R])
    # a multi-output reduction (argmax: a CommReducer with tuples, LetStmts in the block)
    m, k = te.var("m"), te.var("k")
    idx = te.placeholder((m, k), name="idx", dtype="int32")
    val = te.placeholder((m, k), name="val", dtype="float32")
    rk = te.reduce_axis((0, k), name="rk")
    T0, T1 = te.compute((m,), lambda i: _argmax()((idx[i, rk], val[i, rk]), axis=rk), name="T")
    out["argmax"] = te.create_prim_func([idx, val, T0, T1])
    return out


PROGRAMS = _programs()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_te_programs_round_trip(name):
    roundtrip(PROGRAMS[name])


def test_reduce_expression_and_comm_reducer_round_trip():
    m = te.var("m")
    idx = te.placeholder((m, 4), name="idx", dtype="int32")
    val = te.placeholder((m, 4), name="val", dtype="float32")
    rk = te.reduce_axis((0, 4), name="rk")
    T0, _ = te.compute((m,), lambda i: _argmax()((idx[i, rk], val[i, rk]), axis=rk), name="T")
    body = T0.op.body[0]
    assert isinstance(body, ir.Reduce)
    back = roundtrip(body, free_vars=True)
    # the combiner's formal variables stay the objects its result refers to
    comb = back.combiner
    assert ir.uses_var(comb.result[0], comb.lhs[0]) or ir.uses_var(comb.result[0], comb.rhs[0])


def test_shared_objects_stay_shared():
    func = PROGRAMS["gemm_symbolic"]
    back = roundtrip(func)
    A, _, C = back.params
    n = A.shape[0]
    assert isinstance(n, ir.Var) and C.shape[0] is n            # one Var for both buffers' extent
    stores = []
    ir.post_order_visit(back.body, lambda x: stores.append(x) if isinstance(x, ir.BufferStore) else None)
    assert stores and all(s.buffer is C for s in stores)          # the param buffer itself is stored to
    blocks = []
    ir.post_order_visit(back.body, lambda x: blocks.append(x) if isinstance(x, ir.Block) and x.iter_vars else None)
    (blk,) = blocks
    vi = blk.iter_vars[0].var
    assert any(ir.uses_var(i, vi) for s in stores for i in s.indices)


def test_scheduled_and_annotated_function_round_trips():
    func = _gemm(te.var("n"))
    sch = tir.Schedule(func)
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    io, ii = sch.split(i, factors=[None, 4])
    sch.reorder(io, j, k, ii)
    sch.parallel(io)
    sch.vectorize(ii)
    sch.annotate(blk, "meta_schedule.tiling_structure", "SSRSRS")
    sch.annotate(j, "pragma_auto_unroll_max_step", 16)
    sch.annotate(j, "weights", [0.5, 1.25, True])
    sch.annotate(blk, "huge", 2 ** 40)
    back = roundtrip(sch.mod["main"])
    loops = []
    ir.post_order_visit(back.body, lambda x: loops.append(x) if isinstance(x, ir.For) else None)
    ann = {key: v for lp in loops for key, v in lp.annotations.items()}
    assert ann["pragma_auto_unroll_max_step"].value == 16
    w = ann["weights"]
    assert isinstance(w, tuple) and w[0].value == 0.5 and w[2].dtype == "bool"
    # the round-tripped function schedules further and replays the same trace
    sch2 = tir.Schedule(back)
    tir.schedule.Trace.apply_json_to_schedule(tir.Schedule(func).trace.as_json(), sch2)


@pytest.mark.skipif(not HAS_AVX2, reason="the example schedules use the AVX2 micro-kernels")
def test_tensorized_examples_round_trip_and_build_the_same():
    sch = schedule_gemm(gemm_program(32, 32, 32, nr=16), mr=4, nr=16, kc=16, mc=8)
    back = roundtrip(sch.mod["main"])
    src = tessera.backend.generate(sch, "c").text
    assert tessera.backend.generate(back, "c").text == src     # the same C, intrinsic source included
    conv = schedule_conv2d(conv2d_program(1, 8, 6, 8, 16, 3, 3, pad=1, ocb=16), owb=4, ocb=16)
    roundtrip(conv.mod["main"])
    plain = schedule_gemm(plain_gemm_program(32, 32, 32), mr=4, nr=16, kc=16, mc=8, pack="cache_read")
    roundtrip(plain.mod["main"])


def test_lowered_function_round_trips_and_computes_the_same():
    func = PROGRAMS["gemm_symbolic"]
    low = lower(func, Target("c"))
    assert "flat_params" in low.attrs      # flat buffers are free in the body: equal up to renaming
    back = roundtrip(low, free_vars=True)
    lib = tessera.build(back, target="c")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 8), dtype=np.float32), rng.standard_normal((8, 12), dtype=np.float32)
    c = np.zeros((5, 12), np.float32)
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_special_floats_and_irmodule():
    x = te.placeholder((4,), name="x")
    y = te.compute((4,), lambda i: te.if_then_else(x[i] > 0, tir.const(math.inf, "float32"),
                                                   tir.const(-0.0, "float32")) + tir.const(math.nan, "float32"),
                   name="y")
    func = te.create_prim_func([x, y])
    back = roundtrip(func)
    assert "NaN" not in json.dumps(to_json(func))
    mod = ir.IRModule({"main": func, "other": PROGRAMS["gemm"]})
    back = roundtrip(mod)
    assert sorted(back.functions) == ["main", "other"]
    assert structural_equal(load_json(save_json(mod)), mod)


def test_documents_are_deterministic():
    a = save_json(PROGRAMS["argmax"])
    assert a == save_json(PROGRAMS["argmax"])
    assert save_json(from_json(json.loads(a))) == a


def test_refusals():
    doc = to_json(PROGRAMS["gemm"])
    with pytest.raises(TesseraError, match="version 99 is not supported"):
        from_json(dict(doc, version=99))
    with pytest.raises(TesseraError, match="expected a 'tessera.ir' document"):
        from_json({"nodes": []})
    with pytest.raises(TesseraError, match="expected a 'tessera.ir' document"):
        from_json([1, 2])
    bad = json.loads(json.dumps(doc))
    bad["types"][0][0] = "NoSuchNode"
    with pytest.raises(TesseraError, match="unknown node type 'NoSuchNode'"):
        from_json(bad)
    bad = json.loads(json.dumps(doc))
    t = next(t for t in bad["types"] if t[0] == "Var")
    t[1] = ["name"]
    with pytest.raises(TesseraError, match=r"node type Var was written with fields \['name'\]"):
        from_json(bad)
    bad = json.loads(json.dumps(doc))
    bad["nodes"][0] = [bad["nodes"][0][0]] + [{"@": len(bad["nodes"])}] * (len(bad["nodes"][0]) - 1)
    with pytest.raises(TesseraError, match="not an earlier node"):
        from_json(bad)
    bad = json.loads(json.dumps(doc))
    bad["nodes"] = bad["nodes"][:-1]
    with pytest.raises(TesseraError, match="root .* is not a node"):
        from_json(bad)
    with pytest.raises(TesseraError, match="malformed document"):
        from_json(dict(doc, types=[["Var"]]))
    with pytest.raises(TesseraError, match="serializes IR nodes"):
        to_json("not a node")
    odd = PROGRAMS["gemm"].with_attr("weird", object())
    with pytest.raises(TesseraError, match="field 'attrs' of a PrimFunc holds a builtins.object"):
        to_json(odd)
    with pytest.raises(TesseraError, match="not JSON text"):
        load_json("{")
