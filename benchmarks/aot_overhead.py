"""Per-call overhead: the default path (tessera.compile with static shapes: the whole graph in one C
call over the static memory plan) against its own C entry timed inside the library, and the graph
executor (one Python step per node) on the same kernels.

    python benchmarks/aot_overhead.py                          # mlp8, mlp20, mobilenet_v2 (small), bert_base (small)
    python benchmarks/aot_overhead.py --models mlp8 --threads 1 --json aot.json

Per model, after tessera.compile(opt_level=2) (the default executor) and tessera.compile(...,
executor="graph"):
- graph_ms: wall time of one exe.run(inputs) on the graph executor (Python loop over nodes);
- default_ms: wall time of one exe.run(inputs) on the default path (input checks, output allocation,
  one ctypes call);
- entry_ms: the same library's own timer (PREFIX_time: the C loop, no Python at all);
- kernels_ms: the sum of the per-node C timers inside the entry (exe.profile);
- overhead_us: default_ms - entry_ms per call (the issue's bound: below 20 us for the 8-node mlp8);
- saved_us: graph_ms - default_ms per call, and per node.
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
    from tessera.runtime import AotExecutor

    graph, feed = model(name)
    target = f"c -num-threads={threads}"
    exe = tessera.compile(graph, target=target, opt_level=2)
    per_node = tessera.compile(graph, target=target, opt_level=2, executor="graph")
    if not isinstance(exe, AotExecutor):
        raise SystemExit(f"{name}: the default path is {type(exe).__name__}, not the one C entry (symbolic shapes?)")
    for a, b in zip(exe.run(feed), per_node.run(feed)):
        np.testing.assert_array_equal(a, b)
    graph_ms = wall_ms(lambda: per_node.run(feed), number, repeat)
    default_ms = wall_ms(lambda: exe.run(feed), number, repeat)
    entry_ms = min(exe.benchmark(feed, number=number, repeat=repeat).results) * 1e3
    kernels_ms = exe.profile(feed, number=number, repeat=3, show=False).total_ms
    nodes = len(exe.graph.nodes)
    return {"model": name, "threads": threads, "nodes": nodes, "graph_ms": graph_ms, "default_ms": default_ms,
            "entry_ms": entry_ms, "kernels_ms": kernels_ms, "overhead_us": (default_ms - entry_ms) * 1e3,
            "speedup": graph_ms / default_ms, "saved_us": (graph_ms - default_ms) * 1e3,
            "saved_us_per_node": (graph_ms - default_ms) * 1e3 / nodes}


def main(argv=None) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp8,mlp20,mobilenet_v2,bert_base",
                   help="mlpN (an N-layer MLP: N nodes once each dense + bias + relu is fused) and zoo models "
                        "(test-size variants); default mlp8,mlp20,mobilenet_v2,bert_base")
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
