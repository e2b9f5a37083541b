"""The tuning database (tessera.autotune.database) and workloads (tessera.autotune.workload): keys
stable across processes, the JSON-lines round trip, top-k, resume after a SIGKILL mid-run, corrupt
and truncated lines skipped with a warning naming the line, and loading a 100,000-record file."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

from tessera import te, tir
from tessera.autotune.database import Database, TuningRecord
from tessera.autotune.workload import Workload
from tessera.errors import TesseraError
from tessera.ir import structural_equal

TARGET = "c -num-threads=2"


def gemm(M=16, N=16, K=16):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def trace_of(func, factor):
    sch = tir.Schedule(func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, factor])
    return sch.trace.as_json()


def test_workload_key_is_stable_across_processes():
    wl = Workload(gemm(32, 48, 64))
    assert len(wl.key) == 16 and int(wl.key, 16) >= 0
    code = ("from tessera import te; from tessera.autotune.workload import Workload\n"
            "A = te.placeholder((32, 64), name='X'); B = te.placeholder((64, 48), name='Y')\n"
            "k = te.reduce_axis((0, 64), name='r')\n"
            "C = te.compute((32, 48), lambda a, b: te.sum(A[a, k] * B[k, b], axis=k), name='C')\n"
            "print(Workload(te.create_prim_func([A, B, C])).key)")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout.strip() for seed in (12345,)}
    assert keys == {wl.key}   # buffer and loop names differ, salted hash() differs: the key does not
    # block names are part of the key: traces find blocks by name
    assert Workload(gemm(32, 48, 32)).key != wl.key


def test_workload_json_and_flops():
    wl = Workload(gemm(8, 12, 20))
    assert wl.flops == 2 * 8 * 12 * 20
    back = Workload.from_json(json.loads(json.dumps(wl.as_json())))
    assert back == wl and structural_equal(back.func, wl.func)
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    assert Workload(te.create_prim_func([A, te.compute((n,), lambda i: A[i] * 2.0, name="B")])).flops is None
    doc = wl.as_json()
    doc["key"] = "0" * 16
    with pytest.raises(TesseraError, match="the function hashes to"):
        Workload.from_json(doc)
    with pytest.raises(TesseraError, match="a workload is a PrimFunc"):
        Workload("gemm")


def test_round_trip_top_k_and_filters(tmp_path):
    path = tmp_path / "db.jsonl"
    db = Database(path)
    f1, f2 = gemm(16, 16, 16), gemm(16, 16, 32)
    w1 = db.commit_workload(f1)
    assert db.commit_workload(gemm(16, 16, 16)) is w1            # written once
    w2 = db.commit_workload(tir.Schedule(f2))
    recs = [TuningRecord(w1.key, TARGET, trace_of(f1, 4), [3e-3, 3e-3]),
            TuningRecord(w1.key, TARGET, trace_of(f1, 2), [1e-3, 2e-3]),
            TuningRecord(w1.key, TARGET, trace_of(f1, 8), (), {"kind": "wrong_result", "msg": "max abs err 3.5"}),
            TuningRecord(w1.key, "c", trace_of(f1, 16), [0.5e-3]),
            TuningRecord(w2.key, TARGET, trace_of(f2, 4), [2e-3])]
    db.commit(recs[:3])
    db.commit(recs[3:])
    assert len(db) == 5
    with open(path) as f:
        assert sum(1 for line in f if line.startswith('{"workload":')) == 2
    db2 = Database(path)
    assert len(db2) == 5 and [w.key for w in db2.workloads()] == [w1.key, w2.key]
    assert structural_equal(db2.get_workload(w1.key).func, f1)
    for a, b in zip(db.records(), db2.records()):
        assert (a.workload_key, a.target, a.run_secs, a.error, a.time, a.version) == \
               (b.workload_key, b.target, b.run_secs, b.error, b.time, b.version)
        assert b.trace == json.loads(json.dumps(a.trace))
    top = db2.get_top_k(w1, "c  -num-threads=2", 5)                 # target text canonicalized
    assert [r.mean_secs for r in top] == [1.5e-3, 3e-3]              # error records never chosen
    assert db2.get_top_k(f1, "c", 1)[0].run_secs == (0.5e-3,)
    assert len(db2.records(w1.key)) == 4 and len(db2.records(target=TARGET)) == 4
    assert len(db2.records(w2, TARGET)) == 1
    # a top record's trace replays onto the workload
    sch = tir.Schedule(db2.get_workload(w1.key).func)
    tir.schedule.Trace.apply_json_to_schedule(top[0].trace, sch)
    assert len(sch.get_loops(sch.get_block("C"))) == 4
    with pytest.raises(TesseraError, match="has no workload"):
        db2.get_workload("f" * 16)


def test_refusals(tmp_path):
    db = Database(tmp_path / "db.jsonl")
    with pytest.raises(TesseraError, match="commit_workload"):
        db.commit([TuningRecord("ab" * 8, TARGET, [[], []], [1.0])])
    with pytest.raises(TesseraError, match="error is None or"):
        TuningRecord("ab" * 8, TARGET, [[], []], (), {"kind": "oops", "msg": ""})
    with pytest.raises(TesseraError, match="needs its run_secs"):
        TuningRecord("ab" * 8, TARGET, [[], []], ())
    with pytest.raises(TesseraError, match="run_secs must be finite seconds"):
        TuningRecord("ab" * 8, TARGET, [[], []], [float("nan")])
    with pytest.raises(TesseraError, match="is a folder"):
        Database(tmp_path)
    with pytest.raises(TesseraError, match="folder .* does not exist"):
        Database(tmp_path / "nowhere" / "db.jsonl")


def _good_db(path, n=6):
    db = Database(path)
    f = gemm()
    wl = db.commit_workload(f)
    db.commit([TuningRecord(wl.key, TARGET, trace_of(f, 2 ** (i % 4)), [1e-3 * (i + 1)]) for i in range(n)])
    return wl


def test_corrupt_lines_are_reported_and_skipped(tmp_path):
    path = tmp_path / "db.jsonl"
    wl = _good_db(path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:1] + "#garbage#" + lines[2][1:]               # record 2: its header
    lines.insert(4, "not json at all")
    lines.insert(5, json.dumps({"workload_key": wl.key, "target": TARGET, "run_secs": ["x"], "error": None,
                                "time": 0, "version": "0", "trace": [[], []]}))
    bad_trace = lines[6].replace('"trace":[[', '"trace":[[{', 1)      # header fine, trace unreadable
    lines[6] = bad_trace
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning) as got:
        db = Database(path)
    msgs = [str(w.message) for w in got]
    assert any(f"{path}:3: skipped a corrupt line" in m for m in msgs)
    assert any(f"{path}:5: skipped a corrupt line" in m for m in msgs)
    assert any(f"{path}:6: skipped a corrupt line" in m for m in msgs)
    assert len(db) == 5                                   # 6 good - 1 garbled; line 7 loads (trace lazy)
    with pytest.warns(UserWarning, match=f"{path}:7: the record's trace is not JSON"):
        top = db.get_top_k(wl, TARGET, 10)
    assert len(top) == 4 and len(db) == 4               # dropped once found
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        again = Database(path)
        assert len(again.records()) == 4 and len(again) == 4        # records() reads the traces: one dropped
    assert any(f"{path}:7: the record's trace is not JSON" in str(w.message) for w in got)


def test_truncated_tail_then_append_starts_a_fresh_line(tmp_path):
    path = tmp_path / "db.jsonl"
    wl = _good_db(path, n=4)
    data = path.read_bytes()
    path.write_bytes(data[:-40])                        # the last record torn mid-line
    with pytest.warns(UserWarning, match=f"{path}:5: skipped a corrupt line"):
        db = Database(path)
    assert len(db) == 3
    db.commit([TuningRecord(wl.key, TARGET, trace_of(wl.func, 4), [7e-3])])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        db2 = Database(path)
    corrupt = [str(w.message) for w in got if "corrupt" in str(w.message)]
    assert len(corrupt) == 1 and corrupt[0].startswith(f"{path}:5: skipped a corrupt line")   # the new one is whole
    assert len(db2) == 4 and db2.records()[-1].run_secs == (7e-3,)


WRITER = textwrap.dedent("""
    import sys
    from tessera import te, tir
    from tessera.autotune.database import Database, TuningRecord
    A = te.placeholder((16, 16), name="A"); B = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = te.create_prim_func([A, B, C])
    db = Database(sys.argv[1]); wl = db.commit_workload(f)
    sch = tir.Schedule(f); sch.split(sch.get_loops(sch.get_block("C"))[0], [None, 4])
    tr = sch.trace.as_json()
    n = 0
    while True:
        db.commit([TuningRecord(wl.key, "c -num-threads=2", tr, [1e-3 + n * 1e-6 + j * 1e-9]) for j in range(50)])
        n += 1
        print(n, flush=True)
""")


def test_resume_after_sigkill(tmp_path):
    path = tmp_path / "db.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    acked = 0
    try:
        while acked < 20:
            line = proc.stdout.readline()
            assert line, "the writer died"
            acked = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # the batch in flight may be torn
        db = Database(path)
    assert len(db) >= acked * 50          # every acknowledged batch survived
    assert all(r.is_valid and r.trace for r in db.records())
    wl = db.workloads()[0]
    before = len(db)
    db.commit([TuningRecord(wl.key, TARGET, db.records()[0].trace, [5e-4])])     # tuning resumes
    assert len(Database(path)) == before + 1
    assert Database(path).get_top_k(wl, TARGET, 1)[0].run_secs == (5e-4,)


def test_load_100k_records(tmp_path):
    """Builds a 100,000-record file (a real trace each) and loads it; no time asserted (see README)."""
    path = tmp_path / "db.jsonl"
    wl = _good_db(path, n=1)
    line = path.read_text().splitlines()[-1]
    head, tail = line.split('"run_secs":[0.001]', 1)
    with open(path, "a") as f:
        f.writelines(f'{head}"run_secs":[{1 + i % 1000}e-6]{tail}\n' for i in range(100_000))
    db = Database(path)
    assert len(db) == 100_001
    top = db.get_top_k(wl, TARGET, 3)
    assert [r.run_secs[0] for r in top] == [1e-6, 1e-6, 1e-6]
    assert top[0].trace == trace_of(wl.func, 1)


def test_records_rank_by_the_median_round_so_one_stalled_round_does_not_lose_a_fast_candidate(tmp_path):
    """A round stalled on a shared machine (a descheduled thread) multiplies a candidate's mean; the
    median of its rounds ranks it, in get_top_k as in the tuner (MeasureResult.secs)."""
    from tessera.autotune.measure.candidate import MeasureResult

    db = Database(tmp_path / "db.jsonl")
    f = gemm(16, 16, 16)
    w = db.commit_workload(f)
    stalled = TuningRecord(w.key, TARGET, trace_of(f, 2), [1e-3, 1e-3, 9e-3])    # mean 3.7e-3
    steady = TuningRecord(w.key, TARGET, trace_of(f, 4), [2e-3, 2e-3, 2e-3])
    db.commit([steady, stalled])
    assert stalled.mean_secs > steady.mean_secs and stalled.secs == 1e-3
    assert [r.run_secs for r in db.get_top_k(w, TARGET, 2)] == [stalled.run_secs, steady.run_secs]
    assert TuningRecord(w.key, TARGET, trace_of(f, 4), [1e-3, 3e-3]).secs == 2e-3      # even count: middle two
    assert MeasureResult(run_secs=(1e-3, 9e-3, 1e-3)).secs == 1e-3
    assert MeasureResult(run_secs=(), error_kind="build", error_msg="x").secs == float("inf")
