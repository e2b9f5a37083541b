"""A compiled model takes and reports the model's own input and output names (issue 9).

ONNX names such as "gpu_0/data_0" are the public names: exe.run / __call__ keywords, input_names and
output_names, error messages, profile(), an exported library's metadata and model.h, the CLI's
--input NAME=FILE. The graph's Values keep sanitized names; model.h's C identifiers are made from
the public names, distinct even where two names sanitize alike. Expected values come from
onnxruntime.
"""
import subprocess
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.cli import split_input, main
from tessera.errors import TesseraError
from tessera.graph import Builder, Graph
from tessera.codegen.c_aot import c_names
from tessera.graph.document import load_graph
from tessera.graph.passes import optimize, run_pass
from tessera.runtime import AotExecutor, load_module
from tessera.runtime.library import read_document
from tessera.runtime.plan import public_names

# names with '/', ':', '.', '-', '=', a space, a leading digit, and "p/q" / "p_q", which sanitize alike
IN_NAMES = ["gpu_0/data_0", "x:0", "a.b", "in-put", "my input", "0lead", "p/q", "p_q", "k=v"]
OUT_NAMES = ["out/0", "out_0", "1st.out", "y z", "diff:p-q"]
WEIGHT = "w/eight:0"
SHAPE = (2, 3)
RNG = np.random.default_rng(9)
W = RNG.standard_normal(SHAPE).astype(np.float32)


def _odd_model() -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    n = helper.make_node
    nodes = [
        n("Add", ["gpu_0/data_0", "x:0"], ["s/1"]),
        n("Add", ["s/1", WEIGHT], ["out/0"]),
        n("Mul", ["a.b", "in-put"], ["t:mul"]),
        n("Sub", ["my input", "0lead"], ["t:sub"]),
        n("Add", ["t:mul", "t:sub"], ["t:sum"]),
        n("Relu", ["t:sum"], ["out_0"]),
        n("Mul", ["out/0", "k=v"], ["1st.out"]),
        n("Sigmoid", ["out_0"], ["y z"]),
        n("Sub", ["p/q", "p_q"], ["diff:p-q"]),          # order matters: swapped inputs would show
    ]
    g = helper.make_graph(nodes, "odd/names", [vi(name, TP.FLOAT, list(SHAPE)) for name in IN_NAMES],
                          [vi(name, TP.FLOAT, list(SHAPE)) for name in OUT_NAMES],
                          initializer=[numpy_helper.from_array(W, WEIGHT)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def _feeds(seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(SHAPE).astype(np.float32) for name in IN_NAMES}


@pytest.fixture(scope="module")
def odd():
    """(model, graph, params, feeds, onnxruntime's outputs by name)."""
    m = _odd_model()
    graph, params = tessera.frontend.from_onnx(m)
    feeds = _feeds()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip(OUT_NAMES, sess.run(OUT_NAMES, feeds)))
    return m, graph, params, feeds, ref


def _check(outs, ref):
    assert len(outs) == len(OUT_NAMES)
    for name, y in zip(OUT_NAMES, outs):
        np.testing.assert_allclose(y, ref[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_from_onnx_keeps_the_model_names_public_and_the_values_sanitized(odd):
    _, g, params, _, _ = odd
    assert list(g.input_names) == IN_NAMES + [WEIGHT]
    assert list(g.output_names) == OUT_NAMES
    names = [v.name for v in g.inputs]
    assert len(set(names)) == len(names)
    assert all("/" not in n and ":" not in n and " " not in n and "=" not in n for n in names)
    assert names[0] == "gpu_0_data_0" and names[6] == "p_q" and names[7] != "p_q"   # the second one moved aside
    assert list(params) == [g.inputs[-1].name]          # params stay keyed by value name
    text = g.script()
    assert '%gpu_0_data_0: float32[2, 3] as "gpu_0/data_0"' in text
    assert ' as "diff:p-q"' in text and ' as "my input"' in text
    assert g.input("gpu_0/data_0") is g.inputs[0] and g.input("p_q") is g.inputs[7]   # public names first


@pytest.mark.parametrize("executor", ["graph", "aot"])
@pytest.mark.parametrize("opt_level", [0, 3])
def test_compiled_model_runs_by_the_model_names(odd, executor, opt_level):
    _, g, params, feeds, ref = odd
    exe = tessera.compile(g, params, opt_level=opt_level, executor=executor)
    assert exe.input_names == IN_NAMES and exe.output_names == OUT_NAMES
    assert list(exe.graph.input_names) == IN_NAMES and list(exe.graph.output_names) == OUT_NAMES
    _check(exe.run(feeds), ref)
    _check(exe(**feeds), ref)                                           # keywords, identifiers or not
    _check(exe(*[feeds[n] for n in IN_NAMES]), ref)                     # positional, in input order
    swapped = dict(feeds, **{"p/q": feeds["p_q"], "p_q": feeds["p/q"]})
    np.testing.assert_allclose(exe.run(swapped)[4], -ref["diff:p-q"], rtol=1e-6)


@pytest.mark.parametrize("executor", ["graph", "aot"])
def test_a_wrong_name_is_refused_listing_the_public_names(odd, executor):
    _, g, params, feeds, _ = odd
    exe = tessera.compile(g, params, opt_level=0, executor=executor)
    bad = dict(feeds)
    bad["gpu_0_data_0"] = bad.pop("gpu_0/data_0")
    with pytest.raises(TesseraError) as e:
        exe.run(bad)
    msg = str(e.value)
    assert "graph 'odd_names' inputs: missing ['gpu_0/data_0']; unknown ['gpu_0_data_0']" in msg
    assert "'k=v: float32[2, 3]'" in msg and "'my input: float32[2, 3]'" in msg
    assert "'gpu_0_data_0' is the internal name of input 'gpu_0/data_0'" in msg
    with pytest.raises(TesseraError, match=r"unknown \['nope'\]"):
        exe(**dict(feeds, nope=feeds["x:0"]))
    with pytest.raises(TesseraError, match=r"input 'x:0': (dimension 1 is 4|shape \(2, 4\))"):
        exe.run(dict(feeds, **{"x:0": np.zeros((2, 4), np.float32)}))


@pytest.mark.parametrize("executor", ["graph", "aot"])
def test_profile_shows_the_public_names(odd, executor):
    _, g, params, feeds, _ = odd
    exe = tessera.compile(g, params, opt_level=0, executor=executor)
    report = exe.profile(feeds, number=1, repeat=1, show=False)
    assert [n for n, _ in report.inputs] == IN_NAMES and [n for n, _ in report.outputs] == OUT_NAMES
    text = str(report)
    assert "inputs: 'gpu_0/data_0': float32[2, 3], 'x:0': float32[2, 3]" in text
    assert "'diff:p-q': float32[2, 3]" in text


@pytest.fixture(scope="module")
def exported(odd, tmp_path_factory):
    _, g, params, _, _ = odd
    d = tmp_path_factory.mktemp("public_names")
    path = tessera.compile(g, params, opt_level=3).export_library(d / "model.so")
    return d, path


@pytest.mark.parametrize("executor", [None, "graph"])
def test_an_exported_library_keeps_the_names(odd, exported, executor):
    _, _, _, feeds, ref = odd
    d, path = exported
    doc = read_document(path)
    assert doc["input_names"] == IN_NAMES and doc["output_names"] == OUT_NAMES
    loaded = load_module(path, executor=executor)
    assert isinstance(loaded, AotExecutor) == (executor is None)
    assert loaded.input_names == IN_NAMES and loaded.output_names == OUT_NAMES
    assert list(load_graph(loaded).input_names) == IN_NAMES
    _check(loaded.run(feeds), ref)
    with pytest.raises(TesseraError, match=r"missing \['k=v'\]"):
        loaded.run({k: v for k, v in feeds.items() if k != "k=v"})
    assert "'gpu_0/data_0'" in str(loaded.profile(feeds, number=1, repeat=1, show=False))


def test_model_h_names_the_io_and_its_c_identifiers_are_distinct(odd, exported):
    """The header compiles with -Werror, its INDEX macros (distinct C identifiers made from the public
    names) index the inputs and outputs, and a C program run through them matches onnxruntime."""
    _, _, _, feeds, ref = odd
    d, path = exported
    header = (d / "model.h").read_text()
    assert '#define TESSERA_MODEL_INPUT_0_NAME "gpu_0/data_0"' in header
    assert '#define TESSERA_MODEL_INPUT_8_NAME "k=v"' in header
    assert '/* input 4: "my input": float32[2, 3] */' in header
    assert '#define TESSERA_MODEL_OUTPUT_4_NAME "diff:p-q"' in header
    for line in ("#define TESSERA_MODEL_INPUT_INDEX_p_q 6", "#define TESSERA_MODEL_INPUT_INDEX_p_q_1 7",
                 "#define TESSERA_MODEL_INPUT_INDEX_v_0lead 5", "#define TESSERA_MODEL_OUTPUT_INDEX_out_0 0",
                 "#define TESSERA_MODEL_OUTPUT_INDEX_out_0_1 1", "#define TESSERA_MODEL_INPUT_INDEX_k_v 8"):
        assert line in header
    # a C program feeds each input by its INDEX macro (input i filled with feeds[IN_NAMES[i]])
    for i, name in enumerate(IN_NAMES):
        feeds[name].tofile(d / f"in{i}.bin")
    idents = c_names(IN_NAMES)
    reads = "\n".join(f'  if (load("{d}/in{i}.bin", in[TESSERA_MODEL_INPUT_INDEX_{idents[i]}])) return 3;'
                      for i in range(len(IN_NAMES)))
    (d / "use.c").write_text(textwrap.dedent("""
        #include <stdio.h>
        #include "model.h"
        static float bufs[TESSERA_MODEL_NUM_INPUTS][6], outs[TESSERA_MODEL_NUM_OUTPUTS][6];
        static int load(const char* path, float* dst) {
          FILE* f = fopen(path, "rb");
          if (f == NULL) return 1;
          size_t n = fread(dst, sizeof(float), 6, f);
          fclose(f);
          return n != 6;
        }
        int main(void) {
          float* in[TESSERA_MODEL_NUM_INPUTS];
          const void* ins[TESSERA_MODEL_NUM_INPUTS];
          void* os[TESSERA_MODEL_NUM_OUTPUTS];
          for (int i = 0; i < TESSERA_MODEL_NUM_INPUTS; ++i) { in[i] = bufs[i]; ins[i] = bufs[i]; }
          for (int k = 0; k < TESSERA_MODEL_NUM_OUTPUTS; ++k) os[k] = outs[k];
        READS
          tessera_model_t* m = tessera_model_create();
          if (tessera_model_run(m, ins, os) != 0) { fprintf(stderr, "%s\\n", tessera_model_error(m)); return 1; }
          tessera_model_destroy(m);
          printf("%s\\n", TESSERA_MODEL_OUTPUT_4_NAME);
          for (int j = 0; j < 6; ++j) printf("%.9g\\n", outs[TESSERA_MODEL_OUTPUT_INDEX_diff_p_q][j]);
          return 0;
        }
        """).replace("READS", reads))
    proc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", f"-I{d}", str(d / "use.c"), "-o", str(d / "use"),
                           f"-L{d}", "-l:model.so", f"-Wl,-rpath,{d}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(d / "use")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split()
    assert lines[0] == "diff:p-q"
    np.testing.assert_allclose(np.array(lines[1:], np.float32).reshape(SHAPE), ref["diff:p-q"], rtol=1e-6)


def test_c_names_are_distinct_deterministic_identifiers():
    names = ["p/q", "p_q", "p_q_1", "0lead", "_x", "x", "a b", "a-b", "", "*"]
    out = c_names(names)
    assert out == ["p_q", "p_q_2", "p_q_1", "v_0lead", "x", "x_1", "a_b", "a_b_1", "v", "v_1"]
    assert c_names(names) == out and len(set(out)) == len(out)


def test_symbolic_library_loads_as_graph_executor_with_the_names(tmp_path):
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Relu", ["in/x:0"], ["out y"])], "sym",
                          [vi("in/x:0", TP.FLOAT, ["N", 3])], [vi("out y", TP.FLOAT, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph, params = tessera.frontend.from_onnx(m)
    path = tessera.compile(graph, params).export_library(tmp_path / "sym.so")
    loaded = load_module(path)
    assert not isinstance(loaded, AotExecutor)
    assert loaded.input_names == ["in/x:0"] and loaded.output_names == ["out y"]
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"in/x:0": x})
    np.testing.assert_array_equal(loaded.run({"in/x:0": x})[0], ref[0])


def test_the_issue_model_gpu_0_data_0(tmp_path):
    """A ResNet-shaped net whose input is gpu_0/data_0 and output gpu_0/softmax_1, as the bundled
    ResNet-50 / ShuffleNet / ZFNet-512 name them."""
    n = helper.make_node
    wc = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    wf = RNG.standard_normal((10, 8)).astype(np.float32) * 0.3
    nodes = [n("Conv", ["gpu_0/data_0", "gpu_0/conv1_w_0"], ["gpu_0/conv1_1"], pads=[1, 1, 1, 1]),
             n("Relu", ["gpu_0/conv1_1"], ["gpu_0/res_conv1_bn_2"]),
             n("GlobalAveragePool", ["gpu_0/res_conv1_bn_2"], ["gpu_0/pool5_1"]),
             n("Flatten", ["gpu_0/pool5_1"], ["gpu_0/pool5_2"]),
             n("Gemm", ["gpu_0/pool5_2", "gpu_0/pred_w_0"], ["gpu_0/pred_1"], transB=1),
             n("Softmax", ["gpu_0/pred_1"], ["gpu_0/softmax_1"])]
    g = helper.make_graph(nodes, "resnet50", [helper.make_tensor_value_info("gpu_0/data_0", TP.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("gpu_0/softmax_1", TP.FLOAT, [1, 10])],
                          initializer=[numpy_helper.from_array(wc, "gpu_0/conv1_w_0"),
                                       numpy_helper.from_array(wf, "gpu_0/pred_w_0")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["gpu_0/softmax_1"], {"gpu_0/data_0": x})[0]
    graph, params = tessera.frontend.from_onnx(m)
    for executor in ("graph", "aot"):
        exe = tessera.compile(graph, params, executor=executor)
        assert exe.input_names == ["gpu_0/data_0"] and exe.output_names == ["gpu_0/softmax_1"]
        np.testing.assert_allclose(exe.run({"gpu_0/data_0": x})[0], ref, rtol=1e-4, atol=1e-6)
    onnx.save(m, tmp_path / "resnet50.onnx")
    np.save(tmp_path / "x.npy", x)
    assert main(["compile", str(tmp_path / "resnet50.onnx"), "-o", str(tmp_path / "r.so")]) == 0
    assert main(["run", str(tmp_path / "r.so"), "--input", f"gpu_0/data_0={tmp_path / 'x.npy'}",
                 "--output", str(tmp_path / "y.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ref, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# the CLI
# ---------------------------------------------------------------------------------------------
def test_cli_runs_by_the_model_names(odd, exported, tmp_path, capsys):
    m, _, _, feeds, ref = odd
    d, path = exported
    sub = tmp_path / "a=b"                  # a folder with '=' in it: the split must look further left
    sub.mkdir()
    args = []
    for i, name in enumerate(IN_NAMES):
        np.save(sub / f"in{i}.npy", feeds[name])
        args += ["--input", f"{name}={sub / f'in{i}.npy'}"]
    outs = [str(tmp_path / f"o{k}.npy") for k in range(len(OUT_NAMES))]
    assert main(["run", str(path), *args, *sum([["--output", o] for o in outs], [])]) == 0
    _check([np.load(o) for o in outs], ref)
    capsys.readouterr()
    # printed under the public names; the ONNX file runs the same way (compiled at opt level 0)
    onnx.save(m, tmp_path / "odd.onnx")
    assert main(["run", str(tmp_path / "odd.onnx"), "--opt-level", "0", *args]) == 0
    out = capsys.readouterr().out
    assert "diff:p-q: float32[2, 3]" in out and "y z: float32[2, 3]" in out
    # a missing input is named by its public name
    assert main(["run", str(path), *args[:-2]]) == 2
    assert "missing ['k=v']" in capsys.readouterr().err


def test_cli_input_split_takes_the_longest_known_name_from_the_right(tmp_path):
    names = ["k", "k=v", "x:0"]
    assert split_input("k=v=a=b.npy", names) == ("k=v", "a=b.npy")
    assert split_input("k=a=b.npy", names) == ("k", "a=b.npy")
    assert split_input("x:0=f.npy", names) == ("x:0", "f.npy")
    assert split_input(str(tmp_path / "f.npy"), names) == (None, str(tmp_path / "f.npy"))
    f = tmp_path / "q=f.npy"                # an existing file with '=' in its name is positional
    f.write_bytes(b"")
    assert split_input(str(f), names) == (None, str(f))
    with pytest.raises(TesseraError, match=r"no input 'q'.*inputs are \['k', 'k=v', 'x:0'\]"):
        split_input("q=missing.npy", names)


def test_cli_bench_feeds_onnxruntime_by_name(tmp_path, capsys):
    """Inputs in an order ONNX Runtime would not guess from the names: bench matches them by name."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Sub", ["b:0", "a/0"], ["d-out"])], "bench",
                          [vi("b:0", TP.FLOAT, [4]), vi("a/0", TP.FLOAT, [4])], [vi("d-out", TP.FLOAT, [4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "b.onnx")
    assert main(["bench", str(tmp_path / "b.onnx"), "--repeat", "1", "--warmup", "1", "--number", "1"]) == 0
    out = capsys.readouterr().out
    assert "inputs b:0: float32[4], a/0: float32[4]" in out
    assert "onnxruntime  end to end" in out and "differs" not in out


# ---------------------------------------------------------------------------------------------
# the graph
# ---------------------------------------------------------------------------------------------
def _builder_graph():
    gb = Builder("built")
    x = gb.input("x", (2, 3))
    y = gb.input("y", (2, 3))
    gb.output(gb.op("nn.relu", x), gb.op("add", x, y))
    return gb.finish()


def test_a_builder_graph_is_named_by_its_values(tmp_path):
    g = _builder_graph()
    assert g.input_names == ("x", "y") and g.output_names == ("relu", "add")
    assert " as " not in g.script()
    x, y = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    exe = tessera.compile(g)
    assert exe.input_names == ["x", "y"] and exe.output_names == ["relu", "add"]
    loaded = load_module(exe.export_library(tmp_path / "b.so"))
    assert loaded.input_names == ["x", "y"] and loaded.output_names == ["relu", "add"]
    for e in (exe, loaded):
        r, s = e(x=x, y=y)
        np.testing.assert_array_equal(r, np.maximum(x, 0))
        np.testing.assert_array_equal(s, x + y)


def test_graph_checks_its_public_names():
    g = _builder_graph()
    with pytest.raises(TesseraError, match="1 input names for 2 inputs"):
        Graph(g.inputs, g.outputs, g.nodes, input_names=["a"])
    with pytest.raises(TesseraError, match="inputs 0 and 1 are both named 'a'"):
        Graph(g.inputs, g.outputs, g.nodes, input_names=["a", "a"])
    with pytest.raises(TesseraError, match="the name of output 1 must be a non-empty str"):
        Graph(g.inputs, g.outputs, g.nodes, output_names=["o", ""])
    named = Graph(g.inputs, g.outputs, g.nodes, g.constants, g.name, ["a/0", "b:0"], ["r", "r"])
    assert named.output_names == ("r", "r")                     # outputs may share a name
    assert named.with_(name="other").input_names == ("a/0", "b:0")
    assert named.with_(inputs=g.inputs).input_names == ("x", "y")  # new inputs: names from the values


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_every_opt_level_keeps_the_names(odd, opt_level):
    _, g, params, _, _ = odd
    from tessera.graph.const_eval import bind_params

    bound = bind_params(g, params)
    assert list(bound.input_names) == IN_NAMES
    out = optimize(bound, opt_level)
    assert list(out.input_names) == IN_NAMES and list(out.output_names) == OUT_NAMES


def test_run_pass_refuses_a_pass_that_drops_the_names(odd):
    _, g, _, _, _ = odd

    def forgetful(graph, ctx):
        return Graph(graph.inputs, graph.outputs, graph.nodes, graph.constants, graph.name)

    with pytest.raises(TesseraError, match="graph pass forgetful changed the public names"):
        run_pass(forgetful, g, "c", "forgetful")


def test_bind_params_takes_the_public_or_the_value_name(odd):
    _, g, params, feeds, ref = odd
    from tessera.graph.const_eval import bind_params

    (value_name, w), = params.items()
    assert value_name != WEIGHT
    for key in (WEIGHT, value_name):
        exe = tessera.compile(g, {key: w}, opt_level=0)
        _check(exe.run(feeds), ref)
    with pytest.raises(TesseraError, match="twice"):
        bind_params(g, {WEIGHT: w, value_name: w})
    # unbound, the weight is an input under its ONNX name
    exe = tessera.compile(g, opt_level=0)
    assert exe.input_names == IN_NAMES + [WEIGHT]
    _check(exe.run(dict(feeds, **{WEIGHT: W})), ref)


def test_library_documents_without_names_and_malformed_names():
    doc = {"inputs": [{"id": 0, "name": "x"}], "constants": [{"id": 1, "name": "w"}],
           "nodes": [{"outputs": [{"id": 2, "name": "y"}]}], "outputs": [2, 0]}
    assert public_names(doc) == (["x"], ["y", "x"])                # a library written before the names
    assert public_names(dict(doc, input_names=["in/x"], output_names=["a", "b"])) == (["in/x"], ["a", "b"])
    with pytest.raises(TesseraError, match="output_names must be a list of 2"):
        public_names(dict(doc, output_names=["a"]), "m.so")
    with pytest.raises(TesseraError, match="input_names must be a list of 1"):
        public_names(dict(doc, input_names=[3]), "m.so")
    with pytest.raises(TesseraError, match="input_names repeat a name"):
        public_names(dict(doc, inputs=doc["inputs"] * 2, input_names=["a", "a"]), "m.so")


def test_model_h_survives_hostile_names(tmp_path):
    """Comment ends, comment starts, a trigraph, quotes, non-ASCII and a newline in the names: the header
    compiles with -std=c11 -Werror and its _NAME macros give the names back byte for byte."""
    g0 = _builder_graph()
    names_in, names_out = ['in*/x "q" ??/ \u00e9\n', "y"], ["out/*y*/", "a\\b"]
    g = Graph(g0.inputs, g0.outputs, g0.nodes, g0.constants, g0.name, names_in, names_out)
    tessera.compile(g).export_library(tmp_path / "m.so")
    (tmp_path / "u.c").write_text(textwrap.dedent("""
        #include <stdio.h>
        #include "m.h"
        int main(void) {
          fputs(TESSERA_MODEL_INPUT_0_NAME, stdout); putchar(0);
          fputs(TESSERA_MODEL_OUTPUT_0_NAME, stdout); putchar(0);
          fputs(TESSERA_MODEL_OUTPUT_1_NAME, stdout); putchar(0);
          return TESSERA_MODEL_INPUT_INDEX_in__x__q * 10 + TESSERA_MODEL_OUTPUT_INDEX_a_b;
        }
        """))
    proc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}", str(tmp_path / "u.c"),
                           "-o", str(tmp_path / "u")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(tmp_path / "u")], capture_output=True)
    assert run.returncode == 1
    assert run.stdout.split(b"\0")[:3] == [n.encode() for n in (names_in[0], *names_out)]
    assert load_module(tmp_path / "m.so").input_names == names_in
