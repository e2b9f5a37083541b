"""Every op of the op library, built with -sanitize=address,undefined and run at a small shape chosen
to reach border code (remainder loops, padding, stride, ceil mode, negative indices, the tensorized
micro-kernels), compared with the same kernel built without sanitizers (and numpy where given).
An out-of-bounds access or undefined behaviour is a failure naming the kernel and its shapes."""
import pytest
from sanitize_cases import GROUPS, onnx_cases, op_cases
from sanitize_run import prebuild_ops, run_cases, sanitizer_env, selected_groups

from tessera.ops.registry import list_ops

# Ops with no case of their own (each needs a reason).
NO_CASE: dict = {name: "runs on the host (numpy, tessera/ops/dynamic.py): no C kernel to sanitize"
                 for name in ("nonzero", "unique", "non_max_suppression")}
NO_CASE.update({name: "its extent is a symbol only a symbolic graph input binds; the op cases here have static "
                      "inputs (run in tests/frontend/test_onnx_dynamic_axes.py, not yet under the sanitizers)"
                for name in ("prefix_slice", "arange")})


def _graph_ops(case):
    graph, _, _ = case.build()
    return {n.op for n in graph.nodes}


def test_every_op_has_a_sanitizer_case():
    covered = {c.op for cases in op_cases().values() for c in cases}
    for case in onnx_cases():
        covered |= _graph_ops(case)
    # "test.*": private ops other test modules register in this process (tests/graph/graph_ops.py)
    library = {name for name in list_ops() if not name.startswith("test.")}
    missing = sorted(library - covered - set(NO_CASE))
    assert not missing, f"ops of the op library without a sanitizer case in tests/sanitize/sanitize_cases.py: {missing}"
    assert not set(NO_CASE) - library, "NO_CASE names ops that no longer exist"


@pytest.fixture(scope="module")
def op_kernels_built(request):
    """The kernels of every selected group compiled together, the C compilers busy on all CPUs to the
    end (conftest.py starts this when collection ends, so it runs beside the tests before these)."""
    sanitizer_env()                   # skips without an ASan runtime, before building anything
    if not hasattr(request.config, "workerinput"):   # under pytest-xdist each test builds its own group
        prebuild_ops(selected_groups(request.session.items))


@pytest.mark.parametrize("group", GROUPS)
def test_op_kernels_under_asan_and_ubsan(group, op_kernels_built):
    cases = op_cases()[group]
    res = run_cases("ops", group, total=len(cases))
    problems = res.problems()
    assert not problems, f"{len(problems)} of {len(cases)} {group} kernels failed:\n" + "\n".join(problems)
    assert res.passed == set(range(len(cases))), f"cases that never ran: {sorted(set(range(len(cases))) - res.passed)}"


def test_onnx_node_kernels_under_asan_and_ubsan():
    cases = onnx_cases()
    res = run_cases("graphs", "onnx", total=len(cases))
    problems = res.problems()
    assert not problems, "\n".join(problems)
    assert res.passed == set(range(len(cases)))
