"""topk, argsort, sort: rank sort in TE, compared with onnxruntime TopK and numpy's stable sorts."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import ort_run
from op_check import infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(13)


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_onnxruntime_with_ties_and_nan(axis, largest):
    x = RNG.integers(0, 5, (4, 7, 5)).astype(np.float32)  # many ties: the lower index comes first
    x[1, 2, 3] = np.nan
    v, i = run_op("topk", x, k=3, axis=axis, largest=largest)
    rv, ri = ort_run("TopK", [x, np.array([3], np.int64)], dict(axis=axis, largest=int(largest)), num_outputs=2,
                     opset=11)
    np.testing.assert_array_equal(v, rv)
    assert i.dtype == np.int64
    np.testing.assert_array_equal(i, ri)


def test_topk_int_data_symbolic_batch():
    x = RNG.integers(-1000, 1000, (3, 9)).astype(np.int32)
    v, i = run_op("topk", x, k=4, sym={0: ("N", 9)})
    want_i = np.argsort(-x, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(v, np.take_along_axis(x, want_i, axis=1))


@pytest.mark.parametrize("is_ascend", [True, False])
def test_argsort_and_sort_are_stable(is_ascend):
    x = RNG.integers(0, 6, (5, 8)).astype(np.float64)
    (a,) = run_op("argsort", x, axis=0, is_ascend=is_ascend)
    key = x if is_ascend else -x
    np.testing.assert_array_equal(a, np.argsort(key, axis=0, kind="stable"))
    assert a.dtype == np.int32
    (s,) = run_op("sort", x, axis=1, is_ascend=is_ascend)
    np.testing.assert_array_equal(s, np.sort(x, axis=1) if is_ascend else -np.sort(-x, axis=1))


def test_sort_refuses_bad_k_and_symbolic_sort_axis():
    with pytest.raises(tessera.ShapeError, match="k=6"):
        infer("topk", ((2, 5), "float32"), k=6)
    with pytest.raises(tessera.ShapeError, match="static"):
        infer("sort", ((2, "S"), "float32"))
    with pytest.raises(tessera.DTypeError, match="bool"):
        infer("argsort", ((2, 5), "bool"))
