"""The low-precision storage dtypes in the IR and the runtime: names, parsed parts, numpy (ml_dtypes)
mapping, tensors of them through the ABI, and ONNX's packed layout of the sub-byte types."""
import ml_dtypes
import numpy as np
import pytest
from onnx import numpy_helper

import tessera
from tessera.abi import DTYPE_CODE
from tessera.errors import DTypeError, ShapeError
from tessera.ir.dtype import DataType, dtype_of_numpy, numpy_dtype

# name -> (code, bits, is_float, is_subbyte)
LOWP = {
    "float8_e4m3fn": ("float8_e4m3fn", 8, True, False),
    "float8_e4m3fnuz": ("float8_e4m3fnuz", 8, True, False),
    "float8_e5m2": ("float8_e5m2", 8, True, False),
    "float8_e5m2fnuz": ("float8_e5m2fnuz", 8, True, False),
    "float4_e2m1fn": ("float4_e2m1fn", 4, True, True),
    "int4": ("int", 4, False, True),
    "uint4": ("uint", 4, False, True),
    "int2": ("int", 2, False, True),
    "uint2": ("uint", 2, False, True),
}
SUBBYTE = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3), "float4_e2m1fn": (-6, 6)}


@pytest.mark.parametrize("name", LOWP)
def test_lowp_dtype_parses_into_its_parts(name):
    code, bits, is_float, subbyte = LOWP[name]
    dt = DataType(name)
    assert (dt.code, dt.bits, dt.lanes) == (code, bits, 1)
    assert dt.is_float() == is_float and dt.is_integer() == (not is_float)
    assert dt.is_subbyte() == subbyte and dt.is_lowp()
    assert dt.is_minifloat() == is_float
    assert dt.bytes == 1                                    # one byte an element in memory
    vec = DataType(f"{name}x4")
    assert (str(vec), vec.lanes, vec.element_of()) == (f"{name}x4", 4, dt)
    assert dt.with_lanes(8) == f"{name}x8"


@pytest.mark.parametrize("name", LOWP)
def test_lowp_dtype_maps_to_the_ml_dtypes_numpy_type_and_back(name):
    npdt = numpy_dtype(name)
    assert npdt == np.dtype(getattr(ml_dtypes, name))
    assert dtype_of_numpy(npdt) == name and DataType(npdt) == name


def test_the_usual_dtypes_keep_their_meaning():
    for name in ("float32", "bfloat16", "float16", "int8", "uint8", "bool", "int64"):
        assert not DataType(name).is_lowp()
    assert DataType("uint1").is_subbyte() is False and DataType("bool").is_subbyte() is False
    assert DataType("bfloat16").is_minifloat() is False


@pytest.mark.parametrize("bad", ["float8", "float8_e4m3", "float8_e3m4", "int3", "uint7", "float4",
                                 "float8_e8m0fnu", "float6_e2m3fn", "int4x0"])
def test_unknown_lowp_names_are_refused(bad):
    with pytest.raises(DTypeError):
        DataType(bad)


@pytest.mark.parametrize("name", LOWP)
def test_an_ndarray_of_a_lowp_type_carries_its_abi_code_and_bits(name):
    x = np.arange(6).astype(np.float32).reshape(2, 3).astype(numpy_dtype(name))
    a = tessera.nd.array(x)
    assert a.dtype == name and a.shape == (2, 3) and a.nbytes == 6
    code, bits = a._tensor.code, a._tensor.bits
    assert code == DTYPE_CODE[DataType(name).code] and bits == DataType(name).bits
    np.testing.assert_array_equal(a.numpy().view(np.uint8), x.view(np.uint8))
    e = tessera.nd.empty((4,), name)
    assert e.dtype == name and e.numpy().dtype == numpy_dtype(name)


@pytest.mark.parametrize("name", SUBBYTE)
@pytest.mark.parametrize("shape", [(1,), (2,), (3,), (5,), (7,), (3, 3), (2, 3, 5), (0,)])
def test_pack_subbyte_is_onnx_packed_layout(name, shape):
    """Odd element counts included: the last byte's spare bits are zero, as ONNX writes raw_data."""
    lo, hi = SUBBYTE[name]
    rng = np.random.default_rng(sum(shape) + len(name))
    x = rng.integers(lo, hi + 1, size=shape).astype(np.float32).astype(numpy_dtype(name))
    packed = tessera.nd.pack_subbyte(x)
    assert packed.dtype == np.uint8 and packed.size == -(-x.size * DataType(name).bits // 8)
    assert packed.tobytes() == numpy_helper.from_array(x).raw_data
    back = tessera.nd.unpack_subbyte(packed, shape, name)
    assert back.dtype == numpy_dtype(name) and back.shape == shape
    np.testing.assert_array_equal(back.astype(np.float32), x.astype(np.float32))


def test_pack_subbyte_places_elements_from_the_low_bits_up():
    x = np.array([1, -2, 3], ml_dtypes.int4)          # nibbles 0x1, 0xE, 0x3
    assert tessera.nd.pack_subbyte(x).tolist() == [0xE1, 0x03]
    y = np.array([1, 2, 3, 0, 3], ml_dtypes.uint2)      # crumbs low first
    assert tessera.nd.pack_subbyte(y).tolist() == [0b00111001, 0b00000011]
    np.testing.assert_array_equal(tessera.nd.unpack_subbyte(bytes([0xE1, 0xF3]), (3,), "int4").astype(int),
                                  [1, -2, 3])           # the spare high nibble 0xF is ignored


def test_pack_and_unpack_refuse_what_they_cannot_do():
    with pytest.raises(DTypeError, match="not a sub-byte"):
        tessera.nd.pack_subbyte(np.zeros(3, ml_dtypes.float8_e4m3fn))
    with pytest.raises(DTypeError, match="not a sub-byte"):
        tessera.nd.unpack_subbyte(np.zeros(2, np.uint8), (2,), "int8")
    with pytest.raises(ShapeError, match="need 3 packed bytes"):
        tessera.nd.unpack_subbyte(np.zeros(2, np.uint8), (5,), "int4")
