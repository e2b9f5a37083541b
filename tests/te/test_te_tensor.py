"""The tensor expression language itself: tensors, compute, reducers, intrinsics, and their errors."""
import numpy as np
import pytest

from tessera import ir, te
from tessera.errors import DTypeError, ShapeError, TesseraError


def test_placeholder_buffer_shape_dtype():
    n = te.var("n")
    A = te.placeholder((n, 4), name="A", dtype="float16")
    assert A.name == "A" and A.dtype == "float16" and A.ndim == 2
    assert A.shape[0] is n and A.shape[1].value == 4
    assert A.buffer is A.buffer and A.buffer.name == "A" and A.buffer.shape == A.shape
    assert A.buffer.dtype == "float16"
    assert isinstance(A.op, te.PlaceholderOp) and A.op.output(0) is A and A.value_index == 0
    B = te.placeholder(7, name="B")
    assert B.ndim == 1 and B.dtype == "float32"


def test_indexing_builds_bufferload_on_the_tensor_buffer():
    A = te.placeholder((3, 4), name="A")
    i, j = te.var("i"), te.var("j")
    load = A[i, j + 1]
    assert isinstance(load, ir.BufferLoad) and load.buffer is A.buffer
    assert load.indices[0] is i and isinstance(load.indices[1], ir.Add)
    assert A[1, np.int64(2)].indices[1].value == 2
    k = te.reduce_axis((0, 4), name="k")
    assert A[i, k].indices[1] is k.var  # an IterVar indexes as its variable
    assert A(i, j).buffer is A.buffer
    S = te.placeholder((), name="S")
    assert S[()].indices == ()


@pytest.mark.parametrize("bad", [lambda A, i: A[i], lambda A, i: A[i, i, i]])
def test_indexing_wrong_arity_names_the_tensor(bad):
    A = te.placeholder((3, 4), name="Amat")
    with pytest.raises(ShapeError, match="Amat"):
        bad(A, te.var("i"))


def test_indexing_refuses_slices_floats_and_iteration():
    A = te.placeholder((3,), name="A")
    with pytest.raises(TesseraError, match="'A'"):
        A[0:2]
    with pytest.raises(TesseraError):
        A[te.const(1.5)]
    with pytest.raises(TesseraError, match="not iterable"):
        list(A)


def test_bad_shapes_and_dtypes():
    with pytest.raises(ShapeError):
        te.placeholder((-1, 3), name="A")
    with pytest.raises(ShapeError):
        te.placeholder((2.5,), name="A")
    with pytest.raises(DTypeError):
        te.placeholder((2,), dtype="float33", name="A")
    with pytest.raises(DTypeError):
        te.placeholder((2,), dtype="float32x4", name="A")
    with pytest.raises(ShapeError):
        te.compute((te.var("x", "float32"),), lambda i: 1.0)


def test_compute_axis_names_come_from_the_lambda():
    A = te.placeholder((3, 4), name="A")
    C = te.compute((3, 4), lambda row, col: A[row, col] * 2.0, name="C", tag="ewise", attrs={"a": 1})
    op = C.op
    assert isinstance(op, te.ComputeOp) and op.name == "C" and op.tag == "ewise" and op.attrs == {"a": 1}
    assert [iv.var.name for iv in op.axis] == ["row", "col"]
    assert [iv.iter_type for iv in op.axis] == ["data_par", "data_par"]
    assert [iv.dom.extent.value for iv in op.axis] == [3, 4]
    assert op.reduce_axis == () and op.input_tensors == (A,)
    assert C.dtype == "float32" and C.name == "C" and C.buffer.name == "C"
    D = te.compute((2, 3, 4), lambda *idx: idx[0] + idx[2], name="D")
    assert [iv.var.name for iv in D.op.axis] == ["i0", "i1", "i2"] and D.dtype == "int32"


def test_compute_python_scalar_bodies_and_dtypes():
    assert te.compute((3,), lambda i: 0.0).dtype == "float32"
    assert te.compute((3,), lambda i: 7).dtype == "int32"
    assert te.compute((3,), lambda i: i < 2).dtype == "bool"
    A = te.placeholder((3,), name="A", dtype="int8")
    assert te.compute((3,), lambda i: A[i].astype("float64")).dtype == "float64"


def test_compute_wrong_lambda_arity():
    with pytest.raises(ShapeError, match="'C'.*2 dimensions"):
        te.compute((3, 4), lambda i: i, name="C")
    with pytest.raises(ShapeError, match="'C'"):
        te.compute((3,), lambda i, j: i, name="C")


def test_compute_refuses_bad_bodies():
    A = te.placeholder((3,), name="A")
    with pytest.raises(TesseraError, match="tensor 'A' itself"):
        te.compute((3,), lambda i: A)
    with pytest.raises(TesseraError):
        te.compute((3,), lambda i: "text")
    with pytest.raises(TesseraError, match="empty"):
        te.compute((3,), lambda i: ())
    raw = ir.Buffer((3,), "float32", "raw")
    with pytest.raises(TesseraError, match="raw.*not a te tensor"):
        te.compute((3,), lambda i: raw[i])


def test_temporary_tensor_stays_alive_as_input():
    C = te.compute((3,), lambda i: te.placeholder((3,), name="tmp")[i] + 1.0, name="C")
    import gc

    gc.collect()
    assert [t.name for t in C.op.input_tensors] == ["tmp"]


def test_multi_output_compute_names_and_dtypes():
    A = te.placeholder((4,), name="A")
    X, Y = te.compute((4,), lambda i: (A[i] + 1.0, (A[i] > 0.0)), name="pair")
    assert X.name == "pair_v0" and Y.name == "pair_v1"
    assert X.buffer.name == "pair_v0" and Y.dtype == "bool"
    assert X.op is Y.op and X.op.name == "pair" and (X.value_index, Y.value_index) == (0, 1)
    assert X.op.num_outputs == 2 and X.op.output(1) is Y
    single = te.compute((4,), lambda i: [A[i]], name="one")
    assert isinstance(single, te.Tensor) and single.name == "one"


def test_reduce_axis_doms():
    k = te.reduce_axis((2, 10), name="k")
    assert k.iter_type == "reduce" and k.var.name == "k" and k.dom.min.value == 2 and k.dom.extent.value == 8
    n = te.var("n")
    r = te.reduce_axis(ir.Range(0, n), name="r")
    assert r.dom.extent is n
    with pytest.raises(TesseraError, match="'bad'"):
        te.reduce_axis(5, name="bad")
    with pytest.raises(ShapeError):
        te.reduce_axis((0.0, 3), name="f")


def test_sum_builds_reduce_and_records_reduce_axis():
    A = te.placeholder((3, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="S")
    body = S.op.body[0]
    assert isinstance(body, ir.Reduce) and body.axis == (k,) and body.combiner.name == "sum"
    assert S.op.reduce_axis == (k,) and S.op.reduce_groups == ((0,),)
    assert body.combiner.identity_element[0].value == 0.0
    assert isinstance(body.combiner.result[0], ir.Add)
    # one CommReducer per dtype, reused
    S2 = te.compute((3,), lambda i: te.sum(A[i, k], axis=[k]), name="S2")
    assert S2.op.body[0].combiner is body.combiner
    assert te.sum(A[0, k], k).axis == (k,)  # axis may be positional, as in TVM


def test_reducer_elementwise_forms():
    a, b, c = te.var("a", "float32"), te.var("b", "float32"), te.var("c", "float32")
    assert isinstance(te.max(a, b), ir.Max) and isinstance(te.min(a, b), ir.Min)
    s = te.sum(a, b)
    assert isinstance(s, ir.Add) and s.a is a and s.b is b
    m3 = te.max(a, b, c)
    assert isinstance(m3, ir.Max) and isinstance(m3.a, ir.Max)
    assert te.max(a, 0.0).b.value == 0.0
    with pytest.raises(TesseraError, match="axis"):
        te.sum(a)
    with pytest.raises(TesseraError, match="where"):
        te.max(a, b, where=a > b)


def test_reducer_errors():
    A = te.placeholder((3, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    i_axis = ir.IterVar(ir.Range(0, 3), "i", "data_par")
    with pytest.raises(TesseraError, match="reduce_axis"):
        te.sum(A[0, 0], axis=i_axis)
    with pytest.raises(TesseraError, match="twice"):
        te.sum(A[0, k], axis=[k, k])
    with pytest.raises(DTypeError, match="where"):
        te.sum(A[0, k], axis=k, where=A[0, k])
    with pytest.raises(DTypeError, match="bool"):
        te.sum(A[0, k] > 0.0, axis=k)
    with pytest.raises(TesseraError, match="init has"):
        te.sum(A[0, k], axis=k, init=(1.0, 2.0))
    with pytest.raises(DTypeError):
        te.sum(A[0, k], axis=k, init=te.var("x", "int32"))


def test_reduction_must_be_outermost():
    A = te.placeholder((3, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    with pytest.raises(TesseraError, match="te.sum must be the outermost expression"):
        te.compute((3,), lambda i: te.sum(A[i, k], axis=k) * 2.0, name="C")
    with pytest.raises(TesseraError, match="te.max must be the outermost"):
        te.compute((3,), lambda i: te.exp(te.max(A[i, k], axis=k)), name="C")
    with pytest.raises(TesseraError, match="all reductions or none"):
        te.compute((3,), lambda i: (te.sum(A[i, k], axis=k), A[i, 0]), name="C")
    k2 = te.reduce_axis((0, 5), name="k2")
    with pytest.raises(TesseraError, match="same axes"):
        te.compute((3,), lambda i: (te.sum(A[i, k], axis=k), te.sum(A[i, k2], axis=k2)), name="C")


def _argmax():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return ir.Select(keep, x[0], y[0]), ir.Select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


def test_multi_value_reducer():
    argmax = _argmax()
    A = te.placeholder((3, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    r = argmax((k.var, A[0, k]), axis=k)
    assert isinstance(r, tuple) and len(r) == 2 and [x.value_index for x in r] == [0, 1]
    assert r[0].dtype == "int32" and r[1].dtype == "float32"
    comb = r[0].combiner
    assert comb.identity_element[0].value == -1
    assert comb.identity_element[1].value == float(np.finfo(np.float32).min)
    with pytest.raises(TesseraError, match="returns value indices"):
        te.compute((3,), lambda i: argmax((k.var, A[i, k]), axis=k)[1], name="C")
    bad = te.comm_reducer(lambda x, y: x[0], lambda a, b: (0, 0), name="bad")
    with pytest.raises(TesseraError, match="tuple of 2"):
        bad((A[0, k], A[1, k]), axis=k)
    widen = te.comm_reducer(lambda x, y: x + y.astype("float64"), lambda t: 0, name="widen")
    with pytest.raises(DTypeError, match="widen"):
        widen(A[0, k], axis=k)


def test_min_max_value():
    assert te.min_value("float32").value == float(np.finfo(np.float32).min)
    assert te.max_value("float16").value == 65504.0
    assert te.min_value("int8").value == -128 and te.max_value("int8").value == 127
    assert te.min_value("uint16").value == 0 and te.max_value("uint16").value == 65535
    assert te.max_value("int64").dtype == "int64"
    import ml_dtypes

    assert te.max_value("bfloat16").value == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert te.min_value("bool").value == 0 and te.max_value("bool").value == 1
    with pytest.raises(DTypeError):
        te.min_value("float32x4")


FLOAT_UNARY = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10",
               "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "sigmoid": "sigmoid",
               "erf": "erf", "sin": "sin", "cos": "cos", "tan": "tan", "atan": "atan",
               "floor": "floor", "ceil": "ceil", "round": "round", "trunc": "trunc", "abs": "abs"}


@pytest.mark.parametrize("fname", sorted(FLOAT_UNARY))
def test_unary_intrinsics_build_calls(fname):
    x = te.var("x", "float16")
    call = getattr(te, fname)(x)
    assert isinstance(call, ir.Call) and call.op == FLOAT_UNARY[fname] and call.dtype == "float16"
    assert call.args[0] is x


@pytest.mark.parametrize("fname", ["exp", "log", "sqrt", "tanh", "sigmoid", "erf", "atan", "isnan"])
def test_float_math_refuses_ints(fname):
    with pytest.raises(DTypeError, match=fname):
        getattr(te, fname)(te.var("n", "int32"))


def test_integer_rounding_and_abs():
    n = te.var("n", "int32")
    for f in (te.floor, te.ceil, te.round, te.trunc):
        assert f(n) is n
    a = te.abs(n)
    assert isinstance(a, ir.Call) and a.op == "abs" and a.dtype == "int32"
    u = te.var("u", "uint8")
    assert te.abs(u) is u
    with pytest.raises(DTypeError):
        te.abs(n > 0)


def test_binary_and_ternary_intrinsics():
    x, y = te.var("x", "float32"), te.var("y", "float64")
    p = te.power(x, 2)
    assert p.op == "pow" and p.dtype == "float32" and p.args[1].value == 2.0
    assert te.pow(x, y).dtype == "float64"
    assert te.fmod(x, 3.0).op == "fmod"
    f = te.fma(x, x, y)
    assert f.op == "fma" and f.dtype == "float64" and all(a.dtype == "float64" for a in f.args)
    assert te.isnan(x).dtype == "bool" and te.isinf(x).op == "isinf"
    with pytest.raises(DTypeError):
        te.power(te.var("n"), 2)
    n = te.var("n")
    assert isinstance(te.floordiv(n, 2), ir.FloorDiv) and isinstance(te.floormod(n, 2), ir.FloorMod)
    assert isinstance(te.truncdiv(n, 2), ir.Div) and isinstance(te.truncmod(n, 2), ir.Mod)


def test_if_then_else_all_any_const():
    i = te.var("i")
    e = te.if_then_else(i < 3, 1.0, te.var("x", "float32"))
    assert isinstance(e, ir.Call) and e.op == "if_then_else" and e.dtype == "float32"
    assert e.args[1].dtype == "float32"
    assert te.if_then_else(True, i, 0) is i
    with pytest.raises(DTypeError):
        te.if_then_else(i, 1, 2)
    c = te.all(i > 0, i < 5, i != 2)
    assert isinstance(c, ir.And) and isinstance(c.a, ir.And)
    assert isinstance(te.any(i < 0, i > 5), ir.Or)
    assert te.all().value == 1 and te.any().value == 0
    assert te.const(3).dtype == "int32" and te.const(2.0).dtype == "float32"
    assert te.const(1, "int64").dtype == "int64"
    assert isinstance(te.size_var("m"), ir.SizeVar) and te.var().name == "tindex"
    assert te.var("h", "int64").dtype == "int64"
