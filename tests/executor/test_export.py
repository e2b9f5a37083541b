"""export_library / load_module of compiled graphs: one self-contained library (weights embedded),
a C header with static shapes, the same results without recompiling, no compiler and no onnx."""
import os
import pathlib
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import te
from tessera.errors import ShapeError, TesseraError
from tessera.graph import Builder
from tessera.graph.document import load_graph
from tessera.runtime import AotExecutor, GraphExecutor, load_module
from tessera.runtime.library import read_document

RNG = np.random.default_rng(3)


def _symbolic_graph():
    gb = Builder("exported")
    a = gb.input("a", ("N", 3))
    b = gb.input("b", ("M", 3))
    w = gb.const(np.array([[1, 2, 3]], dtype=np.float32), "w")
    c = gb.op("test.cat0", a, b)                  # output extent N + M
    d = gb.op("test.neg", c)
    lo, hi = gb.op("test.split2", gb.input("e", (2, 4)))
    gb.output(d, gb.op("test.sum_rows", d), gb.op("test.add", w, w), hi)
    return gb.finish()


def _static_graph():
    gb = Builder("static")
    x = gb.input("x", (2, 8))
    w = gb.const(RNG.standard_normal((2, 8)).astype(np.float32), "w")
    b = gb.const(RNG.standard_normal((2, 4)).astype(np.float32), "b")
    lo, hi = gb.op("test.split2", gb.op("test.neg", gb.op("test.add", x, w)))
    gb.output(gb.op("test.add", gb.op("test.add", lo, hi), b))
    return gb.finish()


@pytest.fixture(scope="module")
def static_export(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    exe = tessera.compile(_static_graph())
    path = exe.export_library(d / "m.so")
    return exe, path, d


def test_a_symbolic_graph_exports_without_a_c_api_and_loads_as_a_graph_executor(tmp_path):
    exe = tessera.compile(_symbolic_graph(), opt_level=0)
    path = exe.export_library(tmp_path / "g.so")
    assert sorted(os.listdir(tmp_path)) == ["g.so"]          # weights inside, no header
    loaded = load_module(path)
    assert isinstance(loaded, GraphExecutor)
    assert load_graph(loaded).script() == exe.graph.script()
    for n, m in ((1, 2), (4, 3)):
        args = (RNG.standard_normal((n, 3)).astype("float32"), RNG.standard_normal((m, 3)).astype("float32"),
                RNG.standard_normal((2, 4)).astype("float32"))
        for want, got in zip(exe(*args), loaded(*args)):
            np.testing.assert_array_equal(got, want)
    with pytest.raises(TesseraError, match="has no model entry points .*symbolic"):
        load_module(path, executor="aot")


def test_a_static_graph_exports_a_library_and_its_header(static_export):
    exe, path, d = static_export
    assert sorted(os.listdir(d)) == ["m.h", "m.so"]
    header = (d / "m.h").read_text()
    for text in ("tessera_model_t* tessera_model_create(void);", "int32_t tessera_model_run(",
                 "#define TESSERA_MODEL_INPUT_0_SHAPE {2, 8}", "#define TESSERA_MODEL_OUTPUT_0_NUMEL 8",
                 '#define TESSERA_MODEL_INPUT_0_DTYPE "float32"', "#define TESSERA_MODEL_WORKSPACE_BYTES"):
        assert text in header
    loaded = load_module(path)
    assert isinstance(loaded, AotExecutor) and loaded.header == header
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), exe(x))
    graph_exe = load_module(path, executor="graph")
    assert isinstance(graph_exe, GraphExecutor)
    np.testing.assert_array_equal(graph_exe(x), exe(x))
    assert load_graph(graph_exe).script() == exe.graph.script()


def test_the_weights_live_inside_the_library(static_export):
    exe, path, _ = static_export
    loaded = load_module(path, executor="graph")
    for (v, want), (u, got) in zip(exe.graph.constants.items(), load_graph(loaded).constants.items()):
        assert v.name == u.name and not got.flags.writeable
        np.testing.assert_array_equal(got, want)
    doc = read_document(path)
    assert doc["weights"]["symbol"] == "tessera_model_weights" and "params_file" not in doc
    assert doc["weights"]["nbytes"] >= sum(a.nbytes for a in exe.graph.constants.values())


def test_bfloat16_constants_survive_the_embedding(tmp_path):
    gb = Builder()
    c = gb.const(np.array([1.5, -2.25, 3.0], dtype=ml_dtypes.bfloat16), "c")
    x = gb.input("x", (3,), "bfloat16")
    gb.output(gb.op("test.add", x, c))
    exe = tessera.compile(gb.finish())
    x = np.array([1, 2, 3], dtype=ml_dtypes.bfloat16)
    for executor in ("aot", "graph"):
        loaded = load_module(exe.export_library(tmp_path / "b.so"), executor=executor)
        np.testing.assert_array_equal(loaded(x).astype(np.float32), np.array([2.5, -0.25, 6.0], np.float32))


def test_the_header_compiles_with_every_io_dtype(tmp_path):
    gb = Builder("kinds")
    m = gb.input("mask", (4,), "bool")
    h = gb.input("h", (2, 2), "bfloat16")
    gb.output(gb.op("test.to_int32", m), gb.op("test.neg", h), gb.op("test.neg", gb.input("d", (3,), "float64")))
    exe = tessera.compile(gb.finish())
    exe.export_library(tmp_path / "model.so")
    (tmp_path / "use.c").write_text(textwrap.dedent("""
        #include "model.h"
        tessera_model_input_0_t mask[TESSERA_MODEL_INPUT_0_NUMEL];      /* bool */
        tessera_model_input_1_t h[TESSERA_MODEL_INPUT_1_NUMEL];         /* bfloat16 bits */
        tessera_model_output_0_t counts[TESSERA_MODEL_OUTPUT_0_NUMEL];  /* int32 */
        _Static_assert(sizeof mask == TESSERA_MODEL_INPUT_0_NBYTES, "bool is a byte");
        _Static_assert(sizeof h == TESSERA_MODEL_INPUT_1_NBYTES, "bfloat16 is two bytes");
        _Static_assert(sizeof counts == TESSERA_MODEL_OUTPUT_0_NBYTES, "int32");
        int main(void) { return TESSERA_MODEL_NUM_INPUTS == 3 && TESSERA_MODEL_NUM_OUTPUTS == 3 ? 0 : 1; }
        """))
    proc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", f"-I{tmp_path}", str(tmp_path / "use.c"),
                           "-o", str(tmp_path / "use")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run([str(tmp_path / "use")]).returncode == 0
    x = {"mask": np.array([True, False, True, True]), "h": np.ones((2, 2), ml_dtypes.bfloat16),
         "d": np.arange(3.0)}
    for a, b in zip(load_module(tmp_path / "model.so").run(x), exe.run(x)):
        np.testing.assert_array_equal(a, b)


def test_a_loaded_library_re_exports_by_copying_and_keeps_its_prefix(static_export, tmp_path):
    exe, path, _ = static_export
    loaded = load_module(path)
    again = loaded.export_library(tmp_path / "copy.so")
    assert pathlib.Path(again).read_bytes() == pathlib.Path(path).read_bytes()
    assert (tmp_path / "copy.h").read_text() == loaded.header
    with pytest.raises(TesseraError, match="renaming it to 'other' needs the compiled graph"):
        loaded.export_library(tmp_path / "other.so", prefix="other")


def test_the_prefix_names_the_c_api(tmp_path):
    exe = tessera.compile(_static_graph())
    path = exe.export_library(tmp_path / "net.so", prefix="net")
    assert "net_t* net_create(void);" in (tmp_path / "net.h").read_text()
    assert "#define NET_NUM_INPUTS 1" in (tmp_path / "net.h").read_text()
    loaded = load_module(path)
    assert loaded.prefix == "net"
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), exe(x))
    aot = tessera.compile(_static_graph(), executor="aot")
    renamed = aot.export_library(tmp_path / "r.so", prefix="renamed")
    assert load_module(renamed).prefix == "renamed"


def test_loading_needs_neither_the_compiler_nor_onnx(static_export, tmp_path):
    exe, path, _ = static_export
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", exe(x))
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        BLOCK = ("onnx", "onnxruntime", "tessera.frontend", "tessera.te", "tessera.tir", "tessera.ops",
                 "tessera.arith", "tessera.autotune", "tessera.runtime.c_compiler", "tessera.graph",
                 "tessera.backend", "tessera.zoo")

        class Blocker(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCK):
                    raise ImportError("blocked for this test: " + name)

        sys.meta_path.insert(0, Blocker())
        import numpy as np
        from tessera.runtime import load_module
        x, want = np.load({str(tmp_path / 'x.npy')!r}), np.load({str(tmp_path / 'y.npy')!r})
        for executor in (None, "graph"):
            exe = load_module({str(path)!r}, executor=executor)
            np.testing.assert_array_equal(exe(x), want)
            print(type(exe).__name__, "ok")
        """)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable), CC="/nonexistent/cc",
               TESSERA_CACHE_DIR=str(tmp_path / "empty-cache"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["AotExecutor ok", "GraphExecutor ok"]
    assert not (tmp_path / "empty-cache").exists()


def test_loaded_graph_profiles_with_the_library_timers(tmp_path):
    gb = Builder()
    x = gb.input("x", (16,))
    gb.output(gb.op("test.neg", x))
    loaded = load_module(tessera.compile(gb.finish()).export_library(tmp_path / "n.so"))
    report = loaded.profile({"x": np.ones(16, np.float32)}, number=1, repeat=1, show=False)
    assert [r.node for r in report.rows] == ["neg"]


def test_an_old_library_format_asks_for_a_re_export(tmp_path):
    from tessera.runtime.c_compiler import compile_source

    src = ('const char tessera_metadata[] = "{\\"version\\": 1, \\"functions\\": []}";\n'
           'const char tessera_graph[] = "{\\"format\\": \\"tessera-graph\\", \\"version\\": 1}";\n')
    path = compile_source(src, "c", name_hint="old")
    with pytest.raises(TesseraError, match="version 1; this tessera reads versions 2, 3 .*re-export"):
        load_module(path)


def test_kernel_libraries_still_load_as_modules(tmp_path):
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2, name="B")
    lib = tessera.build(te.create_prim_func([A, B]))
    p = lib.export_library(tmp_path / "k.so")
    mod = load_module(p)
    assert isinstance(mod, tessera.runtime.Module)
    with pytest.raises(TesseraError, match="kernel library, not a compiled model"):
        load_module(p, executor="aot")


def test_exporting_into_a_missing_folder_is_an_error(tmp_path):
    exe = tessera.compile(_static_graph())
    with pytest.raises(TesseraError, match="folder .*nowhere does not exist"):
        exe.export_library(tmp_path / "nowhere" / "m.so")
    with pytest.raises(ShapeError):
        tessera.compile(_symbolic_graph(), executor="aot")
