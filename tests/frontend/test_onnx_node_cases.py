"""The ONNX backend node test cases (shipped with the onnx package) through tessera: a case tessera
accepts must give the expected outputs. The default run takes the first case of every op; the
`slow` run takes every case. Cases tessera refuses (UnsupportedOpError, dtypes it does not have)
are counted by benchmarks/onnx_conformance.py, not failed here."""
import collections
import importlib.util
import pathlib

import pytest

_BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "onnx_conformance.py"
_spec = importlib.util.spec_from_file_location("tessera_onnx_conformance", _BENCH)
conformance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conformance)

# cases whose wrong result is known, with the reason; any other WRONG or ERROR fails the suite
KNOWN_WRONG = {
    "test_dft_inverse": "inverse DFT: 1.9e-7 absolute error on outputs that should be ~0 (rtol-only check)",
    "test_dft_inverse_opset19": "inverse DFT: 1.9e-7 absolute error on outputs that should be ~0",
}


def _cases():
    return conformance.collect(None)


def _first_case_of_every_op():
    seen, out = set(), []
    for case in _cases():
        op = conformance.op_of(case)
        if op not in seen and case.name not in KNOWN_WRONG:
            seen.add(op)
            out.append(case)
    return out


def _check(case):
    status, why = conformance.run_tessera(case)
    if status in (conformance.WRONG, conformance.ERROR):
        if case.name in KNOWN_WRONG:
            pytest.xfail(KNOWN_WRONG[case.name])
        pytest.fail(f"{case.name} ({conformance.op_of(case)}): {status}: {why}")
    if case.name in KNOWN_WRONG:
        pytest.fail(f"{case.name} passes now: remove it from KNOWN_WRONG")
    return status


def test_first_case_of_every_op_gives_the_expected_outputs():
    """One case per ONNX op (name order); failures are listed together, each naming its case."""
    cases = _first_case_of_every_op()
    assert len(cases) > 150
    bad, counts = [], collections.Counter()
    for case in cases:
        status, why = conformance.run_tessera(case)
        counts[status] += 1
        if status in (conformance.WRONG, conformance.ERROR):
            bad.append(f"{case.name} ({conformance.op_of(case)}): {status}: {why}")
    assert not bad, "\n".join(bad)
    assert counts[conformance.PASS] > 100, counts


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.name)
def test_every_case_tessera_accepts_gives_the_expected_outputs(case):
    _check(case)


def test_prelu_with_a_full_shaped_runtime_slope():
    """onnx's test_prelu_example: x and slope both float32[3, 4, 5], the slope a runtime input
    (gcc 12.2 at -O3 for AVX-512 once gave 10 of 60 elements the wrong value, see codegen)."""
    (case,) = [c for c in _cases() if c.name == "test_prelu_example"]
    assert _check(case) == conformance.PASS
