"""Dynamic shapes: one compile of a model exported with dynamic batch and sequence axes, run at each
sequence length, against a compile specialized to that length and ONNX Runtime, in the same run.

    python benchmarks/dynamic_shapes.py [--models bert_base,gpt2_small] [--seq 16,64,128,384]
                                        [--batch 1,4] [--layers 12] [--threads 2] [--breakdown]
                                        [--kernels] [--json PATH]

The models come from tessera.zoo with dynamic_shapes=True (every Reshape target, slice bound and
position range computed from Shape, as an export with dynamic axes writes them); their inputs and
outputs get the symbolic dimensions "batch" and "seq". The dynamic compile runs in the graph
executor with kernels compiled for symbolic extents; the specialized one is from_onnx with
shape_dict fixing (batch, seq), compiled with static shapes (the ahead-of-time entry). Every output
is checked against ONNX Runtime's (max abs error printed). The ratio dynamic / specialized is the
cost of compiling once (the issue's goal: within 1.15x); it is printed of the medians and of the minima
(the steadier figure on a loaded machine), with the load average.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np  # noqa: E402
import _common  # noqa: E402
from _common import parser, report  # noqa: E402
from e2e import _ort_session  # noqa: E402


def dynamic_axes(m):
    """The model with dimensions 0 and 1 of every input and output named "batch" and "seq"."""
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) >= 2:
            dims[0].dim_param, dims[1].dim_param = "batch", "seq"
    return m


def dynamic_model(name: str, layers: int):
    from tessera.zoo.transformer import bert_base, gpt2_small

    make = {"bert_base": bert_base, "gpt2_small": gpt2_small}[name]
    return dynamic_axes(make(batch="batch", n_layers=layers, dynamic_shapes=True))


def feeds_for(name: str, batch: int, seq: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    if name == "bert_base":
        mask = np.ones((batch, seq), np.int64)
        mask[:, seq - seq // 4:] = 0          # padding at the end of each row
        return {"input_ids": rng.integers(0, 30522, (batch, seq)).astype(np.int64), "attention_mask": mask,
                "token_type_ids": (np.arange(seq)[None, :] >= seq // 2).astype(np.int64).repeat(batch, 0)}
    return {"input_ids": rng.integers(0, 50257, (batch, seq)).astype(np.int64)}


def max_error(got, want) -> float:
    return max(float(np.max(np.abs(np.asarray(g, np.float64) - w))) for g, w in zip(got, want))


def breakdown(dyn, spec, feeds, row) -> None:
    """Where the two compiles differ: kernel ms per op family (the fused group's name), largest
    difference first, and the call time outside the kernels (the executor's own work)."""
    pd, ps = dyn.profile(feeds, show=False), spec.profile(feeds, show=False)
    d, s = pd.by_op(), ps.by_op()
    outside = {"dynamic": row["dynamic_ms"] - pd.total_ms, "specialized": row["specialized_ms"] - ps.total_ms}
    print(f"    kernels: dynamic {pd.total_ms:.2f} ms, specialized {ps.total_ms:.2f} ms; outside the kernels: "
          f"dynamic {outside['dynamic']:.2f} ms, specialized {outside['specialized']:.2f} ms", file=sys.stderr)
    for op in sorted(set(d) | set(s), key=lambda o: -abs(d.get(o, 0.0) - s.get(o, 0.0)))[:8]:
        print(f"    {op:56s} dynamic {d.get(op, 0.0):8.3f} ms  specialized {s.get(op, 0.0):8.3f} ms",
              file=sys.stderr)
    sys.stderr.flush()


def _kernel_args(types, rng) -> list:
    """Arrays of these TensorTypes: floats random, integers zero (an index or a mask that is always
    in range)."""
    out = []
    for t in types:
        shape, dt = tuple(int(d) for d in t.shape), np.dtype(str(t.dtype))
        out.append(np.zeros(shape, dt) if dt.kind in "iub" else rng.standard_normal(shape).astype(dt))
    return out


def _same_signature(dyn_kernel, spec_kernel) -> bool:
    """Whether the dynamic kernel takes the specialized one's arguments (its symbolic dimensions
    bound by them): the same ranks, dtypes and static extents."""
    pairs = list(zip(dyn_kernel.input_types, spec_kernel.input_types)) + \
        list(zip(dyn_kernel.output_types, spec_kernel.output_types))
    return len(dyn_kernel.input_types) == len(spec_kernel.input_types) and all(
        d.ndim == s.ndim and str(d.dtype) == str(s.dtype)
        and all(isinstance(a, str) or a == b for a, b in zip(d.shape, s.shape)) for d, s in pairs)


def kernel_ratios(dyn, spec, rounds: int = 25, number: int = 3, seed: int = 0) -> list:
    """Per kernel family (the first node of each fused group's name in the specialized compile), the
    dynamic compile's kernel and the specialized one timed by their own C timers on the same
    arguments, interleaved, `number` calls a round, back to back as in a model (OpenMP's threads
    still spinning); minima in ms, largest difference first. On a loaded machine this is the
    steadier comparison: short timings find the quiet moments."""
    rng = np.random.default_rng(seed)
    dk = {}
    for k in dyn.kernels:
        dk.setdefault(k.op, k)
    rows, seen = [], set()
    for sk in spec.kernels:
        d = dk.get(sk.op)
        if sk.op in seen or d is None or not _same_signature(d, sk):
            continue
        seen.add(sk.op)
        args = _kernel_args(sk.input_types, rng) + _kernel_args(sk.output_types, rng)
        fd, fs = d.module, sk.module
        td = fd.time_evaluator(fd.entry_name or fd.function_names[0], number=number, repeat=1)
        ts = fs.time_evaluator(fs.entry_name or fs.function_names[0], number=number, repeat=1)
        a, b = [], []
        for _ in range(rounds):
            a.append(td(*args).min)
            b.append(ts(*args).min)
        rows.append((sk.op, min(a) * 1e3, min(b) * 1e3))
    return sorted(rows, key=lambda r: -(r[1] - r[2]))


def main(argv=None) -> int:
    import tessera
    from tessera.frontend import from_onnx

    p = parser(__doc__)
    p.add_argument("--models", default="bert_base,gpt2_small")
    p.add_argument("--seq", default="16,64,128,384")
    p.add_argument("--batch", default="1", help="batch sizes, comma-separated (default 1)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=9, help="timed calls per variant (default 9)")
    p.add_argument("--breakdown", action="store_true",
                   help="also print, per length, the kernel time of each op family in both compiles (each "
                        "node timed by its kernel's C timer) and the rest of a call (executor, allocation)")
    p.add_argument("--kernels", action="store_true",
                   help="also print, per length, each kernel of the dynamic compile against the specialized "
                        "one, timed alone by their C timers on the same arguments, interleaved (minima), and "
                        "their sum over every node (column kernels_dyn/spec): the steadier comparison on a "
                        "loaded machine (kernels warm in cache, no executor time)")
    args = p.parse_args(argv)
    target = f"c -num-threads={args.threads}"
    seqs = [int(s) for s in args.seq.split(",")]
    batches = [int(b) for b in str(args.batch).split(",")]
    rows = []
    print(f"load average at the start: {_common.load_average_text()}", file=sys.stderr, flush=True)
    for name in args.models.split(","):
        m = dynamic_model(name, args.layers)
        t0 = time.perf_counter()
        graph, params = from_onnx(m)
        dyn = tessera.compile(graph, params, target=target)
        dyn_compile = time.perf_counter() - t0
        print(f"[{name}] one dynamic compile: {dyn_compile:.1f} s ({dyn.kind} executor)", file=sys.stderr, flush=True)
        sess = _ort_session(m, args.threads)
        for batch, seq in [(b, q) for b in batches for q in seqs]:
            feeds = feeds_for(name, batch, seq)
            t0 = time.perf_counter()
            shapes = {k: v.shape for k, v in feeds.items()}
            g2, p2 = from_onnx(m, shape_dict=shapes)
            spec = tessera.compile(g2, p2, target=target)
            spec_compile = time.perf_counter() - t0
            want = sess.run(None, feeds)
            err_dyn = max_error(dyn.run(feeds), want)
            err_spec = max_error(spec.run(feeds), want)
            t = _common.time_interleaved({"dynamic": lambda: dyn.run(feeds), "specialized": lambda: spec.run(feeds),
                                   "onnxruntime": lambda: sess.run(None, feeds)},
                                  warmup=1, repeat=args.repeat, budget=20.0)
            rows.append({"model": name, "batch": batch, "seq": seq,
                         "dynamic_ms": t["dynamic"][0] * 1e3, "specialized_ms": t["specialized"][0] * 1e3,
                         "ort_ms": t["onnxruntime"][0] * 1e3,
                         "dyn/spec": t["dynamic"][0] / t["specialized"][0],
                         "dyn/spec_min": t["dynamic"][1] / t["specialized"][1],
                         "dyn/ort": t["dynamic"][0] / t["onnxruntime"][0],
                         "max_err_dyn": err_dyn, "max_err_spec": err_spec,
                         "spec_compile_s": round(spec_compile, 1)})
            print(f"[{name}] batch {batch} seq {seq}: dynamic {rows[-1]['dynamic_ms']:.2f} ms, specialized "
                  f"{rows[-1]['specialized_ms']:.2f} ms, ratio {rows[-1]['dyn/spec']:.3f} (of the minima "
                  f"{rows[-1]['dyn/spec_min']:.3f}; load {_common.load_average_text()})", file=sys.stderr, flush=True)
            if args.breakdown:
                breakdown(dyn, spec, feeds, rows[-1])
            if args.kernels:
                kr = kernel_ratios(dyn, spec)
                per = {op: (ms_d, ms_s) for op, ms_d, ms_s in kr}
                kd = sum(per[k.op][0] for k in spec.kernels if k.op in per)
                ks = sum(per[k.op][1] for k in spec.kernels if k.op in per)
                rows[-1]["kernels_dyn/spec"] = kd / ks if ks else float("nan")
                print(f"    every node's kernel, by its family's minimum: dynamic {kd:.3f} ms, specialized {ks:.3f} ms, "
                      f"ratio {rows[-1]['kernels_dyn/spec']:.3f}", file=sys.stderr, flush=True)
                for op, ms_d, ms_s in kr:
                    print(f"    {op:56s} dynamic {ms_d:8.4f} ms  specialized {ms_s:8.4f} ms  ratio {ms_d / ms_s:5.2f}",
                          file=sys.stderr, flush=True)
    report("dynamic_shapes", rows, args.json, extra={"threads": args.threads, "layers": args.layers,
                                                     "load_average": _common.load_average_text()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
