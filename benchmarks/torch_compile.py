"""PyTorch models through torch.compile: eager, Inductor (without and with freezing) and
backend="tessera", in one run.

    python benchmarks/torch_compile.py                        # ResNet-18/50, MobileNetV2, BERT-base, GPT-2
    python benchmarks/torch_compile.py --models resnet18,bert_base --threads 2 --json tc.json
    python benchmarks/torch_compile.py --small                # the test-size models (a quick smoke run)

The models are written in PyTorch (tests/frontend/torch_models.py: the published architectures,
random weights, batch 1; BERT-base and GPT-2 small at sequence length 128), in eval mode under
torch.inference_mode, torch.set_num_threads(--threads). Per model:
- eager: the module itself;
- inductor: torch.compile(model) (Inductor's defaults); inductor_freeze: the same with
  options={"freezing": True} (weights folded in as constants, as tessera does);
- tessera: torch.compile(model, backend="tessera", options={"target": "c -num-threads=N"}).
Compile time is the first call's wall time less one steady call's, from a cold cache: each compiler
gets a fresh empty cache folder for this run (TORCHINDUCTOR_CACHE_DIR, Inductor's FX graph cache
off; TESSERA_CACHE_DIR), unless --warm-cache; a two-layer MLP is compiled by each first, so that the
process's one-time costs are charged to no model. Latency is the median wall time of a call over
--repeat calls after --warmup, the four timed round-robin, a block of calls each per round after the
process's worker threads have gone idle (_common.quiesce), so load drifts on a shared machine hit
them alike; the minimum is printed too (steadier on a loaded machine). Every output is checked
against eager (max |err| relative to the output's largest value; ok within 1e-4) and every tessera
row says whether any op was left to eager. Ratios are times over tessera's: above 1 tessera is faster.
The last table gives the geometric means over the models.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests" / "frontend"))

import _common  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert_base", "gpt2")
CONFIGS = ("eager", "inductor", "inductor_freeze", "tessera")


def make_model(name: str, small: bool):
    """(module, example inputs) of model `name` (test sizes with small)."""
    import torch
    import torch_models as M

    torch.manual_seed(0)
    seq = 16 if small else 128
    if name == "resnet18":
        m = M.ResNet(M.BasicBlock, (1, 1, 1, 1), width=8, classes=10) if small else M.ResNet(M.BasicBlock, (2, 2, 2, 2))
        x = (torch.randn(1, 3, 32 if small else 224, 32 if small else 224),)
    elif name == "resnet50":
        m = M.ResNet(M.Bottleneck, (1, 1, 1, 1), width=8, classes=10) if small else M.ResNet(M.Bottleneck, (3, 4, 6, 3))
        x = (torch.randn(1, 3, 32 if small else 224, 32 if small else 224),)
    elif name == "mobilenet_v2":
        m = M.MobileNetV2(0.25, settings=((1, 16, 1, 1), (6, 24, 2, 2)), classes=10, last=64) if small \
            else M.MobileNetV2()
        x = (torch.randn(1, 3, 32 if small else 224, 32 if small else 224),)
    elif name == "bert_base":
        m = M.Bert() if small else M.Bert(vocab=30522, hidden=768, layers=12, heads=12, ffn=3072, max_len=512)
        x = (torch.randint(0, 1000, (1, seq)), torch.ones(1, seq, dtype=torch.int64))
    elif name == "gpt2":
        m = M.GPT2() if small else M.GPT2(vocab=50257, hidden=768, layers=12, heads=12, max_len=1024)
        x = (torch.randint(0, 1000, (1, seq)),)
    else:
        raise SystemExit(f"unknown model {name!r}; models: {', '.join(MODELS)}")
    return M.randomize(m), x


def compiled(config: str, model, threads: int):
    """The callable of one configuration (compiled lazily by its first call). Inductor's freezing is
    an option of its compile, so that dynamo, which keeps compiled code per backend, compiles the
    model again for it instead of reusing the code compiled without it."""
    import torch

    if config == "eager":
        return model
    if config == "tessera":
        return torch.compile(model, backend="tessera", options={"target": f"c -num-threads={threads}"})
    return torch.compile(model, options={"freezing": config == "inductor_freeze"})


def first_call(fn, args):
    """(output, seconds, warnings naming ops left to eager) of the first call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        out = fn(*args)
        t = time.perf_counter() - t0
    eager_ops = [str(w.message) for w in caught if "left to eager" in str(w.message)]
    return out, t, eager_ops


def warm_up(threads: int) -> None:
    """Compile a two-layer MLP with each compiler first, so that one-time costs of the process (imports,
    Inductor's C++ header build, tessera's runtime helpers) are not charged to the first model."""
    import torch

    tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for config in CONFIGS[1:]:
            compiled(config, tiny, threads)(torch.randn(2, 8))


def time_round_robin(fns: dict, args, warmup: int, repeat: int, block: int = 3) -> dict:
    """{name: (median s, min s)} of each fn(*args), timed in rounds of `block` calls each after an
    untimed one, every round starting once the process is idle."""
    for fn in fns.values():
        for _ in range(warmup):
            fn(*args)
    times = {k: [] for k in fns}
    while min(len(v) for v in times.values()) < repeat:
        for k, fn in fns.items():
            _common.quiesce()
            fn(*args)
            for _ in range(block):
                t0 = time.perf_counter()
                fn(*args)
                times[k].append(time.perf_counter() - t0)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _common.machine()["cpu"]


def bench_model(name: str, args_ns) -> list:
    import numpy as np
    import torch

    model, x = make_model(name, args_ns.small)
    torch._dynamo.reset()
    with torch.inference_mode():
        want = model(*x)
        fns, rows = {}, {}
        for config in CONFIGS:
            fn = compiled(config, model, args_ns.threads)
            out, t_first, eager_ops = first_call(fn, x)
            t0 = time.perf_counter()
            fn(*x)
            t_steady = time.perf_counter() - t0
            err = float((out - want).abs().max() / max(float(want.abs().max()), 1e-12))
            rows[config] = {"model": name, "config": config,
                            "compile_s": max(t_first - t_steady, 0.0) if config != "eager" else 0.0,
                            "rel_err": err, "ok": bool(err <= 1e-4 and np.isfinite(err)),
                            "eager_ops": "; ".join(eager_ops) or ("-" if config == "tessera" else "")}
            fns[config] = fn
            print(f"  {name} {config}: first call {t_first:.1f} s, rel err {err:.1e}", file=sys.stderr, flush=True)
        timed = time_round_robin(fns, x, args_ns.warmup, args_ns.repeat)
    tessera_ms = timed["tessera"][0] * 1e3
    for config, (med, low) in timed.items():
        rows[config].update({"ms": med * 1e3, "min_ms": low * 1e3, "x_tessera": med * 1e3 / tessera_ms})
    return list(rows.values())


def geomeans(rows: list) -> list:
    out = []
    models = sorted({r["model"] for r in rows})
    for config in CONFIGS:
        lat = [r["x_tessera"] for r in rows if r["config"] == config]
        comp = [r["compile_s"] for r in rows if r["config"] == config]
        tcomp = [r["compile_s"] for r in rows if r["config"] == "tessera"]
        out.append({"config": config, "models": len(models),
                    "latency_geomean_x_tessera": math.exp(sum(map(math.log, lat)) / len(lat)),
                    "compile_s_total": sum(comp),
                    "compile_x_tessera": (sum(comp) / sum(tcomp)) if config != "eager" and sum(tcomp) else ""})
    return out


def main(argv=None) -> int:
    p = _common.parser(__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--small", action="store_true", help="the test-size models (a quick smoke run)")
    p.add_argument("--warm-cache", action="store_true", help="keep the compilers' usual caches (else fresh ones)")
    args = p.parse_args(argv)
    cold = None
    if not args.warm_cache:
        cold = tempfile.TemporaryDirectory(prefix="torch_compile_bench_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cold.name, "inductor")
        os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
        os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
        os.environ["TESSERA_CACHE_DIR"] = os.path.join(cold.name, "tessera")
    import torch

    torch.set_num_threads(args.threads)
    print(f"cpu: {cpu_name()}; {args.threads} threads; torch {torch.__version__}; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; caches {'warm' if args.warm_cache else 'cold (fresh)'}",
          flush=True)
    warm_up(args.threads)
    rows = []
    for name in [m for m in args.models.split(",") if m]:
        rows += bench_model(name, args)
    _common.report("torch_compile", rows, None)
    print()
    summary = geomeans(rows)
    _common.report("torch_compile-summary", summary, args.json,
                   extra={"model_rows": rows, "threads": args.threads, "cpu": cpu_name(), "small": args.small,
                          "cold_cache": not args.warm_cache, "load_average": list(os.getloadavg())})
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if cold is not None:
        cold.cleanup()
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
