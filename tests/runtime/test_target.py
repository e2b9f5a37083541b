"""Target parsing, canonical text, CPU features and compiler flags."""
import os
import re
import subprocess

import pytest

import tessera
from tessera.errors import TesseraError
from tessera.target import Target
from tessera.toolchain import gcc_version, workaround_flags


def cpuinfo_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


EXAMPLES = ["c", "llvm", "c -mcpu=native -num-threads=2", "c -mcpu=znver3", "c -sanitize=address",
            "c -sanitize=undefined,address",
            "c -mattr=+avx2,+fma", "cuda", "cuda -arch=sm_90", "opencl", "vdla"]


@pytest.mark.parametrize("text", EXAMPLES)
def test_canonical_text_round_trips(text):
    t = Target(text)
    again = Target(str(t))
    assert again == t and hash(again) == hash(t) and str(again) == str(t)
    assert Target(t) is t


def test_parsed_fields():
    assert Target("c").kind == "c" and Target("c").mcpu == "native"
    assert Target("llvm") == Target("c") == Target("c -mcpu=native")
    t = Target("c -mcpu=native -num-threads=2")
    assert t.num_threads == 2 and str(t) == "c -num-threads=2"
    assert Target("c").num_threads == len(os.sched_getaffinity(0))
    assert Target("c -num-threads=0").num_threads == len(os.sched_getaffinity(0))
    z = Target("c -mcpu=znver3")
    assert z.mcpu == "znver3" and str(z) == "c -mcpu=znver3"
    assert Target("c -sanitize=address").attrs == {"sanitize": "address"}
    both = Target("c -sanitize=undefined,address")
    assert both.attrs == {"sanitize": "address,undefined"} and str(both) == "c -sanitize=address,undefined"
    assert both == Target("c -sanitize=address,undefined") == Target("c -sanitize=address,undefined,address")
    cuda = Target("cuda -arch=sm_90")
    assert cuda.kind == "cuda" and cuda.attrs == {"arch": "sm_90"} and cuda.mcpu is None
    assert Target("opencl").kind == "opencl" and Target("vdla").kind == "vdla"
    assert Target("c -num-threads=2") != Target("c -num-threads=3")
    assert Target("c") == "llvm" and Target("c") != "cuda"


def test_option_order_does_not_matter():
    a = Target("c -num-threads=4 -mcpu=znver3 -mattr=+fma,+avx2")
    b = Target("c --mcpu=znver3 -mattr=+avx2,+fma -num_threads=4")
    assert a == b and str(a) == "c -mcpu=znver3 -mattr=+avx2,+fma -num-threads=4"


@pytest.mark.parametrize("text, words", [
    ("rocm", ["unknown target kind", "c", "cuda", "opencl", "vdla"]),
    ("", ["empty target"]),
    ("c -arch=sm_90", ["unknown option -arch", "-mcpu", "-num-threads"]),
    ("cuda -mcpu=native", ["unknown option -mcpu", "-arch"]),
    ("vdla -mcpu=x", ["unknown option -mcpu", "options of vdla: -sync"]),
    ("vdla -sync=fast", ["-sync", "tokens", "serial"]),
    ("c -num-threads=two", ["-num-threads", "integer"]),
    ("c -num-threads=-1", ["-num-threads"]),
    ("c -sanitize=memory", ["address", "undefined"]),
    ("c -sanitize=address,thread", ["-sanitize", "'address,thread'", "address", "undefined"]),
    ("c -sanitize=address,", ["-sanitize", "'address,'"]),
    ("cuda -arch=hopper", ["sm_90"]),
    ("c -mcpu", ["expected -key=value"]),
    ("c mcpu=native", ["expected -key=value"]),
    ("c -mcpu=a -mcpu=b", ["given twice"]),
    ("c -mattr=+av x2", ["expected -key=value"]),
    ("c -mattr=+a$x", ["not a feature name"]),
])
def test_errors_name_the_problem(text, words):
    with pytest.raises(TesseraError) as info:
        Target(text)
    for w in words:
        assert w in str(info.value)


def test_non_string_is_refused():
    with pytest.raises(TesseraError, match="a target is a string"):
        Target(42)


def test_host_features_match_cpuinfo():
    flags = cpuinfo_flags()
    host = Target.host()
    assert host == Target("c")
    assert host.features == frozenset(flags)
    for name in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                 "amx_tile", "amx_int8", "amx_bf16"):
        assert host.has_feature(name) == (name in flags)
    assert host.has_feature("avx512vnni") == ("avx512_vnni" in flags)
    assert host.has_feature("AMX-TILE") == ("amx_tile" in flags)
    expect = 512 if "avx512f" in flags else 256 if {"avx2", "avx"} & flags else 128
    assert host.vector_bits == expect


def compiler_macros(*flags):
    """The C compiler's predefined macros for `flags` (what the CPU features must agree with)."""
    from tessera.toolchain import find_compiler
    out = subprocess.run(find_compiler() + list(flags) + ["-dM", "-E", "-x", "c", "-"], input="",
                         capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"#define (__[A-Z0-9_]+__) 1", out))


@pytest.mark.parametrize("mcpu, macros, lacks", [
    ("x86-64", [], ["avx", "avx2", "fma", "avx512f"]),
    ("haswell", ["__AVX2__", "__FMA__"], ["avx512f", "avx512_vnni"]),
    ("x86-64-v3", ["__AVX2__", "__FMA__"], ["avx512f"]),
    ("skylake-avx512", ["__AVX512F__", "__AVX512BW__", "__AVX512VL__", "__AVX2__"], ["avx512_vnni", "amx_tile"]),
    ("cascadelake", ["__AVX512F__", "__AVX512VNNI__"], ["amx_tile"]),
    ("sapphirerapids", ["__AVX512F__", "__AVX512VNNI__", "__AMX_TILE__", "__AMX_INT8__"], []),
])
def test_named_cpu_features_are_the_compilers(mcpu, macros, lacks):
    """A named -mcpu has what the C compiler enables for -march=<mcpu>, whatever the host has."""
    t = Target(f"c -mcpu={mcpu}")
    assert compiler_macros(f"-march={mcpu}") >= set(macros)
    for macro in macros:
        assert t.has_feature(macro.strip("_"))
    for feat in lacks:
        assert not t.has_feature(feat)
    wide = "__AVX512F__" in macros
    assert t.vector_bits == (512 if wide else 256 if "__AVX2__" in macros else 128)
    assert ("-mprefer-vector-width=512" in t.cflags()) == wide


def test_mattr_on_a_named_cpu_adds_and_takes_away_what_follows():
    t = Target("c -mcpu=skylake-avx512 -mattr=+avx512vnni")
    assert t.has_feature("avx512_vnni") and t.has_feature("avx512f") and t.has_feature("avx2")
    narrow = Target("c -mcpu=sapphirerapids -mattr=-avx512f")
    assert narrow.vector_bits == 256 and narrow.has_feature("avx2")
    assert not any(f.startswith("avx512") for f in narrow.features)


def test_unknown_cpu_is_refused_naming_it():
    with pytest.raises(TesseraError, match="-march=not-a-cpu"):
        Target("c -mcpu=not-a-cpu")


def test_turning_avx512_off_on_the_host_drops_its_extensions():
    """-mattr=-avx512f on the host: the AVX2 half of an AVX-512 machine (VNNI, BW, ... go with it)."""
    flags = cpuinfo_flags()
    t = Target("c -mattr=-avx512f")
    assert not any(f.startswith("avx512") for f in t.features)
    assert t.vector_bits == (256 if {"avx2", "avx"} & flags else 128)
    assert t.has_feature("avx2") == ("avx2" in flags) and t.has_feature("fma") == ("fma" in flags)
    assert "-mno-avx512f" in t.cflags() and "-mprefer-vector-width=512" not in t.cflags()


def test_mattr_modifies_host_features():
    flags = cpuinfo_flags()
    t = Target("c -mattr=-avx2,+amx_int8")
    assert "avx2" not in t.features and "amx_int8" in t.features
    # what needs AVX2 goes with it; nothing the host lacks appears but what -mattr asked for
    assert not any(f.startswith("avx512") for f in t.features)
    assert t.features - {"amx_int8"} <= frozenset(flags - {"avx2"})
    added = Target("c -mattr=+amx_int8")
    assert added.features - {"amx_int8"} == frozenset(flags - {"amx_int8"})


def test_cflags():
    base = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=gnu11"]
    host = Target("c").cflags()
    assert host[:6] == base
    assert ("-mprefer-vector-width=512" in host) == ("avx512f" in cpuinfo_flags())
    znver3 = Target("c -mcpu=znver3")
    assert znver3.cflags() == ["-O3", "-march=znver3"] + base[2:] + workaround_flags(znver3.features)
    asan = Target("c -sanitize=address").cflags()
    assert asan[-2:] == ["-fsanitize=address", "-fno-omit-frame-pointer"]
    ubsan = Target("c -sanitize=undefined").cflags()
    assert ubsan[-3:] == ["-fsanitize=undefined", "-fno-omit-frame-pointer",
                          "-fno-sanitize-recover=undefined"]
    both = Target("c -sanitize=undefined,address").cflags()
    assert both[-3:] == ["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                         "-fno-sanitize-recover=undefined"]
    avx512 = Target("c -mcpu=x86-64-v3 -mattr=+avx512f,-amx-tile,+avx512_vnni").cflags()
    assert "-mavx512f" in avx512 and "-mno-amx-tile" in avx512 and "-mavx512vnni" in avx512
    assert "-mprefer-vector-width=512" in avx512
    with pytest.raises(TesseraError, match="not compiled by a C compiler"):
        Target("cuda").cflags()


def test_immutable_and_package_level_name():
    t = Target("c")
    with pytest.raises(AttributeError):
        t.kind = "cuda"
    assert tessera.Target is Target and tessera.Target(t) is t


def test_gcc_with_the_masked_load_bug_gets_loop_if_conversion_off_for_avx_targets():
    """GCC < 12.4 / 13.3 miscompiles if-converted loops with masked loads (PR 114375) on AVX,
    AVX2 and AVX-512; SSE-only targets have no masked loads; other compilers are left alone."""
    v = gcc_version()
    buggy = v is not None and (v < (12, 4, 0) or (13, 0, 0) <= v < (13, 3, 0))
    for text, avx in (("c -mcpu=x86-64-v2", False), ("c -mcpu=sandybridge", True), ("c -mcpu=haswell", True),
                      ("c -mcpu=skylake-avx512", True)):
        t = Target(text)
        assert t.has_feature("avx") == avx
        assert ("-fno-tree-loop-if-convert" in t.cflags()) == (buggy and avx), text
