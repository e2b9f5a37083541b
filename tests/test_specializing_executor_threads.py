"""SpecializingExecutor (tessera/compile_graph.py) under threads: a new specialization is built outside
the executor's lock, so runs on specializations already built go on meanwhile, and two threads asking
for the same new one build it once."""
import threading

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.errors import TesseraError
from tessera.frontend.onnx import from_onnx
from tessera.graph import DeferredGraph

RNG = np.random.default_rng(27)
WAIT_S = 60          # a bound on waits that on the fixed code end at once: a broken build fails, not hangs


def trilu_executor():
    """Trilu with k a runtime input: one specialization (one compiled graph) per value of k."""
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Trilu", ["x", "k"], ["y"], upper=1)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [4, 4]), helper.make_tensor_value_info("k", TP.INT64, [])],
        [helper.make_empty_tensor_value_info("y")]), opset_imports=[helper.make_opsetid("", 14)])
    graph, params = from_onnx(m)
    assert isinstance(graph, DeferredGraph) and graph.value_inputs == ("k",)
    return tessera.compile(graph, params)


class BlockedBuild:
    """Wraps DeferredGraph.specialize: the build for k == `blocked` waits until `released` is set;
    counts the builds per k."""

    def __init__(self, monkeypatch, blocked: int):
        inner, self.blocked = DeferredGraph.specialize, blocked
        self.started, self.released = threading.Event(), threading.Event()
        self.builds: dict = {}

        def specialize(graph, arrays, *args, **kwargs):
            k = int(arrays["k"])
            self.builds[k] = self.builds.get(k, 0) + 1
            if k == self.blocked:
                self.started.set()
                assert self.released.wait(WAIT_S), "the blocked build was never released"
            return inner(graph, arrays, *args, **kwargs)
        monkeypatch.setattr(DeferredGraph, "specialize", specialize)


def run_in_thread(exe, x, k, results: dict):
    def body():
        try:
            results[k] = exe(x, np.array(k, np.int64))
        except BaseException as e:          # reported by the test, not lost in the thread
            results[k] = e
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def test_a_built_specialization_runs_while_another_is_being_built(monkeypatch):
    exe = trilu_executor()
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_array_equal(exe(x, np.array(0, np.int64)), np.triu(x, 0))      # k=0 built now
    build = BlockedBuild(monkeypatch, blocked=1)
    results: dict = {}
    building = run_in_thread(exe, x, 1, results)
    assert build.started.wait(WAIT_S)
    # k=1's build is blocked inside the executor: a run on the built k=0 must not wait for it
    built = run_in_thread(exe, x, 0, results)
    built.join(WAIT_S)
    finished_while_blocked = not built.is_alive() and not build.released.is_set()
    build.released.set()
    building.join(WAIT_S)
    built.join(WAIT_S)
    assert finished_while_blocked, "a run on a built specialization waited for another one's build"
    np.testing.assert_array_equal(results[0], np.triu(x, 0))
    np.testing.assert_array_equal(results[1], np.triu(x, 1))
    assert build.builds == {1: 1} and exe.specializations == 2


def test_two_threads_asking_for_one_new_specialization_build_it_once(monkeypatch):
    exe = trilu_executor()
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    build = BlockedBuild(monkeypatch, blocked=2)
    first: dict = {}
    second: dict = {}
    a = run_in_thread(exe, x, 2, first)
    assert build.started.wait(WAIT_S)
    b = run_in_thread(exe, x, 2, second)
    b.join(0.5)           # give the second thread time to ask (it then waits for the first one's build)
    build.released.set()
    a.join(WAIT_S)
    b.join(WAIT_S)
    np.testing.assert_array_equal(first[2], np.triu(x, 2))
    np.testing.assert_array_equal(second[2], np.triu(x, 2))
    assert build.builds == {2: 1} and exe.specializations == 1


def test_a_failed_build_raises_and_the_next_run_builds_again(monkeypatch):
    exe = trilu_executor()
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    inner = DeferredGraph.specialize
    calls = []

    def failing(graph, arrays, *args, **kwargs):
        calls.append(int(arrays["k"]))
        if len(calls) == 1:
            raise TesseraError("the build failed once")
        return inner(graph, arrays, *args, **kwargs)
    monkeypatch.setattr(DeferredGraph, "specialize", failing)
    with pytest.raises(TesseraError, match="failed once"):
        exe(x, np.array(3, np.int64))
    assert exe.specializations == 0
    np.testing.assert_array_equal(exe(x, np.array(3, np.int64)), np.triu(x, 3))
    assert calls == [3, 3] and exe.specializations == 1


def test_build_once_cache_builds_outside_its_lock_once_a_key():
    # BuildOnceCache (the torch.compile backend's per-size compiles use it): while one key builds, a
    # built key is served; two askers of one new key build it once; a failed build leaves the key to
    # the next asker; the least recently used key is evicted past max_size
    from tessera.compile_graph import BuildOnceCache

    cache = BuildOnceCache(2)
    assert cache.get("a", lambda: 1) == 1
    release, started, builds = threading.Event(), threading.Event(), []

    def slow():
        builds.append("b")
        started.set()
        assert release.wait(WAIT_S)
        return 2

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("b", slow))) for _ in range(2)]
    for t in threads:
        t.start()
    assert started.wait(WAIT_S)
    served = []
    reader = threading.Thread(target=lambda: served.append(cache.get("a", lambda: pytest.fail("rebuilt"))))
    reader.start()
    reader.join(WAIT_S)
    assert served == [1]                 # served while "b" is still building
    release.set()
    for t in threads:
        t.join(WAIT_S)
    assert results == [2, 2] and builds == ["b"]

    def fails():
        raise TesseraError("no")

    with pytest.raises(TesseraError):
        cache.get("c", fails)
    assert cache.get("c", lambda: 3) == 3
    assert len(cache) == 2 and cache.get("a", lambda: "rebuilt") == "rebuilt"   # "a" was the least recent
