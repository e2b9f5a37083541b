"""The VDLA simulator: functional (bit-exact int8/int32, NumPy-vectorized per instruction) and
cycle-approximate (vdla_spec.md, "Simulators"): the load, compute and store modules run
concurrently, each in order, gated by the four token queues (l2g, g2l, g2s, s2g); a LOAD/STORE costs
a DMA setup per row plus its bytes over the bus width, a GEMM one micro-op per cycle plus the pipeline
fill, an ALU op `alu_cycles_per_uop` per micro-op. Instructions execute in an order the tokens allow
(as VTA's fsim), so a stream whose tokens miss a dependence is the compiler's race, not the simulator's.

    dram = DRAM(); a = dram.alloc_array(x)            # host data in the accelerator's DRAM
    sim = Simulator(cfg)
    report = sim.run(insns, dram)                      # -> Report: cycles, busy, bytes, utilization
    dram.read(addr, "int8", shape)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...errors import TesseraError
from .config import DEFAULT_CONFIG, MEM_IDS, MEM_NAMES, VDLAConfig
from .disasm import format_insn
from .isa import Alu, AluOp, Finish, Gemm, Insn, Load, Store, Uop, encode_uops, module_of


class SimulationError(TesseraError):
    """An instruction the simulator cannot execute (an index outside a buffer or DRAM, a bad flag)."""


class DeadlockError(SimulationError):
    """The token protocol does not balance: a module waits for a token nobody pushes, or tokens are
    left over at the end. Names the instructions involved."""


MODULES = ("load", "compute", "store")
# (module, flag) -> token queue; pops before issue, pushes after completion
_POPS = {"load": {"pop_next": "g2l"}, "compute": {"pop_prev": "l2g", "pop_next": "s2g"},
         "store": {"pop_prev": "g2s"}}
_PUSHES = {"load": {"push_next": "l2g"}, "compute": {"push_prev": "g2l", "push_next": "g2s"},
           "store": {"push_prev": "s2g"}}


class DRAM:
    """The accelerator's view of host memory: one flat byte array with aligned allocations.
    Addresses are byte addresses; instructions address it in units of their memory's row size."""

    ALIGN = 256

    def __init__(self, nbytes: int = 1 << 20):
        self.data = np.zeros(nbytes, dtype=np.uint8)
        self.top = self.ALIGN  # address 0 stays unused, so a zero address is visibly wrong

    def alloc(self, nbytes: int) -> int:
        """A fresh zeroed region of nbytes; its address is aligned to every row size (256 B)."""
        addr = -(-self.top // self.ALIGN) * self.ALIGN
        end = addr + max(int(nbytes), 1)
        if end > self.data.size:
            grown = np.zeros(max(end, 2 * self.data.size), dtype=np.uint8)
            grown[:self.data.size] = self.data
            self.data = grown
        self.top = end
        return addr

    def alloc_array(self, arr: np.ndarray) -> int:
        arr = np.ascontiguousarray(arr)
        addr = self.alloc(arr.nbytes)
        self.write(addr, arr)
        return addr

    def write(self, addr: int, arr: np.ndarray) -> None:
        b = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
        self._check(addr, b.size)
        self.data[addr:addr + b.size] = b

    def read(self, addr: int, dtype, shape) -> np.ndarray:
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) * dtype.itemsize
        self._check(addr, n)
        return self.data[addr:addr + n].view(dtype).reshape(shape).copy()

    def _check(self, addr: int, n: int) -> None:
        if addr < 0 or addr + n > self.data.size:
            raise SimulationError(f"DRAM access [{addr}, {addr + n}) outside the {self.data.size}-byte DRAM")


@dataclass
class Report:
    """What a run did: total cycles; per-module busy cycles; bytes DMA'd per buffer (padding not
    counted, as VTA's profiler); GEMM/ALU micro-op counts; instruction counts per module; and the
    start/end cycle of every instruction (`timeline`, aligned with the stream)."""

    cycles: int = 0
    busy: dict = field(default_factory=lambda: {m: 0 for m in MODULES})
    bytes: dict = field(default_factory=lambda: {m: 0 for m in ("uop", "inp", "wgt", "acc", "out")})
    gemm_uops: int = 0
    alu_uops: int = 0
    insns: dict = field(default_factory=lambda: {m: 0 for m in MODULES})
    timeline: list = field(default_factory=list, repr=False)
    macs_per_cycle: int = 256

    @property
    def gemm_utilization(self) -> float:
        """Fraction of cycles the GEMM core did useful (non-reset) micro-ops."""
        return self.gemm_uops / self.cycles if self.cycles else 0.0

    @property
    def macs(self) -> int:
        return self.gemm_uops * self.macs_per_cycle

    def to_dict(self) -> dict:
        return {"cycles": self.cycles, "busy": dict(self.busy), "bytes": dict(self.bytes),
                "gemm_uops": self.gemm_uops, "alu_uops": self.alu_uops, "insns": dict(self.insns),
                "gemm_utilization": self.gemm_utilization}

    def __str__(self) -> str:
        busy = ", ".join(f"{m} {self.busy[m]} ({self.busy[m] / max(self.cycles, 1):.0%})" for m in MODULES)
        moved = ", ".join(f"{k} {v}" for k, v in self.bytes.items() if v)
        return (f"{self.cycles} cycles; busy: {busy}; GEMM utilization {self.gemm_utilization:.1%} "
                f"({self.gemm_uops} uops); ALU {self.alu_uops} uops; bytes: {moved or 'none'}")


class Simulator:
    """One VDLA: its SRAM buffers persist across runs (as the hardware's would)."""

    def __init__(self, cfg: VDLAConfig = DEFAULT_CONFIG):
        self.cfg = cfg
        b, n = cfg.batch, cfg.block
        self.uop = np.zeros((cfg.depth("uop"), 3), dtype=np.int64)  # decoded: dst, src, wgt
        self.inp = np.zeros((cfg.depth("inp"), b, n), dtype=np.int8)
        self.wgt = np.zeros((cfg.depth("wgt"), n, n), dtype=np.int8)
        self.acc = np.zeros((cfg.depth("acc"), b, n), dtype=np.int32)

    # ---- the cycle model -----------------------------------------------------------------------
    def cost(self, insn: Insn) -> int:
        """Cycles insn occupies its module."""
        c = self.cfg
        if isinstance(insn, (Load, Store)):
            if insn.x_size == 0:
                return 1
            nbytes = insn.y_size * insn.x_size * self._dram_elem(insn)
            pad = 0
            if isinstance(insn, Load):
                xw = insn.x_pad_0 + insn.x_size + insn.x_pad_1
                pad = (insn.y_pad_0 + insn.y_pad_1) * xw + insn.y_size * (insn.x_pad_0 + insn.x_pad_1)
            return insn.y_size * c.dma_row_latency + math.ceil(nbytes / c.bus_bytes) + pad
        if isinstance(insn, Gemm):
            return insn.iter_out * insn.iter_in * max(insn.uop_end - insn.uop_bgn, 0) + c.gemm_fill
        if isinstance(insn, Alu):
            return (insn.iter_out * insn.iter_in * max(insn.uop_end - insn.uop_bgn, 0) * c.alu_cycles_per_uop
                    + c.alu_fill)
        return 1

    def _dram_elem(self, insn) -> int:
        mem = MEM_NAMES[insn.memory_type]
        return self.cfg.elem_bytes(mem)

    # ---- running a stream ----------------------------------------------------------------------
    def run(self, insns, dram: DRAM, execute: bool = True) -> Report:
        """Execute insns (a list, ending with FINISH) against dram; the Report of the run.
        execute=False models time and checks the token protocol only."""
        queues = {m: [] for m in MODULES}
        for i, insn in enumerate(insns):
            m = module_of(insn)
            for flag in ("pop_prev", "pop_next", "push_prev", "push_next"):
                if getattr(insn, flag) and flag not in _POPS[m] and flag not in _PUSHES[m]:
                    raise SimulationError(f"instruction #{i} ({format_insn(insn)}): the {m} module has no "
                                          f"{flag} queue; only {sorted(_POPS[m]) + sorted(_PUSHES[m])}")
            queues[m].append(i)
        if not insns or not isinstance(insns[-1], Finish):
            raise SimulationError("a VDLA stream ends with FINISH (the runtime's Synchronize emits it)")
        tokens = {q: [] for q in ("l2g", "g2l", "g2s", "s2g")}   # push times, FIFO
        pushed_by = {q: [] for q in tokens}
        head = {m: 0 for m in MODULES}
        free = {m: 0 for m in MODULES}
        rep = Report(macs_per_cycle=self.cfg.macs_per_cycle)
        rep.timeline = [None] * len(insns)
        progress = True
        while progress:
            progress = False
            for m in MODULES:
                q = queues[m]
                while head[m] < len(q):
                    i = q[head[m]]
                    insn = insns[i]
                    need = [tok for flag, tok in _POPS[m].items() if getattr(insn, flag)]
                    if any(not tokens[t] for t in need):
                        break
                    start = free[m]
                    for t in need:
                        start = max(start, tokens[t].pop(0))
                        pushed_by[t].pop(0)
                    if execute:
                        self._execute(i, insn, dram, rep)
                    else:
                        self._count(insn, rep)
                    cost = self.cost(insn)
                    end = start + cost
                    free[m] = end
                    rep.busy[m] += cost
                    rep.insns[m] += 1
                    rep.timeline[i] = (start, end)
                    for flag, tok in _PUSHES[m].items():
                        if getattr(insn, flag):
                            tokens[tok].append(end)
                            pushed_by[tok].append(i)
                    head[m] += 1
                    progress = True
        waiting = [(m, queues[m][head[m]]) for m in MODULES if head[m] < len(queues[m])]
        if waiting:
            lines = []
            for m, i in waiting:
                insn = insns[i]
                need = [tok for flag, tok in _POPS[m].items() if getattr(insn, flag) and not tokens[tok]]
                lines.append(f"  {m} module blocked at #{i} ({format_insn(insn)}) waiting for a "
                             f"{'/'.join(need)} token that is never pushed")
            raise DeadlockError("VDLA deadlock: the stream's dependency tokens never balance\n" + "\n".join(lines))
        left = {q: v for q, v in pushed_by.items() if v}
        if left:
            lines = [f"  {len(v)} {q} token(s) never popped, the first pushed by #{v[0]} ({format_insn(insns[v[0]])})"
                     for q, v in left.items()]
            raise DeadlockError("VDLA stream ends with unbalanced dependency tokens\n" + "\n".join(lines))
        rep.cycles = max(free.values())
        return rep

    def _count(self, insn, rep: Report) -> None:
        if isinstance(insn, (Load, Store)) and insn.x_size:
            mem = "out" if isinstance(insn, Store) else MEM_NAMES[insn.memory_type]
            rep.bytes["acc" if mem == "acc8" else mem] += insn.y_size * insn.x_size * self._dram_elem(insn)
        elif isinstance(insn, (Gemm, Alu)):
            n = insn.iter_out * insn.iter_in * max(insn.uop_end - insn.uop_bgn, 0)
            if isinstance(insn, Alu):
                rep.alu_uops += n
            elif not insn.reset_reg:
                rep.gemm_uops += n

    # ---- functional semantics ------------------------------------------------------------------
    def _execute(self, i: int, insn: Insn, dram: DRAM, rep: Report) -> None:
        self._count(insn, rep)
        try:
            if isinstance(insn, Load):
                if insn.x_size:
                    self._load(insn, dram)
            elif isinstance(insn, Store):
                if insn.x_size:
                    self._store(insn, dram)
            elif isinstance(insn, Gemm):
                self._gemm(insn)
            elif isinstance(insn, Alu):
                self._alu(insn)
        except SimulationError as e:
            raise SimulationError(f"instruction #{i} ({format_insn(insn)}): {e}") from None

    def _sram(self, mem: str) -> np.ndarray:
        return {"uop": self.uop, "inp": self.inp, "wgt": self.wgt, "acc": self.acc, "acc8": self.acc}[mem]

    def _load(self, insn: Load, dram: DRAM) -> None:
        mem = MEM_NAMES[insn.memory_type]
        if mem == "out":
            raise SimulationError("LOAD into the out buffer is not an operation of VDLA")
        ebytes = self.cfg.elem_bytes(mem)
        xw = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        rows = (insn.y_pad_0 + insn.y_size + insn.y_pad_1) * xw
        sram = self._sram(mem)
        if insn.sram_base + rows > sram.shape[0]:
            raise SimulationError(f"{mem} rows [{insn.sram_base}, {insn.sram_base + rows}) outside the "
                                  f"{sram.shape[0]}-row {mem} buffer")
        if insn.x_stride < insn.x_size and insn.y_size > 1:
            raise SimulationError(f"x_stride {insn.x_stride} < x_size {insn.x_size}")
        span = max((insn.y_size - 1) * insn.x_stride + insn.x_size, 0)
        src = dram.read(insn.dram_base * ebytes, np.uint8, (span * ebytes,)).reshape(span, ebytes)
        idx = (np.arange(insn.y_size)[:, None] * insn.x_stride + np.arange(insn.x_size)[None, :])
        block = src[idx]                                       # (y, x, ebytes)
        if mem == "uop":
            words = block.reshape(-1, 4).view("<u4").reshape(insn.y_size, insn.x_size).astype(np.int64)
            a, s = self.cfg.idx_bits("acc"), max(self.cfg.idx_bits("inp"), self.cfg.idx_bits("acc"))
            vals = np.stack([words & ((1 << a) - 1), (words >> a) & ((1 << s) - 1), words >> (a + s)], -1)
        elif mem == "acc8":
            vals = block.view(np.int8).astype(np.int32).reshape(insn.y_size, insn.x_size, *sram.shape[1:])
        else:
            vals = block.view(sram.dtype).reshape(insn.y_size, insn.x_size, *sram.shape[1:])
        full = np.zeros((insn.y_pad_0 + insn.y_size + insn.y_pad_1, xw) + sram.shape[1:], dtype=sram.dtype)
        full[insn.y_pad_0:insn.y_pad_0 + insn.y_size, insn.x_pad_0:insn.x_pad_0 + insn.x_size] = vals
        sram[insn.sram_base:insn.sram_base + rows] = full.reshape((rows,) + sram.shape[1:])

    def _store(self, insn: Store, dram: DRAM) -> None:
        if insn.memory_type != MEM_IDS["out"]:
            raise SimulationError(f"STORE reads the out buffer (memory_type {MEM_IDS['out']}), "
                                  f"got {MEM_NAMES[insn.memory_type]}")
        if insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1:
            raise SimulationError("STORE takes no padding")
        rows = insn.y_size * insn.x_size
        if insn.sram_base + rows > self.acc.shape[0]:
            raise SimulationError(f"out rows [{insn.sram_base}, {insn.sram_base + rows}) outside the "
                                  f"{self.acc.shape[0]}-row out buffer")
        ebytes = self.cfg.elem_bytes("out")
        out = self.acc[insn.sram_base:insn.sram_base + rows].astype(np.int8)   # truncation, as fsim
        out = out.reshape(insn.y_size, insn.x_size, -1).view(np.uint8).reshape(insn.y_size, insn.x_size * ebytes)
        for y in range(insn.y_size):
            dram.write((insn.dram_base + y * insn.x_stride) * ebytes, out[y])

    def _indices(self, insn) -> tuple:
        """(dst, src, wgt) row indices of every step of a GEMM/ALU loop, in execution order."""
        u = self.uop[insn.uop_bgn:insn.uop_end]
        if insn.uop_end > self.uop.shape[0] or insn.uop_bgn > insn.uop_end:
            raise SimulationError(f"micro-ops [{insn.uop_bgn}, {insn.uop_end}) outside the uop buffer")
        i = np.arange(insn.iter_out)[:, None, None]
        j = np.arange(insn.iter_in)[None, :, None]
        d = (u[None, None, :, 0] + i * insn.dst_factor_out + j * insn.dst_factor_in).reshape(-1)
        s = (u[None, None, :, 1] + i * insn.src_factor_out + j * insn.src_factor_in).reshape(-1)
        w = u[None, None, :, 2] + i * getattr(insn, "wgt_factor_out", 0) + j * getattr(insn, "wgt_factor_in", 0)
        return d, s, w.reshape(-1)

    def _check_rows(self, what: str, idx: np.ndarray, depth: int) -> None:
        if idx.size and (idx.min() < 0 or idx.max() >= depth):
            raise SimulationError(f"{what} row {int(idx.max())} outside the {depth}-row buffer")

    def _loop_rows(self, insn):
        """The (dst, src, wgt) rows of a GEMM/ALU loop, its accumulator rows checked; None when that is
        all it does: it has no step, or it resets (zeroes) the accumulator rows."""
        d, s, w = self._indices(insn)
        if not d.size:
            return None
        self._check_rows("acc", d, self.acc.shape[0])
        if insn.reset_reg:
            self.acc[d] = 0
            return None
        return d, s, w

    def _gemm(self, insn: Gemm) -> None:
        loop = self._loop_rows(insn)
        if loop is None:
            return
        d, s, w = loop
        self._check_rows("inp", s, self.inp.shape[0])
        self._check_rows("wgt", w, self.wgt.shape[0])
        # products are exact in float32 (|sum| <= 16 * 128 * 128 < 2**24); group steps by weight row
        # so each group is one BLAS matmul, then sum the steps per destination row in int64
        order = np.argsort(w, kind="stable")
        ws = w[order]
        cuts = np.flatnonzero(np.diff(ws)) + 1
        b, n = self.cfg.batch, self.cfg.block
        prod = np.empty((d.size, b, n), dtype=np.float32)
        inp = self.inp[s[order]].astype(np.float32)
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, ws.size]):
            prod[lo:hi] = inp[lo:hi] @ self.wgt[ws[lo]].astype(np.float32).T
        prod = prod.astype(np.int64)
        dsort = d[order]
        o2 = np.argsort(dsort, kind="stable")
        dd = dsort[o2]
        starts = np.r_[0, np.flatnonzero(np.diff(dd)) + 1]
        sums = np.add.reduceat(prod[o2], starts, axis=0)
        rows = dd[starts]
        self.acc[rows] = ((self.acc[rows].astype(np.int64) + sums) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)

    def _alu(self, insn: Alu) -> None:
        loop = self._loop_rows(insn)
        if loop is None:
            return
        d, s, _ = loop
        op = AluOp(insn.alu_opcode)
        if insn.use_imm:
            steps = [(d, None)]
            if np.unique(d).size != d.size:     # an imm op applied twice to a row: apply in order
                steps = self._waves(d, None)
        else:
            self._check_rows("acc", s, self.acc.shape[0])
            steps = self._waves(d, s)
        for dd, ss in steps:
            x = self.acc[dd].astype(np.int64)
            y = np.int64(insn.imm) if insn.use_imm else self.acc[ss].astype(np.int64)
            if op is AluOp.MIN:
                r = np.minimum(x, y)
            elif op is AluOp.MAX:
                r = np.maximum(x, y)
            elif op is AluOp.ADD:
                r = x + y
            elif op is AluOp.MUL:
                r = x * y
            else:  # SHR: y >= 0 ? x >> y : x << -y (arithmetic; shifting 32 or more places out leaves
                #        the sign (right) or 0 (left), as the mathematical shift of a 32-bit value)
                y = np.broadcast_to(y, x.shape)
                r = np.where(y >= 0, x >> np.clip(y, 0, 63), np.where(-y >= 32, 0, x << np.clip(-y, 0, 31)))
            self.acc[dd] = (r & 0xFFFFFFFF).astype(np.uint32).view(np.int32)

    @staticmethod
    def _waves(d: np.ndarray, s):
        """Split the steps into consecutive groups that can run at once with the sequential result:
        a group ends before a step that writes a row written earlier in the group, or reads one."""
        out, lo, written = [], 0, set()
        dl = d.tolist()
        sl = s.tolist() if s is not None else None
        for k in range(len(dl)):
            if dl[k] in written or (sl is not None and sl[k] in written):
                out.append((d[lo:k], None if s is None else s[lo:k]))
                lo, written = k, set()
            written.add(dl[k])
        out.append((d[lo:], None if s is None else s[lo:]))
        return out


def uops_array(uops) -> np.ndarray:
    """Micro-ops -> the uint32 words a LOAD UOP copies from DRAM."""
    return encode_uops([u if isinstance(u, Uop) else Uop(*u) for u in uops])
