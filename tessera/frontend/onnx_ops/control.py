"""Control flow, resolved while converting: If with a constant condition becomes its branch; Loop
and Scan with a known trip count are unrolled (each iteration converts the body inline).

A condition or trip count that is only known at run time is refused (with `needs_constant` naming
the runtime input it comes from, so the caller can freeze it), and so is unrolling beyond the
conversion's limits (tessera.limits: iterations of one loop, nodes converted from loop bodies in all,
nested loops counted). Sequences and optionals (host-side
values while converting, onnx_ops/sequence.py) flow through If outputs and Loop-carried values as
tensors do; Scan's state and scan outputs, and Loop's scan outputs, are tensors.
"""
from __future__ import annotations

import numpy as np

from . import converter
from .sequence import kind_of


def _graph_attr(ctx, name):
    g = ctx.attr(name)
    if g is None:
        ctx.unsupported(f"the {name!r} subgraph attribute is missing")
    return g


def _truth(ctx, arr, what) -> bool:
    a = np.asarray(arr)
    if a.size != 1:
        ctx.unsupported(f"{what} must hold one value, it has shape {a.shape}")
    return bool(a.reshape(-1)[0])


# ---------------------------------------------------------------------------------------------
# If
# ---------------------------------------------------------------------------------------------
@converter("If")
def _if(ctx):
    cond = _truth(ctx, ctx.const_input(0), "the condition")
    branch = _graph_attr(ctx, "then_branch" if cond else "else_branch")
    outs = ctx.subgraph(branch, [])
    if len(outs) != ctx.num_outputs:
        ctx.unsupported(f"the {'then' if cond else 'else'} branch has {len(outs)} outputs, the node {ctx.num_outputs}")
    return outs


# ---------------------------------------------------------------------------------------------
# Loop
# ---------------------------------------------------------------------------------------------
def _stack(ctx, parts, axis, what):
    """Stack same-shaped Values along a new axis (a Loop/Scan output)."""
    if not parts:
        raise AssertionError("callers handle zero iterations")
    rank = parts[0].type.ndim + 1
    ax = axis + rank if axis < 0 else axis
    if not 0 <= ax < rank:
        ctx.unsupported(f"{what}: axis {axis} is out of range for rank {rank}")
    for p in parts[1:]:
        if p.type != parts[0].type:
            ctx.unsupported(f"{what}: iterations give {parts[0].type} and {p.type}; stacking needs one shape")
    expanded = [ctx.op("expand_dims", p, axis=ax) for p in parts]
    return expanded[0] if len(expanded) == 1 else ctx.op("concatenate", *expanded, axis=ax)


def _tensor(ctx, v, what):
    """v when it is a tensor Value (a scan output, a condition), else refused."""
    if kind_of(v) != "a tensor":
        ctx.unsupported(f"{what} is {kind_of(v)}, not a tensor")
    return v


def _empty_stack(ctx, t, axis, what):
    shape = list(t.shape)
    if not all(isinstance(d, int) for d in shape):
        ctx.unsupported(f"{what}: zero iterations of a symbolically shaped output")
    rank = len(shape) + 1
    ax = axis + rank if axis < 0 else axis
    shape.insert(ax, 0)
    return ctx.const(np.zeros(shape, t.dtype.numpy()), "empty")


@converter("Loop")
def _loop(ctx):
    trip = ctx.const_input(0, optional=True)
    cond = ctx.const_input(1, optional=True)
    if trip is None and cond is None:
        ctx.unsupported("a Loop without a trip count or a condition never ends")
    body = _graph_attr(ctx, "body")
    n_carried = ctx.num_inputs - 2
    carried = [ctx.any_input(2 + k, optional=False) for k in range(n_carried)]
    n_body_out = len(body.output)
    n_scan = n_body_out - 1 - n_carried
    if n_scan < 0:
        ctx.unsupported(f"the body has {n_body_out} outputs for {n_carried} loop-carried values")
    limit = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    if limit is None and cond is None:
        ctx.unsupported("a Loop without a trip count or a condition never ends")
    most = ctx.limits.max_loop_iterations
    if limit is not None and limit > most:
        ctx.unsupported(f"a trip count of {limit} is too many iterations to unroll (at most {most}: "
                        f"{ctx.limits.where('max_loop_iterations')})")
    going = True if cond is None else _truth(ctx, cond, "the initial condition")
    scans: list = [[] for _ in range(n_scan)]
    i = 0
    while going and (limit is None or i < limit):
        if i >= most:
            ctx.unsupported(f"the loop runs more than {most} iterations; too many to unroll "
                            f"({ctx.limits.where('max_loop_iterations')})")
        it = ctx.const(np.array(i, np.int64), f"iter{i}")
        c = ctx.const(np.array(True), f"cond{i}")
        outs = ctx.unroll(body, [it, c, *carried], i, limit)
        cond_out = _tensor(ctx, outs[0], "the loop condition")
        going = _truth(ctx, ctx.value_const(cond_out, f"the loop condition after iteration {i}"),
                       "the loop condition")
        carried = list(outs[1:1 + n_carried])
        for k in range(n_scan):
            scans[k].append(_tensor(ctx, outs[1 + n_carried + k], f"scan output {k}"))
        i += 1
    results = list(carried)
    for k in range(n_scan):
        if scans[k]:
            results.append(_stack(ctx, scans[k], 0, f"scan output {k}"))
        else:
            # no iteration ran: the types come from converting the body once (the nodes stay dead)
            outs = ctx.subgraph(body, [ctx.const(np.array(0, np.int64)), ctx.const(np.array(True)), *carried])
            out = _tensor(ctx, outs[1 + n_carried + k], f"scan output {k}")
            results.append(_empty_stack(ctx, out.type, 0, f"scan output {k}"))
    return results


# ---------------------------------------------------------------------------------------------
# Scan (opset 9 and later: no batch axis)
# ---------------------------------------------------------------------------------------------
@converter("Scan", since=8)
def _scan8(ctx):
    ctx.unsupported("Scan-8 (with a batch axis and sequence_lens) is not supported; opset 9's Scan is")


@converter("Scan", since=9)
def _scan(ctx):
    body = _graph_attr(ctx, "body")
    m = ctx.attr("num_scan_inputs")
    if m is None:
        ctx.unsupported("num_scan_inputs is required")
    n = ctx.num_inputs - m
    if n < 0:
        ctx.unsupported(f"num_scan_inputs={m} but the node has {ctx.num_inputs} inputs")
    state = [ctx.input(k) for k in range(n)]
    xs = [ctx.input(n + k) for k in range(m)]
    in_axes = list(ctx.attr("scan_input_axes", [0] * m))
    in_dirs = list(ctx.attr("scan_input_directions", [0] * m))
    k_out = len(body.output) - n
    out_axes = list(ctx.attr("scan_output_axes", [0] * k_out))
    out_dirs = list(ctx.attr("scan_output_directions", [0] * k_out))
    if len(in_axes) != m or len(in_dirs) != m or len(out_axes) != k_out or len(out_dirs) != k_out:
        ctx.unsupported("scan axes/directions do not match the number of scan inputs/outputs")
    length = None
    for j, x in enumerate(xs):
        ax = in_axes[j] + x.type.ndim if in_axes[j] < 0 else in_axes[j]
        if not 0 <= ax < x.type.ndim:
            ctx.unsupported(f"scan input {j}: axis {in_axes[j]} is out of range for {x.type}")
        in_axes[j] = ax
        d = x.type.shape[ax]
        if not isinstance(d, int):
            ctx.unsupported(f"scan input {j}: the scanned extent {d!r} is symbolic; unrolling needs it known")
        if length is not None and d != length:
            ctx.unsupported(f"scan inputs have different lengths ({length} and {d})")
        length = d
    if length is None:
        ctx.unsupported("a Scan without scan inputs")
    if length > ctx.limits.max_loop_iterations:
        ctx.unsupported(f"a sequence of {length} steps is too long to unroll (at most "
                        f"{ctx.limits.max_loop_iterations}: {ctx.limits.where('max_loop_iterations')})")
    outs_per_step: list = [[] for _ in range(k_out)]
    for t in range(length):
        slices = []
        for j, x in enumerate(xs):
            pos = length - 1 - t if in_dirs[j] else t
            slices.append(ctx.op("take", x, np.array(pos, np.int64), axis=in_axes[j]))
        outs = ctx.unroll(body, [*state, *slices], t, length)
        state = [_tensor(ctx, v, f"scan state {k}") for k, v in enumerate(outs[:n])]
        for k in range(k_out):
            outs_per_step[k].append(_tensor(ctx, outs[n + k], f"scan output {k}"))
    results = list(state)
    for k in range(k_out):
        parts = outs_per_step[k][::-1] if out_dirs[k] else outs_per_step[k]
        results.append(_stack(ctx, parts, out_axes[k], f"scan output {k}"))
    return results
