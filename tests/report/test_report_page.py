"""The report page's content: one box per node of the optimized graph, each kernel's tensor
expression, loop program and generated C, the memory plan, the machine, and with a database the
tuning tasks and curve; written by exe.report, write_report and `tessera report`."""
import html
import os
import re

import pytest

pytest.importorskip("grandalf", reason="the report extra: pip install 'tessera[report]'")

import tessera  # noqa: E402
from tessera import autotune, zoo  # noqa: E402
from tessera.autotune.database import record_target  # noqa: E402
from tessera.cli import main  # noqa: E402
from tessera.errors import TesseraError  # noqa: E402
from tessera.graph.ir import FUSED_OP  # noqa: E402
from tessera.graph.lowering import compile_graph  # noqa: E402
from tessera.report import build_report, write_report  # noqa: E402
from tessera.tir.schedule import Schedule  # noqa: E402

from report_helpers import SMALL_BERT, TARGET, head_blobs, kernel_blobs, page_data, synthetic_graph  # noqa: E402


def test_exe_report_has_a_box_per_node_and_every_kernel_s_code(small_bert, tmp_path):
    exe = small_bert
    path = exe.report(tmp_path / "r.html")
    assert path == str(tmp_path / "r.html")
    text = open(path, encoding="utf-8").read()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text   # no network
    data = page_data(text)
    g = exe.graph
    boxes = data["graph"]["boxes"]
    assert len(boxes) == len(g.nodes) == len(exe.plan.steps)
    assert [b["node"] for b in boxes] == [n.name for n in g.nodes]
    fused = [(b, n) for b, n in zip(boxes, g.nodes) if n.op == FUSED_OP]
    assert fused and all(b["ops"] == [m.op for m in n.attrs["function"].body.nodes] for b, n in fused)
    # every box measured, shares adding up to the whole, kernels named as in the plan
    assert all(b["ms"] is not None and b["ms"] >= 0 for b in boxes)
    assert abs(sum(b["share"] for b in boxes) - 1) < 1e-6
    assert [b["kernel"] for b in boxes] == [s.kernel for s in exe.plan.steps]
    # edges carry the tensors' shapes: the first layer's input to its first node
    assert any(e["label"] == "f32[1,16,64]" for e in data["graph"]["edges"])
    # each kernel's panel: the tensor expression, the scheduled loop program, the generated C
    blobs = kernel_blobs(text)
    heads = head_blobs(text)
    assert 1 <= len(heads) < len(blobs)               # the C before the kernels is shared, held once
    ids = data["kernel_ids"]
    assert set(ids) == set(exe.compiled.kernels) and len(blobs) == len(ids)
    for name, k in exe.compiled.kernels.items():
        panel = blobs[ids[name]]
        panel = dict(panel, c_head=heads[panel["c_head"]]["html"] if panel["c_head"] else "")
        plain = {key: html.unescape(re.sub(r"<[^>]+>", "", panel[key])) for key in ("te", "script", "c", "c_head")}
        assert plain["te"].rstrip("\n") == k.func.script().rstrip("\n")      # Pygments ends a listing with a newline
        prog = k.prim.mod if isinstance(k.prim, Schedule) else k.prim
        assert plain["script"].rstrip("\n") == prog.script().rstrip("\n")
        assert (plain["c_head"] + plain["c"]).rstrip("\n") == k.source.text.rstrip("\n")
        assert k.source.functions[0].name in plain["c"]
        assert panel["origin"].startswith(("default schedule", "tuned"))
    assert "Memory plan" in text and data["memory"]["arena_bytes"] == exe.memory_plan.arena_bytes
    assert len(data["memory"]["tensors"]) == len(exe.memory_plan.allocations)
    assert f"<td>tessera</td><td>{tessera.__version__}</td>" in text and "C compiler" in text
    assert "no tuning database given" in text


def _database(exe, path):
    """A database holding, per workload of exe's kernels, its default schedule measured at 20 us and
    then (a second record, the same trace) at 10 us."""
    db = autotune.Database(path)
    tk = record_target(exe.target)
    seen = set()
    for k in exe.compiled.kernels.values():
        wl = db.commit_workload(k.func)
        if wl.key in seen:
            continue
        seen.add(wl.key)
        trace = k.prim.trace.as_json() if isinstance(k.prim, Schedule) else []
        db.commit([autotune.TuningRecord(wl.key, tk, trace, [2e-5], time=1000.0 + len(seen))])
    for i, key in enumerate(sorted(seen)):
        trace = db.records(key, tk)[0].trace
        db.commit([autotune.TuningRecord(key, tk, trace, [1e-5], time=2000.0 + i)])
    return db, len(seen)


def test_a_database_adds_the_tuning_tasks_and_curve(small_bert, tmp_path):
    db, n = _database(small_bert, tmp_path / "tune.jsonl")
    text = build_report(small_bert, database=str(tmp_path / "tune.jsonl"), profile=False)
    rows = re.findall(r"<td class='num'>([0-9.]+)x</td>", text)
    assert len(rows) == n and all(r == "2.00" for r in rows)
    assert "tune.jsonl" in text and "not measured (profile=False)" in text
    if _has_matplotlib():
        assert "data:image/png;base64," in text


def test_a_corrupt_line_in_the_database_is_skipped_not_fatal(small_bert, tmp_path):
    """The report reads the database through autotune.Database: a torn or garbled line is warned
    about and skipped, the other records still make the tasks."""
    db, n = _database(small_bert, tmp_path / "tune.jsonl")
    with open(tmp_path / "tune.jsonl", "a", encoding="utf-8") as f:
        f.write('{"workload": "torn\n')
    with pytest.warns(UserWarning, match="corrupt line"):
        text = build_report(small_bert, database=str(tmp_path / "tune.jsonl"), profile=False)
    rows = re.findall(r"<td class='num'>([0-9.]+)x</td>", text)
    assert len(rows) == n and all(r == "2.00" for r in rows)


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def test_a_missing_database_or_folder_is_refused(small_bert, tmp_path):
    with pytest.raises(TesseraError, match="does not exist"):
        write_report(small_bert, tmp_path / "r.html", database=tmp_path / "none.jsonl", profile=False)
    with pytest.raises(TesseraError, match="folder .* does not exist"):
        small_bert.report(tmp_path / "no" / "r.html")


def test_a_loaded_library_cannot_report(small_bert, tmp_path):
    lib = small_bert.export_library(tmp_path / "m.so")
    loaded = tessera.runtime.load_module(lib)
    with pytest.raises(TesseraError, match="not compiled by tessera.compile in this process"):
        loaded.report(tmp_path / "r.html")


def test_a_symbolic_batch_reports_through_the_graph_executor(tmp_path):
    exe = tessera.compile(synthetic_graph(16, batch="N"), {}, target=TARGET)
    assert exe.kind == "graph" and exe.memory_plan is None
    text = build_report(exe, number=1, repeat=1)       # inputs: seeded, the symbol N set to 1
    data = page_data(text)
    assert len(data["graph"]["boxes"]) == len(exe.graph.nodes) and data["memory"] is None
    assert "no static memory plan" in text and any("N" in e["label"] for e in data["graph"]["edges"])
    assert all(b["ms"] is not None for b in data["graph"]["boxes"])


def test_a_600_node_graph_reports_in_seconds(tmp_path):
    compiled = compile_graph(synthetic_graph(600), TARGET, build_kernels=False)
    text = build_report(compiled, profile=False)
    data = page_data(text)
    assert len(data["graph"]["boxes"]) == 600 and len(data["graph"]["edges"]) == 600 + 600 // 8 + 1


def test_cli_report_writes_the_page(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    model = tmp_path / "bert.onnx"
    onnx.save(zoo.get_model("bert_base", **SMALL_BERT), str(model))
    out = tmp_path / "report.html"
    assert main(["report", str(model), "--target", TARGET, "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"wrote {out}" in said
    data = page_data(out.read_text(encoding="utf-8"))
    assert len(data["graph"]["boxes"]) > 10
    assert main(["report", str(tmp_path / "missing.onnx"), "-o", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert os.path.getsize(out) > 0
