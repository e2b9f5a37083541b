"""Test helper for the op library: run registered ops on numpy arrays through infer, compute,
create_prim_func, the op's default schedule (when it has one) and tessera.build.

    (y,) = run_op("add", a, b)                     # one op
    outs = run_ops([a], [("exp", {}, [0]), ("log", {}, [0])])   # several ops in one kernel

Every run checks that the computed outputs have exactly the types `infer` promised.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

import tessera
from tessera import te
from tessera.graph.ir import TensorType
from tessera.ops.registry import get_op

BF16 = np.dtype(ml_dtypes.bfloat16)


def npdt(dtype):
    return BF16 if str(dtype) == "bfloat16" else np.dtype(str(dtype))


def _placeholders(arrays, sym=None):
    """te placeholders for the arrays; sym: {input index: shape with names for symbolic dims}."""
    vars_, phs, types = {}, [], []
    for k, a in enumerate(arrays):
        shape = (sym or {}).get(k, a.shape)
        dims = []
        for d in shape:
            if isinstance(d, str):
                dims.append(vars_.setdefault(d, te.var(d)))
            else:
                dims.append(int(d))
        types.append(TensorType(shape, TensorType.of(a).dtype))
        phs.append(te.placeholder(dims, TensorType.of(a).dtype, f"x{k}"))
    return phs, types, vars_


def run_ops(arrays, specs, sym=None, schedule=True, target="c"):
    """specs: [(op name, attrs, input indices)]; returns, per spec, the list of its outputs.

    schedule: apply the ops' default schedule (when they all share one, it runs once over the
    whole function, whose blocks it schedules one by one) for `target`, and build for it."""
    phs, types, _ = _placeholders(arrays, sym)
    all_outs, per_spec, want_types = [], [], []
    for name, attrs, idx in specs:
        op = get_op(name)
        attrs = op.normalize_attrs(attrs)
        out_types = op.infer_types([types[i] for i in idx], attrs)
        outs = op.compute([phs[i] for i in idx], attrs)
        assert len(outs) == len(out_types), (name, outs, out_types)
        per_spec.append(len(outs))
        all_outs.extend(outs)
        want_types.extend(out_types)
    func = te.create_prim_func(list(phs) + list(all_outs))
    fns = {get_op(name).schedule for name, _, _ in specs}
    if schedule and len(fns) == 1 and None not in fns:
        from tessera.ops.registry import ScheduleContext

        sch = tessera.tir.Schedule(func)
        op = get_op(specs[0][0])
        ctx = ScheduleContext(block=all_outs[-1].name, attrs=op.normalize_attrs(specs[0][1]),
                              target=tessera.Target(target), input_types=tuple(types),
                              output_types=tuple(want_types))
        op.schedule(sch, ctx)
        func = sch.mod
    lib = tessera.build(func, target=target)
    # concrete output shapes: symbolic dims take their values from the inputs
    binding = {}
    for k, a in enumerate(arrays):
        for d, n in zip(types[k].shape, a.shape):
            if isinstance(d, str):
                binding[d] = n
    results = []
    for t in want_types:
        shape = tuple(binding[d] if isinstance(d, str) else d for d in t.shape)
        results.append(np.zeros(shape, npdt(t.dtype)))
    lib(*arrays, *results)
    for o, t in zip(all_outs, want_types):
        assert str(o.dtype) == str(t.dtype), (o, t)
    out, k = [], 0
    for n in per_spec:
        out.append(results[k:k + n])
        k += n
    return out


def run_op(name, *arrays, sym=None, schedule=True, **attrs):
    """Run one op; returns the list of its outputs."""
    return run_ops(list(arrays), [(name, attrs, list(range(len(arrays))))], sym=sym, schedule=schedule)[0]


def infer(name, *types, **attrs):
    """Output types of op `name` for input TensorTypes (or (shape, dtype) pairs)."""
    op = get_op(name)
    types = [t if isinstance(t, TensorType) else TensorType(*t) for t in types]
    return op.infer_types(types, op.normalize_attrs(attrs))
