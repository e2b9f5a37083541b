"""generation.bandwidth (the STREAM-like read kernel of the decoding step's floor) and benchmarks/generate.py
at its quick size: every runner's tokens are tessera's, the table has its ratios (no timing asserted)."""
import importlib.util
import json
import pathlib

import numpy as np
import pytest

from tessera.errors import TesseraError
from tessera.generation.bandwidth import ReadKernel, read_bandwidth

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_read_kernel_reads_every_element(threads, isa_target):
    k = ReadKernel(3_000_001, f"{isa_target} -num-threads={threads}")
    assert k.nbytes >= 3_000_001 and k.nbytes % 256 == 0 and k.out.size == threads
    k.array[:] = np.arange(k.array.size) % 3          # sums exact in float32 partials of this size
    k.run()
    assert float(k.out.astype(np.float64).sum()) == float(k.array.astype(np.float64).sum())
    k.array[:] = 1.0
    assert k.seconds() > 0
    k.check()
    assert read_bandwidth(1 << 20, f"{isa_target} -num-threads={threads}", repeat=2) > 0


def test_the_read_kernel_refuses_bad_sizes_and_targets():
    with pytest.raises(TesseraError, match="nbytes must be a positive int"):
        ReadKernel(0)
    with pytest.raises(TesseraError, match="nbytes must be a positive int"):
        ReadKernel(True)
    with pytest.raises(TesseraError, match="runs on CPU targets"):
        ReadKernel(1024, "cuda")


def test_generate_benchmark_quick_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("tessera_bench_generate", ROOT / "benchmarks" / "generate.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "generate.json"
    assert bench.main(["--small", "--rounds", "1", "--passes", "1", "--prompt-len", "8", "--new-tokens", "5",
                       "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {r["runner"]: r for r in doc["rows"]}
    assert set(rows) >= {"tessera fp32", "tessera int8", "onnxruntime"}
    for name in ("tessera fp32", "onnxruntime", "torch eager"):
        if name in rows:
            assert rows[name]["same tokens"] == "5/5", (name, rows[name])
    for key in ("floor ms", "decode / floor", "read GB/s"):
        assert rows["tessera fp32"][key] > 0 and rows["tessera int8"][key] > 0
    assert rows["onnxruntime"]["tok/s vs ORT"] == 1
    text = capsys.readouterr().out
    for goal in ("the floor", "ONNX Runtime's", "int8 tokens/s", "prefill"):
        assert goal in text
