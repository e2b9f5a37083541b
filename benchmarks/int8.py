"""int8 inference on the CPU: quantized models through tessera against tessera fp32 and ONNX Runtime int8.

    python benchmarks/int8.py --threads 2 --json int8.json
    python benchmarks/int8.py --models resnet18 --small          # a quick check (32x32 images, 2 layers)

Each zoo model (seeded random weights) is made a QDQ model in this run, as a user would make one:
onnxruntime.quantization.quant_pre_process (batch norm folded), then quantize_static with per-channel
int8 weights, uint8 activations and fixed calibration inputs (seeded normal images; BERT: seeded token
ids). The same QDQ file runs in ONNX Runtime (its QDQ fusion into integer kernels), in OpenVINO where
it imports (`pip install openvino`: its CPU plugin's low-precision transformations) and in tessera
(graph/passes/fake_quantization_to_integer + the int8 kernels); tessera fp32 runs the original model.
All at `--threads` threads, timed in interleaved rounds in one process (medians and minima of the
calls). Agreement: the int8 outputs of tessera and ONNX Runtime in output quantization steps.
The machine may be shared: the load average is printed with the figures; quote ratios, not times.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import tessera  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert_base")
SMALL = {"resnet18": dict(image_size=32), "resnet50": dict(image_size=32),
         "mobilenet_v2": dict(image_size=32, width_mult=0.5),
         "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64)}


def _feeds(name, opts, seed):
    """A seeded input of the model's shapes: normal images, token ids below the vocabulary."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in tessera.zoo.sample_input(name, **opts).items():
        if v.dtype.kind == "f":
            out[k] = rng.standard_normal(v.shape).astype(v.dtype)
        elif k == "input_ids":
            out[k] = rng.integers(0, int(v.max()) + 1, v.shape).astype(v.dtype)
        else:
            out[k] = v
    return out


def quantized(name, opts, folder, calib=8):
    """(fp32 model path, QDQ model path) made with onnxruntime.quantization (module docstring)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    fp32 = os.path.join(folder, f"{name}.onnx")
    onnx.save(tessera.zoo.get_model(name, **opts), fp32)
    pre = os.path.join(folder, f"{name}_pre.onnx")
    quant_pre_process(fp32, pre)
    feeds = [_feeds(name, opts, 100 + i) for i in range(calib)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    qdq = os.path.join(folder, f"{name}_qdq.onnx")
    quantize_static(pre, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return fp32, qdq


def bench(name, args, rows):
    import onnx
    import onnxruntime as ort

    opts = SMALL[name] if args.small else {}
    with tempfile.TemporaryDirectory() as folder:
        fp32, qdq = quantized(name, opts, folder)
        feeds = _feeds(name, opts, 1)
        target = f"c -num-threads={args.threads}"
        t0 = time.perf_counter()
        g, p = tessera.frontend.from_onnx(onnx.load(fp32))
        exe32 = tessera.compile(g, p, target=target)
        c32 = time.perf_counter() - t0
        t0 = time.perf_counter()
        g8, p8 = tessera.frontend.from_onnx(onnx.load(qdq))
        exe8 = tessera.compile(g8, p8, target=target)
        c8 = time.perf_counter() - t0
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess8 = ort.InferenceSession(qdq, so, providers=["CPUExecutionProvider"])
        sess32 = ort.InferenceSession(fp32, so, providers=["CPUExecutionProvider"])
        ours8 = exe8.run(feeds)
        ref8 = sess8.run(None, feeds)
        scale = _output_scale(qdq)
        agree = max(int(np.rint(np.abs(a.astype(np.float64) - b) / scale).max()) for a, b in zip(ours8, ref8))
        fns = {"tessera fp32": lambda: exe32.run(feeds), "tessera int8": lambda: exe8.run(feeds),
               "onnxruntime int8": lambda: sess8.run(None, feeds), "onnxruntime fp32": lambda: sess32.run(None, feeds)}
        ov8, ov_agree = _openvino(qdq, feeds, args.threads, ours8, scale)
        if ov8 is not None:
            fns["openvino int8"] = ov8
        t = _common.time_interleaved(fns, 1, args.repeat, args.budget, least=6)
    ms = {k: v[0] * 1e3 for k, v in t.items()}
    row = {"model": name + (" (small)" if args.small else ""), "threads": args.threads,
           **{f"{k} ms": round(v, 3) for k, v in ms.items()},
           "int8 speedup over tessera fp32": round(ms["tessera fp32"] / ms["tessera int8"], 2),
           "tessera int8 / ORT int8 time": round(ms["tessera int8"] / ms["onnxruntime int8"], 2),
           "max |tessera - ORT| int8 steps": agree,
           **({"tessera int8 / OpenVINO int8 time": round(ms["tessera int8"] / ms["openvino int8"], 2),
               "max |tessera - OpenVINO| int8 steps": ov_agree} if "openvino int8" in ms else {}),
           "compile s fp32/int8": f"{c32:.0f}/{c8:.0f}", "load": _common.load_average_text()}
    rows.append(row)
    print(row, flush=True)


def _openvino(qdq, feeds, threads, ours8, scale):
    """(a call of OpenVINO's CPU plugin on the QDQ file at `threads` threads, its largest distance from
    tessera's int8 outputs in output steps), or (None, None) where openvino does not import (pip install
    openvino). OpenVINO reads the QuantizeLinear / DequantizeLinear pairs as FakeQuantize and runs the
    groups its low-precision transformations match in int8."""
    try:
        import openvino as ov
    except ImportError:
        return None, None
    core = ov.Core()
    compiled = core.compile_model(core.read_model(qdq), "CPU", {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
                                                                "PERFORMANCE_HINT": "LATENCY"})
    req = compiled.create_infer_request()
    ordered = [feeds[i.get_any_name()] for i in compiled.inputs]

    def call():
        return req.infer(ordered)

    res = call()
    got = [res[o] for o in compiled.outputs]
    agree = max(int(np.rint(np.abs(a.astype(np.float64) - np.asarray(b, np.float64)) / scale).max())
                for a, b in zip(ours8, got))
    return call, agree


def _output_scale(path) -> float:
    """The scale of the model's first output's DequantizeLinear (its quantization step)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(path)
    inits = {i.name: i for i in m.graph.initializer}
    out = m.graph.output[0].name
    for n in m.graph.node:
        if n.output[0] == out and n.op_type == "DequantizeLinear":
            return float(numpy_helper.to_array(inits[n.input[1]]))
    return 1.0


def main(argv=None) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--budget", type=float, default=20.0, help="seconds of timing per runner and model")
    p.add_argument("--small", action="store_true", help="the models at test size (a quick check)")
    args = p.parse_args(argv)
    rows = []
    print(f"CPU: {_common.machine()['cpu_model']}, load average {_common.load_average_text()} "
          f"(a shared machine: quote ratios)", flush=True)
    for name in args.models.split(","):
        bench(name.strip(), args, rows)
    _common.report("int8", rows, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
