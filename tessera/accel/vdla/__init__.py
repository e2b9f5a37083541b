"""VDLA, the decoupled access-execute accelerator (the TVM paper's VTA): configuration, ISA,
disassembler, simulator (functional + cycle-approximate), and the compiler's lowering onto it.
docs/vdla.md is the guide."""
from .config import DEFAULT_CONFIG, ConfigError, VDLAConfig
from .disasm import disassemble
from .isa import (Alu, AluOp, Finish, Gemm, Insn, IsaError, Load, Opcode, Store, Uop, decode, decode_stream,
                  encode, encode_stream)

__all__ = ["DEFAULT_CONFIG", "ConfigError", "VDLAConfig", "disassemble", "Alu", "AluOp", "Finish", "Gemm",
           "Insn", "IsaError", "Load", "Opcode", "Store", "Uop", "decode", "decode_stream", "encode",
           "encode_stream"]
