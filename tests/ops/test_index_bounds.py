"""Out-of-range indices raise at run time, as ONNX Runtime does: Gather, GatherElements, GatherND,
ScatterElements, ScatterND, MaxUnpool and RoiAlign's batch indices, through both executors of
tessera.compile, fused or not, and through tessera.build. The error names the node, the index and
the valid range; negative indices within [-n, n) keep their ONNX meaning (compared with ORT)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera import te
from tessera.errors import TesseraError
from tessera.ir import AssertStmt, For, post_order_visit
from tessera.ops.registry import ScheduleContext, get_op
from tessera.tir.transform import lower

RNG = np.random.default_rng(12)
_TYPES = {np.dtype("float32"): TP.FLOAT, np.dtype("int64"): TP.INT64, np.dtype("int32"): TP.INT32}


def _model(nodes, inputs, outputs=("y",), opset=18):
    """A model of `nodes` over the named input arrays (every input a graph input)."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, _TYPES[a.dtype], a.shape)
                                       for n, a in inputs.items()],
                          [helper.make_empty_tensor_value_info(o) for o in outputs])
    return helper.make_model_gen_version(g, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _tessera(model, feeds, executor="auto", target="c", opt_level=2):
    graph, params = tessera.frontend.from_onnx(model)
    exe = tessera.compile(graph, params, target=target, executor=executor, opt_level=opt_level)
    return exe.run(feeds)


D = np.arange(30, dtype=np.float32).reshape(5, 6)
ROI_X = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)


# op name -> (node, feeds with one out-of-range index, the bad value, its valid range [lo, hi))
def _cases():
    upd = np.ones((1, 6), np.float32)
    return {
        "Gather": (helper.make_node("Gather", ["d", "i"], ["y"], axis=0, name="gather_node"),
                   {"d": D, "i": np.array([1, 5, 0])}, 5, (-5, 5)),
        "Gather_negative": (helper.make_node("Gather", ["d", "i"], ["y"], axis=1, name="gather_node"),
                            {"d": D, "i": np.array([[0, -7]], np.int32)}, -7, (-6, 6)),
        "GatherElements": (helper.make_node("GatherElements", ["d", "i"], ["y"], axis=0, name="ge_node"),
                           {"d": D, "i": np.array([[0, 1, 2, 3, 4, 9]])}, 9, (-5, 5)),
        "GatherND": (helper.make_node("GatherND", ["d", "i"], ["y"], name="gnd_node"),
                     {"d": D, "i": np.array([[1, 2], [4, -8]])}, -8, (-6, 6)),
        "ScatterElements": (helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0, name="se_node"),
                            {"d": D, "i": np.array([[0, 1, 2, 3, 4, -6]]), "u": upd}, -6, (-5, 5)),
        "ScatterND": (helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="snd_node"),
                      {"d": D, "i": np.array([[2], [5]]), "u": np.ones((2, 6), np.float32)}, 5, (-5, 5)),
        "MaxUnpool": (helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                                       name="unpool_node"),
                      {"x": np.ones((1, 1, 2, 2), np.float32), "i": np.array([[[[0, 3], [-1, 15]]]])}, -1, (0, 16)),
        "RoiAlign": (helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2,
                                      sampling_ratio=2, name="roi_node"),
                     {"x": ROI_X, "r": np.array([[0, 0, 4, 4], [1, 1, 6, 7]], np.float32), "b": np.array([1, 2])},
                     2, (0, 2)),
        "RoiAlign_negative": (helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=2, output_width=2,
                                               sampling_ratio=2, name="roi_node"),
                              {"x": ROI_X, "r": np.array([[0, 0, 4, 4]], np.float32), "b": np.array([-1])},
                              -1, (0, 2)),
    }


CASES = _cases()


@pytest.mark.parametrize("executor", ["graph", "aot"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_out_of_range_index_raises_naming_the_node_the_index_and_the_range(case, executor):
    node, feeds, bad, (lo, hi) = CASES[case]
    model = _model([node], feeds)
    with pytest.raises(Exception, match="out of|out-of|invalid|Out of range"):
        _ort(model, feeds)                         # ONNX Runtime refuses the same input
    with pytest.raises(TesseraError) as info:
        _tessera(model, feeds, executor)
    msg = str(info.value)
    assert node.name in msg and str(bad) in msg and f"[{lo}, {hi})" in msg, msg


def _in_range(case):
    """The case's feeds with the bad index replaced by a valid one (the lowest valid, often negative)."""
    node, feeds, bad, (lo, hi) = CASES[case]
    feeds = {k: v.copy() for k, v in feeds.items()}
    key = "b" if node.op_type == "RoiAlign" else "i"
    feeds[key][feeds[key] == bad] = lo
    return node, feeds


@pytest.mark.parametrize("case", sorted(CASES))
def test_indices_inside_the_range_match_onnxruntime(case):
    node, feeds = _in_range(case)
    model = _model([node], feeds)
    (want,) = _ort(model, feeds)
    (got,) = _tessera(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_fused_gather_names_its_fused_node_and_op():
    # Gather -> Add -> Relu: one fused kernel, a node named after its last member ('act'); the error
    # names that node and the op whose index failed (the kernel is shared by every function of its
    # structure, so it cannot carry its members' names)
    nodes = [helper.make_node("Gather", ["d", "i"], ["g"], axis=0, name="embed"),
             helper.make_node("Add", ["g", "b"], ["s"], name="bias"),
             helper.make_node("Relu", ["s"], ["y"], name="act")]
    feeds = {"d": D, "i": np.array([0, 3, -6]), "b": np.ones(6, np.float32)}
    model = _model(nodes, feeds)
    graph, params = tessera.frontend.from_onnx(model)
    for executor in ("graph", "aot"):
        exe = tessera.compile(graph, params, target="c", executor=executor)
        assert any(n.op == "fused" for n in exe.graph.nodes)
        with pytest.raises(TesseraError, match=r"node '?act'? \(fused\).*take: index -6 .*\[-5, 5\)"):
            exe.run(feeds)
        ok = dict(feeds, i=np.array([0, 3, -5]))
        np.testing.assert_allclose(exe.run(ok)[0], _ort(model, ok)[0])


def test_a_check_inside_a_parallel_loop_reports_once():
    # enough rows for the gather's parallel loop on 2 threads: the failure is recorded there and returned after it
    d = RNG.standard_normal((64, 256)).astype(np.float32)
    idx = RNG.integers(-64, 64, 4096)
    idx[3000] = 64
    feeds = {"d": d, "i": idx}
    model = _model([helper.make_node("Gather", ["d", "i"], ["y"], axis=0, name="rows")], feeds)
    with pytest.raises(TesseraError, match=r"rows.*index 64 .*\[-64, 64\)"):
        _tessera(model, feeds, target="c -num-threads=2")
    idx[3000] = -64
    np.testing.assert_array_equal(_tessera(model, feeds, target="c -num-threads=2")[0], d[idx])


def _scheduled(op_name, arrays, attrs, target="c"):
    op = get_op(op_name)
    attrs = op.normalize_attrs(attrs)
    phs = [te.placeholder(a.shape, str(a.dtype), f"x{k}") for k, a in enumerate(arrays)]
    types = [tessera.graph.ir.TensorType.of(a) for a in arrays]
    outs = op.compute(phs, attrs)
    sch = tessera.tir.Schedule(te.create_prim_func(phs + outs))
    op.schedule(sch, ScheduleContext(block=outs[0].name, attrs=attrs, target=tessera.Target(target),
                                     input_types=tuple(types), output_types=tuple(op.infer_types(types, attrs))))
    return sch.mod["main"], [np.empty([int(d) for d in o.shape], str(o.dtype)) for o in outs]


def test_a_gather_checks_each_index_once_outside_the_copy_loops():
    # take of 768-float rows: the check sits in the loop over indices, the row copy below it stays vector code
    d = RNG.standard_normal((100, 768)).astype(np.float32)
    idx = RNG.integers(-100, 100, 40)
    func, (out,) = _scheduled("take", [d, idx], {"axis": 0})
    low = lower(func, "c")
    asserts, loops_inside = [], []

    def visit(n):
        if isinstance(n, AssertStmt):
            asserts.append(n)
            post_order_visit(n.body, lambda m: loops_inside.append(m) if isinstance(m, For) else None)

    post_order_visit(low.body, visit)
    assert len(asserts) == 1
    assert loops_inside, "the assert must be outside the row-copy loops"
    lib = tessera.build(func, target="c")
    assert "tsr_vstore" in lib.get_source() or "float32x" in lib.get_source()
    lib(d, idx, out)
    np.testing.assert_array_equal(out, d[idx])
    bad = idx.copy()
    bad[7] = -101
    with pytest.raises(TesseraError, match=r"index -101 .*\[-100, 100\)"):
        lib(d, bad, out)


@pytest.mark.parametrize("target", ["c", "c -num-threads=2"])
def test_a_check_vectorized_with_its_loop_reports_the_failing_lane(target):
    # gather_elements reads one index per output element: the check cannot leave the loop, so it is
    # vectorized with it (all lanes tested at once) and the failing lane's index is reported
    d = RNG.standard_normal((256, 64)).astype(np.float32)
    idx = RNG.integers(-64, 64, (256, 64))
    func, (out,) = _scheduled("gather_elements", [d, idx], {"axis": 1}, target)
    vector_checks = []
    post_order_visit(lower(func, target).body, lambda n: vector_checks.append(n) if isinstance(n, AssertStmt)
                     and n.condition.dtype.lanes > 1 else None)
    assert vector_checks
    lib = tessera.build(func, target=target)
    lib(d, idx, out)
    np.testing.assert_array_equal(out, np.take_along_axis(d, idx % 64, axis=1))
    idx[200, 37] = -70
    with pytest.raises(TesseraError, match=r"index -70 .*\[-64, 64\)"):
        lib(d, idx, out)


def test_scatter_nd_validates_every_index_before_writing():
    d = np.zeros((5, 3), np.float32)
    idx = np.array([[0], [7]])
    func, (out,) = _scheduled("scatter_nd", [d, idx, np.ones((2, 3), np.float32)], {})
    lib = tessera.build(func, target="c")
    out[...] = -1
    with pytest.raises(TesseraError, match=r"index 7 .*\[-5, 5\)"):
        lib(d, idx, np.ones((2, 3), np.float32), out)
    assert (out == -1).all()        # refused before any element was written


def test_roi_align_refuses_a_roi_whose_adaptive_grid_exceeds_max_grid():
    # the op's loops are bounded by max_grid: a ROI needing a finer grid is refused, never sampled short
    x = RNG.standard_normal((1, 2, 16, 16)).astype(np.float32)
    rois = np.array([[0, 0, 4, 4], [0, 0, 15, 15]], np.float32)
    bidx = np.zeros(2, np.int64)
    func, (out,) = _scheduled("image.roi_align", [x, rois, bidx],
                              dict(output_size=(2, 2), sampling_ratio=0, max_grid=(2, 2)))
    lib = tessera.build(func, target="c")
    with pytest.raises(TesseraError, match=r"ROI 1 needs a sampling grid of 8 rows .* max_grid \(2, 2\)"):
        lib(x, rois, bidx, out)
    lib(x, rois[:1].repeat(2, 0), bidx, out)      # both within the grid: runs


def _opencl_ok():
    from tessera.runtime import opencl as rt
    return rt.usable()[0]


@pytest.mark.skipif(not _opencl_ok(), reason="OpenCL is not usable here")
def test_opencl_cannot_report_so_it_clamps_indices_inside_the_tensor():
    # an OpenCL kernel has no status to return: the check becomes the clamp it replaced (reads stay
    # inside the tensor); in-range indices, negative ones included, are exact
    feeds = {"d": D, "i": np.array([1, -5, 4])}
    model = _model([helper.make_node("Gather", ["d", "i"], ["y"], axis=0)], feeds)
    np.testing.assert_array_equal(_tessera(model, feeds, target="opencl")[0], D[[1, -5, 4]])
    bad = {"d": D, "i": np.array([9, -9, 2])}
    np.testing.assert_array_equal(_tessera(model, bad, target="opencl")[0], D[[4, 0, 2]])
