"""A library built for CPU features the running machine lacks is refused, naming them, instead of
dying of SIGILL: its metadata records what its target's code may use (target.needed_features), the
loader checks that against /proc/cpuinfo, and the model entry's create function against CPUID (for
programs that use the library from C). The features a test uses are derived from this host, so the
tests hold on AVX2-only and AMX machines alike."""
import ctypes

import numpy as np
import pytest

import tessera
import tessera.target as target_mod
from tessera import te
from tessera.codegen.c_entry import includes
from tessera.codegen.c_files import section
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.executor import build_library
from tessera.graph.lowering import compile_graph
from tessera.runtime import load_module
from tessera.runtime.c_compiler import compile_source
from tessera.runtime.module import Module
from tessera.target import CPUID_FEATURES, Target, host_features, needed_features

# extensions gcc compiles for that no x86 CPU has all of (AMD-only ones, Intel-only ones)
CANDIDATES = ("fma4", "xop", "sse4a", "amx_tile", "avx512_vp2intersect", "avx512f", "avx2")


def _lacking() -> str:
    """A feature of CPUID_FEATURES this host does not have."""
    have = host_features()
    return next(f for f in CANDIDATES if f not in have)


def _add_func():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    return te.create_prim_func([A, B])


def _graph():
    gb = Builder("cpu")
    x = gb.input("x", (2, 8))
    gb.output(gb.op("negative", gb.op("nn.relu", x)))
    return gb.finish()


def test_a_library_records_what_its_target_needs():
    t = Target("c -mcpu=haswell")
    lib = tessera.build(_add_func(), target=t)
    assert lib.metadata["cpu_features"] == list(needed_features(t))
    assert {"avx2", "fma", "sse4_2"} <= set(lib.metadata["cpu_features"]) <= set(CPUID_FEATURES)
    assert "avx512f" not in lib.metadata["cpu_features"]


def test_loading_on_a_host_without_a_needed_feature_is_refused(monkeypatch):
    lib = tessera.build(_add_func(), target="c")
    needed = lib.metadata["cpu_features"]
    gone = "avx2" if "avx2" in needed else needed[-1]
    monkeypatch.setattr(target_mod, "host_features", lambda: frozenset(host_features()) - {gone})
    with pytest.raises(TesseraError, match=f"needs CPU features this machine lacks: {gone} .*illegal instruction"):
        Module(lib.path)


def test_a_kernel_library_for_a_feature_this_host_lacks_is_refused_on_load():
    feat = _lacking()
    t = Target(f"c -mattr=+{feat}")
    assert feat in needed_features(t)
    path = compile_source(tessera.backend.generate(_add_func(), t).text, t)
    with pytest.raises(TesseraError, match=f"lacks: .*{feat}.*built for target 'c -mattr=.*{feat}"):
        Module(path)


@pytest.fixture(scope="module")
def foreign_model():
    """An ahead-of-time library built for this host's features plus one it lacks (not loaded)."""
    feat = _lacking()
    compiled = compile_graph(_graph(), f"c -mattr=+{feat}", build_kernels=False)
    return feat, build_library(compiled).path


def test_an_aot_model_for_a_feature_this_host_lacks_is_refused_on_load(foreign_model):
    feat, path = foreign_model
    with pytest.raises(TesseraError, match=f"lacks: .*{feat}"):
        load_module(path)


def test_the_c_create_function_refuses_a_cpu_without_a_needed_feature(foreign_model):
    """A C program that links the library gets NULL from create and the missing features from
    error(NULL); the entry without an instance returns a status with the same message."""
    feat, path = foreign_model
    lib = ctypes.CDLL(path)
    lib.tessera_model_create.restype = ctypes.c_void_p
    lib.tessera_model_error.restype = ctypes.c_char_p
    lib.tessera_model_error.argtypes = [ctypes.c_void_p]
    assert lib.tessera_model_create() is None
    message = lib.tessera_model_error(None).decode()
    assert "needs CPU features this CPU lacks:" in message and feat in message.split("lacks:")[1]
    err = ctypes.create_string_buffer(512)
    x, y = np.ones((2, 8), np.float32), np.zeros((2, 8), np.float32)
    ins = (ctypes.c_void_p * 1)(x.ctypes.data)
    outs = (ctypes.c_void_p * 1)(y.ctypes.data)
    lib.tessera_model_run_with_workspace.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int32]
    ws = np.zeros(1024, np.uint8)
    assert lib.tessera_model_run_with_workspace(ws.ctypes.data, ins, outs, err, 512) == 5
    assert feat in err.value.decode() and not y.any()


def test_a_model_for_this_host_creates_and_runs():
    exe = tessera.compile(_graph(), opt_level=0)          # the AOT executor: create passed its CPU check
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(exe(x), -np.maximum(x, 0))


def test_the_cpuid_check_finds_every_feature_cpuinfo_reports():
    """The C check's table (leaf, register, bit, OS state) agrees with the kernel's view: a feature
    /proc/cpuinfo lists is one CPUID reports, so a library built here is never refused here."""
    names = sorted(CPUID_FEATURES)
    rows = ",\n".join(f'  {{"{f}", {CPUID_FEATURES[f][0]}u, {CPUID_FEATURES[f][1]}u, {CPUID_FEATURES[f][2]}u, '
                      f'{CPUID_FEATURES[f][3]}u, {CPUID_FEATURES[f][4]}ull}}' for f in names)
    src = "\n".join([includes(), section("tsr_entry.c", "tsr_cpu_missing"),
                     f"static const tsr_cpu_feature_t all[] = {{\n{rows}\n}};",
                     "int32_t has_feature(int32_t i) { return tsr_cpu_missing(&all[i], 1, \"c\", NULL, 0) == 0; }",
                     'const char tessera_metadata[] = "{}";', ""])
    lib = ctypes.CDLL(compile_source(src, Target("c -mcpu=x86-64"), name_hint="cpuid_check"))
    found = {f for i, f in enumerate(names) if lib.has_feature(i)}
    reported = host_features() & set(names)
    assert reported <= found, f"cpuinfo lists {sorted(reported - found)}, the CPUID check does not find them"
    assert _lacking() not in found
