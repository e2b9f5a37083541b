"""Local measurement (tessera.autotune.measure): every candidate's output is checked before its time
counts, and bad candidates made through real tensor intrinsics become error records -- wrong result,
crash, hang, compile error, invalid trace -- while the tuner goes on to the next one."""
import bad_candidates as bc
import numpy as np
import pytest

from tessera import te
from tessera.autotune.database import Database
from tessera.autotune.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureCandidate,
    measure,
)
from tessera.autotune.measure.check import mismatch
from tessera.autotune.workload import Workload
from tessera.errors import TesseraError

TARGET = "c -num-threads=2"


@pytest.fixture(scope="module")
def pool():
    builder, runner = LocalBuilder(max_workers=2, timeout=60), LocalRunner(number=2, repeat=3, min_repeat_ms=0,
                                                                          timeout=1.5)
    yield builder, runner
    builder.close()
    runner.close()


def test_bad_candidates_become_error_records(pool, tmp_path):
    builder, runner = pool
    cands = bc.candidates()
    order = ["good", "wrong", "crash", "plain", "hang", "build", "invalid", "good"]
    runner.prepare(cands["good"].workload, TARGET)           # the reference now, not in the first run
    results = measure([cands[k] for k in order], TARGET, builder, runner)
    got = {k: r for k, r in zip(order, results)}
    assert [r.error_kind for r in results] == [bc.EXPECTED[k] for k in order]
    assert "output C:" in got["wrong"].error_msg and "elements differ" in got["wrong"].error_msg
    assert "SIG" in got["crash"].error_msg                  # SIGSEGV (or the SIGILL/SIGBUS a NULL store becomes)
    assert "longer than 1.5 s" in got["hang"].error_msg
    assert "C compilation" in got["build"].error_msg and "this is not C" in got["build"].error_msg
    assert "Tensorize" in got["invalid"].error_msg or "tensorize" in got["invalid"].error_msg
    for k in ("good", "plain"):
        r = got[k]
        assert len(r.run_secs) == 3 and all(0 < s < 0.05 for s in r.run_secs), r
        assert r.build_secs >= r.compile_secs >= 0
    assert results[-1].ok                                  # the worker came back after the crash and the hang
    # into the database: errors keep no times, the best record is an error-free one
    db = Database(tmp_path / "db.jsonl")
    db.commit_workload(cands["good"].workload)
    db.commit([r.to_record(c, TARGET) for c, r in zip([cands[k] for k in order], results)])
    errs = [r.error["kind"] for r in db.records() if r.error]
    assert sorted(errs) == sorted(["wrong_result", "crash", "timeout", "build", "invalid"])
    best = Database(tmp_path / "db.jsonl").get_top_k(cands["good"].workload, TARGET, 10)
    assert len(best) == 3 and all(r.error is None for r in best)


def test_check_off_flush_cache_and_no_warmup(pool):
    """The settings are read per candidate: the same worker measures with them changed."""
    builder, runner = pool
    cands = bc.candidates()
    saved = runner.check, runner.flush_cache, runner.number, runner.repeat, runner.warmup, runner.min_repeat_ms
    try:
        runner.check = False                       # never for tuning: a miscompiled candidate could win
        (r,) = measure([cands["wrong"]], TARGET, builder, runner)
        assert r.ok and r.run_secs
        runner.check, runner.flush_cache, runner.number, runner.repeat = True, True, 1, 2
        good, wrong = measure([cands["good"], cands["wrong"]], TARGET, builder, runner)
        assert good.ok and len(good.run_secs) == 2 and all(0 < s <= good.kernel_secs for s in good.run_secs)
        assert wrong.error_kind == "wrong_result"
        # the checked call as the warm-up; number grown to fill min_repeat_ms, as the module's timer does
        runner.flush_cache, runner.warmup, runner.min_repeat_ms = False, False, 20
        (good,) = measure([cands["good"]], TARGET, builder, runner)
        assert good.ok and len(good.run_secs) == 2 and all(0 < s <= good.kernel_secs for s in good.run_secs)
        assert good.kernel_secs >= 2 * 0.02                      # two rounds of at least 20 ms each
    finally:
        (runner.check, runner.flush_cache, runner.number, runner.repeat, runner.warmup,
         runner.min_repeat_ms) = saved


def test_a_weights_flush_times_candidates_and_refuses_positions_the_workload_lacks(pool):
    """flush_cache="weights": each candidate's weights (here B, position 1) evicted before a round."""
    builder, _ = pool
    good = bc.candidates()["good"]
    runner = LocalRunner(number=2, repeat=3, min_repeat_ms=0, warmup=False, flush_cache="weights")
    try:
        for weights in ((1,), (), (0, 1)):
            (r,) = measure([MeasureCandidate(good.workload, good.trace, weights)], TARGET, builder, runner)
            assert r.ok and len(r.run_secs) == 3 and all(s > 0 for s in r.run_secs), (weights, r)
    finally:
        runner.close()
    n = len(good.workload.func.params)
    with pytest.raises(TesseraError, match=f"not parameter positions of .*{n} parameters"):
        MeasureCandidate(good.workload, good.trace, (n,))
    with pytest.raises(TesseraError, match="flush_cache must be True, False or 'weights'"):
        LocalRunner(flush_cache="inputs")


def test_a_build_past_its_timeout_is_killed_and_the_builder_goes_on(pool):
    builder, _ = pool
    A = te.placeholder((64,), name="A")
    scale = float(np.random.default_rng().integers(1, 2 ** 20))       # a source no cache has seen
    func = te.create_prim_func([A, te.compute((64,), lambda i: A[i] * scale, name="B")])
    saved = builder.timeout
    try:
        builder.timeout = 0.01
        (r,) = builder.build([MeasureCandidate(func, [[], []])], TARGET)
        assert r.error_kind == "timeout" and "longer than 0.01 s" in r.error_msg
    finally:
        builder.timeout = saved
    (r,) = builder.build([MeasureCandidate(func, [[], []])], TARGET)     # a fresh worker; the compile finishes
    assert r.ok and r.path.endswith(".so")


def test_int8_and_other_workloads_are_checked_exactly(pool):
    builder, runner = pool
    A = te.placeholder((8, 32), name="A", dtype="uint8")
    B = te.placeholder((32, 16), name="B", dtype="int8")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((8, 16), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    cand = bc.plain(func, factor=4)
    res = measure([cand, MeasureCandidate(func, [[], []])], TARGET, builder, runner)
    assert [r.error_kind for r in res] == [None, None]


def test_symbolic_workloads_are_refused(pool):
    builder, runner = pool
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    func = te.create_prim_func([A, te.compute((n,), lambda i: A[i] + 1.0, name="B")])
    with pytest.raises(TesseraError, match="symbolic extent n"):
        measure([MeasureCandidate(func, [[], []])], TARGET, builder, runner)


def test_argument_errors():
    with pytest.raises(TesseraError, match="number must be an int >= 1"):
        LocalRunner(number=0)
    with pytest.raises(TesseraError, match="timeout must be > 0"):
        LocalRunner(timeout=0)
    with pytest.raises(TesseraError, match="env must be a dict of strings"):
        LocalRunner(env={"OMP_NUM_THREADS": 2})
    with pytest.raises(TesseraError, match="max_workers must be an int >= 1"):
        LocalBuilder(max_workers=0)
    with pytest.raises(TesseraError, match="trace must be the JSON list"):
        MeasureCandidate(Workload(bc.gemm_func()), "split i")
    with pytest.raises(TesseraError, match="2 candidates but 1 build results"):
        LocalRunner().run([None, None], [None], TARGET)


def test_tolerance_accepts_reassociation_and_catches_miscompiles():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 4096)).astype(np.float32)
    b = rng.standard_normal((4096, 32)).astype(np.float32)
    want = a @ b
    # the same sums in other orders: float32 pairwise (numpy), blocked, and reversed sequential
    blocked = sum(a[:, i:i + 256] @ b[i:i + 256] for i in range(0, 4096, 256)).astype(np.float32)
    rev = np.zeros_like(want)
    for kk in range(4095, -1, -1):
        rev += np.outer(a[:, kk], b[kk])
    for got in (blocked, rev):
        assert not np.array_equal(got, want)
        assert mismatch(got, want, np.dtype(np.float32)) is None
    dropped = want - np.outer(a[:, 7], b[7])                     # one of 4096 terms lost
    assert "elements differ beyond rtol" in mismatch(dropped, want, np.dtype(np.float32))
    one = want.copy()
    one[3, 5] += 0.5                                              # one element off by a term's size
    assert "1 of 2048 elements differ" in mismatch(one, want, np.dtype(np.float32))
    nan = want.copy()
    nan[0, 0] = np.nan
    assert mismatch(nan, want, np.dtype(np.float32)) is not None
    assert mismatch(nan, nan, np.dtype(np.float32)) is None
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    off = ints.copy()
    off[2, 1] += 1
    assert mismatch(ints, ints, np.dtype(np.int32)) is None
    assert "first at (2, 1): got 10, expected 9" in mismatch(off, ints, np.dtype(np.int32))


ORPHAN = """
import sys
sys.path.insert(0, sys.argv[1])
import bad_candidates as bc
from tessera.autotune.measure import LocalBuilder, LocalRunner
cand = bc.candidates()["hang"]
b, r = LocalBuilder(max_workers=1), LocalRunner(timeout=120)
(br,) = b.build([cand], "c -num-threads=2")
r._prepare(cand, "c -num-threads=2")
print(r._worker.proc.pid, flush=True)
r.run([cand], [br], "c -num-threads=2")
"""


def _gone(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.split()[1] == "Z" for line in f if line.startswith("State:"))
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_a_hung_worker_exits_when_the_tuner_is_killed():
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", ORPHAN, os.path.dirname(bc.__file__)], stdout=subprocess.PIPE,
                            text=True)
    pid = int(proc.stdout.readline())
    time.sleep(1.0)                                   # the worker spins in the hanging kernel now
    assert not _gone(pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while not _gone(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _gone(pid)
