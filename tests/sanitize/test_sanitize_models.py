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
