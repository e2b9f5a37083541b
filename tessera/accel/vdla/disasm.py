"""A readable listing of a VDLA instruction stream (and its micro-ops): one line per instruction,
the executing module, the dependency flags as queue operations, then the fields that matter.

     0 load    LOAD  inp  sram[0]   <- dram[0] 14x16 /16 pad(y1,1 x1,1)        | push l2g
     1 compute GEMM      uop[0:9] x(2,14) dst+(0,1) src+(16,1) wgt+(0,0)       | pop l2g; push g2s
"""
from __future__ import annotations

from .config import DEFAULT_CONFIG, MEM_NAMES, VDLAConfig
from .isa import Alu, AluOp, Finish, Gemm, Insn, Load, Store, Uop, decode_stream, module_of

# which token queue each flag means, per module (vdla_spec.md)
_QUEUES = {
    "load": {"pop_next": "g2l", "push_next": "l2g"},
    "compute": {"pop_prev": "l2g", "pop_next": "s2g", "push_prev": "g2l", "push_next": "g2s"},
    "store": {"pop_prev": "g2s", "push_prev": "s2g"},
}


def token_ops(insn: Insn) -> tuple:
    """([queues popped before], [queues pushed after]) of insn; a flag its module has no queue for
    is listed as "bad:<flag>"."""
    q = _QUEUES[module_of(insn)]
    pops, pushes = [], []
    for flag in ("pop_prev", "pop_next", "push_prev", "push_next"):
        if getattr(insn, flag):
            (pops if flag.startswith("pop") else pushes).append(q.get(flag, f"bad:{flag}"))
    return pops, pushes


def format_insn(insn: Insn) -> str:
    """One instruction as text, without its index."""
    if isinstance(insn, (Load, Store)):
        mem = MEM_NAMES.get(insn.memory_type, f"mem{insn.memory_type}")
        if insn.x_size == 0:
            body = f"{'LOAD' if isinstance(insn, Load) else 'STORE':<5} {mem:<4} nop"
        else:
            arrow = "<-" if isinstance(insn, Load) else "->"
            body = (f"{'LOAD' if isinstance(insn, Load) else 'STORE':<5} {mem:<4} sram[{insn.sram_base}] {arrow} "
                    f"dram[{insn.dram_base}] {insn.y_size}x{insn.x_size} /{insn.x_stride}")
            if insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1:
                body += f" pad(y{insn.y_pad_0},{insn.y_pad_1} x{insn.x_pad_0},{insn.x_pad_1})"
    elif isinstance(insn, Gemm):
        body = (f"GEMM{' reset' if insn.reset_reg else ''} uop[{insn.uop_bgn}:{insn.uop_end}] "
                f"x({insn.iter_out},{insn.iter_in}) dst+({insn.dst_factor_out},{insn.dst_factor_in}) "
                f"src+({insn.src_factor_out},{insn.src_factor_in}) wgt+({insn.wgt_factor_out},{insn.wgt_factor_in})")
    elif isinstance(insn, Alu):
        try:
            op = AluOp(insn.alu_opcode).name
        except ValueError:
            op = f"op{insn.alu_opcode}"
        operand = f"imm {insn.imm}" if insn.use_imm else f"src+({insn.src_factor_out},{insn.src_factor_in})"
        body = (f"ALU {op} uop[{insn.uop_bgn}:{insn.uop_end}] x({insn.iter_out},{insn.iter_in}) "
                f"dst+({insn.dst_factor_out},{insn.dst_factor_in}) {operand}")
    elif isinstance(insn, Finish):
        body = "FINISH"
    else:
        body = repr(insn)
    pops, pushes = token_ops(insn)
    deps = "; ".join(x for x in (("pop " + ",".join(pops)) if pops else "",
                                 ("push " + ",".join(pushes)) if pushes else "") if x)
    return f"{module_of(insn):<7} {body}" + (f"  | {deps}" if deps else "")


def disassemble(insns, uops=None, cfg: VDLAConfig = DEFAULT_CONFIG) -> str:
    """The listing of a stream: a list of instructions, or the encoded words (uint64 array / bytes);
    with `uops`, the micro-op table follows."""
    if not isinstance(insns, (list, tuple)):
        insns = decode_stream(insns, cfg)
    width = len(str(max(len(insns) - 1, 0)))
    lines = [f"{i:>{width}} {format_insn(x)}" for i, x in enumerate(insns)]
    if uops is not None and len(uops):
        lines.append(f"micro-ops ({len(uops)}): [index] dst src wgt")
        for i, u in enumerate(uops):
            u = u if isinstance(u, Uop) else Uop(*u)
            lines.append(f"  [{i}] {u.dst} {u.src} {u.wgt}")
    return "\n".join(lines)
