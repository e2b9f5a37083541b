"""1x1 convolutions of ResNet-50 and MobileNetV2, layer by layer: tessera's direct blocked kernel
beside the same layer as a packed-weight GEMM and beside ONNX Runtime's Conv alone.

    python benchmarks/conv1x1.py --threads 1                    # every 1x1 shape of both models
    python benchmarks/conv1x1.py --models resnet50 --rounds 10 --json c1.json
    python benchmarks/conv1x1.py --layers 64-256x56s1           # one shape (C-OxSIDEsSTRIDE)

Layers: the distinct 1x1, group-1 Conv shapes of the zoo models (tessera.zoo, batch 1; shapes by
ONNX shape inference), with how often each occurs. Per layer, each a model conv -> bias -> ReLU:
- direct: compiled at opt_level 3 with the default schedules (database=False; --shipped: the
  shipped tuning records where they match) (nn.contrib_conv2d_NCHWc, the row micro-kernel of
  tir/tensor_intrin/x86_conv.py, bias and ReLU fused); its time is the sum of its nodes' C timers inside the
  compiled model (exe.profile) less the layout transforms at the model's edges (inside a model the
  data arrives blocked);
- gemm: the same arithmetic as `nn.matmul` of the (pixels, C) input with the constant (C, O) weight
  at opt_level 3 (pack_matmul_weights: the tensorized GEMM with packed constant weights, bias and
  ReLU fused; strided layers take the subsampled pixels), its nodes' C timers (the same database);
- onnxruntime: a Conv + Relu model (ORT fuses them; MLAS), timed around session.run (its few
  microseconds of call overhead included, and the reorders of the input to and of the output from
  its blocked layout);
- ort_node: the same model's fused Conv node alone, ORT's blocked (NCHWc) kernel as it runs inside a
  model, by ORT's own profiler (per-node kernel times; a profiled session each round): the figure to
  hold `direct` against.
The four run round-robin (`--rounds` rounds; load drift hits them alike); the minimum over rounds is
reported with GFLOPS and the ratios direct / onnxruntime, direct / ort_node and gemm / onnxruntime.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from _common import parser, quiesce, report

import tessera
from tessera import graph


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def model_layers(name):
    """{(C, O, side, stride): count} of the model's 1x1 group-1 Conv nodes (batch 1, square inputs)."""
    import onnx

    from tessera import zoo

    m = onnx.shape_inference.infer_shapes(zoo.get_model(name, batch=1))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.input)}
    inits = {t.name: tuple(t.dims) for t in m.graph.initializer}
    out = {}
    for node in m.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        w = inits.get(node.input[1])
        if w is None or tuple(w[2:]) != (1, 1) or attrs.get("group", 1) != 1:
            continue
        x = shapes[node.input[0]]
        stride, _ = attrs.get("strides", (1, 1))
        key = (int(w[1]), int(w[0]), int(x[2]), int(stride))
        out[key] = out.get(key, 0) + 1
    return out


def _weights(C, O, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((O, C)) / np.sqrt(C)).astype("float32"), rng.standard_normal(O).astype("float32")


def conv_graph(C, O, side, stride):
    w, b = _weights(C, O)
    gb = graph.Builder(f"conv1x1_{C}_{O}_{side}_s{stride}")
    x = gb.input("x", (1, C, side, side))
    y = gb.op("nn.conv2d", x, gb.const(w.reshape(O, C, 1, 1), "w"), strides=(stride, stride))
    gb.output(gb.op("nn.relu", gb.op("add", y, gb.const(b.reshape(O, 1, 1), "b"))))
    return gb.finish()


def gemm_graph(C, O, pixels):
    w, b = _weights(C, O)
    gb = graph.Builder(f"gemm_{pixels}_{C}_{O}")
    x = gb.input("x", (pixels, C))
    y = gb.op("nn.matmul", x, gb.const(np.ascontiguousarray(w.T), "w"))
    gb.output(gb.op("nn.relu", gb.op("add", y, gb.const(b, "b"))))
    return gb.finish()


def ort_conv(C, O, side, stride, threads, profile_prefix=None):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    w, b = _weights(C, O)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride]),
             helper.make_node("Relu", ["y"], ["z"])]
    osz = (side - 1) // stride + 1
    g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, side, side])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, O, osz, osz])],
                          [numpy_helper.from_array(w.reshape(O, C, 1, 1), "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_node_ms(C, O, side, stride, threads, x, number):
    """The fastest of `number` runs of the Conv node alone by ORT's profiler (ms), in a fresh
    profiled session (a session's profile ends once)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        sess = ort_conv(C, O, side, stride, threads, profile_prefix=str(Path(tmp) / "ort"))
        for _ in range(number + 1):
            sess.run(None, {"x": x})
        events = json.loads(Path(sess.end_profiling()).read_text())
    durs = [e["dur"] for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
            and e.get("args", {}).get("op_name") in ("Conv", "FusedConv")]
    if len(durs) < number + 1:     # the first run is the warm-up, left out below
        raise SystemExit(f"onnxruntime's profile of the {C}-{O} conv has {len(durs)} Conv node times for "
                         f"{number + 1} runs")
    return min(durs[1:]) / 1e3


def _nodes_ms(exe, feeds, number):
    rep = exe.profile(feeds, number=number, repeat=1, show=False)
    return sum(r.ms for r in rep.rows if r.op != "layout_transform")


def bench(args):
    target = tessera.Target(f"c -num-threads={args.threads}" + (f" -mattr={args.mattr}" if args.mattr else ""))
    layers = {}
    for name in args.models:
        for key, count in model_layers(name).items():
            layers.setdefault(key, []).append(f"{name}x{count}")
    rows = []
    for (C, O, side, stride), where in sorted(layers.items(), key=lambda kv: (-kv[0][2], kv[0][0], kv[0][1])):
        tag = f"{C}-{O}x{side}s{stride}"
        if args.layers and tag not in args.layers:
            continue
        osz = (side - 1) // stride + 1
        x = np.random.default_rng(1).standard_normal((1, C, side, side)).astype("float32")
        xs = np.ascontiguousarray(x[:, :, ::stride, ::stride].reshape(C, osz * osz).T)
        db = None if args.shipped else False
        direct = tessera.compile(conv_graph(C, O, side, stride), target=target, opt_level=3, database=db)
        gemm = tessera.compile(gemm_graph(C, O, osz * osz), target=target, opt_level=3, database=db)
        sess = ort_conv(C, O, side, stride, args.threads)
        ref = sess.run(None, {"x": x})[0]
        yd = direct(x)
        yg = gemm(xs).T.reshape(ref.shape)
        scale = float(np.max(np.abs(ref)))
        for impl, y in (("direct", yd), ("gemm", yg)):
            if not np.allclose(y, ref, rtol=1e-4, atol=1e-4 * scale):
                raise SystemExit(f"{impl} on {tag}: max |err| {np.max(np.abs(y - ref)):.2e} against onnxruntime")

        def ort_ms(sess=sess, x=x):
            sess.run(None, {"x": x})
            best = float("inf")
            for _ in range(args.number):
                t0 = time.perf_counter()
                sess.run(None, {"x": x})
                best = min(best, time.perf_counter() - t0)
            return best * 1e3

        fns = {"direct": lambda exe=direct, x=x: _nodes_ms(exe, {"x": x}, args.number),
               "gemm": lambda exe=gemm, xs=xs: _nodes_ms(exe, {"x": xs}, args.number), "onnxruntime": ort_ms,
               "ort_node": lambda C=C, O=O, side=side, stride=stride, x=x: ort_node_ms(C, O, side, stride, args.threads,
                                                                                  x, args.number)}
        times = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, fn in fns.items():
                quiesce()
                times[k].append(fn())
        best = {k: min(v) for k, v in times.items()}
        flops = 2 * C * O * osz * osz
        row = {"layer": tag, "in": ",".join(where), "threads": args.threads}
        for k, t in best.items():
            row[f"{k}_ms"] = t
            row[f"{k}_gflops"] = flops / t / 1e6
        row["direct/ort"] = best["direct"] / best["onnxruntime"]
        row["direct/ort_node"] = best["direct"] / best["ort_node"]
        row["gemm/ort"] = best["gemm"] / best["onnxruntime"]
        row["direct/gemm"] = best["direct"] / best["gemm"]
        rows.append(row)
        _log(f"{tag}: " + ", ".join(f"{k} {t:.3f} ms" for k, t in best.items()))
    return rows


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mattr", default="", help="target attributes, e.g. -avx512f for AVX2 code on an AVX-512 CPU")
    p.add_argument("--models", default="resnet50,mobilenet_v2", help="comma-separated zoo models")
    p.add_argument("--layers", default="", help="comma-separated C-OxSIDEsSTRIDE layers (default: all)")
    p.add_argument("--rounds", type=int, default=6, help="timing rounds (round-robin)")
    p.add_argument("--number", type=int, default=5, help="calls a round")
    p.add_argument("--shipped", action="store_true",
                   help="apply the shipped tuning records (default: the default schedules, database=False)")
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.layers = [x for x in args.layers.split(",") if x]
    load0 = os.getloadavg()
    rows = bench(args)
    print(f"load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    report("conv1x1", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
