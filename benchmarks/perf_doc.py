"""Render the measured tables of docs/performance.md from the JSON the benchmarks write (--json).

    python benchmarks/perf_doc.py                       # benchmarks/results/*.json -> docs/performance.md
    python benchmarks/perf_doc.py --check               # exit 1 when the page is not what the JSON gives
    python benchmarks/perf_doc.py e2e.json --stdout     # render other files, print instead of writing

To refresh a figure, rerun its benchmark with `--json benchmarks/results/<benchmark>.json` (the command
each section names), then run this script. Only the text between the BEGIN and END markers is
rewritten; the rest of the page (how to read the figures, the recorded figures of long runs) is kept
as written. Every figure comes from a file: nothing here is typed by hand, so nothing goes stale by hand.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"
BEGIN = "<!-- BEGIN perf_doc.py: generated from benchmarks/results/*.json; do not edit by hand -->"
END = "<!-- END perf_doc.py -->"

# keys every JSON carries (benchmarks/_common.report) and the provenance line shows instead of a table
_META = {"benchmark", "date", "command", "commit", "load_average", "machine", "rows"}


@dataclass(frozen=True)
class Table:
    """One list of rows in a benchmark's JSON, shown as a table: which key, its heading, which columns."""
    key: str
    heading: str = ""
    columns: tuple = ()            # keys, or (key, header) pairs; empty: every key, as the benchmark wrote it
    only_failing: bool = False     # keep rows whose "pass" is below "cases" (onnx_conformance's ops)


@dataclass(frozen=True)
class Section:
    """How one benchmark's JSON reads in the page: title, what it measures, its tables, keys left out."""
    title: str
    about: str
    tables: tuple = (Table("rows"),)
    skip: frozenset = field(default_factory=frozenset)


SECTIONS = {
    "onnx_conformance": Section(
        "ONNX conformance",
        "Every node test case of the installed onnx package through from_onnx -> tessera.compile -> run, "
        "compared with the expected outputs; onnxruntime runs the same cases in the same workers. The "
        "headline feeds every input at run time, as onnxruntime is fed; `frozen` counts the cases with "
        "the inputs the frontend asks for frozen as constants (`from_onnx(const_inputs=...)`), which "
        "onnxruntime never needs: not a like-for-like figure.",
        tables=(Table("ops", "Ops with a case that does not pass",
                      ("op", "cases", "pass", "wrong", "unsupported", "error", "first failure"),
                      only_failing=True),),
        skip=frozenset({"cases"})),
    "memory_plan": Section(
        "Static memory plans",
        "Each zoo model (batch 1) optimized at each opt level and planned by the graph compiler's "
        "memory planner (greedy, 64-byte alignment): the bytes of intermediates with one buffer per "
        "tensor (naive) against the one arena the ahead-of-time module allocates (planned); live is "
        "the most bytes alive at once, a floor no plan goes below.",
        tables=(Table("rows", "", ("model", "opt", "nodes", "intermediates", ("naive_MiB", "naive MiB"),
                                   ("planned_MiB", "planned MiB"), ("saving", "naive / planned"),
                                   ("live_MiB", "live MiB"), ("weights_MiB", "weights MiB"),
                                   ("io_MiB", "inputs + outputs MiB"))),),
        skip=frozenset({"full_rows"})),
    "vdla_latency_hiding": Section(
        "VDLA latency hiding",
        "ResNet-18's conv layers (int8, batch 1) on the VDLA cycle-approximate simulator with the same "
        "tiles, serial (no overlap) against two virtual threads with dependency tokens; utilization is "
        "useful GEMM cycles over all cycles (the TVM paper: 70% -> 88% peak). Simulated cycles: the "
        "figures do not depend on the machine or its load. docs/vdla.md explains the cycle model.",
        tables=(Table("rows", "", ("layer", "shape", "tiles", ("serial_cycles", "serial cycles"),
                                   ("serial_gemm_util", "serial GEMM util"),
                                   ("vthread2_cycles", "2 vthreads cycles"),
                                   ("vthread2_gemm_util", "2 vthreads GEMM util"),
                                   ("vthread2_compute_util", "2 vthreads compute util"),
                                   "speedup", ("ops_per_byte", "ops / byte"),
                                   ("ops_per_cycle", "ops / cycle"), ("roof_ops_per_cycle", "roof"),
                                   "bound")),)),
    "e2e": Section(
        "Model latency",
        "The zoo models through tessera.compile beside onnxruntime and PyTorch eager, timed round-robin "
        "in the same run (medians; ratios tessera / reference, below 1: tessera faster).",
        tables=(Table("rows", "", ("model", "threads", ("tessera_cfg", "config"),
                                   ("tessera_ms", "tessera ms"), ("ort_ms", "onnxruntime ms"),
                                   ("torch_ms", "PyTorch ms"), ("tessera/ort", "tessera / ORT"),
                                   ("tessera/torch", "tessera / PyTorch"), ("max_abs_err", "max abs error"))),
                Table("fusion_ablation", "Fusion: latency without / with fuse_ops"),
                Table("tuned", "Tuned with the records of --tuned"))),
    "gemm": Section(
        "fp32 GEMM beside numpy's BLAS",
        "tessera's hand-written GEMM schedule (the micro-kernel through tensorize) and numpy in "
        "alternating rounds; the machine's fp32 FMA peak measured in the same run."),
    "tuning_curve": Section(
        "Tuning curves",
        "The search strategies on one workload, numpy and the op library's default measured in the same run.",
        skip=frozenset({"history"})),
    "dynamic_shapes": Section(
        "Dynamic shapes",
        "BERT-base and GPT-2 small exported with dynamic axes and compiled once, against a compile "
        "specialized to each length, same run."),
}
ORDER = list(SECTIONS)


def fmt(v) -> str:
    """A cell as the benchmarks print it (_common._fmt: 4 significant digits), safe inside a table."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        text = f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    elif v is None:
        text = ""
    else:
        text = str(v)
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list, columns: tuple) -> list:
    """A Markdown table of rows: the given columns (a key, or a (key, header) pair), or every key in
    first-seen order."""
    columns = tuple((c, c) if isinstance(c, str) else c for c in columns
                    or dict.fromkeys(k for r in rows for k in r))
    numeric = [all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                   for r in rows if r.get(k) not in (None, "")) for k, _ in columns]
    out = ["| " + " | ".join(h for _, h in columns) + " |",
           "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    out += ["| " + " | ".join(fmt(r.get(k, "")) for k, _ in columns) + " |" for r in rows]
    return out


def provenance(doc: dict) -> str:
    """Where the figures come from: date, commit, machine, load, and the command that made them."""
    m = doc.get("machine") or {}
    cpu = m.get("cpu_model") or m.get("cpu") or "unknown CPU"
    parts = [f"{doc.get('date') or 'date not recorded'}", f"commit {doc['commit']}" if doc.get("commit") else None,
             f"{cpu}" + (f", {m['cores']} cores" if m.get("cores") else ""),
             f"{m['vector_bits']}-bit vectors" if m.get("vector_bits") else None,
             f"Python {m['python']}" if m.get("python") else None]
    load = doc.get("load_average")
    if isinstance(load, list):
        parts.append("load average " + " / ".join(fmt(x) for x in load))
    elif isinstance(load, (int, float)):
        parts.append(f"load average {fmt(load)}")
    line = "Measured " + ", ".join(p for p in parts if p) + "."
    if doc.get("command"):
        line += f" Command: `{doc['command']}`."
    return line


def settings(doc: dict, section: Section) -> list:
    """The JSON's other scalars and flat dicts (summaries, settings) as bullet lines."""
    shown = _META | section.skip | {t.key for t in section.tables}
    out = []
    for k, v in doc.items():
        if k in shown:
            continue
        if isinstance(v, dict):
            flat = {a: b for a, b in v.items() if not isinstance(b, (list, dict))}
            nested = {a: b for a, b in v.items() if isinstance(b, dict)}
            if flat:
                out.append(f"- {k}: " + ", ".join(f"{a} {fmt(b)}" for a, b in flat.items()))
            for a, b in nested.items():
                out.append(f"- {k} {a}: " + ", ".join(f"{c} {fmt(d)}" for c, d in b.items()
                                                     if not isinstance(d, (list, dict))))
        elif not isinstance(v, list) and v not in (None, ""):
            out.append(f"- {k}: {fmt(v)}")
    return out


def render_one(doc: dict) -> list:
    """One benchmark's section: title, what it measures, provenance, its tables and summary lines."""
    name = doc.get("benchmark", "?")
    sec = SECTIONS.get(name) or Section(name, f"`benchmarks/{name}.py`.",
                                        tables=tuple(Table(k) for k, v in doc.items()
                                                     if k not in _META - {"rows"} and isinstance(v, list)
                                                     and v and all(isinstance(r, dict) for r in v)))
    out = [f"## {sec.title} (`benchmarks/{name}.py`)", "", sec.about, "", provenance(doc), ""]
    for t in sec.tables:
        rows = doc.get(t.key) or []
        if t.only_failing:
            whole = [r for r in rows if r.get("pass") == r.get("cases")]
            rows = [r for r in rows if r.get("pass") != r.get("cases")]
            if whole:
                out += [f"Ops passing every case ({len(whole)}): " + ", ".join(r["op"] for r in whole) + ".", ""]
        if not rows:
            continue
        if t.heading:
            out += [f"{t.heading}:", ""]
        out += table(rows, t.columns) + [""]
    extra = settings(doc, sec)
    if extra:
        out += extra + [""]
    return out


def render(docs: list) -> str:
    """The generated block: every benchmark's section in ORDER, then the others by name."""
    docs = sorted(docs, key=lambda d: (ORDER.index(d.get("benchmark")) if d.get("benchmark") in ORDER
                                       else len(ORDER), str(d.get("benchmark"))))
    lines = [BEGIN, ""]
    for d in docs:
        lines += render_one(d)
    return "\n".join(lines + [END])


def splice(page: str, block: str) -> str:
    """The page with its generated block replaced (appended when the page has no markers yet)."""
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        return head + block + rest.split(END, 1)[1]
    return page.rstrip("\n") + "\n\n" + block + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", type=Path, help="benchmark JSON files (default: benchmarks/results/*.json)")
    p.add_argument("--page", type=Path, default=PAGE, help="the page to update (default docs/performance.md)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is stale")
    p.add_argument("--stdout", action="store_true", help="print the generated block instead of writing the page")
    args = p.parse_args(argv)
    files = args.files or sorted(RESULTS.glob("*.json"))
    if not files:
        p.error(f"no JSON files given and none in {RESULTS}")
    block = render([json.loads(f.read_text()) for f in files])
    if args.stdout:
        print(block)
        return 0
    page = args.page.read_text() if args.page.exists() else "# Performance\n"
    new = splice(page, block)
    if args.check:
        if new != page:
            print(f"{args.page} is stale: run python benchmarks/perf_doc.py", file=sys.stderr)
            return 1
        return 0
    args.page.write_text(new)
    print(f"wrote {args.page} from {len(files)} file(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
