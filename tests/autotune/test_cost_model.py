"""Cost models (tessera.autotune.cost_model): XGBModel learns a ranking of held-out candidates,
saves and loads in XGBoost's JSON with a sidecar, pre-trains from a database; RandomModel is the
reproducible baseline."""
import itertools
import json
import types

import numpy as np
import pytest
from scipy.stats import spearmanr

import tessera
from tessera import te, tir
from tessera.autotune.cost_model import CostModel, RandomModel, XGBModel, make_cost_model, run_seconds
from tessera.autotune.cost_model.xgb import POOLED_WIDTH, pool
from tessera.autotune.features import NUM_FEATURES, extract_features
from tessera.errors import TesseraError
from tessera.target import Target

TARGET = Target("c -num-threads=2")


def gemm(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def candidate(func, ti, tj, vec, tiled, par):
    """A GEMM schedule: i and j tiled by (ti, tj); k outside the tile (tiled) or innermost; the
    tile's j vectorized (only when it is innermost); the outer i loop parallel."""
    sch = tir.Schedule(func)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, ti])
    j0, j1 = sch.split(j, [None, tj])
    sch.reorder(*((i0, j0, k, i1, j1) if tiled else (i0, j0, i1, j1, k)))
    if vec and tiled:
        sch.vectorize(j1)
    if par:
        sch.parallel(i0)
    return sch


def synthetic_seconds(M, N, K, ti, tj, vec, tiled, par):
    """A stand-in for measured time, a fixed function of the schedule's decisions that the features
    can see (vector lanes, loop order, parallel loop, tile size): vector lanes and the parallel loop
    divide the time, k innermost (a strided column of B, no vectors) multiplies it, a large tile adds
    register pressure. Measuring real times would make this test slow and machine-dependent; what is
    tested is that the model learns a ranking from the features, not the features' fidelity."""
    speed = (min(tj, 16) if (vec and tiled) else 1.0) * (1.8 if par else 1.0)
    penalty = 1.0 + (0.0 if tiled else 3.0) + (0.5 if ti * tj > 256 else 0.0)
    return M * N * K / speed * penalty * 1e-9


def space(M, N, K):
    func = gemm(M, N, K)
    out = []
    for ti, tj, vec, tiled, par in itertools.product([1, 2, 4, 8], [4, 8, 16, 32], [0, 1], [0, 1], [0, 1]):
        if M % ti == 0 and N % tj == 0:
            sch = candidate(func, ti, tj, vec, tiled, par)
            out.append((sch, synthetic_seconds(M, N, K, ti, tj, vec, tiled, par)))
    return func, out


class Result:
    def __init__(self, secs=None, error=None):
        self.run_secs = () if secs is None else (secs, secs)
        self.error_kind = error


@pytest.fixture(scope="module")
def gemm_data():
    """Features and synthetic seconds of two GEMM workloads' candidate sets."""
    data = {}
    for key, shape in (("gemm64", (64, 64, 64)), ("gemm32x96x48", (32, 96, 48))):
        func, cands = space(*shape)
        data[key] = (func, [(sch, extract_features(sch, TARGET), secs) for sch, secs in cands])
    return data


def split(rows, seed=0, frac=0.6):
    idx = np.random.default_rng(seed).permutation(len(rows))
    cut = int(len(rows) * frac)
    return [rows[i] for i in idx[:cut]], [rows[i] for i in idx[cut:]]


def train(model, parts):
    feats, results, keys = [], [], []
    for key, rows in parts:
        for _, f, secs in rows:
            feats.append(f)
            results.append(Result(secs))
            keys.append(key)
    model.update(feats, results, keys)


def test_xgb_ranks_held_out_candidates(gemm_data):
    train_rows, held_out = split(gemm_data["gemm64"][1])
    model = XGBModel(seed=0)
    train(model, [("gemm64", train_rows), ("gemm32x96x48", gemm_data["gemm32x96x48"][1])])
    assert model.trained and model.last_train_seconds > 0
    scores = model.predict([f for _, f, _ in held_out])
    rho = spearmanr(scores, [-secs for _, _, secs in held_out]).correlation
    assert rho > 0.8, f"Spearman correlation of predicted and true ranking of held-out candidates: {rho:.3f}"
    # the random baseline ranks them no better than chance would, far below
    rnd = RandomModel(seed=0).predict([f for _, f, _ in held_out])
    assert spearmanr(rnd, [-secs for _, _, secs in held_out]).correlation < rho - 0.4


def test_same_seed_same_model(gemm_data):
    rows = gemm_data["gemm64"][1]
    a, b = XGBModel(seed=3), XGBModel(seed=3)
    train(a, [("w", rows)])
    train(b, [("w", rows)])
    feats = [f for _, f, _ in rows]
    np.testing.assert_array_equal(a.predict(feats), b.predict(feats))
    # before any training the scores are random, and reproducible from the seed
    np.testing.assert_array_equal(XGBModel(seed=5).predict(feats), XGBModel(seed=5).predict(feats))


def test_errors_are_labelled_zero_and_only_errors_train_nothing(gemm_data):
    rows = gemm_data["gemm64"][1][:20]
    model = XGBModel(seed=0)
    model.update([f for _, f, _ in rows], [Result(error="build") for _ in rows], ["w"] * len(rows))
    assert not model.trained
    # now with times: the errors stay in the training set as the worst candidates
    model.update([f for _, f, _ in rows], [Result(s) for _, _, s in rows], ["w"] * len(rows))
    assert model.trained and model.num_samples == 40
    assert model._labels()[:20].tolist() == [0.0] * 20
    labels = model._labels()[20:]
    assert labels.max() == 1.0 and (labels > 0).all()
    best = min(s for _, _, s in rows)
    np.testing.assert_allclose(labels, [best / s for _, _, s in rows], rtol=1e-6)


def test_run_seconds_of_results():
    assert run_seconds(Result(2e-3)) == pytest.approx(2e-3)
    assert run_seconds(Result(error="crash")) is None
    assert run_seconds(types.SimpleNamespace(run_secs=(1.0, 3.0), error=None)) == pytest.approx(2.0)
    # the median of the rounds: one stalled round (a descheduled thread) does not make it slow
    assert run_seconds(types.SimpleNamespace(run_secs=(1e-3, 30e-3, 1.1e-3), error=None)) == pytest.approx(1.1e-3)
    assert run_seconds(types.SimpleNamespace(run_secs=(1.0,), error={"kind": "run", "msg": "x"})) is None


def test_pooling_keeps_the_dominant_row_and_sums_the_additive_columns(gemm_data):
    _, f, _ = gemm_data["gemm64"][1][0]
    p = pool(f)
    assert p.shape == (POOLED_WIDTH,) and p.dtype == np.float32
    flops = tessera.autotune.features.feature_names().index("compute.flops")
    assert p[flops] == f[:, flops].max()                          # the update nest, not the init
    np.testing.assert_array_equal(p[NUM_FEATURES:2 * NUM_FEATURES], f.max(axis=0))
    assert p[-1] == pytest.approx(np.log2(1 + f.shape[0]))
    assert not pool(np.zeros((0, NUM_FEATURES), np.float32)).any()


def test_save_load_round_trip(gemm_data, tmp_path):
    rows = gemm_data["gemm64"][1]
    model = XGBModel(seed=1)
    train(model, [("w", rows[:50])])
    path = tmp_path / "model.json"
    model.save(path)
    booster = json.loads(path.read_text())              # XGBoost's own JSON
    assert "learner" in booster
    meta = json.loads((tmp_path / "model.json.meta.json").read_text())
    assert meta["format"] == "tessera-xgb-cost-model" and meta["feature_width"] == NUM_FEATURES
    loaded = XGBModel()
    loaded.load(path)
    feats = [f for _, f, _ in rows]
    np.testing.assert_array_equal(loaded.predict(feats), model.predict(feats))
    # training goes on from the loaded trees, which stay as they were
    loaded.update([f for _, f, _ in rows[50:]], [Result(s) for _, _, s in rows[50:]], ["w"] * (len(rows) - 50))
    again = XGBModel()
    again.load(path)
    np.testing.assert_array_equal(again.predict(feats), model.predict(feats))


def test_load_refuses_other_files(tmp_path):
    path = tmp_path / "m.json"
    with pytest.raises(TesseraError, match="meta.json is missing"):
        XGBModel().load(path)
    path.write_text("{}")
    (tmp_path / "m.json.meta.json").write_text(json.dumps({"format": "tessera-xgb-cost-model", "version": 1,
                                                           "feature_width": NUM_FEATURES + 1,
                                                           "pooled_width": POOLED_WIDTH}))
    with pytest.raises(TesseraError, match="features per store"):
        XGBModel().load(path)
    with pytest.raises(TesseraError, match="not been trained"):
        XGBModel().save(tmp_path / "untrained.json")


def test_random_model_is_reproducible_and_saves_its_place(tmp_path):
    feats = [np.zeros((1, NUM_FEATURES), np.float32)] * 7
    a, b = RandomModel(seed=11), RandomModel(seed=11)
    np.testing.assert_array_equal(a.predict(feats), b.predict(feats))
    a.save(tmp_path / "r.json")
    nxt = a.predict(feats)
    c = RandomModel()
    c.load(tmp_path / "r.json")
    np.testing.assert_array_equal(c.predict(feats), nxt)
    a.update(feats, [Result(1.0)] * 7, ["w"] * 7)          # learns nothing, checks its inputs


def test_inputs_are_checked():
    m = XGBModel(seed=0)
    with pytest.raises(TesseraError, match="one to one"):
        m.update([np.zeros((1, NUM_FEATURES))], [], ["w"])
    with pytest.raises(TesseraError, match=f"\\(n_stores, {NUM_FEATURES}\\)"):
        m.predict([np.zeros((2, 3))])
    assert m.predict([]).shape == (0,)
    assert isinstance(make_cost_model("xgb", 0), XGBModel) and isinstance(make_cost_model("random"), RandomModel)
    with pytest.raises(TesseraError, match="unknown cost model"):
        make_cost_model("gbdt")


def _records(rows, key):
    return [types.SimpleNamespace(trace=sch.trace.as_json(), run_secs=(secs,), error=None, target=str(TARGET),
                                  workload_key=key) for sch, _, secs in rows]


class FakeDatabase:
    """The duck-typed interface pretrain reads: workloads() with .key/.func, records(...)."""

    def __init__(self, entries):
        self.entries = entries   # key -> (func, records)

    def workloads(self):
        return [types.SimpleNamespace(key=k, func=f) for k, (f, _) in self.entries.items()]

    def records(self, workload_key=None, target=None):
        return list(self.entries[workload_key][1])


def test_pretrain_from_a_duck_typed_database(gemm_data):
    func, rows = gemm_data["gemm64"]
    train_rows, held_out = split(rows)
    broken = types.SimpleNamespace(trace=[[["NoSuchInstruction", [], [], []]], []], run_secs=(1.0,), error=None)
    db = FakeDatabase({"gemm64": (func, _records(train_rows, "gemm64") + [broken])})
    model = XGBModel(seed=0)
    with pytest.warns(UserWarning, match="1 record"):
        summary = model.pretrain(db)
    assert summary == {"used": len(train_rows), "skipped": 1}
    scores = model.predict([f for _, f, _ in held_out])
    assert spearmanr(scores, [-s for _, _, s in held_out]).correlation > 0.8


def test_pretrain_from_a_database_file(gemm_data, tmp_path):
    database = pytest.importorskip("tessera.autotune.database")
    func, rows = gemm_data["gemm64"]
    train_rows, held_out = split(rows, seed=1)
    db = database.Database(tmp_path / "tune.jsonl")
    wl = db.commit_workload(func)
    db.commit([database.TuningRecord(wl.key, TARGET, sch.trace.as_json(), [secs]) for sch, _, secs in train_rows]
              + [database.TuningRecord(wl.key, TARGET, train_rows[0][0].trace.as_json(), (),
                                       error={"kind": "run", "msg": "segfault"})])
    reopened = database.Database(tmp_path / "tune.jsonl")     # everything from the JSON lines file
    model = XGBModel(seed=0)
    assert model.pretrain(reopened, target=TARGET) == {"used": len(train_rows) + 1, "skipped": 0}
    scores = model.predict([f for _, f, _ in held_out])
    assert spearmanr(scores, [-s for _, _, s in held_out]).correlation > 0.8


def test_cost_models_share_the_base_class():
    assert issubclass(XGBModel, CostModel) and issubclass(RandomModel, CostModel)


@pytest.mark.slow
def test_xgb_ranks_measured_gemm_candidates():
    """Real times: 24 schedules of a 128^3 GEMM built and timed; trained on 16, the other 8 ranked."""
    M = N = K = 128
    func = gemm(M, N, K)
    rng = np.random.default_rng(0)
    a, b = rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32)
    c = np.empty((M, N), np.float32)
    combos = [x for x in itertools.product([1, 4, 8], [4, 16, 32], [0, 1], [0, 1], [0])][:24]
    rows = []
    for ti, tj, vec, tiled, par in combos:
        sch = candidate(func, ti, tj, vec, tiled, par)
        lib = tessera.build(sch, target=TARGET)
        secs = lib.time_evaluator(number=3, repeat=3)(a, b, c).median
        rows.append((sch, extract_features(sch, TARGET), secs))
    train_rows, held_out = split(rows, seed=2, frac=2 / 3)
    model = XGBModel(seed=0)
    train(model, [("gemm128", train_rows)])
    scores = model.predict([f for _, f, _ in held_out])
    rho = spearmanr(scores, [-s for _, _, s in held_out]).correlation
    assert rho > 0.5, f"Spearman of predicted vs measured ranking: {rho:.3f} (times {[s for *_, s in held_out]})"
