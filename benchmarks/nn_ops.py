"""Single nn operators, untuned: tessera's default schedules beside ONNX Runtime, in the same run.

    python benchmarks/nn_ops.py [--threads 1,2] [--cases conv2d_56,matmul_128] [--opt-level 2,3] [--json PATH]

Each case is a one-node ONNX model (weights as initializers, as in a real model). tessera runs it
through from_onnx -> tessera.compile (its default CPU schedules) at each --opt-level (one row each;
at 3 alter_layout gives convolutions and pools the blocked NCHW[x]c layout with weights packed at
compile time, and the layout transforms of the input and output are part of the timed kernels) and
times the node's kernels with their C timer (best of the repeats, summed over the node's kernels); ONNX Runtime runs the same model with
intra_op_num_threads = threads and is timed around session.run (best of the repeats, so its
~20 us of Python call overhead is included). ratio = tessera / onnxruntime: below 1 tessera is
faster. Every row also checks tessera's output against ONNX Runtime's.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

RNG = np.random.default_rng(0)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# name: (op, runtime inputs, initializers, attributes)
CASES = {
    "conv2d_56x56x64_3x3": ("Conv", {"x": _rand(1, 64, 56, 56)}, {"w": _rand(64, 64, 3, 3)}, dict(pads=[1, 1, 1, 1])),
    "conv2d_14x14x256_3x3": ("Conv", {"x": _rand(1, 256, 14, 14)}, {"w": _rand(256, 256, 3, 3)},
                             dict(pads=[1, 1, 1, 1])),
    "conv2d_224x224x3_7x7s2": ("Conv", {"x": _rand(1, 3, 224, 224)}, {"w": _rand(64, 3, 7, 7)},
                               dict(pads=[3, 3, 3, 3], strides=[2, 2])),
    "dense_1x512x1000": ("Gemm", {"x": _rand(1, 512)}, {"w": _rand(1000, 512), "b": _rand(1000)}, dict(transB=1)),
    "matmul_128x768x768": ("MatMul", {"x": _rand(128, 768)}, {"w": _rand(768, 768)}, {}),
    "conv2d_56x56x64_1x1_256": ("Conv", {"x": _rand(1, 64, 56, 56)}, {"w": _rand(256, 64, 1, 1)}, {}),
    "conv2d_7x7x512_3x3": ("Conv", {"x": _rand(1, 512, 7, 7)}, {"w": _rand(512, 512, 3, 3)},
                           dict(pads=[1, 1, 1, 1])),
    "dwconv_112x112x32_3x3": ("Conv", {"x": _rand(1, 32, 112, 112)}, {"w": _rand(32, 1, 3, 3)},
                              dict(pads=[1, 1, 1, 1], group=32)),
    "dwconv_56x56x144_3x3s2": ("Conv", {"x": _rand(1, 144, 56, 56)}, {"w": _rand(144, 1, 3, 3)},
                               dict(pads=[1, 1, 1, 1], strides=[2, 2], group=144)),
    "maxpool_112x112x64_3x3s2": ("MaxPool", {"x": _rand(1, 64, 112, 112)}, {},
                                 dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "avgpool_56x56x64_3x3s2": ("AveragePool", {"x": _rand(1, 64, 56, 56)}, {},
                               dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "globalavgpool_7x7x512": ("GlobalAveragePool", {"x": _rand(1, 512, 7, 7)}, {}, {}),
    "softmax_12x128x128": ("Softmax", {"x": _rand(12, 128, 128)}, {}, dict(axis=-1)),
    "layernorm_128x768": ("LayerNormalization", {"x": _rand(128, 768)}, {"g": _rand(768), "b": _rand(768)},
                          dict(axis=-1)),
}


def model_of(op, inputs, inits, attrs):
    from onnx import helper, numpy_helper

    node = helper.make_node(op, list(inputs) + list(inits), ["y"], **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info(n, 1, a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    # the IR version that matches the opset: older onnxruntime builds refuse newer ones
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])


def time_tessera(model, feeds, threads, repeat, opt_level=2):
    import tessera
    from tessera.frontend import from_onnx

    graph, params = from_onnx(model)
    exe = tessera.compile(graph, params, target=f"c -num-threads={threads}", opt_level=opt_level)
    out = exe.run(feeds)[0]
    best = None
    for _ in range(repeat):
        rows = exe.profile(feeds, number=10, repeat=3, show=False).rows
        total = sum(r.ms for r in rows)
        best = total if best is None else min(best, total)
    return best, out


def time_ort(model, feeds, threads, repeat):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    out = sess.run(None, feeds)[0]
    for _ in range(3):
        sess.run(None, feeds)
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(10):
            sess.run(None, feeds)
        ms = (time.perf_counter() - t) / 10 * 1e3
        best = ms if best is None else min(best, ms)
    return best, out


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--cases", default="", help="comma-separated case name prefixes (default: all)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--opt-level", default="2,3", help="comma-separated tessera.compile opt levels, one row each "
                   "(default 2,3)")
    args = p.parse_args(argv)
    levels = [int(v) for v in args.opt_level.split(",")]
    wanted = [c for c in args.cases.split(",") if c]
    rows = []
    for name, (op, inputs, inits, attrs) in CASES.items():
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        model = model_of(op, inputs, inits, attrs)
        for threads in (int(t) for t in args.threads.split(",")):
            # ONNX Runtime before and after tessera's rows: its best is taken over both (load drift)
            o_ms, o_out = time_ort(model, inputs, threads, args.repeat)
            results = [(lvl, *time_tessera(model, inputs, threads, args.repeat, lvl)) for lvl in levels]
            o_ms = min(o_ms, time_ort(model, inputs, threads, args.repeat)[0])
            for lvl, t_ms, t_out in results:
                err = float(np.max(np.abs(np.asarray(t_out, np.float64) - o_out))) if t_out.shape == o_out.shape \
                    else None
                ok = err is not None and np.allclose(t_out, o_out, rtol=1e-4, atol=1e-4)
                rows.append({"case": name, "threads": threads, "opt_level": lvl, "tessera_ms": round(t_ms, 4),
                             "onnxruntime_ms": round(o_ms, 4), "ratio": round(t_ms / o_ms, 2), "max_abs_err": err,
                             "ok": bool(ok)})
                print(f"{name:28s} threads={threads} O{lvl}  tessera {t_ms:8.3f} ms  onnxruntime {o_ms:8.3f} ms  "
                      f"ratio {t_ms / o_ms:5.2f}  {'ok' if ok else 'MISMATCH'}", file=sys.stderr, flush=True)
    print(f"# load average after the run: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", file=sys.stderr)
    _common.report("nn_ops", rows, args.json)


if __name__ == "__main__":
    main()
