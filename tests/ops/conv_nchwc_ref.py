"""The blocked convolution (nn.contrib_conv2d_NCHWc) + bias + ReLU built alone for op tests: NCHW arrays
packed into NCHW{b}c / OIHW{b}i{b}o, scheduled by the op's default schedule (or given knob choices),
and the result unpacked to NCHW beside the kernel's C source."""
from __future__ import annotations

import numpy as np

import tessera
from tessera import te
from tessera.graph.ir import TensorType
from tessera.ops.nn.conv_nchwc import CONV
from tessera.ops.registry import ScheduleContext, get_op


def pack_data(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def pack_weight(w, ib, ob):
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // ob, ob, i // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def unpack(y):
    n, cc, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cc * b, h, w)


def conv_epilogue(x, w, extras, epilogue, block, target, strides=(1, 1), padding=(0, 0, 0, 0), knobs=None,
                  name="T_out"):
    """(NCHW result, generated C) of the blocked conv followed by `epilogue(conv value, *extras at the
    point)` under the default schedule, or the schedule's choices from `knobs`. An extra is a per-channel
    vector (O,) (a bias) or an NCHW tensor the output's shape (a residual)."""
    op = get_op(CONV)
    attrs = op.normalize_attrs({"strides": strides, "padding": padding, "data_layout": f"NCHW{block}c",
                                "kernel_layout": f"OIHW{block}i{block}o", "out_layout": f"NCHW{block}c"})
    arrays = [pack_data(x, block), pack_weight(w, block, block)]
    arrays += [np.ascontiguousarray(e.reshape(1, -1, 1, 1, block)) if e.ndim == 1 else pack_data(e, block)
               for e in extras]
    types = [TensorType.of(a) for a in arrays[:2]]
    (ot,) = op.infer_types(types, attrs)
    phs = [te.placeholder(a.shape, name=n) for n, a in zip(("data", "weight", "bias", "res"), arrays)]
    (out,) = op.compute(phs[:2], attrs)
    final = te.compute(out.shape, lambda *i: epilogue(out[i], *[p[0, i[1], 0, 0, i[4]] if e.ndim == 1 else p[i]
                                                                 for p, e in zip(phs[2:], extras)]), name=name)
    sch = tessera.tir.Schedule(te.create_prim_func(phs + [final]))
    op.schedule(sch, ScheduleContext(block=out.name, attrs=attrs, target=target, input_types=tuple(types),
                                     output_types=(ot,), epilogue=(final.name,), knobs=knobs))
    lib = tessera.build(sch, target=target)
    y = np.zeros(ot.shape, "float32")
    lib(*arrays, y)
    return unpack(y), lib.get_source()


def conv_bias_relu(x, w, b, block, target, strides=(1, 1), padding=(0, 0, 0, 0), knobs=None):
    """(NCHW result, generated C) of the blocked conv + bias + ReLU under the default schedule, or the
    schedule's choices from `knobs` (an ops.registry.Knobs)."""
    return conv_epilogue(x, w, [b], lambda y, bias: te.max(y + bias, te.const(0.0, "float32")), block, target,
                         strides, padding, knobs, name="T_relu")
