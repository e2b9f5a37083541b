"""The differential fuzzer of the ONNX path (tests/frontend/onnx_fuzz.py): random valid ONNX graphs,
built from the ops the frontend claims, run by tessera at opt_level 0 and 3 and compared with
onnxruntime. A failure (a mismatch, or an exception that is not a TesseraError) prints the seed and
the graph cut down to what still fails; a refusal (a TesseraError) of a generated graph also fails,
as the generator only builds what the frontend claims to convert.

    TESSERA_FUZZ_SEEDS=2000 pytest -m slow tests/frontend/test_onnx_fuzz.py   # the long run
"""
import os
import sys
import pathlib

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import onnx_fuzz  # noqa: E402

from tessera.frontend.onnx_ops import supported_ops  # noqa: E402

DEFAULT_SEEDS = 80          # about 35 s on 2 cores with a cold kernel cache (gcc), a few s warm


def test_generator_draws_only_claimed_ops_and_builds_valid_models():
    claimed = set(supported_ops())
    seen = set()
    for seed in range(200):
        m, feeds = onnx_fuzz.random_model(seed)
        ops = {n.op_type for n in m.graph.node}
        assert ops <= claimed, (seed, ops - claimed)
        seen |= ops
        assert set(feeds) == {i.name for i in m.graph.input}
    for op in ("MatMul", "Gemm", "Conv", "Reshape", "Shape", "Gather", "Concat", "Slice", "Where", "Cast",
               "ReduceSum", "Softmax", "Expand", "Squeeze", "Unsqueeze", "Split", "Constant"):
        assert op in seen, op
    # a model is a function of its seed
    a, fa = onnx_fuzz.random_model(7)
    b, fb = onnx_fuzz.random_model(7)
    assert a.SerializeToString() == b.SerializeToString()
    assert all((fa[k] == fb[k]).all() for k in fa)


def test_minimizer_cuts_a_failing_model_down():
    """A made-up failure (an output whose dtype is float16 fails) is cut down to the node making it."""
    seed = next(s for s in range(200)
                if any(o.type.tensor_type.elem_type == 10 for o in onnx_fuzz.random_model(s)[0].graph.output)
                and len(onnx_fuzz.random_model(s)[0].graph.node) >= 4)
    model, feeds = onnx_fuzz.random_model(seed)
    real = onnx_fuzz.check_model

    def fake(m, f, seed=None, levels=(0, 3)):
        onnx_fuzz.run_ort(m, f)
        bad = any(o.type.tensor_type.elem_type == 10 for o in m.graph.output)
        return onnx_fuzz.FuzzResult(seed, "failed" if bad else "ok", "", ("mismatch",) if bad else (), m, f)

    onnx_fuzz.check_model = fake
    try:
        small, small_feeds = onnx_fuzz.minimize(model, feeds, ("mismatch",))
    finally:
        onnx_fuzz.check_model = real
    assert len(small.graph.output) == 1 and small.graph.output[0].type.tensor_type.elem_type == 10
    assert len([n for n in small.graph.node if n.op_type != "Constant"]) <= 1
    assert set(small_feeds) == {i.name for i in small.graph.input}


def _run(seeds, max_nodes=None):
    """(failure reports, refusals of models with symbolic input dims, counts by status)."""
    bad, sym_refused, counts = [], [], {"ok": 0, "refused": 0, "failed": 0}
    for seed in seeds:
        r = onnx_fuzz.check(seed, max_nodes)
        counts[r.status] += 1
        if r.status == "refused" and onnx_fuzz.is_symbolic(r.model):
            # tessera needs static extents for some ops (Slice/Concat/Split along a symbolic axis, a
            # symbolic dim broadcast against a static one): refusing with a TesseraError is its contract
            sym_refused.append(f"seed {seed}: {r.detail.splitlines()[0]}")
        elif r.status != "ok":
            bad.append(r.report())
    return bad, sym_refused, counts


@pytest.mark.parametrize("block", range(4))
def test_fuzz_onnx_against_onnxruntime(block):
    per = DEFAULT_SEEDS // 4
    bad, _, counts = _run(range(block * per, (block + 1) * per))
    assert not bad, "\n\n".join(bad)
    assert counts["ok"] >= per * 3 // 4, counts      # most graphs run, not just refusals


@pytest.mark.slow
def test_fuzz_onnx_long_run():
    n = int(os.environ.get("TESSERA_FUZZ_SEEDS", "400"))
    start = int(os.environ.get("TESSERA_FUZZ_START", "100000"))
    bad, sym_refused, counts = _run(range(start, start + n), max_nodes=int(os.environ.get("TESSERA_FUZZ_NODES", "10")))
    print(f"onnx fuzz seeds {start}..{start + n - 1}: {counts}; refusals of symbolic-shape models: "
          f"{len(sym_refused)}\n" + "\n".join(sym_refused))
    assert not bad, f"{len(bad)} of {n} seeds failed:\n\n" + "\n\n".join(bad)
