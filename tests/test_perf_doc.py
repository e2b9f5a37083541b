"""docs/performance.md's measured tables are what benchmarks/perf_doc.py renders from the benchmarks'
JSON (benchmarks/results/*.json), so no figure there is typed, or goes stale, by hand."""
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("tessera_bench_perf_doc", ROOT / "benchmarks" / "perf_doc.py")
perf_doc = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = perf_doc   # dataclasses look their module up there
_spec.loader.exec_module(perf_doc)

DOC = {"benchmark": "memory_plan", "date": "2026-01-02", "command": "python benchmarks/memory_plan.py --json x.json",
       "commit": "abc1234", "load_average": [0.5, 0.4, 0.3],
       "machine": {"python": "3.11.7", "cpu": "x86_64", "cpu_model": "Some CPU", "cores": 2, "vector_bits": 256},
       "rows": [{"model": "resnet18", "opt": "O2", "nodes": 24, "intermediates": 23, "naive_MiB": 10.24,
                 "planned_MiB": 3.828, "saving": 2.676, "live_MiB": 3.828, "weights_MiB": 44.57, "io_MiB": 0.578,
                 "plan_ms": 0.3}],
       "full_rows": [{"naive_bytes": 1}]}


def test_the_page_is_what_the_results_render():
    assert perf_doc.main(["--check"]) == 0, "docs/performance.md is stale: run python benchmarks/perf_doc.py"


def test_a_section_names_its_run_and_keeps_the_figures():
    text = perf_doc.render([DOC])
    assert "| resnet18 | O2 | 24 | 23 | 10.24 | 3.828 | 2.676 | 3.828 | 44.57 | 0.578 |" in text
    assert "2026-01-02" in text and "commit abc1234" in text and "Some CPU, 2 cores" in text
    assert "`python benchmarks/memory_plan.py --json x.json`" in text and "load average 0.5 / 0.4 / 0.3" in text
    assert "full_rows" not in text and "naive_bytes" not in text


def test_only_the_generated_block_is_replaced():
    page = f"# Performance\n\nintro\n\n{perf_doc.BEGIN}\nold figures\n{perf_doc.END}\n\n## Recorded figures\n\nkept\n"
    out = perf_doc.splice(page, perf_doc.render([DOC]))
    assert out.startswith("# Performance\n\nintro\n\n") and out.endswith("## Recorded figures\n\nkept\n")
    assert "old figures" not in out and "10.24" in out


def test_an_unknown_benchmark_shows_every_table_and_setting():
    doc = {"benchmark": "new_bench", "rows": [{"case": "a", "ms": 1.5}], "extra_rows": [{"x": 1}], "threads": 2}
    text = perf_doc.render([doc])
    assert "## new_bench (`benchmarks/new_bench.py`)" in text and "| a | 1.5 |" in text
    assert "| x |" in text and "- threads: 2" in text and "date not recorded" in text
