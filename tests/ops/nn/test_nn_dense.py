"""nn.matmul (numpy semantics), nn.dense, nn.batch_matmul and nn.matmul_integer."""
from functools import partial

import numpy as np
import pytest

import tessera
from nn_onnx_ref import ort_run
from op_check import BF16, infer, run_op as _run_op

run_op = partial(_run_op, schedule=True)  # every op runs with its default schedule
RNG = np.random.default_rng(11)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


MATMUL_CASES = [
    ("2d", (5, 7), (7, 3), {}),
    ("vector_times_batch", (7,), (2, 7, 3), {}),
    ("batch_times_vector", (2, 4, 5, 7), (7,), {}),
    ("vector_dot", (9,), (9,), {}),
    ("batch_broadcast", (2, 1, 5, 7), (3, 7, 4), {}),
    ("transposes", (2, 7, 5), (2, 3, 7), {"transpose_a": True, "transpose_b": True}),
]


@pytest.mark.parametrize("name,sa,sb,attrs", MATMUL_CASES, ids=[c[0] for c in MATMUL_CASES])
def test_matmul_follows_numpy(name, sa, sb, attrs):
    a, b = rand(*sa), rand(*sb)
    (y,) = run_op("nn.matmul", a, b, **attrs)
    ta = np.swapaxes(a, -1, -2) if attrs.get("transpose_a") else a
    tb = np.swapaxes(b, -1, -2) if attrs.get("transpose_b") else b
    want = np.matmul(ta.astype(np.float64), tb.astype(np.float64))
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_matmul_integers_exact():
    a = RNG.integers(-100, 100, (3, 6)).astype(np.int64)
    b = RNG.integers(-100, 100, (6, 4)).astype(np.int64)
    (y,) = run_op("nn.matmul", a, b)
    np.testing.assert_array_equal(y, a @ b)


def test_matmul_symbolic_batch():
    b = rand(6, 4)
    for n in (1, 5):
        a = rand(n, 3, 6)
        (y,) = run_op("nn.matmul", a, b, sym={0: ("B", 3, 6)})
        np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-5)
    (t,) = infer("nn.matmul", (("B", "S", 6), "float32"), ((6, 4), "float32"))
    assert t.shape == ("B", "S", 4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dense_half_precision_accumulates_in_float32(dtype):
    x, w = rand(4, 64, dtype=dtype), rand(10, 64, dtype=dtype)
    (y,) = run_op("nn.dense", x, w)
    assert y.dtype == (BF16 if dtype == "bfloat16" else np.dtype(dtype))
    want = x.astype(np.float64) @ w.astype(np.float64).T
    tol = 1e-3 if dtype == "float16" else 8e-3
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max())


def test_dense_batched_data_and_batch_matmul_default_transposed_y():
    x, w = rand(2, 3, 8), rand(5, 8)
    (y,) = run_op("nn.dense", x, w)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)
    p, q = rand(1, 4, 8), rand(3, 6, 8)
    (z,) = run_op("nn.batch_matmul", p, q)
    np.testing.assert_allclose(z, p @ q.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("zp_shape", ["scalar", "per_row_and_column"])
def test_matmul_integer_subtracts_zero_points(zp_shape):
    a = RNG.integers(0, 255, (4, 6)).astype(np.uint8)
    b = RNG.integers(-128, 127, (6, 3)).astype(np.int8)
    if zp_shape == "scalar":
        az, bz = np.array(12, np.uint8), np.array(-5, np.int8)
    else:
        az, bz = RNG.integers(0, 255, (4,)).astype(np.uint8), RNG.integers(-128, 127, (3,)).astype(np.int8)
    (y,) = run_op("nn.matmul_integer", a, b, az, bz)
    if zp_shape == "scalar":
        (ref,) = ort_run("MatMulInteger", [a, b, az, bz], opset=10)
    else:  # onnxruntime takes scalar zero points only: the numpy definition
        ref = (a.astype(np.int64) - az[:, None]) @ (b.astype(np.int64) - bz[None, :])
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("op,types,attrs,error,match", [
    ("nn.matmul", [((3, 4), "float32"), ((5, 2), "float32")], {}, tessera.ShapeError, "contraction"),
    ("nn.matmul", [((2, 3, 4), "float32"), ((3, 4, 2), "float32")], {}, tessera.ShapeError, "broadcast"),
    ("nn.matmul", [((3, 4), "float32"), ((4, 2), "int32")], {}, tessera.DTypeError, "int32"),
    ("nn.matmul", [((), "float32"), ((4, 2), "float32")], {}, tessera.ShapeError, "rank >= 1"),
    ("nn.dense", [((3, 4), "float32"), ((4,), "float32")], {}, tessera.ShapeError, "rank 2"),
    ("nn.batch_matmul", [((3, 4), "float32"), ((3, 4, 4), "float32")], {}, tessera.ShapeError, "rank 3"),
    ("nn.matmul_integer", [((3, 4), "uint8"), ((4, 2), "int8"), ((2,), "uint8"), ((), "int8")], {},
     tessera.ShapeError, "a_zero_point must be a scalar or have 3"),
    ("nn.matmul_integer", [((3, 4), "float32"), ((4, 2), "int8"), ((), "uint8"), ((), "int8")], {},
     tessera.DTypeError, "float32"),
])
def test_matmul_infer_refuses_bad_input(op, types, attrs, error, match):
    with pytest.raises(error, match=match):
        infer(op, *types, **attrs)


@pytest.mark.parametrize("sa,sb", [((64, 32), (32, 48)), ((2, 12, 16), (16, 32))], ids=["packed_b", "batched"])
def test_matmul_on_gemm_micro_kernel_when_tiles_fit(sa, sb, isa_target):
    a, b = rand(*sa), rand(*sb)
    y, src = _matmul_kernel_run(a, b, isa_target)
    np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-5)
    _assert_target_micro_kernel(src, isa_target)


def _matmul_kernel_run(a, b, target):
    """(output, C source) of nn.matmul's default kernel for `target`."""
    from tessera.graph.kernels import get_kernel
    from tessera.graph.ir import TensorType
    from tessera.ops import get_op

    attrs = get_op("nn.matmul").normalize_attrs({})
    (out,) = get_op("nn.matmul").infer_types((TensorType.of(a), TensorType.of(b)), attrs)
    k = get_kernel("nn.matmul", attrs, (TensorType.of(a), TensorType.of(b)), (out,), tessera.Target(target))
    y = np.zeros(out.shape, np.float32)
    k.module(a, b, y)
    return y, k.module.get_source()


def _assert_target_micro_kernel(src, target):
    """The tile ran on a micro-kernel the target has (none of a wider ISA), where it has one."""
    t = tessera.Target(target)
    if t.has_feature("avx2") and t.has_feature("fma"):
        assert "_gemm_" in src
    if not t.has_feature("avx512f"):
        assert "tintrin_avx512" not in src


@pytest.mark.parametrize("sa,sb", [((128, 48), (48, 1001)), ((2, 8, 24), (24, 17)), ((12, 40), (1, 40, 5))],
                         ids=["vocab_like", "batched_17", "batch_b_5"])
def test_matmul_with_awkward_n_runs_on_padded_panels(sa, sb, isa_target):
    """An N no micro-kernel tile divides (GPT-2's 50257 words) packs B in zero-padded panels: C is
    computed N rounded up to the tile wide on the micro-kernel, and its first N columns copied out."""
    a, b = rand(*sa), rand(*sb)
    y, src = _matmul_kernel_run(a, b, isa_target)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    _assert_target_micro_kernel(src, isa_target)
    t = tessera.Target(isa_target)
    if t.has_feature("avx2") and t.has_feature("fma"):
        assert "b_pack" in src


def test_matrix_vector_product_streams_rows_of_b(isa_target):
    """M = 1 (a dense layer on one sample): k outside the column vectors, so each step reads
    contiguous rows of B; column chunks in parallel where the threads divide the vectors."""
    from tessera.graph.kernels import get_kernel
    from tessera.graph.ir import TensorType
    from tessera.ops import get_op

    a, b = rand(1, 1024), rand(1024, 240)
    (y,) = run_op("nn.matmul", a, b)
    # 1024 float32 products summed in another order than numpy's: errors of a few 1e-5
    np.testing.assert_allclose(y, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    target = tessera.Target(f"{isa_target} -num-threads=3")
    k = get_kernel("nn.matmul", get_op("nn.matmul").normalize_attrs({}), (TensorType.of(a), TensorType.of(b)),
                   (TensorType((1, 240), "float32"),), target)
    src = k.module.get_source()
    kernel = src[src.index("_kernel("):src.index("_args_t")]
    assert "#pragma omp parallel for" in kernel
    lines = [ln.strip() for ln in kernel.splitlines() if ln.strip().startswith("for (")]
    assert lines[2].startswith("for (int32_t k ")  # chunk, init, then k outside the column vectors
    out = np.zeros((1, 240), np.float32)
    k.module(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_matrix_vector_chunks_share_evenly_and_accumulate_in_their_own_row(isa_target):
    """1 x 256 @ 256 x 1000 on 2 threads: 1000 columns in vectors of the widest lanes that divide
    them (125 of 8 on AVX2 and AVX-512), in chunks that divide the vectors and split between the
    threads no worse than any other divisor would; each chunk accumulates in a row of its own
    inside the parallel loop (no cache line of the shared row written by both threads at every k
    step); the product is right."""
    from tessera.graph.kernels import get_kernel
    from tessera.graph.ir import TensorType
    from tessera.ops import get_op
    from tessera.ops.nn._cpu_schedule import gemv_chunks, gemv_lanes

    for vecs, threads in ((125, 2), (30, 4), (128, 2), (97, 2), (6, 3)):
        c = gemv_chunks(vecs, threads)
        share = lambda d: -(-d // threads) / d  # noqa: E731  (the busiest thread's part of the work)
        assert vecs % c == 0 and (c == 1 or vecs // c >= 2)
        assert all(share(c) <= share(d) for d in range(threads, vecs // 2 + 1) if vecs % d == 0)
    assert [gemv_lanes(n, 16) for n in (1000, 1024, 40, 36, 24, 6)] == [8, 16, 8, 4, 8, 0]
    a, b = rand(1, 256), rand(256, 1000)
    target = tessera.Target(f"{isa_target} -num-threads=2")
    lanes = gemv_lanes(1000, target.vector_bits // 32)
    k = get_kernel("nn.matmul", get_op("nn.matmul").normalize_attrs({}), (TensorType.of(a), TensorType.of(b)),
                   (TensorType((1, 1000), "float32"),), target)
    src = k.module.get_source()
    kernel = src[src.index("_kernel("):src.index("_args_t")]
    par = kernel.index("#pragma omp parallel for")
    assert f"< {gemv_chunks(1000 // lanes, 2)}; ++" in kernel[par:par + 200]
    assert "_local[" in kernel[par:] and "_local[" not in kernel[:par]
    assert f"float32x{lanes}(" in kernel[par:]
    out = np.zeros((1, 1000), np.float32)
    k.module(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k,n,panel", [(128, 48, 1001, 24), (8, 16, 32, 16), (12, 40, 5, 16)])
def test_prepacked_b_gives_the_plain_product(m, k, n, panel):
    """nn.pack_matmul_weight lays B out in zero-padded column panels; nn.matmul with b_panel reads
    them (what graph.passes.pack_matmul_weights sets up for constant weights)."""
    a, b = rand(m, k), rand(k, n)
    (pb,) = run_op("nn.pack_matmul_weight", b, panel=panel)
    panels = -(-n // panel)
    assert pb.shape == (panels, k, panel)
    flat = pb.transpose(1, 0, 2).reshape(k, panels * panel)
    np.testing.assert_array_equal(flat[:, :n], b)
    assert not flat[:, n:].any()
    (y,) = run_op("nn.matmul", a, pb, b_panel=panel, b_cols=n)
    np.testing.assert_allclose(y, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    (yb,) = run_op("nn.matmul", rand(2, m, k), rand(2, k, n))   # batched operands still plain
    assert yb.shape == (2, m, n)


@pytest.mark.parametrize("types,attrs,match", [
    ([((8, 4), "float32"), ((1, 4, 16), "float32")], {"b_panel": 16, "b_cols": 17}, "does not fit"),
    ([((8, 4), "float32"), ((1, 4, 16), "float32")], {"b_panel": 8, "b_cols": 16}, "must be"),
    ([((4, 8), "float32"), ((1, 4, 16), "float32")], {"b_panel": 16, "b_cols": 16, "transpose_a": True},
     "without transposes"),
])
def test_packed_matmul_refuses_inconsistent_layouts(types, attrs, match):
    with pytest.raises(tessera.errors.TesseraError, match=match):
        infer("nn.matmul", *types, **attrs)
    with pytest.raises(tessera.errors.TesseraError, match="panel must be a positive int"):
        infer("nn.pack_matmul_weight", ((4, 16), "float32"), panel=0)


@pytest.mark.parametrize("epilogue", ["bias_gelu", "bias_residual"])
def test_dense_layer_with_large_weights_and_its_epilogue_per_panel(epilogue, isa_target):
    """A dense layer whose weights (512 KB) stream from memory: B's blocks are computed all rows a
    call (the rows intrinsic, prefetching the next block) and the fused bias / GELU / residual
    epilogue per B panel, on the compacted panel of C. The model's output equals numpy's."""
    import math
    import re

    from onnx import TensorProto, helper, numpy_helper

    M, K, N = 32, 512, 256
    x, w, bias, res = rand(M, K), rand(K, N) * 0.1, rand(N), rand(M, N)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["h"])]
    if epilogue == "bias_gelu":
        nodes += [helper.make_node("Div", ["h", "sqrt2"], ["hs"]), helper.make_node("Erf", ["hs"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["he"]),
                  helper.make_node("Mul", ["he", "half"], ["y"])]
    else:
        nodes += [helper.make_node("Add", ["h", "res"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", math.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])]
    if epilogue == "bias_residual":
        inputs.append(helper.make_tensor_value_info("res", TensorProto.FLOAT, [M, N]))
    graph = helper.make_graph(nodes, "dense", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(g, params, target=f"{isa_target} -num-threads=2")
    feeds = {"x": x, "res": res} if epilogue == "bias_residual" else {"x": x}
    (y,) = exe.run(feeds)
    h = x.astype(np.float64) @ w + bias
    want = (0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2.0))) if epilogue == "bias_gelu" else h + res)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    t = tessera.Target(isa_target)
    if t.has_feature("avx2") and t.has_feature("fma"):
        src = "".join(k.module.get_source() for k in exe.kernels)
        assert f"_rows{M}_pf(" in src
        # the epilogue under the panel loop, in whole vectors of the target's width
        lanes = t.vector_bits // 32
        assert re.search(rf"tsr_vstore_float32x{lanes}\(&T_\w+\[ax0 \* {N} \+ j_0 \* ", src), src
