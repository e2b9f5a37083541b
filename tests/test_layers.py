"""The layering of tessera's packages (docs/internals.md, "Layers"): the import-linter contracts in
pyproject.toml, run here so that the default test run fails the moment an import points up."""
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytest.importorskip("importlinter", reason="import-linter is in the dev extra: pip install -e '.[dev]'")


def _lint(contract: str) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(pathlib.Path(sys.executable).with_name("lint-imports"))
    return subprocess.run([exe, "--no-cache", "--contract", contract, str(ROOT / "pyproject.toml")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def _check(contract: str) -> None:
    r = _lint(contract)
    # lint-imports: 0 = kept, 1 = broken; anything else (a bad config, an unknown module) fails too
    assert r.returncode == 0, (f"import-linter contract {contract!r} is broken (exit {r.returncode}); "
                               f"the offending import chains:\n{r.stdout}\n{r.stderr}")
    assert "BROKEN" not in r.stdout and "KEPT" in r.stdout, r.stdout


def test_layers():
    """cli > frontend|compile_graph|zoo > graph > ops|build_module > backend > tir:te > arith|runtime
    > codegen > target > toolchain > ir > errors: no package imports one above it."""
    _check("layers")


def test_tir_layers():
    """Inside tir: schedule | transform > tensor_intrin > analysis: lowering never imports the scheduler."""
    _check("tir-layers")


def test_ops_import_no_renderer():
    """The operator library does not import codegen: its micro-kernels' C is tir.tensor_intrin's."""
    _check("ops-without-codegen")


def test_runtime_independent_of_graph_ops_frontend():
    _check("runtime-independent")


def test_no_cycles_among_top_level_packages():
    _check("acyclic-packages")


def test_a_broken_contract_fails(tmp_path):
    """The check can fail: a contract that the code breaks (ops above graph) is reported broken,
    with its import chain."""
    cfg = tmp_path / "broken.toml"
    cfg.write_text('[tool.importlinter]\nroot_package = "tessera"\n\n[[tool.importlinter.contracts]]\n'
                   'id = "upside-down"\nname = "upside down"\ntype = "layers"\n'
                   'layers = ["tessera.ops", "tessera.graph"]\n')
    exe = shutil.which("lint-imports") or str(pathlib.Path(sys.executable).with_name("lint-imports"))
    r = subprocess.run([exe, "--no-cache", str(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "BROKEN" in r.stdout and "tessera.graph" in r.stdout, r.stdout
