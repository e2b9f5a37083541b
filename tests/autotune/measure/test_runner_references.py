"""The runner's worker keeps the references of only MAX_REFERENCES workloads: a workload measured
again after more than that many others is prepared again (tune_graph interleaves dozens of tasks)."""
import pytest

from tessera import te
from tessera.autotune.measure import LocalBuilder, LocalRunner, MeasureCandidate, measure
from tessera.autotune.measure._worker import MAX_REFERENCES
from tessera.autotune.measure.check import Reference, index_ranges
from tessera.graph.kernels import get_program
from tessera.ir import TensorType

TARGET = "c -num-threads=2"


def _add(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return te.create_prim_func([A, B])


@pytest.fixture(scope="module")
def pool():
    builder, runner = LocalBuilder(max_workers=2, timeout=60), LocalRunner(number=1, repeat=1, min_repeat_ms=0)
    yield builder, runner
    builder.close()
    runner.close()


def test_a_workload_measured_after_more_than_max_references_others_is_prepared_again(pool):
    builder, runner = pool
    funcs = [_add(16 + k) for k in range(MAX_REFERENCES + 2)]
    for f in funcs + funcs[:2]:            # the first two come back after the worker dropped their references
        (res,) = measure([MeasureCandidate(f, [[], []])], TARGET, builder, runner)
        assert res.error_kind is None, res.error_msg


def _take(axis_size: int):
    """The op library's take of int64 indices from an axis of `axis_size`: its program checks each
    index against [-axis_size, axis_size) at run time."""
    data, idx = TensorType((axis_size, 5), "float32"), TensorType((7,), "int64")
    return get_program("take", {"axis": 0}, [data, idx], [TensorType((7, 5), "float32")], TARGET, "gather").func


def test_the_seeded_indices_of_a_workload_lie_in_the_range_its_checks_demand(pool):
    """A take from an axis of 2: seeded indices in [-8, 8) would fail the program's own range check, so
    the reference could not be computed and no candidate measured."""
    func = _take(2)
    (idx,) = [p for p in func.params if "int" in str(p.dtype)]
    assert index_ranges(func) == {idx: (-2, 2)}
    ref = Reference(func, seed=0)
    got = ref.data[list(func.params).index(idx)]
    assert got.min() >= -2 and got.max() < 2 and len(set(got.tolist())) > 1
    builder, runner = pool
    (res,) = measure([MeasureCandidate(func, [[], []])], TARGET, builder, runner)
    assert res.error_kind is None, res.error_msg


def test_an_index_into_an_empty_axis_is_refused_with_a_tessera_error():
    import numpy as np
    from tessera.autotune.measure.check import random_array
    from tessera.errors import TesseraError

    with pytest.raises(TesseraError, match="empty axis"):
        random_array((3,), np.dtype(np.int64), np.random.default_rng(0), (0, 0))
    assert set(random_array((64,), np.dtype(np.int64), np.random.default_rng(0), (-20, -18)).tolist()) <= {-20, -19}
