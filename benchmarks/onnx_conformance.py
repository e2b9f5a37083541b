"""ONNX backend node tests through tessera: pass / wrong result / unsupported / error, per op.

    python benchmarks/onnx_conformance.py [--filter REGEX] [--jobs 2] [--timeout 120]
                                          [--json PATH] [--failures] [--no-ort]

Every node test case of the installed onnx package (generated in memory by
`onnx.backend.test.case.node.collect_testcases`) goes from_onnx -> tessera.compile -> run, and each
output is compared with the expected one (the case's rtol/atol, NaN where NaN is expected, and the
same dtype and shape). A sequence is fed and compared as a list of arrays, an empty optional as None
(for tessera and onnxruntime alike).

The headline count feeds every graph input at run time, exactly as onnxruntime is fed: nothing is
frozen (an input whose value decides the graph's structure is specialized on at run time, as
tessera.compile does for a DeferredGraph). A second count, printed apart, retries a case the frontend refuses because it needs an
input's value as a constant (needs_constant) with that input frozen (`from_onnx(const_inputs=...)`,
which onnxruntime never needs): it says what the converters can do, not what a user gets. Cases run
in worker processes with a per-case time limit; an exception of any kind is counted and
categorised, never raised. Each case also runs through onnxruntime in the same worker (unless
--no-ort), and its pass count is printed beside tessera's headline.
"""
from __future__ import annotations

import collections
import json
import multiprocessing as mp
import os
import re
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np  # noqa: E402
from _common import parser, report  # noqa: E402

PASS, WRONG, UNSUPPORTED, ERROR = "pass", "wrong", "unsupported", "error"
STATUSES = (PASS, WRONG, UNSUPPORTED, ERROR)


# ---------------------------------------------------------------------------------------------
# the cases
# ---------------------------------------------------------------------------------------------
def collect(pattern: str | None):
    """The node test cases (name order), optionally those whose name matches `pattern`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            from onnx.backend.test.case.node import collect_testcases

            cases = collect_testcases(None)
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    return sorted(cases, key=lambda c: c.name)


_OPS_BY_KEY: dict = {}


def op_of(case) -> str:
    """The ONNX op a case tests: the node's op type, or for an expanded (multi-node) case the op
    whose snake_case name is the longest prefix of the test name."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    if not _OPS_BY_KEY:
        import onnx

        for s in onnx.defs.get_all_schemas_with_history():
            _OPS_BY_KEY[s.name.lower()] = s.name
    parts = case.name[len("test_"):].split("_") if case.name.startswith("test_") else case.name.split("_")
    best = None
    for k in range(1, len(parts) + 1):
        key = "".join(parts[:k]).lower()
        if key in _OPS_BY_KEY:
            best = _OPS_BY_KEY[key]
    return best or (nodes[0].op_type if nodes else "?")


def _shorten(text: str, n: int = 110) -> str:
    text = " ".join(str(text).split())
    text = re.sub(r"0x[0-9a-f]+", "0x.", text)
    return text if len(text) <= n else text[: n - 3] + "..."


# ---------------------------------------------------------------------------------------------
# one case (runs in a worker)
# ---------------------------------------------------------------------------------------------
class _Unsupported(Exception):
    pass


def _as_array(x, what):
    import onnx

    if x is None:
        raise _Unsupported(f"{what} is an omitted optional value")
    if isinstance(x, onnx.TensorProto):
        from tessera.errors import DTypeError
        from tessera.frontend.onnx import tensor_to_array

        try:
            return tensor_to_array(x, what)
        except DTypeError as e:
            raise _Unsupported(str(e)) from None
    if isinstance(x, (list, dict)):
        raise _Unsupported(f"{what} is a sequence/map, not a tensor")
    a = np.asarray(x)
    if a.dtype == object or a.dtype.kind in "USO":
        raise _Unsupported(f"{what} has dtype {a.dtype} (strings/objects)")
    return a


def _as_value(x, what, optional_ok: bool):
    """A case's input or expected output: an array, a list of arrays (a sequence), or None (an empty
    optional, where the model's type is an optional: optional_ok)."""
    if x is None and optional_ok:
        return None
    if isinstance(x, list):
        return [_as_array(e, f"{what}[{i}]") for i, e in enumerate(x)]
    return _as_array(x, what)


def _optional_inputs(model) -> set:
    return {vi.name for vi in model.graph.input if vi.type.HasField("optional_type")}


def compare_value(got, want, rtol, atol) -> str | None:
    """compare() through sequences (lists) and empty optionals (None)."""
    if want is None or isinstance(want, list):
        if want is None:
            return None if got is None else f"{type(got).__name__}, expected an empty optional (None)"
        if not isinstance(got, (list, tuple)):
            return f"{type(got).__name__}, expected a sequence (a list of {len(want)} arrays)"
        if len(got) != len(want):
            return f"a sequence of {len(got)} elements, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = compare_value(g, w, rtol, atol)
            if why:
                return f"element {i}: {why}"
        return None
    if got is None or isinstance(got, (list, tuple)):
        return f"{'None' if got is None else 'a list'}, expected a tensor"
    return compare(np.asarray(got), want, rtol, atol)


def compare(got, want, rtol, atol) -> str | None:
    """None when `got` matches `want`, else why not."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype.kind in "fc" or got.dtype.name == "bfloat16" or got.dtype.name.startswith(("float8", "float4")):
        g, w = got.astype(np.float64), want.astype(np.float64)
        nan_g, nan_w = np.isnan(g), np.isnan(w)
        if not np.array_equal(nan_g, nan_w):
            return f"NaN at {int((nan_g != nan_w).sum())} positions where the expected value differs"
        ok = np.isclose(g, w, rtol=rtol, atol=atol) | nan_w
        if not ok.all():
            bad = np.argwhere(~ok)
            i = tuple(bad[0])
            err = np.abs(np.where(ok, 0, g - w))
            return (f"{int((~ok).sum())}/{ok.size} elements differ (max |err| {np.nanmax(err):.3g}); "
                    f"first at {i}: {g[i]!r} vs {w[i]!r}")
        return None
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        i = tuple(bad[0]) if got.ndim else ()
        return f"{len(bad)}/{got.size} elements differ; first at {i}: {got[i]!r} vs {want[i]!r}"
    return None


def run_tessera(case, freeze: bool = False) -> tuple:
    """(status, reason) of one case through tessera, every input given at run time; with freeze, an
    input the frontend needs as a constant (needs_constant) is frozen and the case retried."""
    import tessera
    from tessera.errors import DTypeError, TesseraError, UnsupportedOpError
    from tessera.frontend.onnx import from_onnx

    model = case.model
    init = {t.name for t in model.graph.initializer}
    in_names = [vi.name for vi in model.graph.input if vi.name not in init]
    optional = _optional_inputs(model)
    try:
        for inputs, outputs in case.data_sets:
            arrays = [_as_value(x, f"input {n!r}", n in optional) for n, x in zip(in_names, inputs)]
            wants = [_as_value(x, f"expected output {i}", True) for i, x in enumerate(outputs)]
            if len(arrays) != len(in_names):
                # fewer data than inputs: trailing optional inputs are omitted
                in_names = in_names[: len(arrays)]
            frozen: dict = {}
            for _ in range(len(arrays) + 1):
                try:
                    graph, params = from_onnx(model, const_inputs=frozen, specialize=not freeze)
                    break
                except UnsupportedOpError as e:
                    need = getattr(e, "needs_constant", None)
                    if freeze and need and need in in_names and need not in frozen:
                        frozen[need] = arrays[in_names.index(need)]
                        continue
                    raise
            exe = tessera.compile(graph, params)
            feeds = [a for n, a in zip(in_names, arrays) if n not in frozen]
            if len(feeds) != len(exe.input_names):
                return ERROR, f"{len(feeds)} input arrays for the graph's {len(exe.input_names)} inputs"
            got = exe.run(dict(zip(exe.input_names, feeds)))
            if len(got) != len(wants):
                return WRONG, f"{len(got)} outputs, expected {len(wants)}"
            for k, (g, w) in enumerate(zip(got, wants)):
                why = compare_value(g, w, case.rtol, case.atol)
                if why:
                    return WRONG, f"output {k}: {why}"
        return PASS, ""
    except _Unsupported as e:
        return UNSUPPORTED, str(e)
    except UnsupportedOpError as e:
        return UNSUPPORTED, str(e)
    except DTypeError as e:
        if "is not supported by tessera" in str(e) or "no tessera equivalent" in str(e):
            return UNSUPPORTED, str(e)
        return ERROR, f"DTypeError: {e}"
    except TesseraError as e:
        return ERROR, f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - every failure is counted, never raised
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        return ERROR, f"{type(e).__name__}{where}: {e}"


def _needs_constant(status, reason) -> bool:
    """Whether a refusal is the frontend asking for a runtime input's value as a constant."""
    return status == UNSUPPORTED and "const_inputs=" in reason


def run_ort(case) -> tuple:
    """(status, reason) of one case through onnxruntime."""
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        optional = _optional_inputs(case.model)
        for inputs, outputs in case.data_sets:
            feeds = {n: _as_value(x, n, n in optional) for n, x in zip(names, inputs)}
            got = sess.run(None, feeds)
            for k, (g, w) in enumerate(zip(got, outputs)):
                why = compare_value(g, _as_value(w, "expected", True), case.rtol, case.atol)
                if why:
                    return WRONG, f"output {k}: {why}"
        return PASS, ""
    except _Unsupported as e:
        return UNSUPPORTED, str(e)
    except Exception as e:  # noqa: BLE001
        text = str(e)
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            return UNSUPPORTED, text
        return ERROR, f"{type(e).__name__}: {text}"


_CASES: list = []


def _worker(conn, with_ort):
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    while True:
        try:
            idx = conn.recv()
        except EOFError:
            return
        if idx is None:
            return
        case = _CASES[idx]
        t0 = time.perf_counter()
        status, reason = run_tessera(case)
        secs = time.perf_counter() - t0
        frozen = run_tessera(case, freeze=True) if _needs_constant(status, reason) else (status, reason)
        ort_status = run_ort(case) if with_ort else None
        conn.send((idx, status, reason, secs, ort_status, frozen))


class _Pool:
    """Fork-based workers with a per-case time limit (a stuck worker is killed and replaced)."""

    def __init__(self, jobs, timeout, with_ort):
        self.ctx = mp.get_context("fork")
        self.jobs, self.timeout, self.with_ort = max(1, jobs), timeout, with_ort
        self.workers = [self._spawn() for _ in range(self.jobs)]

    def _spawn(self):
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, self.with_ort), daemon=True)
        p.start()
        child.close()
        return {"proc": p, "conn": parent, "task": None, "since": 0.0}

    def run(self, indices, on_result):
        from multiprocessing.connection import wait

        todo = collections.deque(indices)
        while todo or any(w["task"] is not None for w in self.workers):
            for w in self.workers:
                if w["task"] is None and todo:
                    w["task"], w["since"] = todo.popleft(), time.monotonic()
                    w["conn"].send(w["task"])
            busy = [w for w in self.workers if w["task"] is not None]
            ready = wait([w["conn"] for w in busy], timeout=1.0)
            now = time.monotonic()
            for i, w in enumerate(self.workers):
                if w["task"] is None:
                    continue
                if w["conn"] in ready:
                    try:
                        idx, status, reason, secs, ort_status, frozen = w["conn"].recv()
                    except (EOFError, OSError):
                        on_result(w["task"], ERROR, "the worker process died (crash in a kernel?)", 0.0, None,
                                  None)
                        self._replace(i)
                        continue
                    w["task"] = None
                    on_result(idx, status, reason, secs, ort_status, frozen)
                elif not w["proc"].is_alive():
                    on_result(w["task"], ERROR, f"the worker process died (exit code {w['proc'].exitcode})",
                              now - w["since"], None, None)
                    self._replace(i)
                elif now - w["since"] > self.timeout:
                    on_result(w["task"], ERROR, f"timeout: more than {self.timeout:.0f} s", now - w["since"], None,
                              None)
                    self._replace(i)

    def _replace(self, i):
        w = self.workers[i]
        if w["proc"].is_alive():
            w["proc"].kill()
        w["proc"].join(5)
        w["conn"].close()
        self.workers[i] = self._spawn()

    def close(self):
        for w in self.workers:
            try:
                w["conn"].send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self.workers:
            w["proc"].join(5)
            if w["proc"].is_alive():
                w["proc"].kill()


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--filter", metavar="REGEX", help="only cases whose name matches")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    p.add_argument("--ort", action="store_true", default=True,
                   help="also run every case through onnxruntime (the default; the headline's reference)")
    p.add_argument("--no-ort", dest="ort", action="store_false", help="tessera only")
    p.add_argument("--failures", action="store_true", help="print every failing case with its reason")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    args = p.parse_args(argv)

    t_start = time.perf_counter()
    cases = collect(args.filter)
    if not cases:
        print(f"no test case matches {args.filter!r}")
        return 1
    _CASES[:] = cases
    import onnx

    print(f"onnx {onnx.__version__}: {len(cases)} node test cases"
          + (f" matching {args.filter!r}" if args.filter else "") + f", {args.jobs} jobs")
    results: dict = {}
    tty = sys.stderr.isatty()

    def on_result(idx, status, reason, secs, ort_status, frozen):
        results[idx] = (status, reason, secs, ort_status, frozen or (status, reason))
        n = len(results)
        if not args.quiet and (tty or n % 100 == 0 or n == len(cases)):
            passed = sum(1 for r in results.values() if r[0] == PASS)
            print(f"\r  {n}/{len(cases)} done, {passed} pass", end="" if tty else "\n", file=sys.stderr,
                  flush=True)

    pool = _Pool(args.jobs, args.timeout, args.ort)
    try:
        pool.run(range(len(cases)), on_result)
    finally:
        pool.close()
    if not args.quiet and tty:
        print(file=sys.stderr)

    counts = collections.Counter(r[0] for r in results.values())
    total = len(cases)
    per_op: dict = collections.OrderedDict()
    rows_cases = []
    for i, c in enumerate(cases):
        status, reason, secs, ort_status, frozen = results[i]
        op = op_of(c)
        per_op.setdefault(op, []).append((c.name, status, reason))
        row = {"case": c.name, "op": op, "status": status, "reason": _shorten(reason, 300), "seconds": round(secs, 3),
               "frozen_status": frozen[0]}
        if ort_status is not None:
            row["ort"] = ort_status[0]
            row["ort_reason"] = _shorten(ort_status[1], 200)
        rows_cases.append(row)

    op_rows = []
    for op in sorted(per_op):
        items = per_op[op]
        c = collections.Counter(s for _, s, _ in items)
        fails = [(n, s, r) for n, s, r in items if s != PASS]
        why = ""
        if fails:
            reasons = collections.Counter(_shorten(r, 90) for _, _, r in fails)
            why = reasons.most_common(1)[0][0]
        op_rows.append({"op": op, "cases": len(items), "pass": c[PASS], "wrong": c[WRONG],
                        "unsupported": c[UNSUPPORTED], "error": c[ERROR], "first failure": why})
    full = [r["op"] for r in op_rows if r["pass"] == r["cases"]]
    partial = [r for r in op_rows if 0 < r["pass"] < r["cases"]]
    none = [r for r in op_rows if r["pass"] == 0]

    print()
    print("per op (cases / pass / wrong / unsupported / error, most common failure):")
    for r in op_rows:
        mark = "ok " if r["pass"] == r["cases"] else "-- " if r["pass"] == 0 else "~  "
        print(f"  {mark}{r['op']:<28} {r['cases']:>3} {r['pass']:>3} {r['wrong']:>3} {r['unsupported']:>3} "
              f"{r['error']:>3}  {r['first failure']}")
    if args.failures:
        print("\nfailing cases:")
        for row in rows_cases:
            if row["status"] != PASS:
                print(f"  {row['status']:<11} {row['case']}: {_shorten(row['reason'], 200)}")
    print()
    print(f"ops passing every case ({len(full)}): {', '.join(full)}")
    print(f"ops passing some cases ({len(partial)}): {', '.join(r['op'] for r in partial)}")
    print(f"ops passing no case ({len(none)}): {', '.join(r['op'] for r in none)}")
    reasons = collections.Counter(_shorten(row["reason"], 70) for row in rows_cases if row["status"] != PASS)
    print("\nmost common failure reasons:")
    for text, n in reasons.most_common(12):
        print(f"  {n:>4}  {text}")
    summary = {"cases": total, **{s: counts[s] for s in STATUSES},
               "pass_rate": counts[PASS] / total, "seconds": round(time.perf_counter() - t_start, 1),
               "onnx_version": onnx.__version__}
    frozen_counts = collections.Counter(r[4][0] for r in results.values())
    summary["frozen"] = {s: frozen_counts[s] for s in STATUSES}
    print()
    print(f"tessera, every input at run time (the headline): {counts[PASS]} pass, {counts[WRONG]} wrong result, "
          f"{counts[UNSUPPORTED]} unsupported, {counts[ERROR]} error of {total} cases: pass rate "
          f"{100 * counts[PASS] / total:.1f}%")
    if args.ort:
        ort_counts = collections.Counter(r[3][0] for r in results.values() if r[3] is not None)
        summary["ort_pass"] = ort_counts[PASS]
        summary["ort_pass_rate"] = ort_counts[PASS] / total
        both = sum(1 for r in results.values() if r[0] == PASS and r[3] and r[3][0] == PASS)
        print(f"onnxruntime: {ort_counts[PASS]} pass of {total} cases: pass rate "
              f"{100 * ort_counts[PASS] / total:.1f}% (both pass: {both}); tessera/onnxruntime pass ratio "
              f"{counts[PASS] / max(1, ort_counts[PASS]):.2f}")
    print(f"tessera with inputs frozen where the frontend asks (const_inputs, not like for like with "
          f"onnxruntime): {frozen_counts[PASS]} pass, {frozen_counts[WRONG]} wrong result of {total} cases: "
          f"pass rate {100 * frozen_counts[PASS] / total:.1f}%")
    print(f"({summary['seconds']:.0f} s)")
    if args.json:
        report("onnx_conformance", [], args.json, extra={"summary": summary, "ops": op_rows, "cases": rows_cases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
