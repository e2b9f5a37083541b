"""lookup_table: an elementwise chain from one 8-bit tensor to an 8-bit tensor as a 256-entry table
lookup (qnn.lookup), and the qnn.lookup op itself."""
import math

import numpy as np
import pytest

import tessera
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.graph.passes import lookup_table, optimized_graph

RNG = np.random.default_rng(11)


def f32(v):
    return np.array(v, "float32")


def gelu_graph(dtype="uint8", shape=(4, 96), leak=False, channel_scale=False):
    """x (8-bit) -> dequantize -> x * 0.5 * (1 + erf(x / sqrt 2)) with a quantize after erf and
    after each multiply, as a QDQ model quantized by ONNX Runtime has it -> 8-bit."""
    zp = 128 if dtype == "uint8" else 0
    b = Builder("gelu")
    x = b.input("x", shape, dtype)
    z = b.const(np.array(zp, dtype), "zp")
    xf = b.op("qnn.dequantize", x, b.const(f32(0.05), "s_in"), z, name="dq")
    e = b.op("erf", b.op("divide", xf, b.const(f32(math.sqrt(2.0)), "sqrt2"), name="div"), name="erf")
    eq = b.op("qnn.quantize", e, b.const(f32(2.0 / 255), "s_erf"), z, out_dtype=dtype, name="q_erf")
    ef = b.op("qnn.dequantize", eq, b.const(f32(2.0 / 255), "s_erf2"), z, name="dq_erf")
    one = b.const(np.ones(shape[-1], "float32") if channel_scale else f32(1.0), "one")
    m = b.op("multiply", xf, b.op("add", ef, one, name="add1"), name="mul")
    mq = b.op("qnn.quantize", b.op("multiply", m, b.const(f32(0.5), "half"), name="mul_half"),
              b.const(f32(0.04), "s_out"), z, out_dtype=dtype, name="q_out")
    b.output(mq, xf) if leak else b.output(mq)
    return b.finish()


def reference_gelu(xv, dtype):
    """The chain in numpy, float32 like the kernels (erf in float64, rounded: within a step)."""
    zp = 128 if dtype == "uint8" else 0
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    xf = (xv.astype(np.float32) - zp) * np.float32(0.05)
    erf = np.vectorize(math.erf)(xf.astype(np.float64) / math.sqrt(2.0)).astype(np.float32)
    eq = np.clip(np.rint(erf / np.float32(2.0 / 255)) + zp, lo, hi)
    ef = (eq.astype(np.float32) - zp) * np.float32(2.0 / 255)
    y = xf * (ef + np.float32(1.0)) * np.float32(0.5)
    return np.clip(np.rint(y / np.float32(0.04)) + zp, lo, hi).astype(dtype)


def all_values(dtype, shape):
    lo = -128 if dtype == "int8" else 0
    v = np.resize(np.arange(lo, lo + 256), int(np.prod(shape)))
    return RNG.permutation(v).reshape(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_gelu_chain_becomes_one_lookup_with_the_chains_own_results(dtype):
    g = gelu_graph(dtype)
    og = optimized_graph(g, opt_level=3)
    assert "qnn.lookup" in og.op_counts() or any("qnn.lookup" in f.ops for f in og.functions)
    plain = optimized_graph(g, opt_level=3, disabled_passes=["fuse_ops"])
    assert [n.op for n in plain.nodes] == ["qnn.lookup"]
    xv = all_values(dtype, (4, 96))     # every 8-bit value at least once
    got = tessera.compile(g)(xv)
    chain = tessera.compile(g, disabled_passes=["lookup_table"])(xv)
    np.testing.assert_array_equal(got, chain)   # the table is what the chain's kernels compute
    ref = reference_gelu(xv, dtype)
    assert np.abs(got.astype(np.int32) - ref.astype(np.int32)).max() <= 1


def test_chain_with_a_middle_value_read_elsewhere_is_left_as_it_is():
    g = gelu_graph(leak=True)          # the dequantized input is also a graph output
    out = lookup_table(optimized_graph(g, opt_level=1))
    assert "qnn.lookup" not in out.op_counts()
    assert "erf" in out.op_counts()


def test_chain_with_a_per_channel_constant_is_not_a_lookup():
    # the map then depends on the element's position, not on its value alone
    g = gelu_graph(channel_scale=True)
    out = lookup_table(optimized_graph(g, opt_level=1))
    assert "qnn.lookup" not in out.op_counts()


def test_short_chain_and_float_result_stay():
    b = Builder("short")
    x = b.input("x", (8,), "uint8")
    z = b.const(np.array(3, "uint8"), "zp")
    xf = b.op("qnn.dequantize", x, b.const(f32(0.1), "s"), z, name="dq")
    b.output(b.op("qnn.quantize", xf, b.const(f32(0.2), "s2"), z, out_dtype="uint8", name="q"),  # 2 nodes
             b.op("sigmoid", b.op("exp", xf, name="e"), name="sig"))                              # float out
    out = lookup_table(b.finish())
    assert "qnn.lookup" not in out.op_counts()


def test_lookup_op_indexes_by_the_8bit_value():
    table = RNG.integers(-128, 128, 256).astype("int8")
    for dtype, lo in (("uint8", 0), ("int8", -128)):
        b = Builder("look")
        x = b.input("x", (3, 50), dtype)
        b.output(b.op("qnn.lookup", x, b.const(table, "table")))
        xv = all_values(dtype, (3, 50))
        got = tessera.compile(b.finish(), opt_level=0)(xv)
        np.testing.assert_array_equal(got, table[xv.astype(np.int32) - lo])


def test_lookup_op_refuses_a_table_without_256_entries_and_float_data():
    b = Builder("bad")
    x = b.input("x", (4,), "uint8")
    with pytest.raises(TesseraError, match=r"table must have shape \(256,\)"):
        b.op("qnn.lookup", x, b.const(np.zeros(255, "uint8"), "table"))
    y = b.input("y", (4,), "float32")
    with pytest.raises(TesseraError, match="data"):
        b.op("qnn.lookup", y, b.const(np.zeros(256, "uint8"), "table2"))


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_lookup_after_a_blocked_int8_conv_keeps_its_table(act, isa_target):
    # QDQ conv -> hard-swish between QDQ pairs (PP-LCNet's activation): on x86 alter_layout blocks the
    # conv's output; the lookup reads it blocked and its 256-entry table stays as it is
    pytest.importorskip("onnxruntime")
    from qdq_models import QDQ, ort_run, steps

    m = QDQ(act)
    x = m.q("x", -2.0, 3.0)
    w, ws = m.weight((RNG.standard_normal((16, 8, 3, 3)) * 0.3).astype("float32"))
    y = m.q(m.node("Conv", [x, w, m.bias(RNG.standard_normal(16).astype("float32"), m.scales[x], ws)], "conv",
                   pads=[1, 1, 1, 1]), -4.0, 6.0)
    out = m.q(m.node("HardSwish", [y], "hswish"), -0.5, 6.0)
    model = m.model([("x", [1, 8, 10, 10])], out, [1, 16, 10, 10])
    feeds = {"x": (RNG.standard_normal((1, 8, 10, 10)) * 1.5).astype("float32")}
    g, p = tessera.frontend.from_onnx(model)
    target = f"{isa_target} -num-threads=2"
    exe = tessera.compile(g, p, target=target)
    ops = {b.op for n in exe.graph.nodes for b in (n.attrs["function"].body.nodes if n.op == "fused" else [n])}
    assert "qnn.lookup" in ops and "hard_swish" not in ops and "nn.hard_swish" not in ops
    (got,) = exe.run(feeds)
    (chain,) = tessera.compile(g, p, target=target, disabled_passes=["lookup_table"]).run(feeds)
    np.testing.assert_array_equal(got, chain)
    assert steps(got, ort_run(model, feeds, optimized=False)[0], m.scales[out]).max() <= 1


def test_a_chain_whose_table_cannot_be_computed_is_left_and_the_others_still_become_lookups(monkeypatch):
    import sys

    lt = sys.modules["tessera.graph.passes.lookup_table"]
    b = Builder("two")
    z = b.const(np.array(128, "uint8"), "zp")
    outs = []
    for name, fns in (("a", ("exp", "sigmoid")), ("b", ("tanh", "erf"))):
        x = b.input(name, (4, 9), "uint8")
        v = b.op("qnn.dequantize", x, b.const(f32(0.05), f"s_{name}"), z, name=f"dq_{name}")
        for fn in fns:
            v = b.op(fn, v, name=f"{fn}_{name}")
        outs.append(b.op("qnn.quantize", v, b.const(f32(0.01), f"s2_{name}"), z, out_dtype="uint8", name=f"q_{name}"))
    b.output(*outs)
    g = b.finish()
    real = lt._tables

    def refuses_erf(chains, constants, target):
        if any(n.op == "erf" for _, _, nodes in chains for n in nodes):
            raise TesseraError("erf refuses the vector")
        return real(chains, constants, target)

    monkeypatch.setattr(lt, "_tables", refuses_erf)
    out = lookup_table(g)
    ops = out.op_counts()
    assert ops.get("qnn.lookup") == 1 and "erf" in ops and "sigmoid" not in ops
    feeds = {"a": all_values("uint8", (4, 9)), "b": all_values("uint8", (4, 9))}
    for got, want in zip(tessera.compile(out, opt_level=0).run(feeds), tessera.compile(g, opt_level=0).run(feeds)):
        np.testing.assert_array_equal(got, want)
