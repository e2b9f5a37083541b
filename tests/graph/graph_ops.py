"""Private test operators ("test.*") for the graph-level tests, registered once per process.

They keep the executor tests independent of the operator library being written beside them.
"""
from tessera import te
from tessera.errors import ShapeError
from tessera.graph import TensorType
from tessera.ops.registry import OpPattern, list_ops, register_op


def _register():
    if "test.add" in list_ops():
        return

    add = register_op("test.add", inputs=("a", "b"), pattern=OpPattern.ELEMWISE, attrs={"alpha": 1.0})

    @add.def_infer
    def _(types, attrs):
        a, b = types
        if a != b:
            raise ShapeError(f"test.add: operands differ: {a} and {b}")
        return [a]

    @add.def_compute
    def _(ts, attrs):
        a, b = ts
        return [te.compute(a.shape, lambda *i: a[i] + b[i] * te.const(attrs["alpha"], a.dtype), name="T_add")]

    neg = register_op("test.neg", inputs=("x",), pattern=OpPattern.ELEMWISE)
    neg.def_infer(lambda types, attrs: [types[0]])
    neg.def_compute(lambda ts, attrs: [te.compute(ts[0].shape, lambda *i: -ts[0][i], name="T_neg")])

    ident = register_op("test.identity", inputs=("x",), pattern=OpPattern.ELEMWISE)
    ident.def_infer(lambda types, attrs: [types[0]])
    ident.def_compute(lambda ts, attrs: [ts[0]])      # the output is the input: the executor copies

    # two outputs: the rows of a [N, 2k] tensor split in two halves along axis 1
    split = register_op("test.split2", inputs=("x",), pattern=OpPattern.INJECTIVE, num_outputs=2)

    @split.def_infer
    def _(types, attrs):
        (t,) = types
        h = t.shape[1] // 2
        return [t.with_shape((t.shape[0], h)), t.with_shape((t.shape[0], h))]

    @split.def_compute
    def _(ts, attrs):
        (x,) = ts
        h = int(x.shape[1].value) // 2
        lo = te.compute((x.shape[0], h), lambda i, j: x[i, j], name="T_lo")
        hi = te.compute((x.shape[0], h), lambda i, j: x[i, j + h], name="T_hi")
        return [lo, hi]

    # a reduction over the last axis
    rsum = register_op("test.sum_rows", inputs=("x",), pattern=OpPattern.COMM_REDUCE)
    rsum.def_infer(lambda types, attrs: [types[0].with_shape(types[0].shape[:1])])

    @rsum.def_compute
    def _(ts, attrs):
        (x,) = ts
        k = te.reduce_axis((0, x.shape[1]), name="k")
        return [te.compute((x.shape[0],), lambda i: te.sum(x[i, k], axis=k), name="T_sum")]

    # concatenation along axis 0: a symbolic result extent (N + M) the graph type names "NM"
    cat = register_op("test.cat0", inputs=("a", "b"), pattern=OpPattern.INJECTIVE)

    @cat.def_infer
    def _(types, attrs):
        a, b = types
        n = a.shape[0] + b.shape[0] if isinstance(a.shape[0], int) and isinstance(b.shape[0], int) else "NM"
        return [a.with_shape((n,) + a.shape[1:])]

    @cat.def_compute
    def _(ts, attrs):
        a, b = ts
        n0 = a.shape[0]
        return [te.compute((a.shape[0] + b.shape[0], a.shape[1]),
                           lambda i, j: te.if_then_else(i < n0, a[i, j], b[te.max(i - n0, 0), j]), name="T_cat")]

    cast = register_op("test.to_int32", inputs=("x",), pattern=OpPattern.ELEMWISE)
    cast.def_infer(lambda types, attrs: [types[0].with_dtype("int32")])
    cast.def_compute(lambda ts, attrs: [te.compute(ts[0].shape, lambda *i: ts[0][i].astype("int32"), name="T_cast")])

    nocompute = register_op("test.no_compute", inputs=("x",), pattern=OpPattern.OPAQUE)
    nocompute.def_infer(lambda types, attrs: [types[0]])


_register()
