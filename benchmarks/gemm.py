"""fp32 GEMM: tessera's kernel beside numpy's BLAS in the same run, GFLOPS and the ratio.

    python benchmarks/gemm.py [--size 1024] [--json out.json]
At this stage the tessera kernel is the unscheduled TE GEMM (the schedule issue adds tuned ones).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import parser, report  # noqa: E402

import tessera  # noqa: E402
from tessera import te  # noqa: E402


def numpy_gflops(a, b, flops, repeat=5):
    c = a @ b  # warm
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        best.append(time.perf_counter() - t0)
    return flops / float(np.median(best)) / 1e9


def main():
    p = parser(__doc__)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    n = args.size
    flops = 2.0 * n * n * n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ref_gflops = numpy_gflops(a, b, flops)

    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    lib = tessera.build(te.create_prim_func([A, B, C]), target=f"c -num-threads={args.threads}")
    c = np.zeros((n, n), np.float32)
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-2)
    res = lib.time_evaluator(number=1, repeat=3)(a, b, c)
    rows = [
        {"kernel": "numpy (BLAS)", "size": n, "ms": flops / ref_gflops / 1e6, "GFLOPS": ref_gflops, "ratio": 1.0},
        {"kernel": "tessera unscheduled", "size": n, "ms": res.median * 1e3, "GFLOPS": flops / res.median / 1e9,
         "ratio": flops / res.median / 1e9 / ref_gflops},
    ]
    report("gemm", rows, args.json)


if __name__ == "__main__":
    main()
