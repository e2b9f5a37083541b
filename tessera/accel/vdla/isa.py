"""The VDLA instruction set: LOAD / STORE / GEMM / ALU / FINISH, each 128 bits (two little-endian
uint64 words, C bit-fields LSB-first, no field straddling bit 64), and the 32-bit micro-op
(vdla_spec.md, "Instructions"). Field widths follow the configuration as VTA's hw_spec.h derives
them; the default configuration gives exactly the spec's layout.

    insn = Gemm(uop_bgn=0, uop_end=4, iter_out=2, iter_in=1, dst_factor_out=4, push_next=True)
    word = encode(insn)                  # a 128-bit int
    assert decode(word) == insn
    raw = encode_stream([insn, Finish()])   # numpy uint64 array, 2 words per instruction
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np

from ...errors import TesseraError
from .config import DEFAULT_CONFIG, MEM_IDS, MEM_NAMES, VDLAConfig


class IsaError(TesseraError):
    """An instruction or micro-op that the ISA cannot encode (a field out of range, a bad opcode)."""


class Opcode(enum.IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class AluOp(enum.IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


DEP_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


@dataclass(frozen=True)
class Insn:
    """Common part: the four dependency flags (vdla_spec.md, "Modules, routing, dependence queues")."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    opcode = None

    def with_flags(self, **flags) -> "Insn":
        return replace(self, **flags)

    @property
    def module(self) -> str:
        """The module that executes it: "load", "compute" or "store" (fetch's routing)."""
        return module_of(self)


@dataclass(frozen=True)
class _Mem(Insn):
    """The fields of a 2-D DMA (the "mem" layout), shared by Load and Store."""

    memory_type: int = MEM_IDS["inp"]
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 0
    x_size: int = 0
    x_stride: int = 0
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0


@dataclass(frozen=True)
class Load(_Mem):
    """2-D DMA from DRAM into SRAM `memory_type`, with zero padding (units: rows / elements)."""

    opcode = Opcode.LOAD


@dataclass(frozen=True)
class Store(_Mem):
    """2-D DMA from the out buffer to DRAM (no padding)."""

    memory_type: int = MEM_IDS["out"]

    opcode = Opcode.STORE


@dataclass(frozen=True)
class _Loop(Insn):
    """The two-level loop around micro-ops uop_bgn..uop_end, shared by Gemm and Alu."""

    reset_reg: bool = False
    uop_bgn: int = 0
    uop_end: int = 1
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0


@dataclass(frozen=True)
class Gemm(_Loop):
    """acc[d] (+)= inp[s] . wgt[w]^T over a two-level loop around micro-ops uop_bgn..uop_end."""

    wgt_factor_out: int = 0
    wgt_factor_in: int = 0

    opcode = Opcode.GEMM


@dataclass(frozen=True)
class Alu(_Loop):
    """acc[d] = op(acc[d], imm or acc[s]) over the same loop structure as Gemm."""

    alu_opcode: int = AluOp.ADD
    use_imm: bool = False
    imm: int = 0

    opcode = Opcode.ALU


@dataclass(frozen=True)
class Finish(Insn):
    """Ends the stream (executed by the compute module)."""

    opcode = Opcode.FINISH


@dataclass(frozen=True)
class Uop:
    """A GEMM/ALU micro-op: accumulator row, source row (inp for GEMM, acc for ALU), weight row."""

    dst: int = 0
    src: int = 0
    wgt: int = 0


def module_of(insn: Insn) -> str:
    """fetch's routing: STORE -> store; LOAD of inp/wgt -> load; the rest -> compute."""
    if isinstance(insn, Store):
        return "store"
    if isinstance(insn, Load) and insn.memory_type in (MEM_IDS["inp"], MEM_IDS["wgt"]):
        return "load"
    return "compute"


# ---- bit layouts ---------------------------------------------------------------------------------

_COMMON = [("opcode", 3, False), ("pop_prev", 1, False), ("pop_next", 1, False),
           ("push_prev", 1, False), ("push_next", 1, False)]


@lru_cache(maxsize=None)
def layout(kind: str, cfg: VDLAConfig = DEFAULT_CONFIG) -> tuple:
    """[(field, lo bit, width, signed)] of instruction kind ("mem", "gemm", "alu", "finish", "uop")
    under cfg; raises IsaError when a word would exceed 64 bits."""
    uop_bits, loop_bits = cfg.idx_bits("uop"), 14
    acc, inp, wgt = cfg.idx_bits("acc"), cfg.idx_bits("inp"), cfg.idx_bits("wgt")
    words = {
        "mem": (_COMMON + [("memory_type", 3, False), ("sram_base", 16, False), ("dram_base", 32, False)],
                [("y_size", 16, False), ("x_size", 16, False), ("x_stride", 16, False),
                 ("y_pad_0", 4, False), ("y_pad_1", 4, False), ("x_pad_0", 4, False), ("x_pad_1", 4, False)]),
        "gemm": (_COMMON + [("reset_reg", 1, False), ("uop_bgn", uop_bits, False),
                            ("uop_end", uop_bits + 1, False), ("iter_out", loop_bits, False),
                            ("iter_in", loop_bits, False)],
                 [("dst_factor_out", acc, False), ("dst_factor_in", acc, False),
                  ("src_factor_out", inp, False), ("src_factor_in", inp, False),
                  ("wgt_factor_out", wgt, False), ("wgt_factor_in", wgt, False)]),
        "alu": (_COMMON + [("reset_reg", 1, False), ("uop_bgn", uop_bits, False),
                           ("uop_end", uop_bits + 1, False), ("iter_out", loop_bits, False),
                           ("iter_in", loop_bits, False)],
                [("dst_factor_out", acc, False), ("dst_factor_in", acc, False),
                 ("src_factor_out", acc, False), ("src_factor_in", acc, False),
                 ("alu_opcode", 3, False), ("use_imm", 1, False), ("imm", 16, True)]),
        "finish": (_COMMON, []),
        "uop": ([("dst", acc, False), ("src", max(inp, acc), False), ("wgt", wgt, False)], []),
    }
    if kind not in words:
        raise IsaError(f"unknown instruction layout {kind!r}")
    out = []
    for base, word in zip((0, 64), words[kind]):
        pos = base
        for name, width, signed in word:
            out.append((name, pos, width, signed))
            pos += width
        limit = base + (32 if kind == "uop" else 64)
        if pos > limit:
            what = "micro-op" if kind == "uop" else f"{kind} instruction"
            raise IsaError(f"a VDLA {what} needs {pos - base} bits in word {base // 64} under this "
                           f"configuration (at most {limit - base}): the buffers are too deep")
    return tuple(out)


_KIND_OF = {Load: "mem", Store: "mem", Gemm: "gemm", Alu: "alu", Finish: "finish", Uop: "uop"}
_CLASS_OF = {Opcode.LOAD: Load, Opcode.STORE: Store, Opcode.GEMM: Gemm, Opcode.ALU: Alu,
             Opcode.FINISH: Finish}


def _pack(obj, kind: str, cfg: VDLAConfig, values: dict) -> int:
    word = 0
    for name, lo, width, signed in layout(kind, cfg):
        v = int(values[name])
        lo_v, hi_v = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
        if not lo_v <= v <= hi_v:
            raise IsaError(f"{type(obj).__name__}.{name} = {v} does not fit its {width}-bit "
                           f"{'signed ' if signed else ''}field (range {lo_v}..{hi_v}) in {obj}")
        word |= (v & ((1 << width) - 1)) << lo
    return word


def encode(insn: Insn, cfg: VDLAConfig = DEFAULT_CONFIG) -> int:
    """The 128-bit encoding of insn as a Python int (low word = bits 0..63)."""
    cls = type(insn)
    if cls not in _CLASS_OF.values():
        raise IsaError(f"encode takes a Load/Store/Gemm/Alu/Finish, got {insn!r}")
    values = {f.name: getattr(insn, f.name) for f in fields(insn)}
    values["opcode"] = int(cls.opcode)
    if cls in (Load, Store) and insn.memory_type not in MEM_NAMES:
        raise IsaError(f"{cls.__name__}.memory_type = {insn.memory_type} is no VDLA memory "
                       f"(ids: {', '.join(f'{v}={k}' for k, v in MEM_IDS.items())})")
    if cls is Alu and insn.alu_opcode not in set(AluOp):
        raise IsaError(f"Alu.alu_opcode = {insn.alu_opcode} is no ALU opcode "
                       f"({', '.join(f'{o.value}={o.name}' for o in AluOp)})")
    return _pack(insn, _KIND_OF[cls], cfg, values)


def _unpack(word: int, kind: str, cfg: VDLAConfig) -> dict:
    out = {}
    for name, lo, width, signed in layout(kind, cfg):
        v = (word >> lo) & ((1 << width) - 1)
        if signed and v >> (width - 1):
            v -= 1 << width
        out[name] = v
    return out


def decode(word: int, cfg: VDLAConfig = DEFAULT_CONFIG) -> Insn:
    """The instruction of a 128-bit word (an int, or 16 little-endian bytes)."""
    if isinstance(word, (bytes, bytearray)):
        if len(word) != 16:
            raise IsaError(f"a VDLA instruction is 16 bytes, got {len(word)}")
        word = int.from_bytes(word, "little")
    word = int(word)
    if not 0 <= word < 1 << 128:
        raise IsaError(f"a VDLA instruction is a 128-bit unsigned value, got {word:#x}")
    op = word & 7
    if op not in set(Opcode):
        raise IsaError(f"opcode {op} in instruction {word:#034x} is no VDLA opcode "
                       f"({', '.join(f'{o.value}={o.name}' for o in Opcode)})")
    cls = _CLASS_OF[Opcode(op)]
    values = _unpack(word, _KIND_OF[cls], cfg)
    values.pop("opcode")
    kw = {}
    for f in fields(cls):
        v = values[f.name]
        kw[f.name] = bool(v) if f.type in ("bool", bool) else v
    insn = cls(**kw)
    if cls in (Load, Store) and insn.memory_type not in MEM_NAMES:
        raise IsaError(f"instruction {word:#034x}: memory_type {insn.memory_type} is no VDLA memory")
    if cls is Alu and insn.alu_opcode not in set(AluOp):
        raise IsaError(f"instruction {word:#034x}: alu_opcode {insn.alu_opcode} is no ALU opcode")
    return insn


def encode_uop(uop: Uop, cfg: VDLAConfig = DEFAULT_CONFIG) -> int:
    """The 32-bit encoding of a micro-op."""
    return _pack(uop, "uop", cfg, {"dst": uop.dst, "src": uop.src, "wgt": uop.wgt})


def decode_uop(word: int, cfg: VDLAConfig = DEFAULT_CONFIG) -> Uop:
    word = int(word)
    if not 0 <= word < 1 << 32:
        raise IsaError(f"a VDLA micro-op is a 32-bit unsigned value, got {word:#x}")
    return Uop(**_unpack(word, "uop", cfg))


def encode_stream(insns, cfg: VDLAConfig = DEFAULT_CONFIG) -> np.ndarray:
    """Instructions -> uint64 array of 2 words each (the layout in DRAM, little-endian words)."""
    out = np.empty(2 * len(insns), dtype=np.uint64)
    for i, insn in enumerate(insns):
        w = encode(insn, cfg)
        out[2 * i] = w & 0xFFFFFFFFFFFFFFFF
        out[2 * i + 1] = w >> 64
    return out


def decode_stream(words, cfg: VDLAConfig = DEFAULT_CONFIG) -> list:
    """A uint64 array (2 words per instruction) or raw bytes -> instructions."""
    if isinstance(words, (bytes, bytearray)):
        words = np.frombuffer(words, dtype="<u8")
    words = np.asarray(words, dtype=np.uint64)
    if words.size % 2:
        raise IsaError(f"an instruction stream has an even number of 64-bit words, got {words.size}")
    return [decode(int(words[i]) | (int(words[i + 1]) << 64), cfg) for i in range(0, words.size, 2)]


def encode_uops(uops, cfg: VDLAConfig = DEFAULT_CONFIG) -> np.ndarray:
    return np.array([encode_uop(u, cfg) for u in uops], dtype=np.uint32)


def decode_uops(words, cfg: VDLAConfig = DEFAULT_CONFIG) -> list:
    return [decode_uop(int(w), cfg) for w in np.asarray(words, dtype=np.uint32)]
