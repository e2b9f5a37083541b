"""A small model under -sanitize=address,undefined: the graph executor with a buffer per tensor
(ASan sees each tensor's bounds), its memory-planned arena, and the ahead-of-time entry, each
compared with the unsanitized build."""
from sanitize_cases import model_cases
from sanitize_run import run_cases


def test_models_under_asan_and_ubsan():
    cases = model_cases()
    res = run_cases("graphs", "models", total=len(cases))
    problems = res.problems()
    assert not problems, "\n".join(problems)
    assert res.passed == set(range(len(cases)))


def test_the_harness_names_a_kernel_that_reads_out_of_bounds():
    res = run_cases("selfcheck", "-", total=2)
    assert set(res.crashed) == {0} and res.labels[0] == "out-of-bounds read", res.problems()
    assert "heap-buffer-overflow" in res.crashed[0] and "READ of size" in res.crashed[0], res.crashed[0]
    assert res.passed == {1}          # the run went on after the crash
