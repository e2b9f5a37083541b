"""Dependency tokens for a VDLA instruction stream (TVM's coproc_sync, by dependence analysis).

Every instruction's footprint (the SRAM rows it reads and writes, per buffer) is known from its
fields and micro-ops. For each instruction and each neighbouring module (load <-> compute <->
store), the latest earlier instruction of that module it conflicts with (read-after-write,
write-after-read, write-after-write on a row) is what it must wait for: it pops one token of the
queue between them, and that producer pushes one. Tokens are counters and each queue has one
producer and one consumer running in order, so the k-th pop receives the k-th push: pushes and
pops are placed in increasing order, and a wait already implied by an earlier one is skipped.
`serial=True` instead makes every instruction wait for everything before it (VTA's
VTA_DEBUG_FORCE_SERIAL: no overlap), routing a load<->store handover through a compute NOP.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .config import MEM_IDS, MEM_NAMES, VDLAConfig
from .isa import Alu, Finish, Gemm, Insn, Load, Store, module_of

# (producer, consumer) -> (producer's push flag, consumer's pop flag)
_QUEUE_FLAGS = {("load", "compute"): ("push_next", "pop_prev"),
                ("compute", "load"): ("push_prev", "pop_next"),
                ("compute", "store"): ("push_next", "pop_prev"),
                ("store", "compute"): ("push_prev", "pop_next")}
_NEIGHBOURS = {"load": ("compute",), "compute": ("load", "store"), "store": ("compute",)}
_BUFFERS = ("uop", "inp", "wgt", "acc")


def uop_steps(insn, uops: np.ndarray) -> tuple:
    """(dst, src, wgt) rows of every step of a GEMM/ALU, given the uop buffer's (dst, src, wgt) rows."""
    u = uops[insn.uop_bgn:insn.uop_end]
    i = np.arange(insn.iter_out)[:, None, None]
    j = np.arange(insn.iter_in)[None, :, None]
    d = (u[None, None, :, 0] + i * insn.dst_factor_out + j * insn.dst_factor_in).reshape(-1)
    s = (u[None, None, :, 1] + i * insn.src_factor_out + j * insn.src_factor_in).reshape(-1)
    w = (u[None, None, :, 2] + i * getattr(insn, "wgt_factor_out", 0)
         + j * getattr(insn, "wgt_factor_in", 0)).reshape(-1)
    return d, s, w


def footprint(insn: Insn, steps=None) -> tuple:
    """({buffer: rows read}, {buffer: rows written}) of insn; for a GEMM/ALU, `steps` are its
    (dst, src, wgt) rows per step (uop_steps of the uop buffer it runs with)."""
    reads, writes = {}, {}
    if isinstance(insn, Load) and insn.x_size:
        mem = MEM_NAMES[insn.memory_type]
        xw = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        n = (insn.y_pad_0 + insn.y_size + insn.y_pad_1) * xw
        writes["acc" if mem == "acc8" else mem] = np.arange(insn.sram_base, insn.sram_base + n)
    elif isinstance(insn, Store) and insn.x_size:
        reads["acc"] = np.arange(insn.sram_base, insn.sram_base + insn.y_size * insn.x_size)
    elif isinstance(insn, (Gemm, Alu)):
        d, s, w = steps
        reads["uop"] = np.arange(insn.uop_bgn, insn.uop_end)
        writes["acc"] = d
        if isinstance(insn, Gemm):
            if not insn.reset_reg:
                reads["acc"], reads["inp"], reads["wgt"] = d, s, w
        elif not insn.reset_reg:
            reads["acc"] = d if insn.use_imm else np.concatenate([d, s])
    return reads, writes


def _nop(module: str) -> Insn:
    """An instruction of `module` that moves nothing (carries dependency flags only)."""
    if module == "store":
        return Store(x_size=0)
    if module == "load":
        return Load(memory_type=MEM_IDS["inp"], x_size=0)
    return Load(memory_type=MEM_IDS["uop"], x_size=0)


def insert_dependences(insns: list, steps: list, cfg: VDLAConfig, serial: bool = False) -> list:
    """insns (no dependency flags; the last one FINISH) with the push/pop flags that make the
    stream correct under concurrent modules. steps[k]: the (dst, src, wgt) rows of instruction k's
    steps when it is a GEMM/ALU (see uop_steps), else None."""
    insns = list(insns)
    tables = list(steps)
    if serial:   # a load <-> store handover has no queue: put a compute NOP between them
        out, out_t, last = [], [], None
        for insn, t in zip(insns, tables):
            m = module_of(insn)
            if last is not None and {last, m} == {"load", "store"}:
                out.append(_nop("compute"))
                out_t.append(None)
            out.append(insn)
            out_t.append(t)
            last = m
        insns, tables = out, out_t
    n = len(insns)
    mods = [module_of(x) for x in insns]
    flags = [dict() for _ in range(n)]
    depth = {b: cfg.depth(b) for b in _BUFFERS}
    last_w = {m: {b: np.full(depth[b], -1, np.int64) for b in _BUFFERS} for m in _NEIGHBOURS}
    last_r = {m: {b: np.full(depth[b], -1, np.int64) for b in _BUFFERS} for m in _NEIGHBOURS}
    last_any = {m: -1 for m in _NEIGHBOURS}
    waited = {pair: -1 for pair in _QUEUE_FLAGS}
    for k, insn in enumerate(insns):
        m = mods[k]
        if isinstance(insn, Finish):
            reads, writes = {}, {}
            need = {p: last_any[p] for p in _NEIGHBOURS[m]}
        else:
            reads, writes = footprint(insn, tables[k])
            need = {}
            for p in _NEIGHBOURS[m]:
                if serial:
                    need[p] = last_any[p]
                    continue
                dep = -1
                for b, rows in reads.items():
                    if rows.size:
                        dep = max(dep, int(last_w[p][b][rows].max()))
                for b, rows in writes.items():
                    if rows.size:
                        dep = max(dep, int(last_w[p][b][rows].max()), int(last_r[p][b][rows].max()))
                need[p] = dep
        for p, dep in need.items():
            if dep > waited[(p, m)]:
                push, pop = _QUEUE_FLAGS[(p, m)]
                flags[k][pop] = True
                flags[dep][push] = True
                waited[(p, m)] = dep
        for b, rows in reads.items():
            last_r[m][b][rows] = k
        for b, rows in writes.items():
            last_w[m][b][rows] = k
        last_any[m] = k
    return [replace(x, **f) if f else x for x, f in zip(insns, flags)]
