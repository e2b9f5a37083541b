"""conv2d of a ResNet layer (N=1, 64 -> 64 channels, 56x56, 3x3, pad 1): tessera beside ONNX Runtime
and PyTorch CPU in the same process, on the same number of threads; ratios are printed.

    python benchmarks/conv2d.py [--threads 1,2] [--rounds 10] [--layer 64,64,56,3,1,1] [--json out.json]

Rows, per thread count:
- onnxruntime: a one-node Conv model (weights as an initializer), timed around session.run;
- PyTorch (when installed): torch.nn.functional.conv2d on NCHW tensors;
- tessera NCHW8c: nn.contrib_conv2d_NCHWc with its default schedule (the x86 row micro-kernel,
  tir/tensor_intrin/x86_conv.py), data already blocked and weights packed, as inside a model compiled at
  opt_level 3 (graph/passes/alter_layout.py); its C timer;
- tessera NCHW8c + layout transforms: the same plus NCHW -> NCHW8c of the input and back, i.e. the
  conv as a one-op model would run it alone;
- tessera example schedule: the hand-written NCHW-in/NCHW-out schedule around the GEMM micro-kernel
  (tessera/tir/schedule/examples/conv2d.py; its layout changes and weight packing are inside).
Timing alternates between the rows round by round (load drift on a shared machine hits them alike),
each row's round after the previous row's spinning worker threads have parked and one untimed round;
the best and the median round are reported with the load average before and after the run.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parser, quiesce, report  # noqa: E402

import tessera  # noqa: E402


def _blocked_conv(x_shape, w_shape, pad, stride, block, threads):
    """(module, packed input, packed weight, output buffer) of nn.contrib_conv2d_NCHWc."""
    from tessera import te
    from tessera.graph.ir import TensorType
    from tessera.ops.registry import ScheduleContext, get_op

    N, C, H, W = x_shape
    O, _, KH, KW = w_shape
    ib = block if C % block == 0 else C
    op = get_op("nn.contrib_conv2d_NCHWc")
    attrs = op.normalize_attrs(dict(strides=(stride, stride), padding=(pad,) * 4, data_layout=f"NCHW{ib}c",
                                    kernel_layout=f"OIHW{ib}i{block}o", out_layout=f"NCHW{block}c"))
    xs, ws = (N, C // ib, H, W, ib), (O // block, C // ib, KH, KW, ib, block)
    types = [TensorType(xs), TensorType(ws)]
    (ot,) = op.infer_types(types, attrs)
    d, k = te.placeholder(xs, name="data"), te.placeholder(ws, name="weight")
    (out,) = op.compute([d, k], attrs)
    sch = tessera.tir.Schedule(te.create_prim_func([d, k, out]))
    target = tessera.Target(f"c -num-threads={threads}")
    op.schedule(sch, ScheduleContext(block=out.name, attrs=attrs, target=target, input_types=tuple(types),
                                     output_types=(ot,)))
    return tessera.build(sch, target=target), ib, ot.shape


def _transform(shape, src, dst, threads):
    from tessera import te
    from tessera.graph.ir import TensorType
    from tessera.ops.registry import ScheduleContext, get_op

    op = get_op("layout_transform")
    attrs = op.normalize_attrs(dict(src_layout=src, dst_layout=dst))
    (ot,) = op.infer_types([TensorType(shape)], attrs)
    d = te.placeholder(shape, name="data")
    (out,) = op.compute([d], attrs)
    sch = tessera.tir.Schedule(te.create_prim_func([d, out]))
    target = tessera.Target(f"c -num-threads={threads}")
    op.schedule(sch, ScheduleContext(block=out.name, attrs=attrs, target=target, input_types=(TensorType(shape),),
                                     output_types=(ot,)))
    return tessera.build(sch, target=target), ot.shape


def _ort(x, w, pad, stride, threads):
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pad] * 4, strides=[stride] * 2)
    g = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", 1, x.shape)],
                          [helper.make_empty_tensor_value_info("y")], initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model_gen_version(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def bench(args, threads, rows):
    C, O, H, K, stride, pad = args.layer
    N, W = 1, H
    OH = (H + 2 * pad - K) // stride + 1
    flops = 2.0 * N * O * OH * OH * C * K * K
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    w = (rng.standard_normal((O, C, K, K), dtype=np.float32) * 0.1).astype(np.float32)
    sess = _ort(x, w, pad, stride, threads)
    ref = sess.run(None, {"x": x})[0]
    block = max(8, tessera.Target("c").vector_bits // 32)
    block = block if O % block == 0 else 8
    conv, ib, oshape = _blocked_conv(x.shape, w.shape, pad, stride, block, threads)
    to_b, xbs = _transform(x.shape, "NCHW", f"NCHW{ib}c", threads)
    from_b, _ = _transform(oshape, f"NCHW{block}c", "NCHW", threads)
    xb = np.ascontiguousarray(x.reshape(N, C // ib, ib, H, W).transpose(0, 1, 3, 4, 2))
    wb = np.ascontiguousarray(w.reshape(O // block, block, C // ib, ib, K, K).transpose(0, 2, 4, 5, 3, 1))
    yb = np.zeros(oshape, np.float32)
    y = np.zeros(ref.shape, np.float32)
    conv(xb, wb, yb)
    from_b(yb, y)
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3)
    timers = {"tessera NCHW{}c (weights pre-packed)".format(block): lambda: min(
        conv.time_evaluator(number=args.number, repeat=1)(xb, wb, yb).results)}
    x_b = np.zeros(xbs, np.float32)
    timers[f"tessera NCHW{block}c + layout transforms"] = lambda: (
        min(to_b.time_evaluator(number=args.number, repeat=1)(x, x_b).results)
        + min(conv.time_evaluator(number=args.number, repeat=1)(x_b, wb, yb).results)
        + min(from_b.time_evaluator(number=args.number, repeat=1)(yb, y).results))
    if stride == 1 and K == 3 and pad == 1 and O % 16 == 0 and W % 4 == 0:
        from tessera.tir.schedule.examples.conv2d import conv2d_program, schedule_conv2d

        target = tessera.Target(f"c -num-threads={threads}")
        wide = target.has_feature("avx512f")
        owb, ocb = (14, 32) if wide and W % 14 == 0 and O % 32 == 0 else (4, 16)
        ex = tessera.build(schedule_conv2d(conv2d_program(N, C, H, W, O, K, K, pad=1, ocb=ocb), owb=owb, ocb=ocb,
                                           target=target), target=target)
        ye = np.zeros(ref.shape, np.float32)
        ex(x, w, ye)
        np.testing.assert_allclose(ye, ref, rtol=1e-3, atol=1e-3)
        timers[f"tessera example schedule ({owb} px x {ocb} ch tile)"] = lambda: min(
            ex.time_evaluator(number=args.number, repeat=1)(x, w, ye).results)

    def wall(fn):
        t0 = time.perf_counter()
        for _ in range(args.number):
            fn()
        return (time.perf_counter() - t0) / args.number

    refs = {"onnxruntime": lambda: wall(lambda: sess.run(None, {"x": x}))}
    try:
        import torch

        torch.set_num_threads(threads)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        with torch.no_grad():
            np.testing.assert_allclose(torch.nn.functional.conv2d(tx, tw, padding=pad, stride=stride).numpy(), ref,
                                       rtol=1e-3, atol=1e-3)

        def run_torch():
            with torch.no_grad():
                torch.nn.functional.conv2d(tx, tw, padding=pad, stride=stride)
        refs[f"PyTorch {torch.__version__}"] = lambda: wall(run_torch)
    except ImportError:
        pass
    times = {k: [] for k in list(refs) + list(timers)}
    for _ in range(args.rounds):
        for k, fn in list(refs.items()) + list(timers.items()):
            quiesce()                  # the previous row's spinning worker threads parked
            fn()                       # one untimed round: caches and thread pool warm again
            times[k].append(fn())
    best = {k: min(v) for k, v in times.items()}
    ort_best, ort_med = best["onnxruntime"], statistics.median(times["onnxruntime"])
    torch_key = next((k for k in refs if k.startswith("PyTorch")), None)
    for k, v in times.items():
        row = {"threads": threads, "kernel": k, "ms best": min(v) * 1e3, "ms median": statistics.median(v) * 1e3,
               "GFLOPS best": flops / min(v) / 1e9, "vs ort (best)": min(v) / ort_best,
               "vs ort (median)": statistics.median(v) / ort_med}
        if torch_key:
            row["vs torch (best)"] = min(v) / best[torch_key]
        rows.append(row)


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--number", type=int, default=10, help="calls per timed round")
    p.add_argument("--layer", default="64,64,56,3,1,1", help="C,O,H(=W),K,stride,pad (default: ResNet layer1)")
    args = p.parse_args()
    args.layer = [int(v) for v in args.layer.split(",")]
    load = os.getloadavg()
    rows = []
    for t in (int(v) for v in args.threads.split(",")):
        bench(args, t, rows)
    after = os.getloadavg()
    C, O, H, K, s, pad = args.layer
    print(f"# conv2d 1x{C}x{H}x{H}, {O} filters {K}x{K}, stride {s}, pad {pad}; load average before "
          f"{load[0]:.2f}, after {after[0]:.2f} ({os.cpu_count()} CPUs); ratios: tessera / reference, below 1 "
          f"tessera is faster")
    report("conv2d", rows, args.json, {"load_average_before": load, "load_average_after": after,
                                       "layer": args.layer})


if __name__ == "__main__":
    main()
