"""Winograd F(2x2, 3x3) / F(4x4, 3x3) against the direct blocked convolution: layers alone (weights in
cache), the same layers inside the models (weights streamed from memory), and the models end to end.

    python benchmarks/winograd.py --threads 1                       # all three parts
    python benchmarks/winograd.py --threads 2 --json wino.json      # the figures that decide the rule
    python benchmarks/winograd.py --no-models --rounds 20           # layers alone only
    python benchmarks/winograd.py --no-layers --no-e2e --models resnet50   # in-model layers only
    python benchmarks/winograd.py --no-models --mattr=-avx512f      # AVX2 code (as on an AVX2-only CPU)

Layers alone: every 3x3 stride-1 convolution shape of ResNet-18 and ResNet-50 (batch 1, C = O, padding
1: 64x56x56, 128x28x28, 256x14x14, 512x7x7; ResNet-50's bottleneck 3x3 layers have these shapes too),
each as a model conv -> bias add -> ReLU compiled at opt_level 3 three ways: direct (the pass
disabled: nn.contrib_conv2d_NCHWc), and with the winograd pass forced to F(2x2) and to F(4x4)
(graph/passes/winograd.py, tile_size=2 / 4). A layer's time is the sum of its nodes' C timers
inside the compiled model's one entry (exe.profile: the real order and cache state of a call) less
the layout transforms at the model's edges, which are the same for all three; the three are timed
round-robin (`--rounds` rounds of `--number` calls each, so load drifts hit them alike) and the
minimum and median over rounds reported, with the ratio Winograd / direct (below 1 Winograd is
faster), the GEMM's share and which m the pass's rule (choose_tile_size) picks with the weights in
cache ("rule") and streamed ("rule_cold"). Alone, a layer's weights stay in cache between calls
(up to 38 MB of F(4x4) weights at 512x7x7 do not).

In the models ("in_model" rows): each zoo model (batch 1) compiled with every eligible layer direct,
every one F(2x2), every one F(3x3), every one F(4x4), and by the rule; a layer's time is the sum of the C timers of its
nodes (the direct convolution's fused node, or input transform + GEMM + output transform with its
epilogue) in whole-model profiles, timed round-robin like the layers; per shape the mean over the
model's layers of that shape in a round, its minimum and median over rounds, the ratio to direct, and
the rule's pick. Here every call streams the
model's weights from memory (ResNet-18 ~45 MB, ResNet-50 ~100 MB of constants, beyond a 32 MB L3),
which is what the rule's cold pricing (layer_costs, COLD_ROWS) stands for.

Models end to end: ResNet-18 and ResNet-50 (tessera.zoo, batch 1) compiled with the pass (its rule),
with the pass pricing the weights as cached ("rule_hot": the rule without its cold pricing) and
without the pass (disabled_passes=["winograd"]), beside ONNX Runtime, timed interleaved as
benchmarks/e2e.py does, outputs checked against ONNX Runtime's.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from _common import parser, quiesce, report, time_interleaved

import tessera
from tessera import graph
from tessera.graph.const_eval import bind_params
from tessera.graph.passes import optimize, passes_for, run_pass
from tessera.graph.passes.winograd import CONV, INPUT, OUTPUT, choose_tile_size, winograd

LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]    # (channels, side): ResNet-18/50's 3x3 stride-1 layers


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def layer_graph(C, side, seed=0):
    """conv 3x3 pad 1 (C -> C) + bias + ReLU on a (1, C, side, side) input."""
    rng = np.random.default_rng(seed)
    gb = graph.Builder(f"conv{C}x{side}")
    x = gb.input("x", (1, C, side, side))
    w = gb.const((rng.standard_normal((C, C, 3, 3)) / np.sqrt(9 * C)).astype("float32"), "w")
    b = gb.const(rng.standard_normal((C, 1, 1)).astype("float32"), "b")
    gb.output(gb.op("nn.relu", gb.op("add", gb.op("nn.conv2d", x, w, padding=(1, 1, 1, 1)), b)))
    return gb.finish()


def optimize_with(g, target, tile_size, choose=None):
    """The opt_level-3 pipeline with the winograd pass forced to `tile_size` (None: left out) or
    deciding by `choose` (winograd's argument)."""
    for p in passes_for(3):
        if p.name == "winograd":
            if tile_size is not None or choose is not None:
                g = winograd(g, target, tile_size=tile_size, choose=choose)
            continue
        g = run_pass(p.fn, g, target, p.name)
    return g


def _layer_ms(exe, x, number):
    """(layer ms, gemm ms): the nodes' C timers in one profile round, less the edge layout transforms."""
    rep = exe.profile({"x": x}, number=number, repeat=1, show=False)
    total = sum(r.ms for r in rep.rows if r.op != "layout_transform")
    gemm = sum(r.ms for r in rep.rows if r.op == "nn.matmul")
    return total, gemm


def _target(args):
    return tessera.Target(f"c -num-threads={args.threads}" + (f" -mattr={args.mattr}" if args.mattr else ""))


def bench_layers(args, rows):
    target = _target(args)
    for C, side in LAYERS:
        if args.layers and f"{C}x{side}" not in args.layers:
            continue
        g = layer_graph(C, side)
        x = np.random.default_rng(1).standard_normal((1, C, side, side)).astype("float32")
        exes, ref = {}, None
        for name, m in (("direct", None), ("F2", 2), ("F4", 4)):
            exe = tessera.compile(optimize_with(g, target, m), target=target, opt_level=0)
            y = exe(x)
            if ref is None:
                ref = y
            err = float(np.max(np.abs(y - ref)))
            if not np.allclose(y, ref, rtol=1e-3, atol=1e-3 * float(np.max(np.abs(ref)))):
                raise SystemExit(f"{name} on layer {C}x{side}: max |err| {err:.2e} against the direct convolution")
            exes[name] = (exe, err)
        times = {k: [] for k in exes}
        gemms = {k: [] for k in exes}
        for _ in range(args.rounds):
            for k, (exe, _) in exes.items():
                quiesce()
                t, gm = _layer_ms(exe, x, args.number)
                times[k].append(t)
                gemms[k].append(gm)
        d_min, d_med = min(times["direct"]), statistics.median(times["direct"])
        flops = 2 * C * C * 9 * side * side
        rule = choose_tile_size(1, C, C, side, side, target)
        cold = choose_tile_size(1, C, C, side, side, target, cold_weights=True)
        for k in exes:
            t_min, t_med = min(times[k]), statistics.median(times[k])
            rows.append({"layer": f"{C}x{side}x{side}", "threads": args.threads, "target": str(target), "impl": k,
                         "min_ms": t_min, "median_ms": t_med, "gemm_ms": min(gemms[k]) if k != "direct" else "",
                         "ratio_min": t_min / d_min, "ratio_median": t_med / d_med,
                         "direct_gflops": flops / t_min / 1e6, "max_abs_err": exes[k][1],
                         "rule": f"F{rule}" if rule else "direct", "rule_cold": f"F{cold}" if cold else "direct"})
        _log(f"layer {C}x{side}: " + ", ".join(f"{k} {min(v):.3f} ms" for k, v in times.items()))


def _layers(exe):
    """{graph node name: layer} for the nodes of a compiled model that compute its 3x3 convolutions (and
    the other direct ones). A layer is named by the node that ends it, the same in every form: the
    direct convolution's fused node, or the Winograd output transform's (which takes over the conv and
    its epilogue), to which its GEMM and input transform are credited. (Inner node names of fused
    functions cannot tell layers apart: identical groups share one function.)"""
    producer = {v: n for n in exe.graph.nodes for v in n.outputs}
    out = {}
    for n in exe.graph.nodes:
        ops = {b.op for b in n.attrs["function"].body.nodes} if "function" in n.attrs else {n.op}
        if OUTPUT in ops:
            out[n.name] = n.name
            for v in n.inputs:
                gemm = producer.get(v)
                if gemm is not None and gemm.name.endswith("_winograd_gemm"):
                    out[gemm.name] = n.name
                    inp = producer.get(gemm.inputs[0])
                    if inp is not None and inp.op == INPUT:
                        out[inp.name] = n.name
        elif CONV in ops:
            out[n.name] = n.name
    return out


def bench_in_model(args, rows):
    from tessera import zoo

    target = _target(args)
    forms = {"direct": lambda *a: None, "F2": lambda *a: 2, "F3": lambda *a: 3, "F4": lambda *a: 4, "rule": None}
    for name in args.models:
        model = zoo.get_model(name, batch=1)
        feeds = zoo.sample_input(name, batch=1)
        g, params = tessera.frontend.from_onnx(model)
        exes, shapes, picks = {}, {}, {}
        bound = bind_params(g, params)
        for form, choose in forms.items():
            og = optimize_with(bound, target, None, choose) if choose else optimize(bound, 3, target)
            exes[form] = tessera.compile(og, target=target, opt_level=0, database=False)
        layers = {f: _layers(exe) for f, exe in exes.items()}
        for node in exes["F4"].graph.nodes:       # every eligible layer is in Winograd form there
            if node.op == INPUT:
                _, cb, h, w, cx = node.inputs[0].type.shape
                shapes[layers["F4"][node.name]] = f"{cb * cx}x{h}x{w}"
        for node in exes["rule"].graph.nodes:
            if node.op == INPUT and layers["rule"].get(node.name) in shapes:
                picks[shapes[layers["rule"][node.name]]] = f"F{node.attrs['tile_size']}"
        for shape in set(shapes.values()):
            picks.setdefault(shape, "direct")
        times = {f: {} for f in exes}
        for _ in range(args.rounds):
            for f, exe in exes.items():
                quiesce()
                rep = exe.profile(feeds, number=args.number, repeat=1, show=False)
                per = {}
                for r in rep.rows:
                    conv = layers[f].get(r.node)
                    if conv in shapes:
                        per.setdefault(shapes[conv], {}).setdefault(conv, 0.0)
                        per[shapes[conv]][conv] += r.ms
                for shape, convs in per.items():        # a layer of this shape, on average, this round
                    times[f].setdefault(shape, []).append(sum(convs.values()) / len(convs))
        for shape in sorted(set(shapes.values()), key=lambda t: -int(t.split("x")[1])):
            d = times["direct"].get(shape)
            for f in exes:
                t = times[f].get(shape)
                if not t or not d:
                    continue
                rows.append({"layer": f"{name}:{shape}", "threads": args.threads, "target": str(target),
                             "impl": f, "in_model": True, "min_ms": min(t), "median_ms": statistics.median(t),
                             "ratio_min": min(t) / min(d), "ratio_median": statistics.median(t) / statistics.median(d),
                             "rule_pick": picks.get(shape, "")})
            _log(f"{name} {shape} in the model: " + ", ".join(
                f"{f} {min(times[f][shape]):.3f} ms" for f in exes if times[f].get(shape)) + f" (rule: {picks.get(shape)})")


def bench_models(args, rows):
    from e2e import _ort_session

    from tessera import zoo

    for name in args.models:
        model = zoo.get_model(name, batch=1)
        feeds = zoo.sample_input(name, batch=1)
        g, params = tessera.frontend.from_onnx(model)
        sess = _ort_session(model, args.threads)
        ref = sess.run(None, feeds)
        timed = {"onnxruntime": lambda sess=sess, feeds=feeds: sess.run(None, feeds)}
        info = {}
        target = _target(args)
        bound = bind_params(g, params)
        def hot(*a, target=target):
            return choose_tile_size(*a, target, cold_weights=False)

        for cfg in ("winograd", "rule_hot", "direct"):
            t0 = time.perf_counter()
            if cfg == "rule_hot":
                exe = tessera.compile(optimize_with(bound, target, None, hot), target=target, opt_level=0,
                                      database=False)
            else:
                exe = tessera.compile(g, params, target=target, disabled_passes=("winograd",) if cfg == "direct" else (),
                                      database=False)
            out = exe.run(feeds)
            err = max(float(np.max(np.abs(np.asarray(o) - r))) for o, r in zip(out, ref))
            n_wino = sum(1 for n in exe.graph.nodes if n.op == "nn.winograd_input_transform")
            info[cfg] = (err, n_wino, time.perf_counter() - t0)
            timed[cfg] = (lambda exe=exe, feeds=feeds: exe.run(feeds))
        times = time_interleaved(timed, 3, args.model_repeat, 20.0)
        ort = times["onnxruntime"]
        for cfg in ("winograd", "rule_hot", "direct"):
            err, n_wino, comp = info[cfg]
            t = times[cfg]
            rows.append({"layer": name, "threads": args.threads, "impl": cfg, "min_ms": t[1] * 1e3,
                         "median_ms": t[0] * 1e3, "ratio_min": t[1] / times["direct"][1],
                         "ratio_median": t[0] / times["direct"][0], "ort_median_ms": ort[0] * 1e3,
                         "vs_ort_median": t[0] / ort[0], "vs_ort_min": t[1] / ort[1], "max_abs_err": err,
                         "winograd_layers": n_wino, "compile_s": comp})
        _log(f"{name}: " + ", ".join(f"{k} {v[0] * 1e3:.2f} ms" for k, v in times.items()))


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mattr", default="", help="target attributes, e.g. -avx512f for AVX2 code on an AVX-512 CPU")
    p.add_argument("--rounds", type=int, default=10, help="layer timing rounds (round-robin)")
    p.add_argument("--number", type=int, default=5, help="calls per layer round")
    p.add_argument("--models", default="resnet18,resnet50", help="comma-separated zoo models ('' for none)")
    p.add_argument("--no-models", action="store_true")
    p.add_argument("--no-layers", action="store_true", help="skip the layers alone")
    p.add_argument("--no-in-model", action="store_true", help="skip the layers inside the models")
    p.add_argument("--no-e2e", action="store_true", help="skip the models end to end")
    p.add_argument("--layers", default="", help="comma-separated CxSIDE layers to time (default: all), e.g. 512x7")
    p.add_argument("--model-repeat", type=int, default=20)
    args = p.parse_args(argv)
    args.models = [] if args.no_models else [m for m in args.models.split(",") if m]
    args.layers = [x for x in args.layers.split(",") if x]
    rows = []
    import os
    load0 = os.getloadavg()
    if not args.no_layers:
        bench_layers(args, rows)
    if args.models and not args.no_in_model:
        bench_in_model(args, rows)
    if args.models and not args.no_e2e:
        bench_models(args, rows)
    print(f"load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    report("winograd", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
