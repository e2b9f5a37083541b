"""The `tessera` command line: `tessera demo` runs a built-in example end to end."""
from __future__ import annotations

import argparse
import sys
import time


def _demo(args) -> int:
    import numpy as np

    import tessera
    from tessera import te

    n, m, k = args.size, args.size, args.size
    print(f"tessera demo: C = A @ B with M=N=K={n} (float32), symbolic M")
    M = te.var("M")
    A = te.placeholder((M, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((M, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    t0 = time.perf_counter()
    func = te.create_prim_func([A, B, C])
    lib = tessera.build(func, target=args.target)
    build_ms = (time.perf_counter() - t0) * 1e3
    rng = np.random.default_rng(0)
    a = tessera.nd.array(rng.standard_normal((n, k), dtype=np.float32))
    b = tessera.nd.array(rng.standard_normal((k, m), dtype=np.float32))
    c = tessera.nd.empty((n, m), "float32")
    lib(a, b, c)
    ref = a.numpy() @ b.numpy()
    err = float(np.max(np.abs(c.numpy() - ref)))
    ok = np.allclose(c.numpy(), ref, rtol=1e-4, atol=1e-3)
    print("\n--- the program (TensorIR) ---")
    print(func.script())
    print("--- the generated C ---")
    print(lib.get_source())
    res = lib.time_evaluator(number=3, repeat=3)(a, b, c)
    gflops = 2 * n * m * k / res.median / 1e9
    print(f"--- result ---\ncompile (TE -> .so): {build_ms:.1f} ms   max |error| vs numpy: {err:.2e}   "
          f"{'OK' if ok else 'MISMATCH'}")
    print(f"unscheduled kernel: {res.median * 1e3:.3f} ms median ({gflops:.2f} GFLOPS); "
          f"the schedule primitives (tir.Schedule) make it fast")
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tessera", description="tessera deep learning compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile, run, check and time a built-in TE program")
    demo.add_argument("--size", type=int, default=256, help="matrix size (default 256)")
    demo.add_argument("--target", default="c", help='target string (default "c")')
    demo.set_defaults(fn=_demo)
    args = parser.parse_args(argv)
    from .errors import TesseraError

    try:
        return args.fn(args)
    except TesseraError as e:
        print(f"tessera: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
