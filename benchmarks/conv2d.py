"""conv2d of a ResNet layer (N=1, 64 -> 64 channels, 56x56, 3x3, pad 1) scheduled by hand, beside
PyTorch CPU in the same process, both on the same number of threads; the ratio is printed.

    python benchmarks/conv2d.py [--threads 2] [--rounds 10] [--owb 4 --ocb 16] [--json out.json]
(tile 4 pixels x 16 channels with AVX2, 14 x 32 with AVX-512)

tessera's kernel takes and returns NCHW tensors like PyTorch's (its layout changes are inside the
timed kernel): zero-padded NHWC input, weights packed per 16 output channels, the convolution as
one tensorized GEMM tile per output row, kernel tap and 4 x 16 block of pixels x channels
(tessera/tir/schedule/examples/conv2d.py). Timing: tessera inside the compiled module
(Module.time_evaluator), PyTorch around torch.nn.functional.conv2d, in alternating rounds; the
best and the median round of each are reported with the load average measured before the run.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parser, report  # noqa: E402

import tessera  # noqa: E402
from tessera.tir.schedule.examples.conv2d import conv2d_program, schedule_conv2d  # noqa: E402


def main():
    p = parser(__doc__)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--owb", type=int, default=None, help="output columns per micro-kernel tile "
                   "(default: 14 with AVX-512, else 4)")
    p.add_argument("--ocb", type=int, default=None, help="output channels per micro-kernel tile "
                   "(default: 32 with AVX-512, else 16)")
    args = p.parse_args()
    N, C, H, W, OC, K = 1, 64, 56, 56, 64, 3
    flops = 2.0 * N * OC * H * W * C * K * K
    load = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    w = rng.standard_normal((OC, C, K, K), dtype=np.float32) * 0.1
    target = tessera.Target(f"c -num-threads={args.threads}")
    wide = target.has_feature("avx512f")
    args.owb = args.owb or (14 if wide else 4)
    args.ocb = args.ocb or (32 if wide else 16)
    sch = schedule_conv2d(conv2d_program(N, C, H, W, OC, K, K, pad=1, ocb=args.ocb), owb=args.owb, ocb=args.ocb,
                          target=target)
    lib = tessera.build(sch, target=target)
    y = np.zeros((N, OC, H, W), np.float32)
    lib(x, w, y)
    try:
        import torch
    except ImportError:
        torch = None
    rows, extra = [], {"load_average": load, "threads": args.threads, "goal_vs_torch": 0.7}
    if torch is not None:
        torch.set_num_threads(args.threads)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        with torch.no_grad():
            ref = torch.nn.functional.conv2d(tx, tw, padding=1).numpy()
        np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3)
    ts, rs = [], []
    for _ in range(args.rounds):
        ts.append(min(lib.time_evaluator(number=10, repeat=1)(x, w, y).results))
        if torch is not None:
            with torch.no_grad():
                t0 = time.perf_counter()
                for _ in range(10):
                    torch.nn.functional.conv2d(tx, tw, padding=1)
                rs.append((time.perf_counter() - t0) / 10)
    ts = np.array(ts)
    g_t, gm_t = flops / ts.min() / 1e9, flops / np.median(ts) / 1e9
    if torch is not None:
        rs = np.array(rs)
        g_r, gm_r = flops / rs.min() / 1e9, flops / np.median(rs) / 1e9
        rows.append({"kernel": f"PyTorch {torch.__version__} conv2d", "ms best": rs.min() * 1e3,
                     "GFLOPS best": g_r, "GFLOPS median": gm_r, "vs torch": 1.0})
        extra.update({"torch": torch.__version__, "ratio_best": g_t / g_r, "ratio_median": gm_t / gm_r,
                      "met": bool(g_t / g_r >= 0.7)})
    rows.append({"kernel": f"tessera (tile {args.owb} px x {args.ocb} ch)", "ms best": ts.min() * 1e3,
                 "GFLOPS best": g_t, "GFLOPS median": gm_t, "vs torch": g_t / g_r if torch is not None else ""})
    print(f"# conv2d 1x64x56x56, 64 filters 3x3, pad 1, {args.threads} threads; load average before the run: {load:.2f}"
          + ("" if torch is not None else "; PyTorch is not installed (pip install torch==2.13.0)"))
    report("conv2d", rows, args.json, extra)


if __name__ == "__main__":
    main()
