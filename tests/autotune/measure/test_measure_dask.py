"""The Dask device pool (tessera.autotune.measure.dask) on a LocalCluster whose workers are started
the documented way (`python -m tessera.autotune.measure.dask_worker ADDRESS --target ...`): it gives
the same records as the local pool, a worker announcing another target gets nothing, and a worker
killed mid-measurement has its candidate measured again on another worker."""
import os
import signal
import subprocess
import sys
import time

import pytest

distributed = pytest.importorskip("distributed")

import bad_candidates as bc

from tessera.autotune.measure import LocalBuilder, LocalRunner, measure
from tessera.autotune.measure.dask import DaskRunner, measure_task, resource_name
from tessera.errors import TesseraError

TARGET, OTHER = "c -num-threads=2", "c -num-threads=1"
SETTINGS = dict(number=2, repeat=2, min_repeat_ms=0)


class Pool:
    """A LocalCluster scheduler and worker processes started with the dask_worker module."""

    def __init__(self):
        self.cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None,
                                                silence_logs=50)
        self.address = self.cluster.scheduler_address
        self.client = distributed.Client(self.address)
        self.procs = {}

    def start(self, name, target):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "tessera.autotune.measure.dask_worker", self.address, "--target", target,
             "--name", name, "--no-nanny"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def wait(self, n):
        self.client.wait_for_workers(n, timeout=120)
        return {w["name"]: a for a, w in self.client.scheduler_info(n_workers=-1)["workers"].items()}

    def kill(self, name):
        p = self.procs.pop(name)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    def close(self):
        for name in list(self.procs):
            self.kill(name)
        self.client.close()
        self.cluster.close()


@pytest.fixture
def pool():
    p = Pool()
    yield p
    p.close()


def test_dask_runner_refuses_what_it_cannot_use():
    with pytest.raises(TesseraError, match="takes a scheduler address or a distributed.Client"):
        DaskRunner(8786)
    with pytest.raises(TesseraError, match="cannot reach the Dask scheduler"):
        DaskRunner("tcp://127.0.0.1:9", connect_timeout=1)


def test_dask_pool_in_process_gives_the_local_pool_records():
    """Quick: a LocalCluster with one in-process worker announcing the target; the same error kinds and
    verdicts as test_measure_local.py checks the local pool gives (the slow test below compares the
    two pools message for message)."""
    cands = bc.candidates()
    order = ["good", "wrong", "crash", "build", "invalid", "plain"]
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None,
                                  resources={resource_name(TARGET): 1}, silence_logs=50) as cluster, \
            DaskRunner(cluster.scheduler_address, **SETTINGS) as runner:        # by address: its own client
        remote = measure([cands[k] for k in order], TARGET, runner=runner)
        (addr,) = runner.workers_for(TARGET)
        with pytest.raises(TesseraError, match="no worker of the Dask pool announces target 'c -num-threads=1'"):
            measure([cands["good"]], OTHER, runner=runner)
    assert [x.error_kind for x in remote] == [bc.EXPECTED[k] for k in order]
    assert "output C:" in remote[1].error_msg and "SIG" in remote[2].error_msg
    assert all(0 < s < 0.05 for x in remote if x.ok for s in x.run_secs)
    assert {x.worker for x in remote} == {addr}


def test_dask_pool_times_with_tune_graphs_settings_evicting_the_candidates_weights(monkeypatch):
    """graph_timing's keywords (tessera tune --pool) reach the worker's runner, and so do a candidate's
    weights (test_measure_local.py checks what the runner does with them)."""
    from tessera.autotune.measure import MeasureCandidate
    from tessera.autotune.tune import graph_timing

    asked = []
    real = LocalRunner.run_one

    def spy(self, cand, br, target, cutoff_secs=None):
        asked.append((self.flush_cache, self.number, self.repeat, self.min_repeat_ms, self.warmup, cand.weights))
        return real(self, cand, br, target, cutoff_secs)

    monkeypatch.setattr(LocalRunner, "run_one", spy)      # the in-process Dask worker's runner
    good = bc.candidates()["good"]
    cand = MeasureCandidate(good.workload, good.trace, (1,))
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None,
                                  resources={resource_name(TARGET): 1}, silence_logs=50) as cluster, \
            DaskRunner(cluster.scheduler_address, **graph_timing(True)) as runner:
        (r,) = measure([cand], TARGET, runner=runner)
    assert r.ok and len(r.run_secs) == 3
    assert asked == [("weights", 3, 3, 0, False, (1,))]


@pytest.mark.slow
def test_dask_pool_gives_the_local_pool_records(pool):
    """Worker processes started with the documented command, one of them for another target."""
    pool.start("dev_a", TARGET)
    pool.start("dev_other", OTHER)
    cands = bc.candidates()
    order = ["good", "wrong", "crash", "build", "invalid", "plain"]
    with LocalBuilder(max_workers=2) as b, LocalRunner(**SETTINGS) as r:
        local = measure([cands[k] for k in order], TARGET, b, r)
    names = pool.wait(2)
    with DaskRunner(pool.client, **SETTINGS) as runner:
        assert runner.workers_for(TARGET) == [names["dev_a"]]
        remote = measure([cands[k] for k in order], TARGET, runner=runner)
        assert [x.error_kind for x in remote] == [x.error_kind for x in local] == [bc.EXPECTED[k] for k in order]
        for x, y in zip(local, remote):        # the same verdicts, word for word where no path is involved
            if x.error_kind in ("wrong_result", "invalid"):
                assert x.error_msg == y.error_msg
        assert {x.worker for x in remote} == {names["dev_a"]}      # the other target's worker got nothing
        assert all(0 < s < 0.05 for x in remote if x.ok for s in x.run_secs)
        # LocalRunner's signature: locally failed builds keep their error, the rest is measured remotely
        brs = LocalBuilder(max_workers=1).build([cands["invalid"], cands["good"]], TARGET)
        res = runner.run([cands["invalid"], cands["good"]], brs, TARGET)
        assert [x.error_kind for x in res] == ["invalid", None] and res[1].worker == names["dev_a"]
        with pytest.raises(TesseraError, match="no worker of the Dask pool announces target 'c -num-threads=4'"):
            measure([cands["good"]], "c -num-threads=4", runner=runner)


@pytest.mark.slow
def test_worker_killed_mid_measurement_is_measured_elsewhere(pool):
    pool.start("dev_1", TARGET)
    pool.start("dev_2", TARGET)
    names = pool.wait(2)
    cands = bc.candidates()
    with DaskRunner(pool.client, timeout=4, **SETTINGS) as runner:
        futures = runner.client.map(measure_task, [runner._payload(cands["hang"], TARGET)],
                                    resources={resource_name(TARGET): 1}, pure=False)
        deadline = time.time() + 60
        victim = None
        while victim is None and time.time() < deadline:
            for addr, keys in pool.client.processing().items():
                if keys:
                    victim = addr
            time.sleep(0.2)
        assert victim is not None
        time.sleep(1.0)                      # it is inside the hanging candidate now
        pool.kill(next(n for n, a in names.items() if a == victim))
        out = futures[0].result(timeout=120)
        assert out["error_kind"] == "timeout" and out["worker"] != victim
        good = measure([cands["good"]], TARGET, runner=runner)
        assert good[0].ok and good[0].worker != victim
