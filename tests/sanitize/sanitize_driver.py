"""Runs a list of sanitizer cases in this process (started by the tests with the ASan runtime preloaded).

    python sanitize_driver.py ops <group> [--start N]     # OpCases of sanitize_cases.op_cases()[group]
    python sanitize_driver.py graphs <onnx|models> [--start N]

Every kernel is built twice, with target SANITIZE_TARGET and with plain "c" (the reference). The op
cases of a group go into a few translation units per target (case i's kernel is the C function
k<i>_<op>), compiled at once on the available CPUs. Before a case runs the driver prints
`CASE <i> <label>` (ops: with its C function), after it `PASS <i>` or `FAIL <i> <why>`; a sanitizer
finding aborts the process, so the last CASE line printed names the kernel and stderr holds the
sanitizer's report (its stack names the C function). `DONE` ends a complete run.
"""
from __future__ import annotations

import os
import re
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


def function_name(i, op):
    """The C function of case i in its group's translation unit (distinct per case: k<i>_<op>)."""
    return f"k{i}_{re.sub(r'[^0-9A-Za-z_]', '_', op)}"


class _Entry:
    """One case's kernel for one target: the lowered PrimFunc (renamed function_name(i, op)), its
    output shapes, and once built the callable (or the exception that stopped it)."""

    __slots__ = ("i", "name", "lowered", "weight", "out_shapes", "fn", "error")

    def __init__(self, i, name):
        self.i, self.name = i, name
        self.lowered = self.weight = self.out_shapes = self.fn = self.error = None


def _prepare(i, sig, target):
    """The kernel the graph executor would build for sig (its compute and default schedule, lowered
    for target), renamed for the group's unit. A default schedule that fails is an error here, not a
    silent fall-back to the unscheduled kernel: the sanitized kernel must be the one the executor runs."""
    from tessera.build_module import lower
    from tessera.graph.kernels import prepare_kernel, get_kernels
    from tessera.ir import PrimFunc

    op, attrs, in_types, out_types, node = sig
    e = _Entry(i, function_name(i, op))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            p = prepare_kernel(op, attrs, tuple(in_types), tuple(out_types), target, node)
            shapes = [tuple(d) for d in p.out_exprs]
            if not all(isinstance(d, int) for s in shapes for d in s):
                raise AssertionError(f"output shapes {shapes} are not static")
            e.out_shapes = shapes
            f = lower(p.prim, target)
            if isinstance(f, PrimFunc):
                e.lowered = f.replace(name=e.name)
                text = getattr(p.source, "text", p.source)        # its own unit's source: a size to balance
                e.weight = len(text) if isinstance(text, str) else 1
            else:                     # several functions: built on its own, as the executor would
                e.fn = get_kernels([sig], target)[0].fn
    except Exception as ex:          # noqa: BLE001 - reported per case
        e.error = ex
    return e


def _chunks(entries, n):
    """entries (in case order) cut into at most n contiguous runs of about equal source size."""
    total = sum(e.weight for e in entries)
    out, cur, acc = [], [], 0
    for e in entries:
        cur.append(e)
        acc += e.weight
        if acc >= total * (len(out) + 1) / n and len(out) < n - 1:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _compile_unit(entries, target, hint):
    """Generate one translation unit for entries and compile it: {case index: library path or the
    error}. A unit that fails to generate or compile is built again a function at a time, so the
    error lands on the case it belongs to."""
    from tessera.codegen.c import generate_module
    from tessera.errors import TesseraError
    from tessera.runtime.c_compiler import compile_source

    try:
        path = compile_source(generate_module([e.lowered for e in entries], target), target, name_hint=hint)
        return {e.i: path for e in entries}
    except TesseraError as ex:
        if len(entries) == 1:
            return {entries[0].i: ex}
    out = {}
    for e in entries:
        out.update(_compile_unit([e], target, e.name))
    return out


def _plan_group(group, sigs, targets):
    """({target: {case index: _Entry}}, units): every case's kernel prepared for every target, and
    per target its lowered functions cut into a few translation units (one C compiler run each, not
    one per kernel): a unit is (entries, target, name, estimated cost)."""
    from tessera.graph.kernels import build_jobs
    from tessera.target import Target

    jobs = build_jobs()
    built, units = {}, []
    for t in targets:
        target = Target(t)
        built[t] = {i: _prepare(i, sig, target) for i, sig in sigs.items()}
        todo = [e for e in built[t].values() if e.lowered is not None]
        sanitized = t == SANITIZE_TARGET          # costs about three times as much to compile
        n = jobs + 1 if sanitized else max(1, jobs - 1)
        for k, chunk in enumerate(_chunks(todo, min(n, len(todo))) if todo else []):
            cost = sum(e.weight for e in chunk) * (3 if sanitized else 1)
            units.append((chunk, target, f"sanitize {group} {t!r} unit {k}", cost))
    return built, units


def _compile_units(units) -> list:
    """_compile_unit on every unit, build_jobs() at once, the costliest first."""
    from concurrent.futures import ThreadPoolExecutor

    from tessera.graph.kernels import build_jobs

    order = sorted(range(len(units)), key=lambda k: -units[k][3])
    with ThreadPoolExecutor(max_workers=max(1, min(build_jobs(), len(units)))) as pool:
        done = dict(zip(order, pool.map(lambda k: _compile_unit(*units[k][:3]), order)))
    return [done[k] for k in range(len(units))]


def _build_group(group, sigs, targets):
    """{target: {case index: _Entry}} with every case's kernel for every target built and loaded."""
    from tessera.runtime.module import Module

    built, units = _plan_group(group, sigs, targets)
    results = _compile_units(units)
    modules = {}
    for (chunk, _, _, _), res in zip(units, results):
        for e in chunk:
            r = res[e.i]
            if isinstance(r, Exception):
                e.error = r
                continue
            try:
                if r not in modules:
                    modules[r] = Module(r)
                e.fn = modules[r].get_function(e.name)
            except Exception as ex:  # noqa: BLE001
                e.error = ex
    return built


def _op_signatures(cases):
    """{case index: signature} and {case index: why its type inference failed}."""
    sigs, failed = {}, {}
    for i, case in enumerate(cases):
        try:
            sigs[i] = _signature(case)
        except Exception as e:       # noqa: BLE001
            failed[i] = f"type inference: {type(e).__name__}: {e}"
    return sigs, failed


def prebuild_ops(groups):
    """Compile the translation units of these groups into the kernel cache, all groups' units in one
    pool (the CPUs stay busy to the end), in a process WITHOUT the ASan runtime (the test process,
    before it starts the drivers): under ASan's allocator Python's string building in the compiler
    driver turns quadratic (embedding a unit's source as a C literal took minutes). A driver then
    generates the same units and finds them in the cache. Errors are left for the drivers to
    report, per case."""
    units = []
    for group in groups:
        units += _plan_group(group, _op_signatures(op_cases()[group])[0], (SANITIZE_TARGET, REF_TARGET))[1]
    _compile_units(units)


def _call(entry, inputs, out_types):
    from tessera.ir.dtype import numpy_dtype

    outs = [np.empty(shape, numpy_dtype(t.dtype)) for shape, t in zip(entry.out_shapes, out_types)]
    entry.fn(*inputs, *outs)
    return outs


def run_ops(group, start):
    """Every case of the group is prepared and built (also those before start, so that a restart
    after a crash builds the same translation units and finds them in the kernel cache); the cases
    from start on are run."""
    cases = op_cases()[group]
    sigs, failed = _op_signatures(cases)
    built = _build_group(group, sigs, (SANITIZE_TARGET, REF_TARGET))
    for i, case in enumerate(cases):
        if i < start:
            continue
        if i in failed:
            say(f"CASE {i} {case.label}")
            say(f"FAIL {i} {failed[i]}".replace("\n", " | "))
            continue
        ks, kr = built[SANITIZE_TARGET][i], built[REF_TARGET][i]
        say(f"CASE {i} {case.label} [C function {ks.name}]")
        errors = [f"building {k.name} for {t!r}: {type(k.error).__name__}: {k.error}"
                  for k, t in ((ks, SANITIZE_TARGET), (kr, REF_TARGET)) if k.error is not None]
        if errors:
            say(f"FAIL {i} {'; '.join(errors)[:3000]}".replace("\n", " | "))
            continue
        try:
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
    from tessera.runtime.static_runner import StaticRunner

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
                san = tessera.compile(graph, params, target=SANITIZE_TARGET, opt_level=case.opt_level,
                                      executor="graph")
            want = ref.run(feeds)
            arrays = _feed(san, feeds)
            runs = []
            # the general path: every tensor in its own allocation, so ASan sees each tensor's bounds
            say(f"CASE {i} {case.label}: graph executor, a buffer per tensor")
            runs.append(("graph executor, a buffer per tensor", san.execute(arrays)))
            if case.opt_level:          # models: also the memory-planned arena and the AOT entry
                say(f"CASE {i} {case.label}: graph executor, static memory plan")
                runner = StaticRunner.for_executor(san)
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
    # The ASan runtime is loaded in this process already; the C compilers it starts need not carry it
    # (preloaded into gcc, cc1, as and ld it doubles their CPU time).
    os.environ.pop("LD_PRELOAD", None)
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
