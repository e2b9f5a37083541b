"""Codegen support for tensor intrinsics: `T.address_of(A[i])` pointer arguments, C source imported
once per translation unit (pragma_import_c), and the CPU features a `tensor_intrin` region needs."""
import numpy as np
import pytest

import tessera
from tessera.codegen.c import generate, generate_module
from tessera.errors import TesseraError, UnsupportedOpError
from tessera.ir import (AttrStmt, Buffer, Call, Evaluate, For, PrimFunc, StringImm, Var, const, seq)
from tessera.tir.transform import lower

FILL = """/* p[0:n] = v */
static void fill_span(float* p, int32_t n, float v) {
  for (int32_t k = 0; k < n; ++k) p[k] = v;
}"""


def _addr(load):
    return Call("handle", "address_of", [load])


def _fill_func(name="main", code=FILL, feature=""):
    """A[0:8] = 0, A[8:16] = 1 through the imported fill_span, twice (two loop nests)."""
    A = Buffer((16,), "float32", "A")

    def call(i):
        body = Evaluate(Call("handle", "fill_span", [_addr(A[i * 8]), 8, i.astype("float32")]))
        body = AttrStmt(StringImm("fill_span"), "pragma_import_c", StringImm(code), body)
        if feature:
            body = AttrStmt(StringImm("fill_intrin"), "tensor_intrin", StringImm(feature), body)
        return body
    i, j = Var("i"), Var("j")
    body = seq(For(i, 0, 2, "serial", call(i)), For(j, 0, 2, "serial", call(j)))   # two call sites
    return PrimFunc([A], body, name=name)


def test_imported_source_is_emitted_once_and_called_with_addresses():
    f = _fill_func()
    lib = tessera.build(f)
    a = np.full(16, -1, np.float32)
    lib(a)
    np.testing.assert_array_equal(a, [0] * 8 + [1] * 8)
    src = lib.get_source()
    assert src.count("static void fill_span(") == 1
    assert "extern void fill_span" not in src
    assert "fill_span(&A[i * 8], 8, (float)i);" in src
    assert "fill_span(&A[j * 8], 8, (float)j);" in src
    assert "float* restrict A" in src and "const float* restrict A" not in src   # written through a pointer


def test_two_functions_share_one_copy_and_conflicting_sources_are_refused():
    src = generate_module([lower(_fill_func("f1")), lower(_fill_func("f2"))])
    assert src.count("static void fill_span(") == 1
    other = FILL.replace("p[k] = v;", "p[k] = v + 1;")
    with pytest.raises(TesseraError, match=r"C function fill_span is defined by two different imported sources"):
        generate_module([lower(_fill_func("f1")), lower(_fill_func("f2", code=other))])


def test_address_of_element_zero_and_plain_extern_prototypes():
    A = Buffer((4,), "float32", "A")
    call = Evaluate(Call("handle", "my_extern", [_addr(A[0]), const(4)]))
    src = generate(lower(PrimFunc([A], call)))
    assert "my_extern(A, 4);" in src
    assert "extern void my_extern(float*, int32_t);" in src
    with pytest.raises(TesseraError, match=r"address_of in main takes one scalar buffer element"):
        generate(lower(PrimFunc([A], Evaluate(Call("handle", "my_extern", [_addr(const(1))])))))


def test_tensor_intrin_regions_need_their_cpu_features():
    f = lower(_fill_func(feature="avx512f,avx512vnni"))
    with pytest.raises(UnsupportedOpError, match=r"tensor intrinsic 'fill_intrin' in main needs the CPU features "
                                                 r"avx512f, avx512_vnni, which target 'c -mcpu=haswell -mattr=\+avx2' "
                                                 r"lacks \(its features: [a-z0-9_, ]*avx2[a-z0-9_, ]*\); build for a target that has them"):
        generate(f, "c -mcpu=haswell -mattr=+avx2")
    src = generate(f, "c -mcpu=haswell -mattr=+avx512f,+avx512vnni")
    assert "/* tensor intrinsic fill_intrin */" in src
