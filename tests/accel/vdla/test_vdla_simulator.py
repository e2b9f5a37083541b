"""VDLA simulator: each instruction's semantics against a step-by-step NumPy reference written from
the spec; the cycle model's concurrency and token gating; deadlocks and leftover tokens reported
with the instructions involved."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.accel.vdla.config import DEFAULT_CONFIG, MEM_IDS
from tessera.accel.vdla.isa import Alu, AluOp, Finish, Gemm, Load, Store, Uop
from tessera.accel.vdla.simulator import DRAM, DeadlockError, SimulationError, Simulator, uops_array

CFG = DEFAULT_CONFIG


def _run(sim, insns, dram=None):
    dram = dram or DRAM()
    return sim.run(list(insns) + [Finish()], dram), dram


def _ref_loop(insn, uops):
    """(d, s, w) per step, in order (the spec's triple loop)."""
    for i in range(insn.iter_out):
        for j in range(insn.iter_in):
            for u in uops[insn.uop_bgn:insn.uop_end]:
                yield (u.dst + i * insn.dst_factor_out + j * insn.dst_factor_in,
                       u.src + i * insn.src_factor_out + j * insn.src_factor_in,
                       u.wgt + i * getattr(insn, "wgt_factor_out", 0) + j * getattr(insn, "wgt_factor_in", 0))


def _load_uops(sim, dram, uops):
    addr = dram.alloc_array(uops_array(uops))
    _run(sim, [Load(memory_type=MEM_IDS["uop"], dram_base=addr // 4, y_size=1, x_size=len(uops),
                    x_stride=len(uops))], dram)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_load_inp_2d_with_padding(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    y, x = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    stride = x + data.draw(st.integers(0, 3))
    pads = [data.draw(st.integers(0, 3)) for _ in range(4)]
    base = data.draw(st.integers(0, 100))
    src = rng.integers(-128, 128, ((y - 1) * stride + x + 5, 1, 16), dtype=np.int8)
    sim, dram = Simulator(), DRAM()
    addr = dram.alloc_array(src)
    sim.inp[:] = 77
    _run(sim, [Load(memory_type=MEM_IDS["inp"], sram_base=base, dram_base=addr // 16 + 2, y_size=y, x_size=x,
                    x_stride=stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3])], dram)
    xw = pads[2] + x + pads[3]
    ref = np.zeros((pads[0] + y + pads[1], xw, 1, 16), np.int8)
    for yy in range(y):
        for xx in range(x):
            ref[pads[0] + yy, pads[2] + xx] = src[2 + yy * stride + xx]
    n = ref.shape[0] * xw
    np.testing.assert_array_equal(sim.inp[base:base + n], ref.reshape(n, 1, 16))
    assert (sim.inp[:base] == 77).all() and (sim.inp[base + n:] == 77).all()


def test_load_wgt_acc_acc8_and_store():
    rng = np.random.default_rng(0)
    sim, dram = Simulator(), DRAM()
    w = rng.integers(-128, 128, (3, 16, 16), dtype=np.int8)
    a = rng.integers(-2**31, 2**31, (4, 1, 16), dtype=np.int64).astype(np.int32)
    a8 = rng.integers(-128, 128, (2, 1, 16), dtype=np.int8)
    wa, aa, a8a = dram.alloc_array(w), dram.alloc_array(a), dram.alloc_array(a8)
    rep, _ = _run(sim, [Load(memory_type=MEM_IDS["wgt"], sram_base=5, dram_base=wa // 256, y_size=1, x_size=3, x_stride=3),
                        Load(memory_type=MEM_IDS["acc"], sram_base=10, dram_base=aa // 64, y_size=2, x_size=2, x_stride=2),
                        Load(memory_type=MEM_IDS["acc8"], sram_base=20, dram_base=a8a // 16, y_size=1, x_size=2, x_stride=2)],
                  dram)
    np.testing.assert_array_equal(sim.wgt[5:8], w)
    np.testing.assert_array_equal(sim.acc[10:14], a)
    np.testing.assert_array_equal(sim.acc[20:22], a8.astype(np.int32))
    assert rep.bytes["wgt"] == 3 * 256 and rep.bytes["acc"] == 4 * 64 + 2 * 16
    # STORE: y rows of x out-rows (acc truncated to int8) to a strided DRAM region
    sim.acc[0:6] = rng.integers(-2**31, 2**31, (6, 1, 16), dtype=np.int64).astype(np.int32)
    out = dram.alloc(16 * 20)
    rep, _ = _run(sim, [Store(sram_base=0, dram_base=out // 16, y_size=3, x_size=2, x_stride=5)], dram)
    got = dram.read(out, np.int8, (20, 1, 16))
    for y in range(3):
        np.testing.assert_array_equal(got[y * 5:y * 5 + 2], sim.acc[y * 2:y * 2 + 2].astype(np.int8))
    assert (got[2:5] == 0).all() and rep.bytes["out"] == 6 * 16


def test_load_uops_decodes_fields():
    sim, dram = Simulator(), DRAM()
    uops = [Uop(2047, 2047, 1023), Uop(1, 2, 3), Uop(0, 0, 0)]
    _load_uops(sim, dram, uops)
    assert sim.uop[:3].tolist() == [[2047, 2047, 1023], [1, 2, 3], [0, 0, 0]]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_gemm_matches_reference(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    nu = data.draw(st.integers(1, 5))
    uops = [Uop(int(rng.integers(0, 8)), int(rng.integers(0, 8)), int(rng.integers(0, 8))) for _ in range(nu)]
    g = Gemm(uop_bgn=0, uop_end=nu, iter_out=data.draw(st.integers(1, 3)), iter_in=data.draw(st.integers(1, 3)),
             dst_factor_out=data.draw(st.integers(0, 4)), dst_factor_in=data.draw(st.integers(0, 4)),
             src_factor_out=data.draw(st.integers(0, 4)), src_factor_in=data.draw(st.integers(0, 4)),
             wgt_factor_out=data.draw(st.integers(0, 4)), wgt_factor_in=data.draw(st.integers(0, 4)),
             reset_reg=data.draw(st.booleans()))
    sim, dram = Simulator(), DRAM()
    _load_uops(sim, dram, uops)
    sim.inp[:40] = rng.integers(-128, 128, (40, 1, 16))
    sim.wgt[:40] = rng.integers(-128, 128, (40, 16, 16))
    sim.acc[:40] = rng.integers(-2**31, 2**31, (40, 1, 16), dtype=np.int64)
    ref = sim.acc.astype(np.int64).copy()
    for d, s, w in _ref_loop(g, uops):
        if g.reset_reg:
            ref[d] = 0
        else:
            ref[d] = ref[d] + sim.inp[s].astype(np.int64) @ sim.wgt[w].astype(np.int64).T
            ref[d] = (ref[d] + 2**31) % 2**32 - 2**31       # int32 wraparound
    rep, _ = _run(sim, [g], dram)
    np.testing.assert_array_equal(sim.acc, ref.astype(np.int32))
    steps = g.iter_out * g.iter_in * nu
    assert rep.gemm_uops == (0 if g.reset_reg else steps)


_ALU_REF = {AluOp.MIN: min, AluOp.MAX: max, AluOp.ADD: lambda x, y: x + y, AluOp.MUL: lambda x, y: x * y,
            AluOp.SHR: lambda x, y: x >> y if y >= 0 else x << -y}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_alu_matches_reference(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    op = data.draw(st.sampled_from(list(AluOp)))
    use_imm = data.draw(st.booleans())
    imm = data.draw(st.integers(-20, 20) if op is AluOp.SHR else st.integers(-2**15, 2**15 - 1))
    nu = data.draw(st.integers(1, 4))
    uops = [Uop(int(rng.integers(0, 10)), int(rng.integers(0, 10)), 0) for _ in range(nu)]
    a = Alu(uop_bgn=0, uop_end=nu, iter_out=data.draw(st.integers(1, 3)), iter_in=data.draw(st.integers(1, 3)),
            dst_factor_out=data.draw(st.integers(0, 3)), dst_factor_in=data.draw(st.integers(0, 3)),
            src_factor_out=data.draw(st.integers(0, 3)), src_factor_in=data.draw(st.integers(0, 3)),
            alu_opcode=op, use_imm=use_imm, imm=imm)
    sim, dram = Simulator(), DRAM()
    _load_uops(sim, dram, uops)
    hi = 2**31 if op is not AluOp.SHR else 2**20
    sim.acc[:40] = rng.integers(-hi, hi, (40, 1, 16), dtype=np.int64)
    if op is AluOp.SHR and not use_imm:
        sim.acc[:40] = rng.integers(-12, 12, (40, 1, 16))
    ref = sim.acc.astype(np.int64).copy()
    f = _ALU_REF[op]
    for d, s, _ in _ref_loop(a, uops):
        for lane in range(16):
            y = imm if use_imm else int(ref[s, 0, lane])
            r = f(int(ref[d, 0, lane]), y)
            ref[d, 0, lane] = (r + 2**31) % 2**32 - 2**31
    rep, _ = _run(sim, [a], dram)
    np.testing.assert_array_equal(sim.acc, ref.astype(np.int32))
    assert rep.alu_uops == a.iter_out * a.iter_in * nu


def _pipelined_stream(n, serial=False):
    """n tiles: LOAD inp -> GEMM -> STORE, with the RAW tokens (and WAR tokens for double buffering
    when not serial: each module waits only for what it depends on)."""
    s = []
    for t in range(n):
        s.append(Load(memory_type=MEM_IDS["inp"], sram_base=0, dram_base=16, y_size=4, x_size=16,
                      x_stride=16, pop_next=t > 0 if serial else t >= 2, push_next=True))
        s.append(Gemm(uop_end=1, iter_out=64, pop_prev=True, push_prev=True, push_next=True,
                      pop_next=t > 0 if serial else t >= 2))
        s.append(Store(x_size=0, pop_prev=True, push_prev=True))
    # drain the WAR tokens the last tiles pushed, so the stream balances
    drains = 1 if serial else 2
    s.append(Load(memory_type=MEM_IDS["inp"], x_size=0, pop_next=True))
    if drains == 2:
        s.append(Load(memory_type=MEM_IDS["inp"], x_size=0, pop_next=True))
    s.append(Gemm(uop_end=0, pop_next=True))
    if drains == 2:
        s.append(Gemm(uop_end=0, pop_next=True))
    return s


def test_modules_overlap_and_tokens_gate():
    sim = Simulator()
    serial, _ = _run(sim, _pipelined_stream(6, serial=True))
    overlap, _ = _run(sim, _pipelined_stream(6))
    load_cost = sim.cost(_pipelined_stream(1)[0])
    gemm_cost = 64 + CFG.gemm_fill
    assert serial.gemm_uops == overlap.gemm_uops == 6 * 64
    # serial: each tile's load waits for the previous tile's GEMM; overlap hides the shorter stage
    assert serial.cycles >= 6 * (load_cost + gemm_cost)
    assert overlap.cycles <= load_cost + 6 * max(load_cost, gemm_cost) + 20
    assert overlap.cycles < serial.cycles
    assert overlap.gemm_utilization > serial.gemm_utilization
    # the timeline respects the tokens: every GEMM starts after its LOAD ends
    s = _pipelined_stream(6)
    for i, insn in enumerate(s):
        if isinstance(insn, Gemm) and insn.pop_prev:
            assert overlap.timeline[i][0] >= overlap.timeline[i - 1][1]


def test_deadlock_names_the_instruction():
    sim = Simulator()
    with pytest.raises(DeadlockError, match=r"compute module blocked at #1 .*GEMM.*l2g"):
        _run(sim, [Load(memory_type=MEM_IDS["inp"], x_size=0), Gemm(uop_end=1, pop_prev=True)])
    with pytest.raises(DeadlockError, match=r"1 g2s token\(s\) never popped, the first pushed by #0"):
        _run(sim, [Gemm(uop_end=1, push_next=True)])
    with pytest.raises(SimulationError, match="load module has no push_prev"):
        _run(sim, [Load(memory_type=MEM_IDS["wgt"], push_prev=True)])
    with pytest.raises(SimulationError, match="FINISH"):
        sim.run([Gemm()], DRAM())


def test_out_of_buffer_access_is_an_error():
    sim, dram = Simulator(), DRAM()
    with pytest.raises(SimulationError, match=r"#0 .*inp rows \[2040, 2056\)"):
        _run(sim, [Load(memory_type=MEM_IDS["inp"], sram_base=2040, dram_base=16, y_size=1, x_size=16,
                        x_stride=16)], dram)
    with pytest.raises(SimulationError, match="wgt row 2046 outside the 1024-row"):
        _run(sim, [Gemm(uop_end=1, iter_out=3, wgt_factor_out=1023)], dram)
