"""Tuning whole models: extract_tasks, tune_graph, compiling with the records, the shipped records."""
import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import autotune, zoo
from tessera.autotune import Database, extract_tasks, record_target, tune_graph
from tessera.autotune.apply_history import BUILTIN_DIR, builtin_databases
from tessera.autotune.scheduler import TaskScheduler, pretrain_from
from tessera.frontend import from_onnx
from tessera.graph.ir import FUSED_OP
from tessera.ops.registry import Knobs, get_op
from tessera.target import Target
from tessera.tir import Schedule
from tessera.tir.schedule import Trace

T2 = "c -num-threads=2"


def small_cnn(seed=0):
    """conv(8->16) relu, conv(16->16) relu twice (the same kernel), global pool, flatten, gemm."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name))
        return name

    x = "x"
    for k, (cin, cout) in enumerate(((8, 16), (16, 16), (16, 16))):
        nodes.append(helper.make_node("Conv", [x, w(f"w{k}", cout, cin, 3, 3), w(f"b{k}", cout)], [f"c{k}"],
                                      pads=[1, 1, 1, 1], name=f"conv{k}"))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}"))
        x = f"r{k}"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["p"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["p"], ["f"], name="flatten"))
    nodes.append(helper.make_node("Gemm", ["f", w("fc_w", 10, 16), w("fc_b", 10)], ["y"], transB=1, name="fc"))
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _kernel_nodes(g):
    return [n for n in g.nodes if n.op == FUSED_OP or get_op(n.op).host is None]


def test_extract_tasks_of_a_small_cnn_deduplicates_the_repeated_conv():
    g, params = from_onnx(small_cnn())
    tasks = extract_tasks(g, params, T2)
    opt = autotune.graph_tasks.optimized_graph(g, params, T2)
    assert sum(t.weight for t in tasks) == len(_kernel_nodes(opt))
    assert len({t.workload.key for t in tasks}) == len(tasks)
    twice = [t for t in tasks if t.weight == 2]
    assert len(twice) == 1 and "conv2d" in twice[0].name
    assert sorted(n.split("_")[0] for n in twice[0].nodes) == ["relu1", "relu2"]   # conv1 and conv2's groups
    assert all(t.weight == 1 for t in tasks if t is not twice[0])
    # the conv's FLOPs: at least the multiply-adds of a 16x16x16 output over 16 x 3 x 3 inputs
    assert twice[0].flops >= 2 * 16 * 16 * 16 * 16 * 9


def test_extract_tasks_of_a_transformer_block_weights_the_shared_layer_norm():
    opts = dict(seq_len=16, hidden=64, heads=4, n_positions=64)
    g, params = from_onnx(zoo.get_model("gpt2_block", **opts))
    tasks = extract_tasks(g, params, T2)
    opt = autotune.graph_tasks.optimized_graph(g, params, T2)
    assert sum(t.weight for t in tasks) == len(_kernel_nodes(opt))
    ln = [t for t in tasks if "layer_norm" in t.name]
    assert len(ln) == 1 and ln[0].weight == 2          # ln_1 and ln_2 run one kernel
    mm = [t for t in tasks if "matmul" in t.name]
    assert len(mm) >= 4 and all(t.flops > 0 for t in mm)


def test_extract_tasks_marks_the_kernel_parameters_that_are_weights_and_counts_their_bytes():
    g, params = from_onnx(small_cnn())
    opt = autotune.graph_tasks.optimized_graph(g, params, T2)
    tasks = extract_tasks(opt, target=T2, optimized=True)
    by_node = {n.name: n for n in opt.nodes}
    expect = 0
    for t in tasks:
        for name in t.nodes:
            n = by_node[name]
            consts = tuple(i for i, v in enumerate(n.inputs) if v in opt.constants)
            assert t.weights == consts, (t.name, name)
            assert all(tuple(d.value for d in t.func.params[i].shape) == opt.constants[n.inputs[i]].shape
                       for i in consts)
            expect += sum(opt.constants[n.inputs[i]].nbytes for i in consts)
    assert any(t.weights for t in tasks) and any(not t.weights for t in tasks)    # convs; the pool
    assert autotune.tune.weights_bytes(tasks) == expect > 0


@pytest.mark.parametrize("streamed_above, cold", [(1, True), (1 << 40, False)])
def test_tune_graph_evicts_the_weights_before_timing_only_when_the_model_outgrows_the_cache(monkeypatch, streamed_above,
                                                                                            cold):
    from tessera.autotune import scheduler
    import importlib
    winograd = importlib.import_module("tessera.graph.passes.winograd")   # (the package exports the pass)

    asked = []

    class Stop(Exception):
        pass

    def fake_runner(cold_weights=True):
        asked.append(cold_weights)
        raise Stop

    # the Winograd pass's threshold: the tuner times as the compiler plans
    monkeypatch.setattr(winograd, "COLD_WEIGHT_BYTES", streamed_above)
    monkeypatch.setattr(scheduler, "graph_runner", fake_runner)
    g, params = from_onnx(small_cnn())
    with pytest.raises(Stop):
        tune_graph(g, params, T2, max_trials=4, transfer=False)
    assert asked == [cold]
    runner = autotune.tune.graph_runner(cold)
    assert runner.flush_cache == ("weights" if cold else False) and (runner.number, runner.repeat) == (3, 3)
    tasks = extract_tasks(g, params, T2)
    assert autotune.tune.weights_outgrow_cache(tasks, T2) == cold
    assert not autotune.tune.weights_outgrow_cache(tasks, "opencl")       # a GPU kernel is timed on its device


def test_conv_knob_space_contains_the_default_schedule_and_samples_build_right():
    g, params = from_onnx(small_cnn())
    conv = next(t for t in extract_tasks(g, params, T2) if t.weight == 2)
    space = conv.space
    default = space.default()
    if space.kind != "knobs":
        pytest.skip(f"{Target(T2)} has no conv micro-kernel here (no knobs)")
    # every knob at its default (decision 0) is the hand schedule
    zeros = conv.program.schedule(Knobs([0] * space.knobs, seed=0))
    assert tessera.ir.structural_equal(zeros.mod, default.mod)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(6):
        sch = space.sample(rng)
        if sch is None:
            continue
        seen.add(str(sch.trace))
        replay = space.replay(sch.trace.as_json())
        assert replay is not None and tessera.ir.structural_equal(replay.mod, sch.mod)
    assert len(seen) >= 2


def test_every_point_of_the_conv_and_row_knob_spaces_computes_the_untuned_result():
    """Each knob setting is a schedule the measurement checks against the unscheduled program."""
    from tessera.autotune.measure import MeasureCandidate
    from tessera.autotune.measure.runner import measure

    g, params = from_onnx(small_cnn())
    tasks = [t for t in extract_tasks(g, params, T2) if t.space.kind == "knobs"]
    g2, p2 = from_onnx(zoo.get_model("gpt2_block", seq_len=16, hidden=64, heads=4, n_positions=64))
    tasks += [t for t in extract_tasks(g2, p2, T2) if t.space.kind == "knobs" and
              ("layer_norm" in t.name or "softmax" in t.name)]
    assert any("conv2d" in t.name for t in tasks) or not Target(T2).has_feature("avx2")
    assert any("layer_norm" in t.name for t in tasks) and any("softmax" in t.name for t in tasks)
    cands = []
    for t in tasks:
        pts = [s for s in t.space.points().values() if s is not None]
        assert len(pts) >= 2, t.name
        cands += [MeasureCandidate(t.workload, s.trace.as_json()) for s in pts[:6]]
    runner = autotune.LocalRunner(number=1, repeat=1, min_repeat_ms=0)
    try:
        results = measure(cands, T2, runner=runner)
    finally:
        runner.close()
    for c, r in zip(cands, results):
        assert r.error_kind is None, (c.workload.func.name, r.error_kind, r.error_msg)


@pytest.fixture(scope="module")
def tuned_cnn(tmp_path_factory):
    model = small_cnn()
    g, params = from_onnx(model)
    path = tmp_path_factory.mktemp("tune") / "cnn.jsonl"
    tasks = extract_tasks(g, params, T2)
    # a tiny budget on two of the tasks (the repeated conv, the dense layer) keeps the test quick
    some = [t for t in tasks if t.weight == 2] + [t for t in tasks if "matmul" in t.name][:1]
    # one timed call a candidate and a generous timeout: the test checks what tuning does, not how
    # fast; on a loaded CI machine a 2-thread kernel timed for 50 ms could run into the 10 s limit
    # TESSERA_SPIN_US=0: the measured kernels' threads sleep between calls, so the default schedule's
    # parallel loops pay a wake-up and the few candidates have a default to beat (tests below need one
    # tuned kernel; with spinning threads a 16x16 CNN's defaults are rarely beaten in 6 trials)
    runner = autotune.LocalRunner(number=1, repeat=1, min_repeat_ms=0, warmup=False, timeout=120,
                                  env={"TESSERA_SPIN_US": "0"})
    try:
        # validate=False: these tests check the isolated search's records (the in-model check has its own)
        res = tune_graph(g, params, T2, max_trials=6, database=str(path), batch_size=2, seed=0, tasks=some,
                         runner=runner, validate=False)
    finally:
        runner.close()
    return model, g, params, path, res


def test_tune_graph_keeps_or_improves_every_task_and_stays_equal_to_onnxruntime(tuned_cnn):
    model, g, params, path, res = tuned_cnn
    assert res.trials == 6 and len(res.tasks) == 2
    measured = [r for r in res.reports if r.trials]
    assert len(measured) == 2 and all(r.default_secs is not None for r in measured)
    for r in measured:
        assert r.best_secs <= r.default_secs
    assert res.latency <= res.default_latency
    exe = tessera.compile(g, params, T2, database=str(path))
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(exe(x), _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    n_tuned = int(exe.tuning.split("tuned schedules for ")[1].split(" of")[0])
    assert n_tuned == sum(1 for spec in exe.plan.kernels.values() if spec.tuned) >= 1
    prof = exe.profile(x)
    assert sum(1 for r in prof.rows if r.tuned) >= n_tuned and "* tuned schedule" in str(prof)


def test_tune_graph_resumes_from_its_database(tuned_cnn):
    model, g, params, path, res = tuned_cnn
    again = tune_graph(g, params, T2, max_trials=res.trials, database=str(path), batch_size=2, seed=1,
                       tasks=res.tasks, validate=False)
    assert again.trials == res.trials                  # nothing new to measure: the budget is spent
    assert again.latency == pytest.approx(res.latency)


def test_records_of_another_target_are_never_applied(tuned_cnn, tmp_path):
    model, g, params, path, res = tuned_cnn
    one = tessera.compile(g, params, "c -num-threads=1", database=str(path))
    assert one.tuning.startswith("tuned schedules for 0 of")
    # the same records under another x86-64 level than this machine's
    host_key = record_target(T2)
    other_level = "x86-64-v3" if "x86-64-v4" in host_key else "x86-64-v4"
    moved = tmp_path / "moved.jsonl"
    with open(path) as src, open(moved, "w") as dst:
        for line in src:
            doc = json.loads(line)
            if "target" in doc:
                doc["target"] = f"c -mcpu={other_level} -num-threads=2"
            dst.write(json.dumps(doc) + "\n")
    other = tessera.compile(g, params, T2, database=str(moved))
    assert other.tuning.startswith("tuned schedules for 0 of")
    same = tessera.compile(g, params, T2, database=str(path))
    assert not same.tuning.startswith("tuned schedules for 0 of")


def test_a_tuned_model_exports_to_a_library_that_runs_its_tuned_kernels(tuned_cnn, tmp_path):
    model, g, params, path, res = tuned_cnn
    exe = tessera.compile(g, params, T2, database=str(path))
    lib = tmp_path / "cnn.so"
    exe.export_library(str(lib))
    loaded = tessera.runtime.load_module(str(lib))
    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(loaded(x), _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert any(spec.tuned for spec in loaded.plan.kernels.values())     # the plan in the file says so


def test_transfer_pretrains_the_cost_model_on_other_workloads_only(tuned_cnn):
    model, g, params, path, res = tuned_cnn
    db = Database(path)
    n = len(db.records(target=record_target(T2)))
    xgb = autotune.XGBModel(seed=0)
    assert pretrain_from(xgb, str(path), T2) == {"used": n, "skipped": 0}
    mine = {t.workload.key for t in res.tasks}
    assert pretrain_from(autotune.XGBModel(seed=0), str(path), T2, exclude=mine) == {"used": 0, "skipped": 0}
    with pytest.raises(tessera.TesseraError, match="missing.jsonl.* does not exist"):   # a typo is not silence
        pretrain_from(autotune.XGBModel(seed=0), [str(path), str(path.parent / "missing.jsonl")], T2)
    assert not (path.parent / "missing.jsonl").exists()
    # the pre-trained model scores a new candidate
    feats = [autotune.extract_features(res.tasks[0].space.default(), Target(T2))]
    assert np.isfinite(xgb.predict(feats)).all()


def test_compile_refuses_a_missing_database(tmp_path):
    g, params = from_onnx(small_cnn())
    with pytest.raises(tessera.TesseraError, match="does not exist"):
        tessera.compile(g, params, T2, database=str(tmp_path / "none.jsonl"))


def test_a_record_that_no_longer_applies_falls_back_to_the_default(tuned_cnn, tmp_path):
    model, g, params, path, res = tuned_cnn
    broken = tmp_path / "broken.jsonl"
    with open(path) as src, open(broken, "w") as dst:
        for line in src:
            doc = json.loads(line)
            if "trace" in doc:
                doc["trace"] = [[["Split", ["no_such_loop"], [], []]], []]
            dst.write(json.dumps(doc) + "\n")
    with pytest.warns(UserWarning, match="does not apply"):
        exe = tessera.compile(g, params, T2, database=str(broken))
    x = np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(exe(x), _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_task_scheduler_gives_the_next_round_to_the_task_that_cuts_latency_most():
    class FakeTask:
        def __init__(self, name, weight, flops):
            self.name, self.op, self.weight, self.flops = name, name, weight, flops

    class FakeTuner:
        def __init__(self, task, best):
            self.task, self.best_secs, self.trials, self.exhausted = task, best, 10, False

    big = FakeTuner(FakeTask("conv_a", 4, 1e9), 4e-3)     # 4 runs of 4 ms: most of the model
    small = FakeTuner(FakeTask("pool_b", 1, 1e6), 1e-5)
    sched = TaskScheduler([big, small], np.random.default_rng(0), eps=0.0, negligible=0.0)
    sched.record(0, None)
    sched.record(1, None)
    assert sched.next_task() == 0
    # a task under 0.5% of the estimated latency is not tuned at all
    sched = TaskScheduler([big, small], np.random.default_rng(0), eps=0.0)
    assert sched.next_task() == 0 and sched.done[1] == "negligible"
    # early stopping: no gain for early_stopping trials ends a task
    sched = TaskScheduler([big, small], np.random.default_rng(0), eps=0.0, early_stopping=5, negligible=0.0)
    sched.record(1, None)
    small.trials = 20
    sched.record(1, small.best_secs)
    assert sched.done[1] == "converged" and sched.alive() == [0]


def test_task_scheduler_gives_first_rounds_to_the_largest_share_of_the_estimate_first():
    class FakeTask:
        def __init__(self, name, weight):
            self.name, self.op, self.weight, self.flops = name, name, weight, 1e6

    class FakeTuner:
        def __init__(self, task, best):
            self.task, self.best_secs, self.trials, self.exhausted = task, best, 1, False

    # shares 1 x 1 ms, 3 x 1 ms, 1 x 2 ms, and a task whose default has no time yet (first of all)
    tuners = [FakeTuner(FakeTask("a", 1), 1e-3), FakeTuner(FakeTask("b", 3), 1e-3), FakeTuner(FakeTask("c", 1), 2e-3),
              FakeTuner(FakeTask("d", 1), None)]
    sched = TaskScheduler(tuners, np.random.default_rng(0), eps=0.0, negligible=0.0)
    order = []
    for _ in range(4):
        i = sched.next_task()
        order.append(i)
        sched.rounds[i] += 1          # its round done (record() would also judge its gain)
    assert order == [3, 1, 2, 0]


def test_shipped_records_load_replay_and_cover_both_cpu_levels():
    files = sorted(BUILTIN_DIR.glob("*.jsonl"))
    assert files, "tessera ships tuned records for the zoo models"
    levels = set()
    for f in files:
        db = Database(f)
        assert len(db) > 0
        for wl in db.workloads():
            for rec in db.records(workload_key=wl.key):
                levels.add(rec.target.split()[1])
                sch = Schedule(wl.func)
                Trace.apply_json_to_schedule(rec.trace, sch)      # every shipped trace replays here
    assert {"-mcpu=x86-64-v3", "-mcpu=x86-64-v4"} <= levels


def test_shipped_records_apply_to_resnet18_on_this_cpu_level():
    target = T2
    if not builtin_databases(target):
        pytest.skip(f"no shipped records for {record_target(target)}")
    g, params = from_onnx(zoo.get_model("resnet18"))
    exe = tessera.compile(g, params, target)                 # shipped records apply by default
    plain = tessera.compile(g, params, target, database=False)
    assert not exe.tuning.startswith("tuned schedules for 0 of"), exe.tuning
    assert plain.tuning.startswith("no tuning records")
    x = zoo.sample_input("resnet18")["input"]
    np.testing.assert_allclose(exe(x), plain(x), rtol=1e-4, atol=1e-4)


def test_a_record_needing_cpu_features_the_target_lacks_is_passed_over_for_the_next_fastest(tmp_path):
    """An x86-64 level does not imply AVX-512 VNNI: a record tuned on a VNNI machine (the same record
    key) must not be applied where its intrinsic would not build."""
    from tessera import te
    from tessera.autotune import ApplyHistoryBest, TuningRecord
    from tessera.autotune.workload import workload_key

    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    key = workload_key(func)
    vnni = [[["Tensorize", ["b0"], [json.dumps("x86_avx512_vnni_gemm_6x64_u8s8s32")], []]], []]
    plain = [[["GetBlock", [], [json.dumps("B"), json.dumps("main")], ["b0"]]], []]
    unknown = [[["Tensorize", ["b0"], [json.dumps("no_such_intrinsic_4x4")], []]], []]
    v4 = "c -mcpu=x86-64-v4 -num-threads=2"
    db = Database(tmp_path / "vnni.jsonl")
    db.commit_workload(func)
    db.commit([TuningRecord(key, v4, vnni, (1e-6,)), TuningRecord(key, v4, unknown, (2e-6,)),
               TuningRecord(key, v4, plain, (3e-6,))])
    assert ApplyHistoryBest(db, builtin=False).lookup(func, v4) == plain
    sch = autotune.apply_best(func, db, v4)                  # the same choice
    assert sch is not None and sch.trace.as_json() == plain
    with_vnni = "c -mcpu=x86-64-v4 -mattr=+avx512vnni -num-threads=2"
    assert Target(with_vnni).has_feature("avx512_vnni")
    db2 = Database(tmp_path / "vnni2.jsonl")
    db2.commit_workload(func)
    db2.commit([TuningRecord(key, record_target(with_vnni), vnni, (1e-6,)),
                TuningRecord(key, record_target(with_vnni), plain, (3e-6,))])
    assert ApplyHistoryBest(db2, builtin=False).lookup(func, with_vnni) == vnni
    # a GPU target's records keep their tensor-core intrinsics (the CPU-feature check is for CPUs)
    wmma = [[["Tensorize", ["b0"], [json.dumps("cuda_wmma_16x16x16_f16f32")], []]], []]
    gpu = Database(tmp_path / "gpu.jsonl")
    gpu.commit_workload(func)
    gpu.commit([TuningRecord(key, record_target("cuda"), wmma, (1e-6,)),
                TuningRecord(key, record_target("cuda"), plain, (3e-6,))])
    assert ApplyHistoryBest(gpu, builtin=False).lookup(func, "cuda") == wmma
    only = Database(tmp_path / "only.jsonl")
    only.commit_workload(func)
    only.commit([TuningRecord(key, v4, vnni, (1e-6,))] * 5)
    hist = ApplyHistoryBest(only, builtin=False)
    assert hist.lookup(func, v4) is None and key in hist.missed


def test_an_intrinsic_family_made_while_another_thread_asks_for_it_is_found_by_both():
    """TensorIntrin.get of a family name (a tuning record's conv micro-kernel, say) from two threads
    at once: the second waits for the first's make() instead of reporting the name unknown."""
    import threading
    import time

    from tessera.tir import TensorIntrin
    from tessera.tir.tensor_intrin.x86 import gemm_desc, gemm_impl

    started = threading.Event()

    def make(m):
        started.set()
        time.sleep(0.3)
        TensorIntrin.register(m.group(0), gemm_desc(4, 8), gemm_impl("test_family_ukr", 4, 8), override=True,
                              c_source="static void test_family_ukr(void) {}")

    TensorIntrin.register_family(r"test_race_family_(\d+)", make)
    got, errors = [], []

    def ask():
        try:
            got.append(TensorIntrin.get("test_race_family_7"))
        except Exception as e:        # noqa: BLE001  (reported below)
            errors.append(e)

    try:
        first = threading.Thread(target=ask)
        first.start()
        assert started.wait(5)
        second = threading.Thread(target=ask)
        second.start()
        first.join()
        second.join()
    finally:
        # the tuner's rules try every registered intrinsic: this dummy must not outlive the test
        TensorIntrin.unregister_family(r"test_race_family_(\d+)")
        if TensorIntrin.get("test_race_family_7", allow_missing=True) is not None:
            TensorIntrin.unregister("test_race_family_7")
    assert TensorIntrin.get("test_race_family_7", allow_missing=True) is None
    assert not errors, errors
    assert len(got) == 2 and got[0] is got[1] and got[0].name == "test_race_family_7"


def test_a_resumed_task_stops_early_counting_from_its_best_trial_not_from_zero(tuned_cnn):
    """Early stopping after a resume: the trials since the task's best record, not all its trials."""
    from tessera.autotune.cost_model import make_cost_model
    from tessera.autotune.tune import TaskTuner

    class FakeTask:
        name = op = "conv_a"
        weight, flops = 1, 1e9

    class Resumed:
        def __init__(self, trials, best_trial):
            self.task, self.best_secs, self.exhausted = FakeTask(), 1e-3, False
            self.trials, self.best_trial = trials, best_trial

    tu = Resumed(trials=200, best_trial=190)     # its best came 10 trials before the resume
    sched = TaskScheduler([tu], np.random.default_rng(0), eps=0.0, early_stopping=64, negligible=0.0)
    tu.trials = 216                              # one round of 16 without a gain
    sched.record(0, tu.best_secs)
    assert sched.done[0] is None                 # 26 trials since its best: still tuned
    tu.trials = 254
    sched.record(0, tu.best_secs)
    assert sched.done[0] == "converged"          # 64 since its best
    # a TaskTuner resumed from a database knows at which of its trials the best record came
    model, g, params, path, res = tuned_cnn
    for task, fresh in zip(res.tasks, res.results):
        resumed = TaskTuner(task, make_cost_model("random", 0), np.random.default_rng(0), "random",
                            Database(path))
        resumed.start()
        assert resumed.best_secs == fresh.run_secs
        assert 1 <= resumed.best_trial <= resumed.trials == fresh.trials
        # the trial count the fresh run's history shows when it first reached that best
        first = min(t for t, _, best in fresh.history if best == fresh.run_secs)
        assert resumed.best_trial <= first


def test_a_graph_specialized_at_run_time_refuses_a_missing_database_at_compile_and_uses_a_given_one(tuned_cnn,
                                                                                                    tmp_path):
    from tessera.graph import DeferredGraph

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    graph = helper.make_graph([node], "reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                                                  helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    g, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))
    assert isinstance(g, DeferredGraph)
    with pytest.raises(tessera.TesseraError, match="does not exist"):
        tessera.compile(g, params, T2, database=str(tmp_path / "none.jsonl"))
    path = tuned_cnn[3]
    exe = tessera.compile(g, params, T2, database=str(path))
    assert "per specialization" in exe.tuning and "0 compiled" in exe.tuning      # what `tessera run --db` prints
    (y,) = exe.run({"x": x, "shape": np.array([6, 4], np.int64)})
    np.testing.assert_array_equal(y, x.reshape(6, 4))
    assert exe.specialization({"x": x, "shape": np.array([6, 4], np.int64)}).tuning.startswith("tuned schedules")
    assert "no tuning records" in tessera.compile(g, params, T2, database=False).tuning


def test_export_best_keeps_each_workloads_fastest_records_and_refuses_an_existing_file(tuned_cnn, tmp_path):
    path = tuned_cnn[3]
    db = Database(path)
    small = db.export_best(tmp_path / "best.jsonl", k=1)
    again = Database(tmp_path / "best.jsonl")              # what was written reads back the same
    tk = record_target(T2)
    keys = {r.workload_key for r in db.records(target=tk) if r.is_valid}
    assert keys and {w.key for w in again.workloads()} == keys
    for key in keys:
        want = db.get_top_k(key, tk, 1)[0]
        got = again.records(workload_key=key, target=tk)
        assert len(got) == 1 and got[0].trace == want.trace and got[0].mean_secs == want.mean_secs
    assert len(small) == len(again) == len(keys)
    with pytest.raises(tessera.TesseraError, match="exists"):
        db.export_best(tmp_path / "best.jsonl")


@pytest.mark.parametrize("bad,message", [
    (dict(remeasure=-1), "remeasure must be an int >= 0"),
    (dict(remeasure="3"), "remeasure must be an int >= 0"),
    (dict(early_stopping=0), "early_stopping must be an int >= 1 or None"),
    (dict(time_budget=0), "time_budget must be > 0"),
    (dict(max_trials=-1), "max_trials must be an int >= 0"),
])
def test_tune_graph_refuses_bad_arguments_by_name(bad, message, tmp_path):
    g, params = from_onnx(small_cnn())
    args = dict(max_trials=4, database=str(tmp_path / "t.jsonl")) | bad
    with pytest.raises(tessera.TesseraError, match=message):
        tune_graph(g, params, T2, **args)
    assert not (tmp_path / "t.jsonl").exists()


# ---------------------------------------------------------------------------------------------
# the in-model check, pick records, and the review's leftovers
# ---------------------------------------------------------------------------------------------
def test_in_model_check_runs_and_compile_applies_each_checked_tasks_pick(tmp_path):
    """tune_graph(validate=True) times the candidates inside the compiled model, writes each checked
    task's pick, and tessera.compile then builds exactly that choice (the default where it kept it)."""
    from tessera.autotune import ApplyHistoryBest

    model = small_cnn(seed=4)
    g, params = from_onnx(model)
    tasks = extract_tasks(g, params, T2)
    some = [t for t in tasks if t.weight == 2]                 # the repeated conv: most of the model
    path = tmp_path / "checked.jsonl"
    runner = autotune.LocalRunner(number=1, repeat=1, min_repeat_ms=0, warmup=False, timeout=120)
    try:
        res = tune_graph(g, params, T2, max_trials=5, database=str(path), batch_size=2, seed=0, tasks=some,
                         runner=runner, remeasure=0, validate_budget=2)
    finally:
        runner.close()
    check = res.validation
    assert check is not None and check.skipped is None, check
    assert [t.name for t in check.tasks] == [some[0].name] and check.configs >= 2 and check.rounds >= 3
    tc = check.tasks[0]
    assert tc.labels[0].startswith("default") and len(tc.labels) == len(tc.median_secs) >= 2
    assert all(m > 0 for m in tc.median_secs) and set(check.end_to_end) >= {"default", "isolated", "picked"}
    db = Database(path)
    pick = db.get_pick(some[0].workload.key, record_target(T2))
    assert pick is not None and pick.pick == ("default" if tc.chosen == 0 else "record")
    assert pick.in_model_secs == pytest.approx(tc.median_secs[tc.chosen])
    hist = ApplyHistoryBest(str(path), builtin=False)
    want = None if tc.chosen == 0 else pick.trace
    assert hist.lookup(some[0].func, T2) == want
    exe = tessera.compile(g, params, T2, database=str(path))
    kernel = [k for k in exe.kernels if workload_key_of(k) == some[0].workload.key]
    assert len(kernel) == 1 and kernel[0].tuned == (tc.chosen != 0)
    if tc.chosen:
        assert kernel[0].prim.trace.as_json() == pick.trace
    else:
        assert "kept there by the tuner's in-model check" in exe.tuning
    x = np.random.default_rng(5).standard_normal((1, 8, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(exe(x), _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert "in-model check" in res.table()


def workload_key_of(kernel):
    from tessera.autotune.workload import workload_key

    return workload_key(kernel.func)


def _pick_db(tmp_path, name="picks.jsonl"):
    from tessera import te
    from tessera.autotune import TuningRecord
    from tessera.autotune.workload import workload_key

    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    key = workload_key(func)
    db = Database(tmp_path / name)
    db.commit_workload(func)
    return db, func, key, TuningRecord


def test_a_pick_record_is_applied_over_the_fastest_while_it_is_the_latest(tmp_path):
    from tessera.autotune import ApplyHistoryBest

    db, func, key, TuningRecord = _pick_db(tmp_path)
    v = record_target(T2)
    fast, slow = [], []
    for k, out in ((4, fast), (8, slow)):
        sch = Schedule(func)
        i, _ = sch.get_loops(sch.get_block("B"))
        sch.split(i, factors=[None, k])
        out.extend(sch.trace.as_json())
    default = Schedule(func).trace.as_json()
    db.commit([TuningRecord(key, v, fast, (1e-6,)), TuningRecord(key, v, slow, (2e-6,))])
    assert ApplyHistoryBest(db, builtin=False).lookup(func, T2) == fast       # no pick: the fastest
    db.commit([TuningRecord(key, v, slow, (2e-6,), pick="record", in_model_secs=5e-7)])
    again = Database(db.path)                                                   # the pick reads back
    assert again.get_pick(key, v).pick == "record" and again.get_pick(key, v).in_model_secs == 5e-7
    hist = ApplyHistoryBest(again, builtin=False)
    assert hist.lookup(func, T2) == slow                                        # the pick, not the fastest
    assert autotune.apply_best(func, again, T2).trace.as_json() == slow
    # exported, the pick goes along and still applies
    small = again.export_best(tmp_path / "small.jsonl", k=1)
    assert ApplyHistoryBest(Database(small.path), builtin=False).lookup(func, T2) == slow
    # a pick of the default: the default schedule (lookup answers None) and the summary says so
    db.commit([TuningRecord(key, v, default, (3e-6,), pick="default")])
    hist = ApplyHistoryBest(Database(db.path), builtin=False)
    assert hist.lookup(func, T2) is None and key in hist.kept and key not in hist.missed
    # a record measured after the pick (a later tuning without the check) voids it: the fastest again
    db.commit([TuningRecord(key, v, default, (9e-6,))])
    assert Database(db.path).get_pick(key, v) is None
    assert ApplyHistoryBest(Database(db.path), builtin=False).lookup(func, T2) == fast
    with pytest.raises(tessera.TesseraError, match="pick"):
        TuningRecord(key, v, fast, (1e-6,), pick="maybe")
    with pytest.raises(tessera.TesseraError, match="pick"):
        TuningRecord(key, v, fast, (), error={"kind": "run", "msg": "x"}, pick="record")
    # a plain record's line has no pick fields (older readers see what they always saw)
    assert "pick" not in TuningRecord(key, v, fast, (1e-6,)).to_line()


def test_cuda_records_are_keyed_by_architecture_and_old_cuda_keys_read_as_the_default_arch(tmp_path):
    from tessera.backend.cuda import DEFAULT_ARCH

    assert record_target("cuda") == f"cuda -arch={DEFAULT_ARCH}"
    assert record_target("cuda -arch=sm_80") == "cuda -arch=sm_80"
    db, func, key, TuningRecord = _pick_db(tmp_path, "gpu.jsonl")
    plain = Schedule(func).trace.as_json()
    # a line written before the key named the architecture
    old = TuningRecord(key, "cuda -arch=sm_80", plain, (1e-6,)).as_json()
    old["target"] = "cuda"
    with open(db.path, "a") as f:
        f.write(json.dumps(old) + "\n")
    again = Database(db.path)
    assert [r.target for r in again.records()] == [f"cuda -arch={DEFAULT_ARCH}"]
    assert len(again.records(target="cuda")) == 1 and again.get_top_k(key, record_target("cuda"), 1)
    assert again.records(target="cuda -arch=sm_80") == [] and again.has_target(f"cuda -arch={DEFAULT_ARCH}")
    assert autotune.apply_best(func, again, "cuda") is not None
    assert autotune.apply_best(func, again, "cuda -arch=sm_80") is None


def test_a_task_whose_candidates_all_fail_is_dropped_with_a_warning():
    class FakeTask:
        def __init__(self, name, weight, flops):
            self.name, self.op, self.weight, self.flops = name, name, weight, flops

    class FakeTuner:
        def __init__(self, task, best, trials):
            self.task, self.best_secs, self.trials, self.errors, self.exhausted = task, best, trials, trials, False

    good = FakeTuner(FakeTask("conv_a", 1, 1e9), 4e-3, 10)
    bad = FakeTuner(FakeTask("conv_b", 4, 1e9), None, 17)
    sched = TaskScheduler([good, bad], np.random.default_rng(0), eps=0.0, early_stopping=None)
    sched.record(0, None)
    with pytest.warns(UserWarning, match="conv_b: all 17 candidates .* failed"):
        sched.record(1, None)
    assert sched.done[1] == "failed" and sched.alive() == [0]
    for _ in range(3):                      # every later round goes to the task that runs
        assert sched.next_task() == 0
    from tessera.autotune.scheduler import TaskReport, estimated_latency

    reps = [TaskReport("a", 1, 1e9, 10, 0, 5e-3, 4e-3, None), TaskReport("b", 4, 1e9, 17, 17, None, None, "failed")]
    assert estimated_latency(reps) == pytest.approx(4e-3)     # the estimate goes on without it


def test_exe_tuning_names_only_records_that_applied_and_the_ones_that_did_not(tuned_cnn, tmp_path):
    model, g, params, path, res = tuned_cnn
    broken = tmp_path / "broken2.jsonl"
    with open(path) as src, open(broken, "w") as dst:
        for line in src:
            doc = json.loads(line)
            if "trace" in doc:      # a trace of its own: kernels are cached per trace, and this one must be made
                doc["trace"] = [[["Split", ["no_such_loop_either"], [], []]], []]
            dst.write(json.dumps(doc) + "\n")
    with pytest.warns(UserWarning, match="does not apply"):
        exe = tessera.compile(g, params, T2, database=str(broken))
    assert exe.tuning.startswith("tuned schedules for 0 of") and "(records: none)" in exe.tuning, exe.tuning
    assert "records that did not apply: " in exe.tuning and "broken2.jsonl" in exe.tuning
    good = tessera.compile(g, params, T2, database=[str(path), str(broken)])      # the good one answers first
    assert "(records: cnn.jsonl)" in good.tuning and "did not apply" not in good.tuning, good.tuning


def test_a_shared_kernel_program_names_the_node_that_asked_in_its_warnings():
    """graph.kernels caches a program by signature: a later node's warning names that node."""
    from tessera.graph.ir import TensorType
    from tessera.graph.kernels import get_kernels, get_program, kernel_traces

    t = TensorType((3, 7, 13), "float32")
    get_program("nn.relu", {}, [t], [t], T2, "first_relu")

    class Bad:
        def lookup(self, func, target):
            return [[["Split", ["no_such_loop"], [], []]], []]

    with pytest.warns(UserWarning) as got:
        request = [("nn.relu", {}, [t], [t], "second_relu")]
        get_kernels(request, T2, compile=False, traces=kernel_traces(request, T2, Bad()))
    msgs = [str(w.message) for w in got if "does not apply" in str(w.message)]
    assert msgs and "second_relu" in msgs[0] and "first_relu" not in msgs[0]


def test_with_a_pretrained_cost_model_rounds_measure_its_top_few_until_confirmed(tuned_cnn, tmp_path):
    """Transfer: a trained cost model's top `transfer_batch` candidates a round instead of a full
    batch (a scratch model's first round is the full batch); two rounds in a row without a gain confirm a
    task, which then searches in full batches (it is not ended: the budget is still used)."""
    model, g, params, path, res = tuned_cnn
    conv = [t for t in res.tasks if t.weight == 2]
    xgb = autotune.XGBModel(seed=0)
    assert pretrain_from(xgb, str(path), T2)["used"] > 0 and xgb.trained
    runner = autotune.LocalRunner(number=1, repeat=1, min_repeat_ms=0, warmup=False, timeout=120)
    try:
        quick = tune_graph(g, params, T2, max_trials=11, database=str(tmp_path / "q.jsonl"), batch_size=8,
                           seed=0, tasks=conv, runner=runner, cost_model=xgb, transfer=False, remeasure=0,
                           validate=False, transfer_batch=3)
        full = tune_graph(g, params, T2, max_trials=11, database=str(tmp_path / "f.jsonl"), batch_size=8,
                          seed=0, tasks=conv, runner=runner, transfer=False, remeasure=0, validate=False)
    finally:
        runner.close()
    steps = np.diff([0] + [t for t, _, _ in quick.history])
    assert steps[0] == 1 and quick.trials == sum(steps)
    assert steps[1:1 + len(conv)].max() <= 3          # the default, then each task's first round: its top 3
    fsteps = np.diff([0] + [t for t, _, _ in full.history])
    assert fsteps[0] == 1 and fsteps[1] > 3            # a scratch round: the full batch (what the space has left)
    # confirm: 2 rounds without a gain confirm a task under transfer; it goes on (full rounds)
    sched = TaskScheduler([_Fake(1e-3, 5)], np.random.default_rng(0), eps=0.0, early_stopping=None, confirm=2)
    sched.record(0, 2e-3)                        # a gain
    sched.record(0, 1e-3)
    assert sched.done[0] is None and not sched.confirmed[0]
    sched.record(0, 1e-3)
    assert sched.done[0] is None and sched.confirmed[0] and sched.next_task() == 0


class _Fake:
    def __init__(self, best, trials):
        class T:
            name = op = "conv_a"
            weight, flops = 1, 1e9

        self.task, self.best_secs, self.trials, self.errors, self.exhausted = T(), best, trials, 0, False


def test_in_model_configs_take_the_weights_as_inputs_scalars_included():
    """The check builds the model with its constants as inputs (no weights compiled into each build);
    a 0-d weight stays 0-d, and the model computes what it computes with them embedded."""
    from tessera.autotune.graph_tasks import optimized_graph
    from tessera.autotune.in_model import _Fixed, _inputs, _weights_as_inputs
    from tessera.executor import build_aot
    from tessera.graph.lowering import compile_graph, graph_traces

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 4)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("MatMul", ["m", "w"], ["y"])]
    graph = helper.make_graph(nodes, "scaled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(np.array(1.5, np.float32), "s"),
                               numpy_helper.from_array(w, "w")])
    g, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    opt = optimized_graph(g, params, T2)
    as_inputs, weights = _weights_as_inputs(opt)
    assert not as_inputs.constants and len(weights) == len(opt.constants) >= 1
    assert any(np.ndim(a) == 0 for a in weights)
    exe = build_aot(compile_graph(as_inputs, T2, build_kernels=False, traces=graph_traces(as_inputs, T2, _Fixed({}))))
    feeds = _inputs(exe, rng, weights)
    outs, secs, whole = exe.run_profiled(feeds)
    np.testing.assert_allclose(outs[0], (feeds["x"] * 1.5) @ w, rtol=1e-5, atol=1e-5)
    assert len(secs) == len(exe.plan.steps) and whole > 0


def test_in_model_decisions_keep_the_default_unless_a_candidate_wins_clearly_on_both_figures():
    from tessera.autotune.in_model import choose, keeps

    # default, then candidates: (median, minimum) in-model seconds per node
    assert choose([1.0, 0.95, 0.90], [1.0, 0.96, 0.995]) == 1        # #2 loses on the minimum: #1
    assert choose([1.0, 0.995, 0.90], [1.0, 0.90, 0.999]) == 0       # neither wins by 1% on both
    assert choose([1.0, 0.95, 0.90], [1.0, 0.95, 0.90]) == 2         # both win: the lower median
    assert choose([1.0], [1.0]) == 0
    assert keeps((1.0, 1.0), (1.0, 1.0)) and keeps((0.9, 0.95), (1.0, 1.0))
    assert not keeps((1.06, 0.99), (1.0, 1.0)) and not keeps((0.99, 1.01), (1.0, 1.0))


def test_in_model_end_to_end_takes_the_fastest_configuration_never_slower_than_untuned():
    from tessera.autotune.in_model import final_choice

    d = (1.0, 1.0)
    assert final_choice({"default": d, "isolated": (0.9, 0.9), "picked": (0.8, 0.8)}) == "picked"
    # per-task picks slower end to end than the isolated picks (a MobileNetV2 run): the isolated ones
    assert final_choice({"default": d, "isolated": (0.7, 0.7), "picked": (0.95, 0.95)}) == "isolated"
    # isolated picks slower than untuned: the per-task picks where they are not
    assert final_choice({"default": d, "isolated": (1.1, 1.0), "picked": (0.97, 0.98)}) == "picked"
    # neither at least as fast as the untuned model on both figures: the default
    assert final_choice({"default": d, "isolated": (0.9, 1.02), "picked": (1.01, 0.9)}) == "default"
    assert final_choice({"default": d, "picked": (0.99, 0.99)}) == "picked"
