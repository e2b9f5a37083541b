"""The runner's worker keeps the references of only MAX_REFERENCES workloads: a workload measured
again after more than that many others is prepared again (tune_graph interleaves dozens of tasks)."""
import pytest

from tessera import te
from tessera.autotune.measure import LocalBuilder, LocalRunner, MeasureCandidate, measure
from tessera.autotune.measure._worker import MAX_REFERENCES

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
