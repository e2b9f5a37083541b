"""The winograd pass: eligible 3x3 stride-1 convolutions (after alter_layout) become input transform ->
batched GEMM -> output transform with the epilogue fused into the output transform; everything else is
left alone; the models compute what the direct convolution, numpy (float64) and onnxruntime compute."""
import numpy as np
import pytest

import tessera
from tessera.graph import Builder
from tessera.graph.ir import FUSED_OP
from tessera.graph.passes import optimize, pass_names, passes_for, run_pass
from tessera.graph.passes.alter_layout import alter_layout
from tessera.graph.passes.winograd import _isa, choose_tile_size, gemm_rows, winograd
from tessera.target import Target
from tessera.tir.tensor_intrin.x86 import FP32_GEMM

rng = np.random.default_rng(31)
TARGET = Target("c")
HAS_GEMM = _isa(TARGET) is not None
# the rule (choose_tile_size, layer_costs, gemm_rows) reads only a target's features and compiles
# nothing: its tests run it for both ISAs it tells apart, whatever the host has
AVX512 = Target("c -mcpu=skylake-avx512")
AVX2 = Target("c -mcpu=haswell")
needs_gemm = pytest.mark.skipif(not HAS_GEMM, reason="the pass runs on CPUs with the x86 GEMM micro-kernels")
EPS = float(np.finfo(np.float32).eps)


def rand(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype("float32")


def all_nodes(graph):
    out = []
    for n in graph.nodes:
        out.extend(n.attrs["function"].body.nodes if n.op == FUSED_OP else [n])
    return out


def ops_of(graph):
    return [n.op for n in all_nodes(graph)]


def optimize_forced(g, tile_size, target=TARGET):
    """The opt_level-3 pipeline with the winograd pass forced to tile_size."""
    for p in passes_for(3):
        g = winograd(g, target, tile_size=tile_size) if p.name == "winograd" else run_pass(p.fn, g, target, p.name)
    return g


def residual_block(C, H, W, pad, residual=True, batch=1):
    """conv(3x3) + bias + ReLU -> conv(3x3) [+ x] -> ReLU, weights scaled like a trained net's."""
    gb = Builder("block")
    x = gb.input("x", (batch, C, H, W))
    w1, w2 = (gb.const(rand(C, C, 3, 3, scale=1 / np.sqrt(9 * C)), f"w{k}") for k in (1, 2))
    b1 = gb.const(rand(C, 1, 1), "b1")
    y = gb.op("nn.relu", gb.op("add", gb.op("nn.conv2d", x, w1, padding=(pad,) * 4), b1))
    z = gb.op("nn.conv2d", y, w2, padding=(pad,) * 4)
    if residual:
        z = gb.op("add", z, x)
    gb.output(gb.op("nn.relu", z))
    return gb.finish(), gb


def block_f64(consts, x, pad, residual):
    """The block in float64 numpy, and the error scale of its output: the second convolution's sum of
    |terms| plus the first's carried through |w2| (bias and ReLU do not amplify an error)."""
    w1, b1, w2 = (consts[k].astype(np.float64) for k in ("w1", "b1", "w2"))

    def conv(a, w):
        ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        OH, OW = ap.shape[2] - 2, ap.shape[3] - 2
        out, scale = 0.0, 0.0
        for kh in range(3):
            for kw in range(3):
                p = ap[:, :, kh:kh + OH, kw:kw + OW]
                out = out + np.einsum("nchw,oc->nohw", p, w[:, :, kh, kw])
                scale = scale + np.einsum("nchw,oc->nohw", np.abs(p), np.abs(w[:, :, kh, kw]))
        return out, scale

    y1, s1 = conv(x.astype(np.float64), w1)
    z, s2 = conv(np.maximum(y1 + b1, 0), w2)
    if residual:
        z = z + x
    return np.maximum(z, 0), s2 + conv(s1, np.abs(w2))[0]


@needs_gemm
@pytest.mark.parametrize("m,H,W,pad,residual,batch", [(2, 14, 14, 1, True, 1), (4, 9, 7, 1, True, 2),
                                                      (4, 11, 9, 0, False, 1), (2, 9, 11, 0, False, 2),
                                                      (3, 14, 14, 1, True, 1)])
def test_winograd_block_matches_float64_numpy(m, H, W, pad, residual, batch):
    C = 16
    g, _ = residual_block(C, H, W, pad, residual, batch)
    consts = {v.name: a for v, a in g.constants.items()}
    x = rand(batch, C, H, W)
    go = optimize_forced(g, m)
    assert ops_of(go).count("nn.winograd_input_transform") == 2
    assert "nn.contrib_conv2d_NCHWc" not in ops_of(go)
    y = tessera.compile(go, opt_level=0)(x)
    want, scale = block_f64(consts, x, pad, residual)
    # the error of each convolution is at most eps32 x (its sum of |terms|) x the transforms' growth
    # (tests/ops/nn/test_winograd.py: <= 4 for F(2x2), <= 24 for F(3x3), <= 45 for F(4x4)); +1e-6: the
    # residual add's rounding
    growth = {2: 4.0, 3: 24.0, 4: 45.0}[m]
    assert y.shape == want.shape
    assert np.all(np.abs(y - want) <= growth * EPS * scale + 1e-6)


@needs_gemm
def test_epilogue_fuses_into_the_output_transform_and_no_layout_transform_appears():
    g, _ = residual_block(16, 12, 12, 1)
    go = optimize_forced(g, 2)
    fused = [n for n in go.nodes if n.op == FUSED_OP]
    names = [[m.op for m in n.attrs["function"].body.nodes] for n in fused]
    assert ["nn.winograd_output_transform", "add", "nn.relu"] in names          # bias + ReLU
    assert ["nn.winograd_output_transform", "add", "nn.relu"] in names[1:] or \
        sum(1 for ns in names if ns[0] == "nn.winograd_output_transform") == 2   # residual add + ReLU
    # one transform into the blocked layout at the input, one out of it at the output
    assert sum(1 for n in go.nodes if n.op == "layout_transform") == 2
    # the transformed weights are packed constants (folded at compile time)
    mms = [n for n in all_nodes(go) if n.op == "nn.matmul"]
    assert len(mms) == 2 and all(n.attrs["b_panel"] and n.inputs[1] in go.constants for n in mms)


@needs_gemm
def test_only_3x3_stride_1_dense_convolutions_are_rewritten():
    C = 16
    gb = Builder("mix")
    x = gb.input("x", (1, C, 16, 16))

    def conv(v, shape, **attrs):
        return gb.op("nn.conv2d", v, gb.const(rand(*shape, scale=0.1)), **attrs)

    a = conv(x, (C, C, 3, 3), padding=(1,) * 4)                           # eligible
    b = conv(a, (C, C, 3, 3), padding=(1,) * 4, strides=(2, 2))           # stride 2
    c = conv(b, (C, C, 1, 1))                                             # 1x1
    d = conv(c, (C, C, 3, 3), padding=(2,) * 4, dilation=(2, 2))          # dilated
    e = conv(d, (C, C // 2, 3, 3), padding=(1,) * 4, groups=2)            # grouped
    f = conv(e, (C, 1, 3, 3), padding=(1,) * 4, groups=C)                 # depthwise
    gb.output(f)
    g = gb.finish()
    blocked = alter_layout(g, TARGET)
    go = winograd(blocked, TARGET, tile_size=2)
    assert [n.op for n in go.nodes].count("nn.winograd_input_transform") == 1
    convs = [n for n in go.nodes if n.op in ("nn.contrib_conv2d_NCHWc", "nn.contrib_depthwise_conv2d_NCHWc",
                                             "nn.conv2d")]
    before = [n for n in blocked.nodes if n.op in ("nn.contrib_conv2d_NCHWc", "nn.contrib_depthwise_conv2d_NCHWc",
                                                   "nn.conv2d")]
    assert len(convs) == len(before) - 1
    # the stride-2, 1x1, dilated, grouped and depthwise convolutions stay as they were
    assert {(n.name, n.op, tuple(n.attrs.items())) for n in convs} == \
        {(n.name, n.op, tuple(n.attrs.items())) for n in before[1:]}


def test_runtime_weights_and_other_targets_are_left_alone():
    gb = Builder("rt")
    x = gb.input("x", (1, 16, 12, 12))
    w = gb.input("w", (16, 16, 3, 3))
    gb.output(gb.op("nn.conv2d", x, w, padding=(1,) * 4))
    g = gb.finish()
    blocked = alter_layout(g, TARGET)
    assert "nn.winograd_input_transform" not in ops_of(winograd(blocked, TARGET, tile_size=2))
    assert "nn.winograd_input_transform" not in ops_of(optimize_forced(g, 2))
    g2, _ = residual_block(16, 8, 8, 1)
    assert winograd(g2, "opencl", tile_size=2) is g2
    with pytest.raises(tessera.TesseraError, match="tile_size"):
        winograd(g2, TARGET, tile_size=5)


def test_the_pass_is_named_in_the_pipeline_and_can_be_disabled():
    assert "winograd" in pass_names()
    names = [p.name for p in passes_for(3)]
    assert names.index("alter_layout") < names.index("winograd") < names.index("pack_matmul_weights")
    assert "winograd" not in [p.name for p in passes_for(2)]
    g, _ = residual_block(64, 16, 16, 1)
    off = optimize(g, 3, TARGET, disabled_passes=["winograd"])
    assert "nn.winograd_input_transform" not in ops_of(off)
    on = optimize(g, 3, TARGET)
    assert ("nn.winograd_input_transform" in ops_of(on)) == HAS_GEMM


def test_rule_and_gemm_rows():
    for target in (TARGET, AVX512, AVX2):
        has_gemm = _isa(target) is not None
        wide = has_gemm and _isa(target)[1] == 16       # AVX-512: 7x7 maps take F(2x2), AVX2 F(4x4)
        layers = {(64, 56): 4, (128, 28): 4, (256, 14): 4, (512, 7): 2 if wide else 4}
        for (C, side), m in layers.items():
            assert choose_tile_size(1, C, C, side, side, target) == (m if has_gemm else None)
        assert choose_tile_size(1, 64, 64, 4, 4, target) is None          # 4 tiles of F(2x2)
        assert choose_tile_size(1, 16, 16, 56, 56, target) is None        # few channels
        if not has_gemm:
            continue
        isa, _ = _isa(target)
        for tiles, chans in ((196, 64), (16, 512), (49, 256), (54, 128), (13, 8)):
            p = gemm_rows(tiles, chans, target)
            fits = [mr for mr, nr in FP32_GEMM[isa] if chans % nr == 0] or \
                [mr for mr, nr in FP32_GEMM["avx2"] if chans % nr == 0]
            assert p >= tiles and any(p % mr == 0 for mr in fits)
            fewest = min(-(-tiles // mr) * mr for mr in fits)
            assert p == fewest or (p - tiles) * 16 <= tiles           # the fewest, or little padding
        if isa == "avx512":   # 6x64 preferred; 4x64 where 6 rows a tile would pad > 1/16
            assert [gemm_rows(t, c, target) for t, c in ((16, 512), (49, 256), (196, 64), (54, 128))] == [16, 52, 198, 54]
    assert _isa(AVX512)[0] == "avx512" and _isa(AVX2)[0] == "avx2"
    avx2 = Target("c -mattr=-avx512f")
    for t in (avx2, AVX2):
        if _isa(t) is not None:
            assert choose_tile_size(1, 512, 512, 7, 7, t) == 4
            assert choose_tile_size(1, 512, 512, 4, 4, t) is None     # 1 tile of F(4x4), 4 of F(2x2)


def test_cold_weights_move_the_few_row_gemms_to_the_cheaper_form():
    """With its weights streamed from memory a GEMM of few rows costs COLD_ROWS rows: on AVX-512 the
    14x14 layers take F(2x2) (16 rows of F(4x4) priced as 24 x 36 positions > 52 x 16); the larger
    maps keep F(4x4); AVX2 keeps its rule."""
    from tessera.graph.passes.winograd import COLD_ROWS, layer_costs

    cold = {(64, 56): 4, (128, 28): 4, (256, 14): 2, (512, 7): 2}
    for target in (TARGET, AVX512):
        for (C, side), m in cold.items():
            costs = layer_costs(1, C, side, side, target, cold_weights=True)
            if _isa(target) is not None and _isa(target)[1] == 16:
                assert choose_tile_size(1, C, C, side, side, target, cold_weights=True) == m
                assert costs[m] == min(costs.values())
                assert all(v >= (k + 2) ** 2 * COLD_ROWS for k, v in costs.items() if k)
    assert choose_tile_size(2, 256, 256, 14, 14, TARGET, cold_weights=True) == (4 if HAS_GEMM else None)  # 32 rows
    assert choose_tile_size(2, 256, 256, 14, 14, AVX512, cold_weights=True) == 4
    for avx2 in (Target("c -mattr=-avx512f"), AVX2):
        if _isa(avx2) is not None:
            for C, side in cold:
                assert choose_tile_size(1, C, C, side, side, avx2, cold_weights=True) == \
                    choose_tile_size(1, C, C, side, side, avx2)


@needs_gemm
def test_the_pass_prices_the_weights_of_the_whole_graph():
    """A 256-channel 14x14 layer takes F(4x4) in a small graph and F(2x2) beside more than
    COLD_WEIGHT_BYTES of other weights (a matmul's, here)."""
    from tessera.graph.passes.winograd import COLD_WEIGHT_BYTES, weights_cold

    def graph(extra_cols):
        gb = Builder("cold")
        x = gb.input("x", (1, 256, 14, 14))
        w = gb.const(rand(256, 256, 3, 3, scale=1 / np.sqrt(9 * 256)), "w")
        y = gb.op("nn.relu", gb.op("nn.conv2d", x, w, padding=(1, 1, 1, 1)))
        if extra_cols:
            flat = gb.op("reshape", y, newshape=(1, 256 * 14 * 14))
            big = gb.const(np.zeros((256 * 14 * 14, extra_cols), "float32"), "big")
            gb.output(gb.op("nn.matmul", flat, big))
        else:
            gb.output(y)
        return gb.finish()

    def tile_sizes(g):
        return [n.attrs["tile_size"] for n in all_nodes(optimize(g, 3, TARGET)) if n.op == "nn.winograd_input_transform"]

    cols = COLD_WEIGHT_BYTES // (4 * 256 * 14 * 14) + 1
    small, large = graph(0), graph(cols)
    assert not weights_cold(small) and weights_cold(large)
    assert tile_sizes(small) == [4]
    assert tile_sizes(large) == [2 if _isa(TARGET)[1] == 16 else 4]
    for target, m in ((AVX512, 2), (AVX2, 4)):   # both ISAs' rules, whatever the host (the passes compile nothing)
        laid = run_pass(alter_layout, large, target, "alter_layout")
        assert [n.attrs["tile_size"] for n in winograd(laid, target).nodes
                if n.op == "nn.winograd_input_transform"] == [m]


def _onnx_block(C=64, H=16):
    from onnx import TensorProto, helper, numpy_helper

    def init(name, *shape):
        return numpy_helper.from_array(rand(*shape, scale=1 / np.sqrt(9 * C) if len(shape) == 4 else 0.1), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    inits = [init("w1", C, C, 3, 3), init("b1", C), init("w2", C, C, 3, 3), init("b2", C)]
    graph = helper.make_graph(nodes, "wino_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])], inits)
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_resnet_block_matches_onnxruntime_with_the_pass_on():
    ort = pytest.importorskip("onnxruntime")
    model = _onnx_block()
    x = rand(1, 64, 16, 16)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(graph, params)                   # opt_level 3: the rule picks F(4x4) (16 tiles)
    assert ops_of(exe.graph).count("nn.winograd_input_transform") == (2 if HAS_GEMM else 0)
    # F(4x4)'s error: <= 45 eps32 x the sum of |terms| (test_winograd.py), here ~1e-5 at outputs ~1
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=2e-4)


@pytest.mark.slow
def test_winograd_benchmark_writes_layer_rows(tmp_path):
    import importlib.util
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("tessera_bench_winograd", root / "benchmarks" / "winograd.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "wino.json"
    assert bench.main(["--no-models", "--layers", "512x7", "--rounds", "1", "--number", "1", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())["rows"]
    assert [r["impl"] for r in rows] == ["direct", "F2", "F4"]
    assert all(r["layer"] == "512x7x7" and r["min_ms"] > 0 for r in rows)
    assert rows[0]["ratio_min"] == 1.0 and rows[1]["max_abs_err"] < 1e-3


@needs_gemm
def test_every_point_of_the_transforms_knob_spaces_computes_the_untuned_result():
    """The transforms' parallel-loop knobs give the tuner small spaces (not the rules' generated
    ones); each point is checked by the measurement against the unscheduled program."""
    from tessera import autotune
    from tessera.autotune.measure import MeasureCandidate
    from tessera.autotune.measure.runner import measure

    t2 = "c -num-threads=2"
    g, _ = residual_block(64, 16, 16, 1)
    tasks = [t for t in autotune.extract_tasks(g, {}, t2) if "winograd" in t.name and "transform" in t.name]
    assert any("input" in t.name for t in tasks) and any("output" in t.name for t in tasks)
    cands = []
    for t in tasks:
        assert t.space.kind == "knobs", t.name
        pts = [s for s in t.space.points().values() if s is not None]
        assert len(pts) == 2, t.name
        cands += [MeasureCandidate(t.workload, s.trace.as_json()) for s in pts]
    runner = autotune.LocalRunner(number=1, repeat=1, min_repeat_ms=0)
    try:
        results = measure(cands, t2, runner=runner)
    finally:
        runner.close()
    for c, r in zip(cands, results):
        assert r.error_kind is None, (c.workload.func.name, r.error_kind, r.error_msg)


@needs_gemm
def test_choose_decides_per_layer_and_is_checked():
    """winograd(choose=f) takes f's m (or the direct form) per eligible convolution, in place of the rule."""
    g, _ = residual_block(64, 16, 16, 1)
    laid = run_pass(alter_layout, g, TARGET, "alter_layout")
    seen = []

    def pick(batch, c, o, h, w):
        seen.append((batch, c, o, h, w))
        return 2 if len(seen) == 1 else None

    out = winograd(laid, TARGET, choose=pick)
    assert seen == [(1, 64, 64, 16, 16)] * 2
    assert [n.attrs["tile_size"] for n in out.nodes if n.op == "nn.winograd_input_transform"] == [2]
    assert sum(n.op == "nn.contrib_conv2d_NCHWc" for n in out.nodes) == 1
    with pytest.raises(tessera.TesseraError, match="choose returned 5"):
        winograd(laid, TARGET, choose=lambda *a: 5)
    with pytest.raises(tessera.TesseraError, match="choose returned 2.0"):    # the ops take an int
        winograd(laid, TARGET, choose=lambda *a: 2.0)
    # a numpy integer (a pick from a table of measurements) is an int to the transform ops
    picked = winograd(laid, TARGET, choose=lambda *a: np.int64(3))
    assert [n.attrs["tile_size"] for n in picked.nodes if n.op == "nn.winograd_input_transform"] == [3, 3]
    assert all(type(n.attrs["tile_size"]) is int for n in picked.nodes if n.op.startswith("nn.winograd"))
    for bad in (2.0, True):
        with pytest.raises(tessera.TesseraError, match="winograd: tile_size"):
            winograd(laid, TARGET, tile_size=bad)
    with pytest.raises(tessera.TesseraError, match="choose must be a callable"):
        winograd(laid, TARGET, tile_size=2, choose=pick)
