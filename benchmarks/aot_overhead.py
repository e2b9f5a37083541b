"""Per-call overhead: the graph executor (one Python step per node) vs the ahead-of-time module
(the whole graph in one C call over the static memory plan), on the same kernels.

    python benchmarks/aot_overhead.py                          # mlp20, mobilenet_v2 (small), bert_base (small)
    python benchmarks/aot_overhead.py --models mlp20 --threads 1 --json aot.json

Per model, after tessera.compile(opt_level=2) and build_aot on the same GraphExecutor:
- graph_ms: wall time of one exe.run(inputs) (graph executor, Python loop over nodes);
- aot_py_ms: wall time of one aot.run(inputs) (one ctypes call: input checks, output allocation);
- aot_c_ms: the AOT library's own timer (PREFIX_time: the C loop, no Python at all);
- kernels_ms: the sum of the per-node C timers (exe.profile): the work both do;
- saved_us: graph_ms - aot_py_ms per call, and per node.
Wall times are the minimum over --repeat rounds of the mean of --number calls (the machine is shared:
the minimum is the least disturbed). Ratios are what to quote.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import _common  # noqa: E402

SMALL = {
    "mobilenet_v2": dict(image_size=32, width_mult=0.5),
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "resnet18": dict(image_size=32),
}


def mlp(layers=20, width=64, batch=1):
    """A `layers`-deep MLP (dense + bias + relu) with seeded weights; its graph and input."""
    from tessera.graph import Builder

    rng = np.random.default_rng(0)
    gb = Builder(f"mlp{layers}")
    v = gb.input("x", (batch, width))
    for i in range(layers):
        w = gb.const((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), f"fc{i}.weight")
        b = gb.const((0.1 * rng.standard_normal((1, width))).astype(np.float32), f"fc{i}.bias")
        v = gb.op("nn.dense", v, w)
        v = gb.op("add", v, b)
        if i + 1 < layers:
            v = gb.op("nn.relu", v)
    gb.output(v)
    return gb.finish(), {"x": rng.standard_normal((batch, width)).astype(np.float32)}


def model(name: str):
    if name.startswith("mlp"):
        return mlp(int(name[3:] or 20))
    from tessera import frontend, zoo

    opts = SMALL.get(name, {})
    graph, params = frontend.from_onnx(zoo.get_model(name, **opts))
    from tessera.graph.const_eval import bind_params

    return bind_params(graph, params), zoo.sample_input(name, **opts)


def wall_ms(fn, number, repeat) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e3


def measure(name: str, threads: int, number: int, repeat: int) -> dict:
    import tessera
    from tessera.graph.aot import build_aot

    graph, feed = model(name)
    exe = tessera.compile(graph, target=f"c -num-threads={threads}")
    aot = build_aot(exe)
    for a, b in zip(exe.run(feed), aot.run(feed)):
        np.testing.assert_array_equal(a, b)
    graph_ms = wall_ms(lambda: exe.run(feed), number, repeat)
    aot_py_ms = wall_ms(lambda: aot.run(feed), number, repeat)
    aot_c_ms = min(aot.benchmark(feed, number=number, repeat=repeat).results) * 1e3
    kernels_ms = exe.profile(feed, number=number, repeat=3, show=False).total_ms
    nodes = len(exe.graph.nodes)
    return {"model": name, "threads": threads, "nodes": nodes, "graph_ms": graph_ms, "aot_py_ms": aot_py_ms,
            "aot_c_ms": aot_c_ms, "kernels_ms": kernels_ms, "speedup": graph_ms / aot_py_ms,
            "saved_us": (graph_ms - aot_py_ms) * 1e3, "saved_us_per_node": (graph_ms - aot_py_ms) * 1e3 / nodes,
            "py_call_us": (aot_py_ms - aot_c_ms) * 1e3}


def main(argv=None) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp20,mobilenet_v2,bert_base",
                   help="mlpN (an N-layer MLP) and zoo models (test-size variants); "
                        "default mlp20,mobilenet_v2,bert_base")
    p.add_argument("--threads", type=int, default=1, help="kernel threads (default 1)")
    p.add_argument("--number", type=int, default=20, help="calls per timed round (default 20)")
    p.add_argument("--repeat", type=int, default=7, help="timed rounds; the best is kept (default 7)")
    args = p.parse_args(argv)
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        rows.append(measure(name, args.threads, args.number, args.repeat))
    _common.report("aot_overhead", rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
