"""Runs a list of sanitizer cases in this process (started by the tests with the ASan runtime preloaded).

    python sanitize_driver.py ops <group> [--start N]     # OpCases of sanitize_cases.op_cases()[group]
    python sanitize_driver.py graphs <onnx|models> [--start N]

Every kernel is built twice, with target SANITIZE_TARGET and with plain "c" (the reference), the
C compiler running on several at once. Before a case runs the driver prints `CASE <i> <label>`, after
it `PASS <i>` or `FAIL <i> <why>`; a sanitizer finding aborts the process, so the last CASE line
printed names the kernel and stderr holds the sanitizer's report. `DONE` ends a complete run.
"""
from __future__ import annotations

import os
import sys
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sanitize_cases import SANITIZE_TARGET, model_cases, onnx_cases, op_cases  # noqa: E402

REF_TARGET = "c"


def say(*parts):
    print(*parts, flush=True)


def compare(got, want, what):
    """Raise AssertionError naming the output when got differs from want (bitwise for non-floats)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{what}: {got.dtype}{list(got.shape)}, the reference {want.dtype}{list(want.shape)}")
    if np.issubdtype(got.dtype, np.floating) or got.dtype.kind == "V" or str(got.dtype) == "bfloat16":
        g, w = got.astype(np.float64), want.astype(np.float64)
        tol = 1e-5 if got.dtype.itemsize >= 4 else 2e-2
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


# ----------------------------------------------------------------------------------------- ops
def _signature(case):
    from tessera.graph.ir import TensorType
    from tessera.ops.registry import get_op

    op = get_op(case.op)
    attrs = op.normalize_attrs(case.attrs)
    in_types = tuple(TensorType.of(a) for a in case.inputs)
    out_types = tuple(op.infer_types(in_types, attrs))
    return (case.op, attrs, in_types, out_types, None)


def _build(requests, target):
    """Kernels for the requests (a kernel whose default schedule fails is an error here, not a silent
    fall-back to the unscheduled kernel: the sanitized kernel must be the one the executor runs)."""
    from tessera.graph.executor import get_kernels

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return get_kernels(requests, target)
        except Exception:
            if len(requests) == 1:
                raise
    out = []                                  # one failed: build one by one to say which
    for r in requests:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                out.append(get_kernels([r], target)[0])
        except Exception as e:       # noqa: BLE001 - reported per case
            out.append(e)
    return out


def _call(kernel, inputs, out_types):
    from tessera.graph.executor import _np_dtype

    outs = [np.empty(shape, _np_dtype(t.dtype)) for shape, t in zip(kernel.static_out_shapes, out_types)]
    kernel.fn(*inputs, *outs)
    return outs


def run_ops(group, start):
    cases = op_cases()[group]
    sigs = {}
    for i, case in enumerate(cases):
        if i < start:
            continue
        try:
            sigs[i] = _signature(case)
        except Exception as e:       # noqa: BLE001
            say(f"CASE {i} {case.label}")
            say(f"FAIL {i} type inference: {type(e).__name__}: {e}".replace("\n", " | "))
    idx = sorted(sigs)
    san = _build([sigs[i] for i in idx], SANITIZE_TARGET)
    ref = _build([sigs[i] for i in idx], REF_TARGET)
    for i, ks, kr in zip(idx, san, ref):
        case = cases[i]
        say(f"CASE {i} {case.label}")
        try:
            for k in (ks, kr):
                if isinstance(k, Exception):
                    raise k
            out_types = sigs[i][3]
            got = _call(ks, case.inputs, out_types)
            want = _call(kr, case.inputs, out_types)
            for j, (g, w) in enumerate(zip(got, want)):
                compare(g, w, f"output {j} against the unsanitized kernel")
            if case.ref is not None:
                with np.errstate(over="ignore"):
                    exp = case.ref(*case.inputs)
                for j, (g, w) in enumerate(zip(got, exp)):
                    compare(g, np.asarray(w).astype(g.dtype), f"output {j} against numpy")
        except Exception as e:       # noqa: BLE001
            msg = f"{type(e).__name__}: {e}".replace("\n", " | ")
            say(f"FAIL {i} {msg[:3000]}")
            continue
        say(f"PASS {i}")


# -------------------------------------------------------------------------------------- graphs
def _feed(exe, feeds):
    return [feeds[n] for n in exe.input_names]


def run_graphs(which, start):
    import tessera
    from tessera.graph.executor import _StaticRunner

    cases = onnx_cases() if which == "onnx" else model_cases()
    for i, case in enumerate(cases):
        if i < start:
            continue
        say(f"CASE {i} {case.label} (build)")
        try:
            graph, params, feeds = case.build()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                ref = tessera.compile(graph, params, target=REF_TARGET, opt_level=case.opt_level)
                san = tessera.compile(graph, params, target=SANITIZE_TARGET, opt_level=case.opt_level)
            want = ref.run(feeds)
            arrays = _feed(san, feeds)
            runs = []
            # the general path: every tensor in its own allocation, so ASan sees each tensor's bounds
            say(f"CASE {i} {case.label}: graph executor, a buffer per tensor")
            runs.append(("graph executor, a buffer per tensor", san._execute(arrays)))
            if case.opt_level:          # models: also the memory-planned arena and the AOT entry
                say(f"CASE {i} {case.label}: graph executor, static memory plan")
                runner = _StaticRunner.for_executor(san)
                if not runner:
                    raise AssertionError("the graph executor made no static plan for a static graph")
                runs.append(("graph executor, static memory plan", runner.run(arrays)))
                say(f"CASE {i} {case.label}: AOT build")
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    aot = tessera.compile(graph, params, target=SANITIZE_TARGET, opt_level=case.opt_level,
                                          executor="aot")
                say(f"CASE {i} {case.label}: AOT entry")
                runs.append(("AOT entry", aot.run(feeds)))
                runs.append(("AOT entry, second run", aot.run(feeds)))
            for what, got in runs:
                if len(got) != len(want):
                    raise AssertionError(f"{what}: {len(got)} outputs, the reference {len(want)}")
                for j, (g, w) in enumerate(zip(got, want)):
                    compare(np.asarray(g), np.asarray(w), f"{what}: output {j} against the unsanitized build")
        except Exception as e:       # noqa: BLE001
            msg = "".join(traceback.format_exception_only(type(e), e)).strip().replace("\n", " | ")
            say(f"FAIL {i} {msg[:3000]}")
            continue
        ops = sorted({n.op for n in san.graph.nodes})
        say(f"OPS {i} {' '.join(ops)}")
        say(f"PASS {i}")


# ------------------------------------------------------------------------------------ selfcheck
def run_selfcheck(start):
    """Kernels with a known fault, each followed by a sound one: the harness must name the faulty ones."""
    import tessera
    from tessera import te

    def shifted(read_past_end):
        A = te.placeholder((8,), "float32", "A")
        off = 1 if read_past_end else 0
        B = te.compute((8,), lambda i: A[i + off] * 2.0, name="B")
        return tessera.build(te.create_prim_func([A, B]), target=SANITIZE_TARGET)

    cases = [("out-of-bounds read", lambda: shifted(True)), ("in-bounds read", lambda: shifted(False))]
    for i, (label, make) in enumerate(cases):
        if i < start:
            continue
        lib = make()
        say(f"CASE {i} {label}")
        a, b = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
        lib(a, b)
        say(f"PASS {i}")


def main(argv):
    kind, what = argv[0], argv[1]
    start = int(argv[argv.index("--start") + 1]) if "--start" in argv else 0
    if kind == "ops":
        run_ops(what, start)
    elif kind == "graphs":
        run_graphs(what, start)
    elif kind == "selfcheck":
        run_selfcheck(start)
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    say("DONE")


if __name__ == "__main__":
    main(sys.argv[1:])
