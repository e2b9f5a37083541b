"""benchmarks/gpu_check.py, the one-command device check: its dry run (no GPU needed) builds every
CUDA kernel the check would run with nvcc -- the GEMM schedules, the rows, ResNet-18 and BERT-base at
batch 1 and 16 -- and reports each without an error (skipped without nvcc; with a GPU the real check
runs on the device, not in the suite)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tessera.runtime import cuda as cuda_rt

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(cuda_rt.nvcc_path() is None, reason="nvcc (the CUDA toolkit) is not on the PATH")
def test_the_dry_run_builds_every_kernel_of_the_check(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["dry"] is True
    sections = doc["sections"]
    assert set(sections) == {"device", "tests", "gemm", "rows", "models"}
    gemm = sections["gemm"]
    labels = {(r["gemm"], r["schedule"]) for r in gemm}
    for n in (1024, 4096):
        for dt in ("fp32", "fp16"):
            assert (f"{dt} {n}^3", "default") in labels
    tensor_core = [r for r in gemm if r["gemm"].startswith("fp16") and r["schedule"] == "default"
                   or r["schedule"].startswith("wgmma")]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check
    fitting = sum(n % bm == 0 and n % bn == 0 for n in (1024, 4096) for bm, bn, _ in gpu_check.WGMMA_TILES)
    assert len([r for r in tensor_core if r["schedule"].startswith("wgmma")]) == fitting
    assert all(r["registers"] > 0 and r["spills"] == 0 for r in tensor_core)
    tuned = [r for r in gemm if r["schedule"].startswith("tuned")]
    assert len(tuned) == 2 and all(r["candidates_built"] > 0 for r in tuned)
    assert len(sections["rows"]) == 4
    models = {(r["model"], r["batch"]) for r in sections["models"]}
    assert models == {("resnet18", 1), ("resnet18", 16), ("bert_base", 1), ("bert_base", 16)}
    for r in gemm + sections["rows"] + sections["models"]:
        assert "error" not in r, r
        assert "ratio" not in r            # nothing is timed without a GPU
    assert all(r["kernels"] > 0 for r in sections["models"])


def test_without_a_gpu_or_dry_the_check_says_what_it_needs():
    if cuda_rt.available():
        pytest.skip("a GPU is present: the check would run")
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--only", "device"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--dry" in proc.stderr
