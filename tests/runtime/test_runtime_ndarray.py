"""NDArray: aligned storage, zero-copy views and wrapping, DLPack, dtypes, the cached ABI struct."""
import ctypes

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.errors import DTypeError, ShapeError, TesseraError
from tessera.runtime import nd
from tessera.runtime.ndarray import NDArray


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


@pytest.mark.parametrize("shape", [(), (1,), (3,), (7, 5), (2, 3, 4), (0,), (4, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint16", "bfloat16", "float16", "bool"])
def test_empty_is_aligned(shape, dtype):
    x = nd.empty(shape, dtype)
    assert x.shape == shape and x.dtype == dtype
    assert ptr(x.numpy()) % 64 == 0 and x.data_ptr == ptr(x.numpy())


def test_array_copies_into_aligned_storage():
    rng = np.random.default_rng(0)
    for _ in range(10):  # misaligned sources of several sizes
        src = rng.random(int(rng.integers(1, 300)) + 1).astype(np.float32)[1:]
        x = nd.array(src)
        assert ptr(x.numpy()) % 64 == 0
        np.testing.assert_array_equal(x.numpy(), src)
        src[0] = -1.0
        assert x.numpy()[0] != -1.0          # a copy, not a view
    y = nd.array([[1, 2], [3, 4]], dtype="float32")
    assert y.dtype == "float32" and y.numpy().dtype == np.float32 and y.shape == (2, 2)
    z = nd.array(np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2])   # non-contiguous source
    np.testing.assert_array_equal(z.numpy(), [[0, 2], [3, 5]])
    np.testing.assert_array_equal(nd.array(y).numpy(), y.numpy())
    assert nd.array(3.5).shape == ()


def test_numpy_is_a_zero_copy_view():
    x = nd.array(np.zeros((2, 3), np.float32))
    v = x.numpy()
    v[1, 2] = 5.0
    assert x.numpy()[1, 2] == 5.0 and ptr(v) == x.data_ptr
    v.shape = (3, 2)                      # reshaping the view leaves the NDArray alone
    assert x.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(x), x.numpy())


def test_from_numpy_shares_memory_even_when_only_16_byte_aligned():
    raw = np.zeros(64 + 40, np.uint8)
    start = next(o for o in range(0, 64, 16) if (ptr(raw) + o) % 64 == 16)
    a = raw[start:start + 64].view(np.float32)        # 16 floats, 16-byte aligned, not 64
    assert ptr(a) % 64 == 16
    x = nd.from_numpy(a)
    assert x.data_ptr == ptr(a)
    a[3] = 7.0
    assert x.numpy()[3] == 7.0
    x.numpy()[4] = 9.0
    assert a[4] == 9.0
    with pytest.raises(ShapeError, match="C-contiguous"):
        nd.from_numpy(np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(TesseraError, match="numpy array"):
        nd.from_numpy([1, 2, 3])


def test_dlpack_round_trip_with_numpy():
    x = nd.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert x.__dlpack_device__() == (1, 0)
    y = np.from_dlpack(x)
    assert ptr(y) == x.data_ptr
    y[0, 0] = 42.0
    assert x.numpy()[0, 0] == 42.0
    src = np.arange(10, dtype=np.int32)
    z = nd.from_dlpack(src)
    assert z.data_ptr == ptr(src) and z.dtype == "int32"
    src[2] = -5
    assert z.numpy()[2] == -5
    assert nd.from_dlpack(x) is x


def test_from_dlpack_refuses_other_devices_and_non_tensors():
    class GpuTensor:
        def __dlpack__(self, stream=None):
            raise AssertionError("must not be asked for data")

        def __dlpack_device__(self):
            return (2, 0)      # kDLCUDA

    with pytest.raises(TesseraError, match=r"device \(2, 0\)"):
        nd.from_dlpack(GpuTensor())
    with pytest.raises(TesseraError, match="__dlpack__"):
        nd.from_dlpack([1.0, 2.0])


def test_low_precision_dtypes():
    b = nd.array(np.array([1.5, -2.25, 3.0], np.float32), dtype="bfloat16")
    assert b.dtype == "bfloat16" and b.numpy().dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(b.numpy().astype(np.float32), [1.5, -2.25, 3.0])
    assert b._tensor.code == 4 and b._tensor.bits == 16
    with pytest.raises(DTypeError, match="bfloat16"):
        b.__dlpack__()
    h = nd.array(np.array([0.5, 65504.0], np.float16))
    assert h.dtype == "float16" and h._tensor.code == 2 and h._tensor.bits == 16
    np.testing.assert_array_equal(np.from_dlpack(h), [0.5, 65504.0])
    assert ptr(b.numpy()) % 64 == 0 and ptr(h.numpy()) % 64 == 0


def test_cached_abi_struct_describes_the_array():
    x = nd.empty((5, 7), "int16")
    t = x._tensor
    assert t.data == x.data_ptr and t.ndim == 2 and [t.shape[0], t.shape[1]] == [5, 7]
    assert not t.strides and (t.code, t.bits, t.lanes) == (0, 16, 1)
    assert x._addr == ctypes.addressof(t)
    flag = nd.empty((3,), "bool")
    assert (flag._tensor.code, flag._tensor.bits) == (6, 8)
    assert (nd.empty(4, "uint8")._tensor.code) == 1


def test_copyfrom_and_copyto():
    x = nd.empty((2, 2), "float32")
    assert x.copyfrom([[1, 2], [3, 4]]) is x
    np.testing.assert_array_equal(x.numpy(), [[1, 2], [3, 4]])
    out = np.zeros((2, 2), np.float32)
    assert x.copyto(out) is out
    np.testing.assert_array_equal(out, x.numpy())
    y = nd.empty((2, 2), "float32")
    x.copyto(y)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    np.testing.assert_array_equal(x.copy().numpy(), x.numpy())
    with pytest.raises(ShapeError, match=r"\(3,\)"):
        x.copyfrom(np.zeros(3))
    with pytest.raises(ShapeError):
        x.copyto(np.zeros((2, 3), np.float32))
    with pytest.raises(DTypeError, match="float64"):
        x.copyto(np.zeros((2, 2)))
    with pytest.raises(TesseraError):
        x.copyto("somewhere")


def test_bad_shapes_and_dtypes_are_refused():
    with pytest.raises(ShapeError, match="non-negative"):
        nd.empty((2, -1))
    with pytest.raises(ShapeError):
        nd.empty((2.0, 3))
    with pytest.raises(ShapeError):
        nd.empty("abc")
    with pytest.raises(DTypeError, match="unknown dtype"):
        nd.empty((2,), "float8")
    with pytest.raises(DTypeError, match="float32x4"):
        nd.empty((2,), "float32x4")
    with pytest.raises(DTypeError, match="complex"):
        nd.array(np.zeros(3, np.complex64))
    with pytest.raises(DTypeError, match="byte order"):
        nd.from_numpy(np.zeros(3, ">f4"))


def test_repr_and_namespace():
    x = nd.array(np.ones((2, 3), np.float32))
    r = repr(x)
    assert "shape=(2, 3)" in r and "float32" in r and "1." in r
    assert tessera.nd.array is nd.array and tessera.runtime.NDArray is NDArray
    assert len(x) == 2 and x.ndim == 2 and x.size == 6 and x.nbytes == 24
