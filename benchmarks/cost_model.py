"""What the tuner's cost model costs: feature extraction per candidate and XGBModel's retraining.

    python benchmarks/cost_model.py [--candidates 200] [--train 500,1000,2000] [--measured 48] [--json out.json]

Printed: milliseconds per candidate of autotune.features.extract_features (median and mean) on GEMM
1024^3 fp32 candidates sampled from the generated design space (various tilings, parallel, vectorize,
unroll) and on the hand schedule of tir.schedule.examples.gemm (tensorized by the micro-kernel), split
into the lowering prefix (the target's pipeline up to lower_blocks) and the feature walk; then the
seconds XGBModel.update takes to retrain on N candidates (their pooled features, with random times as
labels -- the worst case for the trees, which split every level -- and one thread, its default).
With --measured N: N schedules of a GEMM 256^3 (i and j tiled, k inside or outside the tile, the tile
vectorized, the outer loop parallel) built and timed, and XGBModel's held-out Spearman correlation of
predicted vs measured ranking (trained on two thirds, 10 random splits); the run-to-run noise of the
times bounds what any model can reach, so the times are measured twice and their own Spearman printed.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import parser, report  # noqa: E402


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--candidates", type=int, default=200)
    p.add_argument("--train", default="500,1000,2000")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--measured", type=int, default=0)
    args = p.parse_args()

    from tessera.autotune import features as F
    from tessera.autotune.cost_model import XGBModel
    from tessera.autotune.space import generate_design_space, sample_candidate
    from tessera.target import Target
    from tessera.tir.schedule.examples import gemm as G
    from tessera.tir.tensor_intrin import x86

    target = Target(f"c -num-threads={args.threads}")
    func = G.plain_gemm_program(1024, 1024, 1024)
    spaces = generate_design_space(func, target)
    rng = np.random.default_rng(0)
    sampled = []
    while len(sampled) < args.candidates:
        s = sample_candidate(func, spaces[len(sampled) % len(spaces)], target, rng)
        if s is not None:
            sampled.append(s)
    groups = [("gemm1024 space samples", sampled)]
    try:
        x86.gemm_intrin_for(target, "float32", tiles=[(4, 16)])
        tens = G.schedule_gemm(G.gemm_program(1024, 1024, 1024, nr=16), mr=4, nr=16, kc=256, mc=64, target=target)
        groups.append(("gemm1024 tensorized (hand schedule)", [tens] * 50))
    except Exception as e:  # no AVX2/FMA micro-kernel on this CPU
        print(f"tensorized GEMM skipped: {e}", file=sys.stderr)

    rows = []
    for name, schs in groups:
        lower, walk, total, nrows = [], [], [], []
        for s in schs:
            t0 = time.perf_counter()
            funcs = F.lowered_for_features(s, target)
            t1 = time.perf_counter()
            w = F._Walker(target)
            for f in funcs:
                w.stmt(f.body)
            t2 = time.perf_counter()
            x = F.extract_features(s, target)
            t3 = time.perf_counter()
            lower.append(t1 - t0)
            walk.append(t2 - t1)
            total.append(t3 - t2)
            nrows.append(x.shape[0])
        rows.append({"what": name, "candidates": len(schs), "rows/cand": float(np.mean(nrows)),
                     "lower ms (median)": statistics.median(lower) * 1e3,
                     "walk ms (median)": statistics.median(walk) * 1e3,
                     "extract ms (median)": statistics.median(total) * 1e3,
                     "extract ms (mean)": statistics.mean(total) * 1e3})
    feats = F.extract_features_batch(sampled, target)

    class Result:
        def __init__(self, secs):
            self.run_secs, self.error_kind = (secs,), None

    secs = np.random.default_rng(1).lognormal(0.0, 1.0, max(len(feats), 1))
    for n in (int(x) for x in args.train.split(",") if x):
        idx = [k % len(feats) for k in range(n)]
        model = XGBModel(seed=0)
        model.update([feats[i] for i in idx], [Result(float(secs[i])) for i in idx], ["gemm1024"] * n)
        t0 = time.perf_counter()
        model.predict([feats[i] for i in idx])
        rows.append({"what": f"XGBModel retrain, {n} candidates", "candidates": n,
                     "retrain s": model.last_train_seconds,
                     "predict ms/cand": (time.perf_counter() - t0) / n * 1e3})
    if args.measured:
        rows.append(measured_ranking(args.measured, target, Result))
    report("cost_model", rows, args.json)


def measured_ranking(n, target, Result):
    import itertools

    from scipy.stats import spearmanr

    import tessera
    from tessera import te, tir
    from tessera.autotune.cost_model import XGBModel
    from tessera.autotune.features import extract_features

    M = N = K = 256
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    rng = np.random.default_rng(0)
    a, b = rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32)
    c = np.empty((M, N), np.float32)
    combos = list(itertools.product([1, 4, 8, 16], [8, 16, 32, 64], [0, 1], [0, 1], [0, 1]))
    feats, t1, t2 = [], [], []
    for ci in rng.permutation(len(combos))[:n]:
        ti, tj, vec, tiled, par = combos[ci]
        sch = tir.Schedule(func)
        i, j, kk = sch.get_loops(sch.get_block("C"))
        i0, i1 = sch.split(i, [None, ti])
        j0, j1 = sch.split(j, [None, tj])
        sch.reorder(*((i0, j0, kk, i1, j1) if tiled else (i0, j0, i1, j1, kk)))
        if vec and tiled:
            sch.vectorize(j1)
        if par:
            sch.parallel(i0)
        lib = tessera.build(sch, target=target)
        timer = lib.time_evaluator(number=3, repeat=3)
        t1.append(timer(a, b, c).median)
        t2.append(timer(a, b, c).median)
        feats.append(extract_features(sch, target))
    rhos = []
    cut = len(feats) * 2 // 3
    for seed in range(10):
        idx = np.random.default_rng(seed).permutation(len(feats))
        model = XGBModel(seed=0)
        model.update([feats[i] for i in idx[:cut]], [Result(t1[i]) for i in idx[:cut]], ["gemm256"] * cut)
        pred = model.predict([feats[i] for i in idx[cut:]])
        rhos.append(spearmanr(pred, [-t1[i] for i in idx[cut:]]).correlation)
    return {"what": f"held-out ranking, {len(feats)} measured GEMM 256^3 schedules", "candidates": len(feats),
            "spearman mean": float(np.mean(rhos)), "spearman min": float(np.min(rhos)),
            "times run-to-run spearman": float(spearmanr(t1, t2).correlation),
            "fastest ms": min(t1) * 1e3, "slowest ms": max(t1) * 1e3}


if __name__ == "__main__":
    main()
