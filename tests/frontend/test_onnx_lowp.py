"""The low-precision ONNX types (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, float4 e2m1, int4/uint4,
int2/uint2) through Cast, CastLike, QuantizeLinear and DequantizeLinear: onnx's node test cases with
every input given at run time (as onnxruntime is fed), and models of our own against ONNX's reference
evaluator (saturate on and off, per-axis and blocked scales, packed int4 initializers), every output
compared bit for bit."""
import functools
import importlib.util
import pathlib
import re

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.frontend.onnx import from_onnx

_BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "onnx_conformance.py"
_spec = importlib.util.spec_from_file_location("tessera_onnx_conformance_lowp", _BENCH)
conformance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conformance)

_LOWP_NAME = r"(FLOAT8E4M3FNUZ|FLOAT8E4M3FN|FLOAT8E5M2FNUZ|FLOAT8E5M2|FLOAT4E2M1|U?INT4|U?INT2|e4m3fn|e5m2|float4e2m1|u?int4|u?int2)"
_CASES = re.compile(rf"^test_(cast|castlike|quantizelinear|dequantizelinear)_.*{_LOWP_NAME}")
# the default run: a sample, one case or two per type (the C conversions of every pair of types are
# tested bit for bit in tests/codegen/test_lowp_casts.py; the slow run takes every case)
_QUICK = re.compile(r"^test_(quantizelinear_(e4m3fn|int4|float4e2m1|uint2)|dequantizelinear_(e5m2|int2|uint4)|"
                    r"cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ|castlike_FLOAT_to_FLOAT8E5M2FNUZ)$")


@functools.cache
def _lowp_cases():
    """The cases (generating onnx's cases takes seconds: once a process)."""
    return [c for c in conformance.collect(None) if _CASES.search(c.name) and "e8m0" not in c.name]


def _same(got, want, what):
    """Equal dtype, shape and bits (any NaN matches any NaN: a NaN's sign is not kept)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind == "f" or got.dtype.name.startswith(("float", "bfloat")):
        g, w = got.astype(np.float64), want.astype(np.float64)
        ok = ((g == w) & (np.signbit(g) == np.signbit(w))) | (np.isnan(g) & np.isnan(w))
    else:
        ok = got.astype(np.int64) == want.astype(np.int64)
    assert ok.all(), f"{what}: {int((~ok).sum())} of {ok.size} differ: got {got[~ok][:5]!r}, want {want[~ok][:5]!r}"


def _run_case(case):
    """The case through tessera with every graph input fed at run time; outputs checked bit for bit."""
    model = case.model
    init = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in init]
    graph, params = from_onnx(model, specialize=False)        # nothing frozen, nothing deferred
    exe = tessera.compile(graph, params)
    for inputs, outputs in case.data_sets:
        feeds = {n: conformance._as_array(x, n) for n, x in zip(names, inputs)}
        got = exe.run(feeds)
        assert len(got) == len(outputs)
        for k, (g, w) in enumerate(zip(got, outputs)):
            _same(g, conformance._as_array(w, "expected"), f"{case.name} output {k}")


def test_the_lowp_node_cases_are_all_there():
    """onnx 1.23: 160 cases of these four ops in the nine types (tessera refused all of them before)."""
    cases = _lowp_cases()
    assert len(cases) >= 160
    assert len([c for c in cases if _QUICK.search(c.name)]) == 9


@pytest.mark.parametrize("case", [c for c in _lowp_cases() if _QUICK.search(c.name)], ids=lambda c: c.name)
def test_lowp_node_case_with_runtime_inputs(case):
    _run_case(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in _lowp_cases() if not _QUICK.search(c.name)], ids=lambda c: c.name)
def test_every_other_lowp_node_case_with_runtime_inputs(case):
    _run_case(case)


# ---------------------------------------------------------------------------------------------
# models of our own, against the reference evaluator
# ---------------------------------------------------------------------------------------------
def _model(op, inputs, inits=None, attrs=None, opset=25, out_type=None):
    inits = inits or {}
    node = helper.make_node(op, list(inputs) + list(inits), ["y"], **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()]
    out = helper.make_tensor_value_info("y", out_type, None) if out_type else helper.make_empty_tensor_value_info("y")
    g = helper.make_graph([node], "g", ins, [out], initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check_against_reference(m, feeds):
    want = ReferenceEvaluator(m).run(None, feeds)
    graph, params = from_onnx(m, specialize=False)
    got = tessera.compile(graph, params).run(feeds)
    assert len(got) == len(want)
    for g, w, o in zip(got, want, m.graph.output):
        _same(g, w, f"{m.graph.node[0].op_type} -> {o.name}")
    return got


def _quantize_dequantize(x, s, z, attrs, runtime_params=False):
    """A model y = QuantizeLinear(x, s, z), x2 = DequantizeLinear(y, s, z) with both outputs; s and z
    initializers, or runtime inputs with runtime_params."""
    names = ["x", "s", "z"]
    nodes = [helper.make_node("QuantizeLinear", names, ["y"], **attrs),
             helper.make_node("DequantizeLinear", ["y", "s", "z"], ["x2"],
                              **{k: v for k, v in attrs.items() if k != "saturate"})]
    vals = {"x": x, "s": s, "z": z}
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(vals[n].dtype), vals[n].shape)
           for n in (names if runtime_params else ["x"])]
    inits = [] if runtime_params else [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z")]
    outs = [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(z.dtype), x.shape),
            helper.make_tensor_value_info("x2", TensorProto.FLOAT, x.shape)]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs, initializer=inits),
                          opset_imports=[helper.make_opsetid("", 25)])
    feeds = {n: vals[n] for n in (names if runtime_params else ["x"])}
    return _check_against_reference(m, feeds)


def _probe(shape, scale=300.0, seed=0, nonfinite=True):
    """Random values with NaN and +-inf (unless nonfinite=False), +-1e6 and -0.0 in front."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    special = ([np.nan, np.inf, -np.inf] if nonfinite else []) + [1e6, -1e6, -0.0]
    x.reshape(-1)[:len(special)] = special
    return x


@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_float8_saturates_only_when_asked(saturate):
    """saturate=1: beyond the range (inf too) -> the largest value, NaN stays NaN; saturate=0: overflow
    becomes inf (e5m2) or NaN (the others). One Cast per float8 type."""
    x = _probe((4, 50), scale=3e4)
    types = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ]
    nodes = [helper.make_node("Cast", ["x"], [f"y{k}"], to=t, saturate=saturate) for k, t in enumerate(types)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info(f"y{k}", t, x.shape) for k, t in enumerate(types)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    for got in _check_against_reference(m, {"x": x}):
        f = got.astype(np.float32)
        big = np.isinf(x)
        if saturate:
            assert np.isfinite(f[big]).all()
        else:
            assert not np.isfinite(f[big]).any()


def test_cast_between_float8_types_and_from_float16_and_int32_saturates():
    x8 = _probe((64,), scale=1e4).astype(ml_dtypes.float8_e5m2)       # e5m2 values beyond e4m3fn's range
    _check_against_reference(_model("Cast", {"x": x8}, attrs=dict(to=TensorProto.FLOAT8E4M3FN), opset=21), {"x": x8})
    h = _probe((64,), scale=1e3).astype(np.float16)
    _check_against_reference(_model("Cast", {"x": h}, attrs=dict(to=TensorProto.FLOAT8E4M3FNUZ), opset=21), {"x": h})
    i = np.arange(-600, 600, 7, dtype=np.int32)
    _check_against_reference(_model("Cast", {"x": i}, attrs=dict(to=TensorProto.FLOAT8E4M3FN), opset=21), {"x": i})


@pytest.mark.parametrize("qtype,zp", [(TensorProto.INT4, -3), (TensorProto.UINT4, 9), (TensorProto.INT2, -1),
                                      (TensorProto.UINT2, 2)])
def test_quantize_to_subbyte_integers_per_axis_round_trips_through_dequantize(qtype, zp):
    npdt = helper.tensor_dtype_to_np_dtype(qtype)
    x = _probe((3, 5, 4), scale=6.0, seed=1, nonfinite=False)   # the reference's int32(NaN or inf) is undefined
    x.reshape(-1)[4:7] = [0.5, 1.5, -2.5]                  # ties round to even
    s = np.array([0.5, 1.0, 2.0, 0.25, 1.5], np.float32)
    z = np.full(5, zp, np.float32).astype(npdt)
    q, _ = _quantize_dequantize(x, s, z, dict(axis=1))
    assert q.dtype == npdt


def test_blocked_int4_quantize_and_dequantize_with_runtime_scales():
    x = _probe((4, 10), scale=4.0, seed=2, nonfinite=False)
    s = np.random.default_rng(3).uniform(0.2, 1.0, (4, 3)).astype(np.float32)   # blocks of 4 along axis 1
    z = np.random.default_rng(4).integers(-8, 8, (4, 3)).astype(np.float32).astype(ml_dtypes.int4)
    _quantize_dequantize(x, s, z, dict(axis=1, block_size=4), runtime_params=True)


@pytest.mark.parametrize("qtype,saturate", [(TensorProto.FLOAT8E4M3FN, 1), (TensorProto.FLOAT8E4M3FN, 0),
                                            (TensorProto.FLOAT8E5M2FNUZ, 1), (TensorProto.FLOAT8E5M2, 0)])
def test_quantize_to_float8_with_saturate(qtype, saturate):
    npdt = helper.tensor_dtype_to_np_dtype(qtype)
    x = _probe((2, 40), scale=2e4, seed=5)
    s = np.array([0.5, 2.0], np.float32)
    _quantize_dequantize(x, s, np.zeros(2, npdt), dict(axis=0, saturate=saturate))


def test_quantize_to_float4_adds_the_zero_point_and_dequantize_ignores_it():
    x = _probe((6, 7), scale=4.0, seed=6)
    z = np.array(1.0, np.float32).astype(ml_dtypes.float4_e2m1fn)
    _quantize_dequantize(x, np.array(0.75, np.float32), z, {})


def test_packed_int4_weights_dequantize_into_a_matmul():
    """An int4 initializer with an odd element count (stored packed in the model) dequantized per
    output channel and multiplied: a weight-only quantized layer, against the reference."""
    rng = np.random.default_rng(7)
    w = rng.integers(-8, 8, (5, 3)).astype(np.float32).astype(ml_dtypes.int4)      # 15 values: 8 bytes
    ws = rng.uniform(0.05, 0.2, 3).astype(np.float32)
    wz = rng.integers(-2, 3, 3).astype(np.float32).astype(ml_dtypes.int4)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    t = numpy_helper.from_array(w, "w")
    assert len(t.raw_data) == 8                                                      # packed, as ONNX stores it
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=1),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 5))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))],
                          initializer=[t, numpy_helper.from_array(ws, "ws"), numpy_helper.from_array(wz, "wz")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    graph, params = from_onnx(m)
    (got,) = tessera.compile(graph, params).run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_graph_with_int4_and_float8_inputs_and_outputs_runs_on_every_executor(tmp_path):
    """The values cross the runtime boundary as ml_dtypes arrays (one byte an element), also through
    an exported and reloaded library."""
    q = np.arange(-8, 8).astype(np.float32).astype(ml_dtypes.int4).reshape(4, 4)
    x8 = _probe((4, 4), scale=100.0, seed=8).astype(ml_dtypes.float8_e4m3fn)
    nodes = [helper.make_node("Cast", ["q"], ["a"], to=TensorProto.FLOAT8E4M3FN),
             helper.make_node("Cast", ["x8"], ["b"], to=TensorProto.INT4),
             helper.make_node("Cast", ["x8"], ["c"], to=TensorProto.UINT2)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("q", TensorProto.INT4, (4, 4)),
                                       helper.make_tensor_value_info("x8", TensorProto.FLOAT8E4M3FN, (4, 4))],
                          [helper.make_tensor_value_info(n, t, (4, 4)) for n, t in
                           (("a", TensorProto.FLOAT8E4M3FN), ("b", TensorProto.INT4), ("c", TensorProto.UINT2))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    feeds = {"q": q, "x8": x8}
    want = ReferenceEvaluator(m).run(None, feeds)
    graph, params = from_onnx(m)
    for executor in ("aot", "graph"):
        exe = tessera.compile(graph, params, executor=executor)
        for gv, wv in zip(exe.run(feeds), want):
            _same(gv, wv, executor)
    exe.export_library(str(tmp_path / "lowp.so"))
    for gv, wv in zip(tessera.runtime.load_module(str(tmp_path / "lowp.so")).run(feeds), want):
        _same(gv, wv, "reloaded")
