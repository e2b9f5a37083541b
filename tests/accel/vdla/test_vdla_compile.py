"""VDLA compiler: int8 conv2d / dense layers (+ bias, shift, relu, clip) scheduled onto the
accelerator, built with tessera.build(target="vdla") and run on the simulator, are bit-identical to a
NumPy int8 reference, with dependency tokens and serially, with and without virtual threads."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera
from tessera.accel.vdla.codegen import FitError
from tessera.accel.vdla.isa import Gemm, Load
from tessera.accel.vdla.layers import (Conv2DShape, conv2d_packed, conv2d_reference, dense_packed, dense_reference,
                                       pack_bias, pack_data, pack_weight, schedule_conv2d, schedule_dense,
                                       unpack_data)
from tessera.accel.vdla.module import VDLAModule


def _run_conv(s, shift, relu, bias, sched, sync, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (s.n, s.c, s.h, s.w), dtype=np.int8)
    w = rng.integers(-128, 128, (s.o, s.c, s.kh, s.kw), dtype=np.int8)
    b = rng.integers(-5000, 5000, s.o).astype(np.int32) if bias else None
    sch = schedule_conv2d(conv2d_packed(s, shift=shift, relu=relu, bias=bias), **sched)
    mod = tessera.build(sch, target="vdla" + (" -sync=serial" if sync else ""))
    out = np.zeros((s.n, s.o // 16, s.oh, s.ow, 1, 16), np.int8)
    args = [pack_data(x), pack_weight(w)] + ([pack_bias(b, 6)] if bias else []) + [out]
    mod(*args)
    np.testing.assert_array_equal(unpack_data(out), conv2d_reference(x, w, b, s, shift, relu))
    return mod


@st.composite
def conv_cases(draw):
    k = draw(st.sampled_from([1, 3]), label="k")
    stride = draw(st.sampled_from([1, 2]), label="stride")
    pad = draw(st.sampled_from([0, 1] if k == 3 else [0]), label="pad")
    h = draw(st.integers(max(k - 2 * pad, 1), 7), label="h")
    w = draw(st.integers(max(k - 2 * pad, 1), 7), label="w")
    s = Conv2DShape(1, draw(st.sampled_from([16, 32, 48]), label="c"), h, w,
                    draw(st.sampled_from([16, 32, 64]), label="o"), k, k, stride, pad)
    vt_axis = draw(st.sampled_from(["co", "h"]), label="vthread_axis")
    th = draw(st.sampled_from([d for d in range(1, s.oh + 1) if s.oh % d == 0]), label="tile_h")
    tw = draw(st.sampled_from([d for d in range(1, s.ow + 1) if s.ow % d == 0]), label="tile_w")
    tco = draw(st.sampled_from([d for d in range(1, s.o // 16 + 1) if (s.o // 16) % d == 0]), label="tile_co")
    tci = draw(st.sampled_from([d for d in range(1, s.c // 16 + 1) if (s.c // 16) % d == 0]), label="tile_ci")
    tiles = (s.o // 16 // tco) if vt_axis == "co" else (s.oh // th)
    vt = draw(st.sampled_from([1, 2] if tiles % 2 == 0 else [1]), label="vthreads")
    sched = dict(tile_h=th, tile_w=tw, tile_co=tco, tile_ci=tci, vthreads=vt, vthread_axis=vt_axis)
    return s, draw(st.integers(0, 12), label="shift"), draw(st.booleans(), label="relu"), \
        draw(st.booleans(), label="bias"), sched, draw(st.booleans(), label="serial"), draw(st.integers(0, 99))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_cases())
def test_conv2d_bit_identical(case):
    _run_conv(*case)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_cases())
def test_conv2d_bit_identical_many(case):
    _run_conv(*case)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_dense_bit_identical(data):
    n = data.draw(st.integers(1, 4), label="n")
    k = 16 * data.draw(st.integers(1, 4), label="k/16")
    m = 16 * data.draw(st.sampled_from([1, 2, 4]), label="m/16")
    shift, relu, bias = data.draw(st.integers(0, 12)), data.draw(st.booleans()), data.draw(st.booleans())
    tm = data.draw(st.sampled_from([d for d in range(1, m // 16 + 1) if (m // 16) % d == 0]), label="tile_m")
    tk = data.draw(st.sampled_from([d for d in range(1, k // 16 + 1) if (k // 16) % d == 0]), label="tile_k")
    tn = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]), label="tile_n")
    vt = data.draw(st.sampled_from([1, 2] if (m // 16 // tm) % 2 == 0 else [1]), label="vthreads")
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = rng.integers(-128, 128, (n, k), dtype=np.int8)
    w = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-5000, 5000, m).astype(np.int32) if bias else None
    sch = schedule_dense(dense_packed(n, k, m, shift=shift, relu=relu, bias=bias), tile_n=tn, tile_m=tm,
                         tile_k=tk, vthreads=vt)
    mod = tessera.build(sch, target="vdla" + (" -sync=serial" if data.draw(st.booleans()) else ""))
    out = np.zeros((n, m // 16, 1, 16), np.int8)
    mod(*([pack_data(x), pack_weight(w)] + ([pack_bias(b, 4)] if bias else []) + [out]))
    np.testing.assert_array_equal(unpack_data(out), dense_reference(x, w, b, shift, relu))


def test_virtual_threads_hide_latency_and_stream_is_inspectable(tmp_path):
    s = Conv2DShape(1, 64, 8, 8, 64, 3, 3, 1, 1)
    sched = dict(tile_h=4, tile_co=1, tile_ci=2)
    serial = _run_conv(s, 6, True, True, dict(sched, vthreads=1), True, 1)
    vt = _run_conv(s, 6, True, True, dict(sched, vthreads=2), False, 1)
    rs, rv = serial.last_report, vt.last_report
    assert rs.gemm_uops == rv.gemm_uops == 64 * 8 * 8 * 64 * 9 // 256
    assert rv.cycles < rs.cycles and rv.gemm_utilization > rs.gemm_utilization
    # tokens: the serial stream waits at every module change, the vthread one only on real dependences
    prog = vt.program
    assert prog.vthreads == 2 and not prog.serial
    assert any(isinstance(i, Gemm) and i.pop_prev for i in prog.insns)
    assert any(isinstance(i, Load) and i.pop_next for i in prog.insns)
    text = vt.get_source()
    assert "2 virtual thread(s)" in text and "GEMM uop[" in text and "pad(" in text and "compute FINISH" in text.splitlines()[-1]
    # the module file is JSON and loads back to the same program
    path = vt.export_library(str(tmp_path / "conv.json"))
    with open(path) as f:
        assert json.load(f)["format"] == "tessera-vdla"
    again = VDLAModule.load(path)
    assert again.program.insns == prog.insns and (again.program.uop_words == prog.uop_words).all()


def test_tile_larger_than_a_buffer_is_refused():
    # a weight tile of 4 x 68 blocks = 272 rows fits; 4 x 272 = 1088 rows exceeds the 1024-row wgt buffer
    sch = schedule_dense(dense_packed(1, 16 * 272, 64), tile_m=4, tile_k=272)
    with pytest.raises(FitError, match=r"buffer 'weight_wgt' \(scope 'wgt'\) needs 1088 rows \(278528 bytes\).*"
                                       r"1024 rows \(262144 bytes\)"):
        tessera.build(sch, target="vdla")
    s = Conv2DShape(1, 64, 56, 56, 16, 3, 3, 1, 1)
    with pytest.raises(FitError, match=r"'conv2d_acc' \(scope 'acc'\) needs 3136 rows \(200704 bytes\).*2048 rows"):
        tessera.build(schedule_conv2d(conv2d_packed(s), tile_h=56, tile_ci=4), target="vdla")


def test_unsupported_program_is_refused_by_name():
    from tessera import te
    A = te.placeholder((1, 1, 1, 16), "int8", name="A")
    B = te.compute(A.shape, lambda *i: A(*i) + A(*i), name="B")
    with pytest.raises(tessera.errors.TesseraError, match="store into 'B'"):
        tessera.build(te.create_prim_func([A, B]), target="vdla")
