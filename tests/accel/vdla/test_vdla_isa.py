"""VDLA ISA: every field of every instruction kind and of the micro-op round-trips through the
128-bit (32-bit) encoding at the spec's bit positions; values out of a field's range are refused."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.accel.vdla.config import DEFAULT_CONFIG, MEM_IDS, ConfigError, VDLAConfig
from tessera.accel.vdla.disasm import disassemble
from tessera.accel.vdla.isa import (Alu, AluOp, Finish, Gemm, IsaError, Load, Store, Uop, decode,
                                    decode_stream, decode_uop, encode, encode_stream, encode_uop, layout)

_KIND = {Load: "mem", Store: "mem", Gemm: "gemm", Alu: "alu", Finish: "finish"}


def _field_strategy(name, width, signed):
    if signed:
        return st.integers(-(1 << (width - 1)), (1 << (width - 1)) - 1)
    return st.integers(0, (1 << width) - 1)


def _insn_strategy(cls):
    kw = {}
    for name, lo, width, signed in layout(_KIND[cls]):
        if name == "opcode":
            continue
        if name == "memory_type":
            kw[name] = st.sampled_from(sorted(MEM_IDS.values()))
        elif name == "alu_opcode":
            kw[name] = st.sampled_from([int(o) for o in AluOp])
        elif width == 1:
            kw[name] = st.booleans()
        else:
            kw[name] = _field_strategy(name, width, signed)
    return st.builds(cls, **kw)


any_insn = st.one_of(*[_insn_strategy(c) for c in (Load, Store, Gemm, Alu, Finish)])


@settings(max_examples=150, deadline=None)
@given(any_insn)
def test_every_field_round_trips(insn):
    word = encode(insn)
    assert 0 <= word < 1 << 128
    assert decode(word) == insn
    assert decode(word.to_bytes(16, "little")) == insn
    # each field sits at its documented bits
    for name, lo, width, signed in layout(_KIND[type(insn)]):
        raw = (word >> lo) & ((1 << width) - 1)
        value = int(type(insn).opcode) if name == "opcode" else int(getattr(insn, name))
        assert raw == value & ((1 << width) - 1), name


@settings(max_examples=50, deadline=None)
@given(st.lists(any_insn, max_size=8))
def test_stream_round_trips(insns):
    words = encode_stream(insns)
    assert words.dtype == np.uint64 and words.size == 2 * len(insns)
    assert decode_stream(words) == insns
    assert decode_stream(words.astype("<u8").tobytes()) == insns


@given(st.integers(0, 2047), st.integers(0, 2047), st.integers(0, 1023))
def test_uop_round_trips(dst, src, wgt):
    u = Uop(dst, src, wgt)
    w = encode_uop(u)
    assert w == dst | (src << 11) | (wgt << 22)
    assert decode_uop(w) == u


def test_spec_bit_positions():
    """The default configuration gives vdla_spec.md's layout exactly."""
    gemm = {n: (lo, lo + w) for n, lo, w, _ in layout("gemm")}
    assert gemm["uop_bgn"] == (8, 21) and gemm["uop_end"] == (21, 35) and gemm["iter_in"] == (49, 63)
    assert gemm["wgt_factor_in"] == (118, 128) and gemm["dst_factor_out"] == (64, 75)
    mem = {n: (lo, lo + w) for n, lo, w, _ in layout("mem")}
    assert mem["dram_base"] == (26, 58) and mem["x_pad_1"] == (124, 128) and mem["y_size"] == (64, 80)
    alu = {n: (lo, lo + w) for n, lo, w, _ in layout("alu")}
    assert alu["alu_opcode"] == (108, 111) and alu["use_imm"] == (111, 112) and alu["imm"] == (112, 128)
    # a LOAD with push_next only: opcode 0, bit 6
    assert encode(Load(push_next=True, memory_type=0)) == 1 << 6
    assert encode(Finish()) == 3


@pytest.mark.parametrize("insn,field", [
    (Gemm(uop_bgn=1 << 13), "uop_bgn"),
    (Gemm(iter_out=1 << 14), "iter_out"),
    (Gemm(wgt_factor_in=1024), "wgt_factor_in"),
    (Alu(imm=1 << 15), "imm"),
    (Alu(imm=-(1 << 15) - 1), "imm"),
    (Load(dram_base=1 << 32), "dram_base"),
    (Load(x_pad_0=16), "x_pad_0"),
    (Store(sram_base=-1), "sram_base"),
])
def test_field_out_of_range_is_refused(insn, field):
    with pytest.raises(IsaError, match=field):
        encode(insn)


def test_bad_opcodes_are_refused():
    with pytest.raises(IsaError, match="opcode 5"):
        decode(5)
    with pytest.raises(IsaError, match="memory_type"):
        encode(Load(memory_type=6))
    with pytest.raises(IsaError, match="alu_opcode"):
        encode(Alu(alu_opcode=7))
    with pytest.raises(IsaError, match="dst"):
        encode_uop(Uop(dst=2048))


def test_config_derives_widths_and_refuses_nonsense():
    small = VDLAConfig(log_block=3, log_inp_buff_size=14, log_wgt_buff_size=16, log_acc_buff_size=14)
    assert small.block == 8 and small.elem_bytes("acc") == 32 and small.depth("acc") == 512
    assert dict((n, w) for n, _, w, _ in layout("gemm", small))["dst_factor_out"] == 9
    assert VDLAConfig.from_dict(small.to_dict()) == small
    assert DEFAULT_CONFIG.depth("wgt") == 1024 and DEFAULT_CONFIG.depth("out") == 2048
    with pytest.raises(ConfigError, match="log_block"):
        VDLAConfig(log_block=-1)
    with pytest.raises(ConfigError, match="int8"):
        VDLAConfig(log_inp_width=4)
    with pytest.raises(ConfigError, match="unknown"):
        VDLAConfig.from_dict({"log_blk": 4})
    with pytest.raises(IsaError, match="too deep"):
        layout("gemm", VDLAConfig(log_acc_buff_size=30, log_inp_buff_size=30, log_wgt_buff_size=30))


def test_disassembler_names_modules_queues_and_fields():
    text = disassemble(encode_stream([
        Load(memory_type=MEM_IDS["inp"], y_size=3, x_size=4, x_stride=8, x_pad_0=1, push_next=True),
        Gemm(uop_end=2, iter_out=3, pop_prev=True, push_prev=True, push_next=True),
        Store(x_size=0, pop_prev=True),
        Finish()]), uops=[Uop(1, 2, 3)])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["0", "load", "LOAD"] and "3x4 /8" in lines[0] and "push l2g" in lines[0]
    assert "GEMM uop[0:2] x(3,1)" in lines[1] and "pop l2g; push g2l,g2s" in lines[1]
    assert "STORE out  nop" in lines[2] and "pop g2s" in lines[2]
    assert lines[3].endswith("FINISH") and "[0] 1 2 3" in text
