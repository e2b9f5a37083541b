"""Static memory planning: planned arena (peak) vs one buffer per tensor, for the zoo models.

    python benchmarks/memory_plan.py                               # ResNet-18, MobileNetV2, BERT-base
    python benchmarks/memory_plan.py --models resnet18 --opt-levels 0,2 --json plan.json
    python benchmarks/memory_plan.py --small                       # the test-size models

Each model comes from tessera.zoo (batch 1, seed 0), is optimized by tessera's graph passes at each
opt level (2 fuses ops, so fewer tensors reach memory) and planned by
tessera.graph.memory_plan (greedy, 64-byte alignment), then checked by
check_memory_plan. Columns: intermediates (node outputs that are not graph outputs), naive (the
sum of their sizes: one buffer per tensor), planned (the arena the ahead-of-time module allocates),
saving (naive / planned), live (the largest set of tensors alive at once: no plan can go below it),
and the bytes outside the arena (weights, inputs + outputs).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

DEFAULT = ["resnet18", "mobilenet_v2", "bert_base"]
SMALL = {
    "resnet18": dict(image_size=32),
    "resnet50": dict(image_size=32),
    "mobilenet_v2": dict(image_size=32, width_mult=0.5),
    "bert_base": dict(n_layers=2, seq_len=16, hidden=64, heads=4, ffn=128, vocab=500, max_position=64),
    "gpt2_block": dict(seq_len=16, hidden=64, heads=4, n_positions=64),
    "gpt2_small": dict(n_layers=2, seq_len=16, hidden=64, heads=4, vocab=500, n_positions=64),
}
MiB = float(1 << 20)


def plan_rows(name: str, opt_levels, small: bool) -> list:
    from tessera import frontend, zoo
    from tessera.graph.const_eval import bind_params
    from tessera.graph.passes import optimize
    from tessera.graph.memory_plan import check_memory_plan, plan_memory

    opts = SMALL.get(name, {}) if small else {}
    graph, params = frontend.from_onnx(zoo.get_model(name, **opts))
    g0 = bind_params(graph, params)
    rows = []
    for level in opt_levels:
        g = optimize(g0, level)
        t0 = time.perf_counter()
        plan = plan_memory(g)
        ms = (time.perf_counter() - t0) * 1e3
        check_memory_plan(g, plan)
        rows.append({"model": name + (" (small)" if small else ""), "opt": f"O{level}", "nodes": len(g.nodes),
                     "intermediates": len(plan.allocations), "naive_MiB": plan.naive_bytes / MiB,
                     "planned_MiB": plan.arena_bytes / MiB, "saving": plan.saving, "live_MiB": plan.live_bytes / MiB,
                     "weights_MiB": plan.constant_bytes / MiB, "io_MiB": (plan.input_bytes + plan.output_bytes) / MiB,
                     "plan_ms": ms, "naive_bytes": plan.naive_bytes, "planned_bytes": plan.arena_bytes})
    return rows


def main(argv=None) -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT), help=f"comma-separated zoo models (default {DEFAULT})")
    p.add_argument("--opt-levels", default="0,2", help="graph optimization levels to plan (default 0,2)")
    p.add_argument("--small", action="store_true", help="the test-size variants of the models")
    args = p.parse_args(argv)
    levels = [int(x) for x in args.opt_levels.split(",") if x.strip()]
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        print(f"planning {name} ...", file=sys.stderr, flush=True)
        rows.extend(plan_rows(name, levels, args.small))
    shown = [{k: v for k, v in r.items() if not k.endswith("_bytes")} for r in rows]
    _common.report("memory_plan", shown, args.json, extra={"full_rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
