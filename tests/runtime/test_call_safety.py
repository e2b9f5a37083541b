"""A Module call never writes where it must not: an argument the function writes must be writeable
memory (a read-only array, memory map or bytes buffer is refused before the call, not written or
faulted on), and must not overlap another argument (kernels take restrict pointers: an in-place call
read what it had just written). The metadata names the written parameters ("writes"), which the
entry's own C checks for overlap, so a library called from C is protected as well."""
import ctypes

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.errors import TesseraError
from tessera.tir.schedule.examples.gemm import gemm_program, schedule_gemm

N = 16
RNG = np.random.default_rng(5)


@pytest.fixture(scope="module")
def matmul():
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return tessera.build(te.create_prim_func([A, B, C]))


def _operands():
    return (RNG.standard_normal((N, N)).astype(np.float32), RNG.standard_normal((N, N)).astype(np.float32))


def test_the_metadata_names_the_written_parameter(matmul):
    assert matmul.metadata["functions"][0]["writes"] == [2]


def test_a_tensorized_kernel_writes_only_its_output():
    """The micro-kernel reaches A, B and C by address; only C is written, so read-only operands pass."""
    target = "c -mcpu=haswell"
    sch = schedule_gemm(gemm_program(32, 32, 32, nr=16), mr=4, nr=16, kc=32, mc=16, target=target)
    assert "x86_" in sch.mod.script()                   # tensorized: the micro-kernel takes addresses
    lib = tessera.build(sch, target=target)
    params = [p["name"] for p in lib.metadata["functions"][0]["params"]]
    assert [params[i] for i in lib.metadata["functions"][0]["writes"]] == ["C"]
    a, b = (RNG.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    a.flags.writeable = b.flags.writeable = False
    c = np.empty((32, 32), np.float32)
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_read_only_output_array_is_refused(matmul):
    a, b = _operands()
    c = np.zeros((N, N), np.float32)
    c.flags.writeable = False
    with pytest.raises(TesseraError, match="argument 'C' is written by the function, but the ndarray passed is "
                                           "read-only"):
        matmul(a, b, c)
    assert not c.any()


def test_an_output_over_a_bytes_object_is_refused(matmul):
    a, b = _operands()
    raw = bytes(N * N * 4)
    c = np.frombuffer(raw, np.float32).reshape(N, N)
    with pytest.raises(TesseraError, match="read-only"):
        matmul(a, b, c)
    assert raw == bytes(N * N * 4)


def test_a_read_only_memory_map_is_refused_not_faulted_on(matmul, tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(bytes(N * N * 4))
    c = np.memmap(path, np.float32, mode="r", shape=(N, N))
    a, b = _operands()
    with pytest.raises(TesseraError, match="read-only"):
        matmul(a, b, c)
    with pytest.raises(TesseraError, match="read-only"):
        matmul.time_evaluator(number=1, repeat=1)(a, b, c)


def test_an_ndarray_over_read_only_memory_is_refused(matmul):
    a, b = _operands()
    ro = np.zeros((N, N), np.float32)
    ro.flags.writeable = False
    with pytest.raises(TesseraError, match="NDArray passed is read-only"):
        matmul(tessera.nd.array(a), tessera.nd.array(b), tessera.nd.from_numpy(ro))


def test_read_only_inputs_are_accepted(matmul):
    a, b = _operands()
    a.flags.writeable = b.flags.writeable = False
    c = np.empty((N, N), np.float32)
    matmul(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_an_output_aliasing_an_input_is_refused(matmul):
    a, b = _operands()
    before = a.copy()
    with pytest.raises(TesseraError, match="argument 2 \\(C\\) is written by the function, and its memory "
                                           "overlaps argument 0 \\(A\\)"):
        matmul(a, b, a)
    np.testing.assert_array_equal(a, before)
    with pytest.raises(TesseraError, match="overlaps argument 1 \\(B\\)"):
        matmul(tessera.nd.array(a), b, b)


def test_a_partly_overlapping_output_is_refused(matmul):
    buf = np.zeros(2 * N * N, np.float32)
    a = buf[:N * N].reshape(N, N)
    c = buf[N * N - N:2 * N * N - N].reshape(N, N)      # shares one row with a
    b = RNG.standard_normal((N, N)).astype(np.float32)
    with pytest.raises(TesseraError, match="overlaps argument 0 \\(A\\)"):
        matmul(a, b, c)


def test_the_same_input_twice_and_neighbouring_buffers_are_accepted(matmul):
    a, _ = _operands()
    buf = np.empty(3 * N * N, np.float32)
    x, c = buf[:N * N].reshape(N, N), buf[N * N:2 * N * N].reshape(N, N)   # adjacent, not overlapping
    x[...] = a
    matmul(x, x, c)
    np.testing.assert_allclose(c, a @ a, rtol=1e-5, atol=1e-5)


def test_the_c_entry_itself_refuses_an_aliased_output(matmul):
    """What a C caller of tessera_call_main gets: status 6 and the message, before the kernel runs."""
    a, b = _operands()
    fn = matmul["main"]
    slots, keep = fn._pack((a, b, b))
    err = ctypes.create_string_buffer(256)
    rc = fn._entry(slots, fn._kinds, 3, err, 256)
    assert rc == 6 and b"overlaps argument 1 (B)" in err.value
