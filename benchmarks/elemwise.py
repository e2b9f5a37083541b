"""Elementwise, broadcast and reduction ops with their default schedules beside numpy.

    python benchmarks/elemwise.py [--n 4194304] [--json PATH]

Each op is built from the registry (compute + default CPU schedule), timed inside the compiled
module, and numpy's equivalent is timed in the same process with the same arrays. A memory-bound
op (add) should run near memory bandwidth: the GB/s column counts the bytes read and written once.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np  # noqa: E402
from _common import parser, report  # noqa: E402

import tessera  # noqa: E402
from tessera import te  # noqa: E402
from tessera.graph.ir import TensorType  # noqa: E402
from tessera.ops.registry import ScheduleContext, get_op  # noqa: E402


def build(op_name, arrays, target, **attrs):
    op = get_op(op_name)
    attrs = op.normalize_attrs(attrs)
    types = [TensorType.of(a) for a in arrays]
    phs = [te.placeholder(a.shape, str(t.dtype), f"x{k}") for k, (a, t) in enumerate(zip(arrays, types))]
    outs = op.compute(phs, attrs)
    out_types = op.infer_types(types, attrs)
    sch = tessera.tir.Schedule(te.create_prim_func(phs + outs))
    op.schedule(sch, ScheduleContext(block=outs[0].name, attrs=attrs, target=target,
                                     input_types=tuple(types), output_types=tuple(out_types)))
    lib = tessera.build(sch, target=target)
    results = [np.empty([int(d) for d in t.shape], t.dtype.numpy()) for t in out_types]
    return lib, results


def numpy_seconds(fn, number, repeat):
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best.append((time.perf_counter() - t0) / number)
    return float(np.median(best))


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4 * 1024 * 1024, help="elements (default 4M)")
    p.add_argument("--threads", type=int, default=0, help="threads (default: every core)")
    args = p.parse_args()
    n = args.n
    target = tessera.Target(f"c -num-threads={args.threads}" if args.threads else "c")
    rng = np.random.default_rng(0)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    rows_m = max(1, n // 1024)
    m2 = a.reshape(rows_m, -1)
    bias = rng.random(m2.shape[1], dtype=np.float32)
    out_add = np.empty_like(a)
    out_b = np.empty_like(m2)
    out_s = np.empty(rows_m, np.float32)
    cases = [
        ("add", [a, b], {}, lambda: np.add(a, b, out=out_add), 3 * a.nbytes),
        ("multiply (row x bias)", [m2, bias], {}, lambda: np.multiply(m2, bias, out=out_b), 2 * m2.nbytes),
        ("exp", [a], {}, lambda: np.exp(a, out=out_add), 2 * a.nbytes),
        ("sum (rows)", [m2], {"axis": (1,)}, lambda: np.sum(m2, axis=1, out=out_s), m2.nbytes),
    ]
    rows = []
    for label, arrays, attrs, np_fn, nbytes in cases:
        op_name = label.split()[0]
        lib, outs = build(op_name, arrays, target, **attrs)
        lib(*arrays, *outs)
        t = lib.time_evaluator(number=20, repeat=5)(*arrays, *outs).median
        t_np = numpy_seconds(np_fn, 20, 5)
        rows.append({"op": label, "elements": n, "tessera_ms": t * 1e3, "numpy_ms": t_np * 1e3,
                     "numpy/tessera": t_np / t, "tessera_GB/s": nbytes / t / 1e9})
    report("elemwise", rows, args.json, {"threads": target.num_threads})


if __name__ == "__main__":
    main()
