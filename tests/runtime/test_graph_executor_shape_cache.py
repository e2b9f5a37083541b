"""The graph executor's ShapeRunners: a symbolic plan run again at input shapes it has seen binds only
the arrays (extents, arena and argument structs made once per shapes), with the same results and
checks as the general path, and outputs the caller owns."""
import threading

import numpy as np
import pytest

import tessera
from tessera.graph import Builder
from tessera.runtime.graph_executor import SHAPE_CACHE_SIZE, ShapeRunner, _Arena

RNG = np.random.default_rng(15)
W = RNG.standard_normal((16, 8)).astype(np.float32)


def _model():
    """s = softmax((x + y) @ W) and -(s + (x + y) @ W): intermediates freed at different points,
    a graph output that a later node reads."""
    gb = Builder("cache")
    x, y = gb.input("x", ("n", 16)), gb.input("y", ("n", 16))
    m = gb.op("nn.matmul", gb.op("add", x, y), gb.const(W, "w"))
    s = gb.op("nn.softmax", m)
    gb.output(s)
    gb.output(gb.op("negative", gb.op("add", s, m)))
    return tessera.compile(gb.finish(), target="c")


def _want(x, y):
    m = (x.astype(np.float64) + y) @ W
    e = np.exp(m - m.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    return [s, -(s + m)]


@pytest.fixture(scope="module")
def exe():
    return _model()


def _check(outs, x, y):
    for got, want in zip(outs, _want(x, y)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_repeated_shapes_run_through_a_shape_runner_with_the_general_paths_results(exe):
    assert exe._shape_runners is not None
    for n in (1, 7, 16, 37, 7, 1, 37):
        for _ in range(2):
            x = RNG.standard_normal((n, 16)).astype(np.float32)
            y = RNG.standard_normal((n, 16)).astype(np.float32)
            outs = exe.run({"x": x, "y": y})
            _check(outs, x, y)
            np.testing.assert_array_equal(outs[1], exe.execute([x, y])[1])
        assert (n, 16) == next(k for k in exe._shape_runners if k[0] == (n, 16))[0]


def test_outputs_of_an_earlier_call_are_not_overwritten(exe):
    x1, y1 = RNG.standard_normal((2, 5, 16)).astype(np.float32)
    first = exe.run({"x": x1, "y": y1})
    kept = [o.copy() for o in first]
    for _ in range(3):
        x2, y2 = RNG.standard_normal((2, 5, 16)).astype(np.float32)
        second = exe.run({"x": x2, "y": y2})
        _check(second, x2, y2)
        assert all(a is not b for a, b in zip(first, second))
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


def test_the_cache_keeps_the_latest_shapes_only(exe):
    for n in range(1, SHAPE_CACHE_SIZE + 4):
        x = np.ones((n, 16), np.float32)
        exe.run({"x": x, "y": x})
    assert len(exe._shape_runners) == SHAPE_CACHE_SIZE
    assert ((SHAPE_CACHE_SIZE + 3, 16), (SHAPE_CACHE_SIZE + 3, 16)) in exe._shape_runners


def test_the_cache_holds_at_most_its_byte_budget_but_always_the_newest(monkeypatch):
    import tessera.runtime.graph_executor as ge
    exe = _model()
    exe.run({"x": np.ones((50, 16), np.float32), "y": np.ones((50, 16), np.float32)})
    one = next(iter(exe._shape_runners.values())).arena.nbytes
    monkeypatch.setattr(ge, "SHAPE_CACHE_BYTES", one + 1)
    for n in (40, 30, 50):
        x = np.ones((n, 16), np.float32)
        _check(exe.run({"x": x, "y": x}), x, x)
    # each new runner's arena (about n/50 of `one`) with the one before exceeds the budget
    assert list(exe._shape_runners) == [((50, 16), (50, 16))]


def test_a_bad_shape_is_refused_every_time_and_never_cached(exe):
    before = dict(exe._shape_runners)
    for _ in range(2):
        with pytest.raises(tessera.ShapeError, match="n"):
            exe.run({"x": np.ones((3, 16), np.float32), "y": np.ones((4, 16), np.float32)})
    assert ((3, 16), (4, 16)) not in exe._shape_runners and len(exe._shape_runners) == len(before)


def test_threads_sharing_a_shape_runner_get_their_own_results(exe):
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                x, y = rng.standard_normal((2, 9, 16)).astype(np.float32)
                _check(exe.run({"x": x, "y": y}), x, y)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_static_plan_has_no_shape_runners():
    gb = Builder("static")
    x = gb.input("x", (4, 16))
    gb.output(gb.op("nn.relu", x))
    exe = tessera.compile(gb.finish(), target="c", executor="graph")
    assert exe._shape_runners is None and not ShapeRunner.applies(exe)


def test_arena_blocks_live_at_once_never_overlap():
    rng = np.random.default_rng(1)
    arena, live = _Arena(), {}
    for step in range(400):
        if live and rng.random() < 0.45:
            k = rng.choice(sorted(live))
            arena.release(*live.pop(k))
        else:
            nbytes = int(rng.integers(0, 5000))
            off = arena.alloc(nbytes)
            assert off % 64 == 0
            live[step] = (off, nbytes)
        spans = sorted((o, o + max(64, -(-n // 64) * 64)) for o, n in live.values())
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and (not spans or spans[-1][1] <= arena.top)
    for off, nbytes in list(live.values()):
        arena.release(off, nbytes)
    assert arena.free == [(0, arena.top)] or arena.top == 0
