"""The renderers' shared parts: the C runtime files shipped as package data (runtime_c/), the one
C-string escaper, the one timer loop, and the C-style base serving a renderer other than C's."""
import ctypes
import fnmatch
import os
import subprocess
import tomllib

import pytest

import tessera
from tessera import te
from tessera.codegen import c_files
from tessera.codegen.c import generate
from tessera.codegen.c_base import CodeGenCBase, HelperRegistry, c_comment, c_string
from tessera.codegen.c_entry import entry_helpers, timer_loop
from tessera.errors import TesseraError, UnsupportedOpError
from tessera.ir import (Buffer, BufferLoad, BufferStore, Call, Evaluate, FloatImm, For, IntImm, IterVar,
                        PrimFunc, SeqStmt, Var)
from tessera.ir.stmt import Allocate
from tessera.runtime.c_compiler import compile_source
from tessera.toolchain import find_compiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTILE = ['', 'plain', 'quote " and \\ back\\slash', 'a??/b ??= ??( trigraphs?', 'new\nline\n', '\n',
           'tab\tcr\r nul\x00 del\x7f', 'é ∑ 🚀', '*/ closes /* opens', '%s %d percent', '\\0123', 'x' * 250]


# -- the C runtime files -------------------------------------------------------------------------
def _runtime_files():
    return sorted(f for f in os.listdir(c_files.DIRECTORY) if not f.startswith("."))


def test_runtime_files_are_package_data():
    """Every file in runtime_c/ matches pyproject's package-data globs (else a wheel lacks it)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        globs = tomllib.load(f)["tool"]["setuptools"]["package-data"]["tessera.codegen"]
    files = _runtime_files()
    assert {"tsr_abi.h", "tsr_entry.c", "tsr_includes.h"} <= set(files)
    for name in files:
        assert any(fnmatch.fnmatch(f"runtime_c/{name}", g) for g in globs), name


@pytest.mark.parametrize("name", ["tsr_abi.h", "tsr_entry.c", "tsr_includes.h"])
def test_runtime_file_compiles_alone(name, tmp_path):
    """Each file is real C, under the dialect generated units are built with (Target flags: -std=gnu11)."""
    cc = find_compiler()
    proc = subprocess.run(cc + ["-std=gnu11", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-function",
                                "-Wno-unused-parameter", "-Werror", "-x", "c", os.path.join(c_files.DIRECTORY, name)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_sections_and_their_dependencies():
    secs = c_files.sections("tsr_entry.c")
    assert "#include" not in "".join(s.code for s in secs.values())  # the preamble is never pasted
    assert secs["tsr_get_tensor"].deps == ("tsr_kind_name", "tsr_dtype_name")
    used = entry_helpers("  TSR_TRY(tsr_get_tensor(args, kinds, 0, \"A\", 1, 2, 32, \"float32\", &t, err, err_len));")
    names = [next(n for n, s in secs.items() if s.code == u) for u in used]
    assert names == ["TSR_TRY", "tsr_kind_name", "tsr_dtype_name", "tsr_get_tensor"]  # file order, deps in
    assert entry_helpers("int32_t f(void) { return 0; }") == []
    with pytest.raises(TesseraError, match="no section 'nope'.*tsr_get_tensor"):
        c_files.section("tsr_entry.c", "nope")


def test_generated_unit_pastes_only_used_sections():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    src = generate(tessera.lower(te.create_prim_func([A, B])))
    assert c_files.section("tsr_entry.c", "tsr_get_tensor") in src
    assert c_files.section("tsr_abi.h", "tessera_tensor_t") in src
    assert "tsr_get_int(" not in src and "tsr_check_fits" not in src  # no scalar, no symbolic extent
    assert "//@" not in src and '#include "tsr_' not in src  # self-contained


def test_missing_runtime_file_names_it(monkeypatch, tmp_path):
    monkeypatch.setattr(c_files, "DIRECTORY", str(tmp_path))
    monkeypatch.setattr(c_files, "_CACHE", {})
    with pytest.raises(TesseraError, match=r"tsr_entry\.c cannot be read.*package data"):
        c_files.sections("tsr_entry.c")
    (tmp_path / "bad.c").write_text("//@ a: b\nint x;\n")
    with pytest.raises(TesseraError, match="section a depends on b"):
        c_files.sections("bad.c")


# -- the one C-string escaper --------------------------------------------------------------------
def test_c_string_text():
    assert c_string('a"b\\c') == '"a\\"b\\\\c"'
    assert c_string("??/") == '"\\?\\?/"'  # no trigraph survives
    assert c_string("é\n\t") == '"\\303\\251\\n\\011"'
    assert c_string("abcdefg", 3, sep="\n  ") == '"abc"\n  "def"\n  "g"'
    assert c_string("a\nb\n", lines=True) == '"a\\n"\n"b\\n"'
    assert c_string("", 3) == '""' and c_string("", lines=True) == '""'
    with pytest.raises(TesseraError, match="width"):
        c_string("x", 0)


def test_c_comment():
    for text in ["*/", "/*", "a*/b/*c", "*//*", "/*/", "**//", "x/**/y"]:
        out = c_comment(text)
        assert "*/" not in out and "/*" not in out, (text, out)
    assert c_comment("plain % text") == "plain % text"


def test_c_string_round_trips_through_the_compiler():
    """Every form (plain, pieces of a width, a piece per line) compiles under -std=c11 -Wall -Werror
    to exactly the UTF-8 bytes of the text."""
    forms = [lambda t: c_string(t), lambda t: c_string(t, 7, sep="\n  "), lambda t: c_string(t, lines=True),
             lambda t: c_string(t, 5, lines=True)]
    lines = ["#include <stdint.h>"]
    expected = []
    for i, text in enumerate(HOSTILE):
        for j, form in enumerate(forms):
            lines.append(f"/* {c_comment(text)} */ const char s_{i}_{j}[] = {form(text)};")
            lines.append(f"const int64_t n_{i}_{j} = sizeof s_{i}_{j} - 1;")
            expected.append((f"{i}_{j}", text.encode("utf-8")))
    target = tessera.Target("c")
    path = compile_source("\n".join(lines) + "\n", target, name_hint="c_string_round_trip")
    lib = ctypes.CDLL(path)
    for key, want in expected:
        n = ctypes.c_int64.in_dll(lib, f"n_{key}").value
        got = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, f"s_{key}")), n)
        assert got == want, (key, got, want)


# -- the one timer loop --------------------------------------------------------------------------
def test_function_timer_is_the_timer_loop():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    src = generate(tessera.lower(te.create_prim_func([A, B])))
    assert "\n".join(timer_loop("TSR_TRY(main_kernel(a.A, a.B))")) in src
    loop = timer_loop("if (f() != 0) return 1", now="clock_s", indent="    ")
    assert all(x.startswith("    ") for x in loop)
    assert "        double t0 = clock_s();" in loop
    assert "        for (int64_t k = 0; k < n; ++k) if (f() != 0) return 1;" in loop


# -- the C-style base serves other renderers by attributes ---------------------------------------
class _GPUStyle(CodeGenCBase):
    """A renderer set up like a CUDA one would be: attributes and a failure report, nothing else."""

    backend_name = "test-gpu"
    kernel_prefix = 'extern "C" __global__ '
    kernel_return = "void"
    restrict = "__restrict__"
    smem_prefix = "__shared__ "
    barrier = "__syncthreads()"
    thread_index = {"blockIdx.x": "blockIdx.x", "threadIdx.x": "threadIdx.x"}
    array_attribute = ""

    def fail(self, fmt_args):
        self.emit("__trap();")


def _gpu_program():
    A, B = Buffer((256,), "float32", "A"), Buffer((256,), "float32", "B")
    S = Buffer((64,), "float32", "S", scope="shared")
    bx, tx = Var("bx"), Var("tx")
    idx = bx * 64 + tx
    body = SeqStmt([BufferStore(S, BufferLoad(A, [idx]), [tx]),
                    Evaluate(Call("int32", "tvm_storage_sync", [])),
                    BufferStore(B, BufferLoad(S, [IntImm("int32", 63) - tx]) * FloatImm("float32", 2.0), [idx])])
    inner = For(tx, 0, 64, "thread_binding", body, thread_binding=IterVar(None, tx, "thread", "threadIdx.x"))
    return A, B, For(bx, 0, 4, "thread_binding", Allocate(S, inner),
                     thread_binding=IterVar(None, bx, "thread", "blockIdx.x"))


def test_base_renders_a_gpu_style_kernel_from_attributes():
    A, B, stmt = _gpu_program()
    gen = _GPUStyle(HelperRegistry())
    for buf in (A, B):
        gen.buffer_names[buf] = gen.names.define(buf)
    gen.stmt(stmt)
    text = gen.kernel_text("k", [gen.buffer_param(A.dtype, "A", const=True),
                                 gen.buffer_param(B.dtype, "B", const=False)], "k: A, B")
    assert text.startswith('/* k: A, B */\nextern "C" __global__ void k(const float* __restrict__ A, '
                           'float* __restrict__ B) {')
    assert "const int32_t bx = (int32_t)blockIdx.x;" in text
    assert "const int32_t tx = (int32_t)threadIdx.x;" in text
    assert "__shared__ float S[64];" in text
    assert "__syncthreads();" in text
    assert "for (" not in text and "omp" not in text and "free(" not in text


def test_c_renderer_refuses_gpu_constructs_by_name():
    A, B, stmt = _gpu_program()
    f = PrimFunc([A, B], stmt)
    with pytest.raises(TesseraError, match="loop bx is bound to blockIdx.x; build for a GPU target"):
        generate(f)
    gen = _GPUStyle(HelperRegistry())
    gen.thread_index = {"threadIdx.x": "threadIdx.x"}
    with pytest.raises(TesseraError, match="bound to blockIdx.x; the test-gpu backend binds only threadIdx.x"):
        gen.stmt(stmt)
    x = Var("x")
    sync = PrimFunc([A], For(x, 0, 4, "serial", Evaluate(Call("int32", "tvm_storage_sync", []))))
    with pytest.raises(UnsupportedOpError, match="tvm_storage_sync.*no barrier"):
        generate(sync)
    S = Buffer((4,), "float32", "S", scope="shared")
    shared = PrimFunc([A], Allocate(S, BufferStore(S, FloatImm("float32", 0.0), [IntImm("int32", 0)])))
    with pytest.raises(TesseraError, match="storage scope 'shared'.*C backend cannot allocate"):
        generate(shared)
