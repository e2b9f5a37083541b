"""The device check: tessera's CUDA path on an NVIDIA GPU, each figure beside its reference in the same run.

    PYTHONPATH=. python benchmarks/gpu_check.py --json gpu_check.json      # on a machine with a GPU (< 8 min)
    PYTHONPATH=. python benchmarks/gpu_check.py --dry                      # anywhere with nvcc: builds only

Sections, in order (--only picks some; each section's failure is recorded and the rest still run):
- device: the GPU, its driver, multiprocessors and memory; nvcc's, torch's and cupy's versions.
- tests: `pytest tests/gpu -m "not slow"` (every CUDA-execution test, skipped without a GPU, runs here).
- gemm: C = A @ B at 1024^3 and 4096^3, fp32 and fp16 (inputs float16, products accumulated and stored
  in float32), each with tessera's default GPU schedule (ops/gpu: shared-memory FFMA tiles of 64 x 64
  for fp32, mma.sync tensor-core tiles for fp16), the others worth measuring beside it (fp32: FFMA
  tiles of 128 x 128; fp16: wgmma tiles, built for `cuda -arch=sm_90a`), and a short tuning run (--trials, 64: autotune.tune_tir on the target's design space;
  candidates are timed unchecked, the best is checked here like every row) against cuBLAS via
  torch.matmul (TF32 off; fp16 in, fp16 out). Errors are against torch.matmul in float32.
- rows: softmax over the last axis and layer norm, as one-node models through tessera.compile(target=
  "cuda"), against torch.softmax / F.layer_norm: time and memory bandwidth (bytes read + written).
- models: ResNet-18 and BERT-base (tessera.zoo) at batch 1 and 16 through tessera.compile(target="cuda")
  (the graph executor with its device runner: values stay on the GPU, static plans replay as one CUDA
  graph), inputs and outputs on the device, against torch eager on the GPU (benchmarks/_torch_onnx.py:
  the same graph and weights, node by node); outputs checked against ONNX Runtime on the CPU.

Times are CUDA events around repeated calls (kernels) or the median wall time of synchronized calls
(models, both sides); ratios are tessera's speed over the reference's (above 1: tessera is faster).
--dry needs no GPU: it builds every CUDA kernel the check would run with nvcc (the tuning runs'
candidates excepted: only their design space is sampled and a few candidates built) and times nothing;
the default test suite runs it (tests/benchmarks/test_gpu_check_dry.py).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import tessera  # noqa: E402
import tessera.backend  # noqa: E402
from tessera import te, tir  # noqa: E402
from tessera.ops.gpu import schedule_gemm_gpu, schedule_gemm_wgmma, schedule_gpu_default  # noqa: E402
from tessera.runtime import cuda as cuda_rt  # noqa: E402

SECTIONS = ("device", "tests", "gemm", "rows", "models")
TARGET = "cuda"
WGMMA_TARGET = "cuda -arch=sm_90a"       # wgmma is an arch-specific (sm_90a) instruction
WGMMA_TILES = ((128, 256, 4), (128, 128, 4), (256, 128, 3))   # (BM, BN, stages) of schedule_gemm_wgmma


def log(*args):
    print(*args, flush=True)


# ---------------------------------------------------------------------------------------------
# device
# ---------------------------------------------------------------------------------------------
def section_device(ctx):
    out = {"python": platform.python_version(), "host": platform.node()}
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader"],
                           capture_output=True, text=True)
        out["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
    nvcc = cuda_rt.nvcc_path()
    if nvcc:
        v = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        out["nvcc"] = v[-1] if v else ""
    for mod in ("torch", "cupy", "triton"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    if ctx["gpu"]:
        import cupy as cp
        p = cp.cuda.runtime.getDeviceProperties(0)
        out.update(gpu=p["name"].decode(), sms=p["multiProcessorCount"], cc=f"{p['major']}.{p['minor']}",
                   memory_gib=round(p["totalGlobalMem"] / 2**30, 1), l2_mib=round(p["l2CacheSize"] / 2**20, 1),
                   driver=cp.cuda.runtime.driverGetVersion(), runtime=cp.cuda.runtime.runtimeGetVersion())
    log(json.dumps(out))
    return out


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------
def section_tests(ctx):
    if ctx["dry"]:
        return {"skipped": "dry run (the test suite runs this dry run itself)"}
    cmd = [sys.executable, "-m", "pytest", "tests/gpu", "-m", "not slow", "-q", "-p", "no:cacheprovider",
           "-o", "addopts=", "-rfEs"]
    try:
        import xdist  # noqa: F401
        cmd += ["-n", "8"]
    except ImportError:
        pass
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=ctx["tests_timeout"])
    tail = (proc.stdout + proc.stderr).strip().splitlines()
    summary = next((ln for ln in reversed(tail) if " passed" in ln or " failed" in ln or " error" in ln), "")
    failed = [ln for ln in tail if ln.startswith(("FAILED", "ERROR"))]
    log(f"tests: {summary} ({time.perf_counter() - t0:.0f} s)")
    for ln in failed:
        log("  " + ln)
    return {"returncode": proc.returncode, "summary": summary, "failed": failed,
            "seconds": round(time.perf_counter() - t0, 1)}


# ---------------------------------------------------------------------------------------------
# timing helpers
# ---------------------------------------------------------------------------------------------
def torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def event_time(fn, number, repeat=3, min_ms=50.0):
    """Median seconds per call of fn over `repeat` CUDA-event timings of at least `number` calls,
    more where a timing would be shorter than min_ms (after a warm-up as long: the clocks ramp up)."""
    import cupy as cp

    def measure(n):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        return cp.cuda.get_elapsed_time(s, e)

    n = number
    while measure(n) < min_ms and n < 1 << 20:
        n *= 2
    ts = sorted(measure(n) * 1e-3 / n for _ in range(repeat))
    return ts[len(ts) // 2]


def wall_time(fn, sync, number, warmup=3, budget=20.0):
    """Median wall seconds of synchronized calls of fn (at most `number`, within `budget` seconds)."""
    for _ in range(warmup):
        fn()
    sync()
    ts, t_end = [], time.perf_counter() + budget
    for _ in range(number):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
        if time.perf_counter() > t_end and len(ts) >= 3:
            break
    return sorted(ts)[len(ts) // 2]


# ---------------------------------------------------------------------------------------------
# gemm
# ---------------------------------------------------------------------------------------------
def gemm_func(n, dtype):
    A = te.placeholder((n, n), name="A", dtype=dtype)
    B = te.placeholder((n, n), name="B", dtype=dtype)
    k = te.reduce_axis((0, n), name="k")
    if dtype == "float32":
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    else:
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
                       name="C")
    return te.create_prim_func([A, B, C])


def gemm_schedules(n, dtype):
    """[(label, schedule, target)]: the default GPU schedule (fp32: FFMA tiles of 64 x 64; fp16: the
    mma.sync tensor-core tiles), then the others worth measuring beside it: FFMA tiles of 128 x 128
    (fp32), Hopper's wgmma tiles (fp16; they build for the arch-specific target sm_90a only)."""
    func = gemm_func(n, dtype)
    out = [("default", schedule_gpu_default(tir.Schedule(func), TARGET), TARGET)]
    if dtype == "float16":
        for bm, bn, stages in WGMMA_TILES:
            if n % bm == 0 and n % bn == 0:
                sch = tir.Schedule(func)
                out.append((f"wgmma {bm}x{bn}x64 s{stages}", schedule_gemm_wgmma(sch, sch.get_block("C"), bm, bn, stages),
                            WGMMA_TARGET))
    else:
        sch = tir.Schedule(func)
        out.append(("ffma tiles 128x128 (8x8 a thread)", schedule_gemm_gpu(sch, sch.get_block("C"), tile_m=128,
                                                                           tile_n=128, thread_m=8, thread_n=8), TARGET))
    return func, out


def section_gemm(ctx):
    rows = []
    torch = None if ctx["dry"] else torch_cuda()
    for n in ctx["sizes"]:
        for dtype in ("float32", "float16"):
            func, schedules = gemm_schedules(n, dtype)
            ref = None
            if not ctx["dry"]:
                import cupy as cp
                rng = np.random.default_rng(0)
                a = rng.standard_normal((n, n)).astype(dtype)
                b = rng.standard_normal((n, n)).astype(dtype)
                da, db = cp.asarray(a), cp.asarray(b)
                dc = cp.zeros((n, n), np.float32)
                want = cp.matmul(da.astype(cp.float32), db.astype(cp.float32))   # float32 (cuBLAS, no TF32)
                scale = float(cp.abs(want).max())
                if torch is not None:
                    torch.backends.cuda.matmul.allow_tf32 = False
                    ta, tb = torch.from_dlpack(da), torch.from_dlpack(db)
                    t_ref = event_time(lambda: torch.matmul(ta, tb), ctx["number"])
                    ref = ("cuBLAS (torch.matmul)", t_ref)
            flops = 2.0 * n ** 3
            for label, sch, target in schedules:
                row = {"gemm": f"{'fp32' if dtype == 'float32' else 'fp16'} {n}^3", "schedule": label}
                try:
                    t0 = time.perf_counter()
                    mod = tessera.build(sch, target=target)
                    row["build_s"] = round(time.perf_counter() - t0, 2)
                    kern = next(iter(mod.ptxas.values()), {})
                    row["registers"], row["spills"] = kern.get("registers"), kern.get("spill_stores")
                    if not ctx["dry"]:
                        dc.fill(np.nan)
                        mod(da, db, dc)
                        row["rel_err"] = float(cp.abs(dc - want).max()) / scale
                        t = event_time(lambda: mod(da, db, dc), ctx["number"])
                        row["tessera_tflops"] = round(flops / t * 1e-12, 2)
                        if ref is not None:
                            row["ref_tflops"] = round(flops / ref[1] * 1e-12, 2)
                            row["ratio"] = round(ref[1] / t, 3)
                except Exception as e:  # noqa: BLE001 - recorded, the check goes on
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                log(json.dumps(row))
                rows.append(row)
            if ctx["trials"] and n in ctx["tune_sizes"]:
                row = {"gemm": f"{'fp32' if dtype == 'float32' else 'fp16'} {n}^3",
                       "schedule": f"tuned ({ctx['trials']} trials)"}
                try:
                    tuned = tune_gemm(func, ctx)
                    row.update(tuned["row"])
                    if not ctx["dry"] and tuned["schedule"] is not None:
                        mod = tessera.build(tuned["schedule"], target=TARGET)
                        dc.fill(np.nan)
                        mod(da, db, dc)
                        row["rel_err"] = float(cp.abs(dc - want).max()) / scale
                        t = event_time(lambda: mod(da, db, dc), ctx["number"])
                        row["tessera_tflops"] = round(flops / t * 1e-12, 2)
                        if ref is not None:
                            row["ref_tflops"] = round(flops / ref[1] * 1e-12, 2)
                            row["ratio"] = round(ref[1] / t, 3)
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                log(json.dumps(row))
                rows.append(row)
    return rows


def tune_gemm(func, ctx):
    """A short tuning run of func on the GPU (or, dry, its design space sampled and a few candidates
    built): {"row": figures, "schedule": the best}."""
    from tessera import autotune
    from tessera.autotune.task import TuneTask

    if ctx["dry"]:
        task = TuneTask(func, TARGET)
        rng = np.random.default_rng(0)
        built, refused = 0, []
        for _ in range(4):
            sch = task.space.sample(rng)
            if sch is None:
                continue
            try:
                tessera.build(sch, target=TARGET)
                built += 1
            except tessera.TesseraError as e:   # the tuner's builder refuses such a candidate the same way
                refused.append(str(e)[:120])
        return {"row": {"candidates_built": built, "candidates_refused": refused}, "schedule": None}
    try:
        import xgboost  # noqa: F401
        model = "xgb"
    except ImportError:
        model = "random"
    runner = autotune.LocalRunner(check=False, number=10, repeat=3, min_repeat_ms=20)
    t0 = time.perf_counter()
    res = autotune.tune_tir(func, target=TARGET, max_trials=ctx["trials"], cost_model=model, runner=runner,
                            seed=0, batch_size=16, progress=False, time_budget=ctx["tune_budget"])
    row = {"tune_s": round(time.perf_counter() - t0, 1), "cost_model": model, "errors": res.errors,
           "trials": res.trials, "tuner_tflops": round(res.gflops * 1e-3, 2) if res.gflops else None,
           "best_trace_tail": str(res.trace).strip().splitlines()[-1][:200] if res.trace is not None else None}
    return {"row": row, "schedule": res.schedule}


# ---------------------------------------------------------------------------------------------
# rows: softmax, layer norm
# ---------------------------------------------------------------------------------------------
def one_node_model(op, shape, **attrs):
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    inputs, inits, extra = ["x"], [], {}
    if op == "LayerNormalization":
        rng = np.random.default_rng(1)
        extra = {k: rng.standard_normal(shape[-1]).astype("float32") for k in ("w", "b")}
        inits = [numpy_helper.from_array(v, k) for k, v in extra.items()]
        inputs += ["w", "b"]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    g = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, list(shape))], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, extra


ROW_CASES = (("Softmax", (16 * 12 * 128, 128), {"axis": -1}),     # BERT-base attention, batch 16
             ("Softmax", (4096, 4096), {"axis": -1}),
             ("LayerNormalization", (16 * 128, 768), {"axis": -1, "epsilon": 1e-5}),
             ("LayerNormalization", (8192, 4096), {"axis": -1, "epsilon": 1e-5}))


def section_rows(ctx):
    rows = []
    torch = None if ctx["dry"] else torch_cuda()
    for op, shape, attrs in ROW_CASES:
        row = {"op": op, "shape": "x".join(map(str, shape))}
        try:
            model, extra = one_node_model(op, shape, **attrs)
            graph, params = tessera.frontend.from_onnx(model)
            t0 = time.perf_counter()
            exe = tessera.compile(graph, params, target=TARGET)
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            if not ctx["dry"]:
                import cupy as cp
                x = np.random.default_rng(2).standard_normal(shape).astype("float32")
                dx = cp.asarray(x)
                y = exe(dx)
                nbytes = 2 * x.nbytes
                if torch is not None:
                    tx = torch.from_dlpack(dx)
                    if op == "Softmax":
                        fn_ref = lambda: torch.softmax(tx, -1)   # noqa: E731
                    else:
                        w, b = (torch.from_numpy(extra[k]).cuda() for k in ("w", "b"))
                        fn_ref = lambda: torch.nn.functional.layer_norm(tx, (shape[-1],), w, b, attrs["epsilon"])  # noqa: E731
                    want = fn_ref()
                    row["max_abs_err"] = float((torch.from_dlpack(y) - want).abs().max())
                    t_ref = event_time(fn_ref, ctx["number"])
                    row["ref_gbps"] = round(nbytes / t_ref * 1e-9, 1)
                t = event_time(lambda: exe(dx), ctx["number"])
                row["tessera_us"] = round(t * 1e6, 1)
                row["tessera_gbps"] = round(nbytes / t * 1e-9, 1)
                if torch is not None:
                    row["ref_us"] = round(t_ref * 1e6, 1)
                    row["ratio"] = round(t_ref / t, 3)
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {e}"[:500]
        log(json.dumps(row))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------
def section_models(ctx):
    rows = []
    torch = None if ctx["dry"] else torch_cuda()
    for name in ctx["models"]:
        for batch in ctx["batches"]:
            row = {"model": name, "batch": batch}
            try:
                model = tessera.zoo.get_model(name, batch=batch)
                feeds = tessera.zoo.sample_input(name, batch=batch)
                graph, params = tessera.frontend.from_onnx(model)
                t0 = time.perf_counter()
                exe = tessera.compile(graph, params, target=TARGET)
                row["compile_s"] = round(time.perf_counter() - t0, 1)
                row["kernels"] = len(exe.kernels)
                if not ctx["dry"]:
                    rows.append(row)
                    run_model(ctx, row, model, feeds, exe, torch)
                    rows.pop()
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                if ctx["verbose"]:
                    traceback.print_exc()
            log(json.dumps(row))
            rows.append(row)
    return rows


def run_model(ctx, row, model, feeds, exe, torch):
    import cupy as cp
    import onnxruntime as ort

    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    dev = {k: cp.asarray(v) for k, v in feeds.items()}
    got = exe.run(dev)
    errs = [float(np.abs(cp.asnumpy(g) - w).max()) for g, w in zip(got, want)]
    row["max_abs_err"] = max(errs)
    row["ok"] = bool(all(np.allclose(cp.asnumpy(g), w, rtol=1e-3, atol=1e-3) for g, w in zip(got, want)))
    row["device_graph"] = getattr(exe._device_runner, "graph_error", None) is None
    sync = cp.cuda.runtime.deviceSynchronize
    t = wall_time(lambda: exe.run(dev), sync, ctx["model_runs"])
    row["tessera_ms"] = round(t * 1e3, 3)
    if torch is not None:
        from _torch_onnx import TorchOnnxRunner
        runner = TorchOnnxRunner(model, device="cuda")
        tfeeds = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
        ref = runner(tfeeds, keep=True)
        row["torch_max_abs_err"] = max(float(np.abs(r.cpu().numpy() - w).max()) for r, w in zip(ref, want))
        t_ref = wall_time(lambda: runner(tfeeds, keep=True), torch.cuda.synchronize, ctx["model_runs"])
        row["torch_eager_ms"] = round(t_ref * 1e3, 3)
        row["ratio"] = round(t_ref / t, 3)


# ---------------------------------------------------------------------------------------------
def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="PATH", help="write every figure to PATH as JSON")
    p.add_argument("--dry", action="store_true", help="no GPU: build every kernel with nvcc, run nothing")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run (of {', '.join(SECTIONS)})")
    p.add_argument("--sizes", default="1024,4096", help="GEMM sizes")
    p.add_argument("--trials", type=int, default=64, help="tuning trials per GEMM (0: no tuning run)")
    p.add_argument("--tune-sizes", default="4096", help="the GEMM sizes that get a tuning run")
    p.add_argument("--tune-budget", type=float, default=90.0, help="seconds a tuning run may take at most")
    p.add_argument("--models", default="resnet18,bert_base")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--number", type=int, default=20, help="calls per timing of a kernel")
    p.add_argument("--model-runs", type=int, default=30, help="timed runs of a model")
    p.add_argument("--tests-timeout", type=float, default=300.0)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        p.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    gpu = cuda_rt.available()
    if not gpu and not args.dry:
        print("no NVIDIA GPU with cupy here: run with --dry to build the kernels without one", file=sys.stderr)
        return 2
    if cuda_rt.nvcc_path() is None:
        print("nvcc is not on the PATH: the check builds its kernels with it", file=sys.stderr)
        return 2
    ctx = {"dry": args.dry, "gpu": gpu, "sizes": [int(s) for s in args.sizes.split(",") if s],
           "tune_sizes": {int(s) for s in args.tune_sizes.split(",") if s}, "trials": args.trials,
           "tune_budget": args.tune_budget,
           "models": [m for m in args.models.split(",") if m], "batches": [int(b) for b in args.batches.split(",") if b],
           "number": args.number, "model_runs": args.model_runs, "tests_timeout": args.tests_timeout,
           "verbose": args.verbose}
    result = {"benchmark": "gpu_check", "dry": args.dry, "target": TARGET, "sections": {}}
    t_all = time.perf_counter()
    for name in SECTIONS:
        if name not in only:
            continue
        log(f"== {name}")
        t0 = time.perf_counter()
        try:
            result["sections"][name] = globals()[f"section_{name}"](ctx)
        except Exception as e:  # noqa: BLE001 - one section's failure is a figure too
            result["sections"][name] = {"error": f"{type(e).__name__}: {e}"[:1000]}
            traceback.print_exc()
        result.setdefault("seconds", {})[name] = round(time.perf_counter() - t0, 1)
        if args.json:    # written after every section: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(result, indent=1))
    result["seconds"]["total"] = round(time.perf_counter() - t_all, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}", file=sys.stderr)
    errors = [r for s in result["sections"].values() for r in (s if isinstance(s, list) else [s])
              if isinstance(r, dict) and r.get("error")]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
