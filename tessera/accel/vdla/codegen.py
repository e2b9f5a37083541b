"""VDLA code generation: a lowered PrimFunc -> a Program (instruction stream, micro-ops, DRAM layout).

The lowered program is what tessera's lowering makes of a VDLA schedule (docs/vdla.md): loops,
buffers allocated in the scopes "inp", "wgt" and "acc" (the on-chip SRAMs), copies between them and
the function's parameters (DRAM), calls of the GEMM intrinsic (`vdla.gemm(&acc, &inp, &wgt)`) and
elementwise statements on acc buffers. As VTA's runtime does, the host part (the loops around the
tiles) runs at compile time and the instructions are emitted per tile; the statements inside a tile
are evaluated over their whole iteration space at once (NumPy) and turned into instructions:

- a copy DRAM -> inp/wgt/acc is a set of (SRAM row, DRAM row or zero padding) pairs, fitted to 2-D
  DMA loads (y_size x x_size rows with a stride and the four pads); acc -> DRAM copies (the int8
  cast) to 2-D stores;
- the intrinsic's calls are micro-ops (acc row, inp row, wgt row), folded into GEMM instructions
  `iter_out x iter_in x kernel` (TVM's fold_uop_loop, found from the rows themselves);
- an elementwise statement `Y = f(X, imm or acc)` on acc rows becomes ALU instructions (MIN, MAX,
  ADD, SHR, MUL; a subtraction of a constant is ADD of its negation, a left shift SHR by a negative
  amount), in place: Y shares X's rows when X has no other reader (else Y is reset and X added
  first); a reduction's zero init is a GEMM reset;
- loops bound to "vthread" run each virtual thread with its own copy of every buffer allocated
  inside (TVM's inject_virtual_thread, allow_share=False) and interleave the threads' instructions
  one by one, so that one thread's loads can overlap another's GEMMs;
- micro-op kernels are loaded into the uop buffer once and kept while they fit; then dependency
  tokens are inserted (sync.insert_dependences) and FINISH ends the stream.

A tile larger than its SRAM, a partial 16-lane row, or a statement none of the above fits is refused
with an error naming the buffer or the statement.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np

from ...errors import ScheduleError, TesseraError
from ...ir import (Add, Allocate, And, AttrStmt, BufferLoad, BufferStore, Call, Cast, Div, EQ, Evaluate, FloorDiv,
                   FloorMod, For, ForKind, GE, GT, IfThenElse, IntImm, LE, LT, Let, LetStmt, Max, Min, Mod, Mul,
                   NE, Not, Or, PrimFunc, Select, SeqStmt, Sub, Var, post_order_visit, structural_equal)
from .config import DEFAULT_CONFIG, MEM_IDS, VDLAConfig
from .disasm import disassemble
from .intrin import GEMM_CALL
from .isa import Alu, AluOp, Finish, Gemm, Load, Store, Uop, decode_stream, encode_stream, encode_uops, layout, module_of
from .sync import insert_dependences, uop_steps

SRAM_SCOPES = ("inp", "wgt", "acc")


class FitError(ScheduleError):
    """A VDLA schedule whose tiles do not fit the accelerator's buffers (names buffer and sizes)."""


class CodegenError(TesseraError):
    """A lowered statement the VDLA code generator cannot map onto the ISA (names the statement)."""


# ---------------------------------------------------------------------------------------------
# the compiled program
# ---------------------------------------------------------------------------------------------
@dataclass
class Program:
    """One compiled function: its parameters and their DRAM addresses, the instruction stream,
    the micro-op words (at uop_addr in DRAM) and the DRAM size it needs."""

    name: str
    cfg: VDLAConfig
    params: list            # [{"name", "dtype", "shape", "addr"}]
    insns: list
    uop_words: np.ndarray
    uop_addr: int
    dram_bytes: int
    serial: bool = False
    vthreads: int = 1
    stats: dict = field(default_factory=dict)

    def listing(self) -> str:
        """The disassembled stream, with the parameters' DRAM addresses first."""
        head = [f"// VDLA program {self.name}: {len(self.insns)} instructions, {self.uop_words.size} micro-ops, "
                f"{'serial' if self.serial else 'dependency tokens'}, {self.vthreads} virtual thread(s)"]
        for p in self.params:
            head.append(f"//   {p['name']}: {p['dtype']}{list(p['shape'])} at dram byte {p['addr']}")
        head.append(f"//   micro-ops at dram byte {self.uop_addr}")
        return "\n".join(head) + "\n" + disassemble(self.insns, cfg=self.cfg)

    def to_json(self) -> dict:
        words = encode_stream(self.insns, self.cfg)
        return {"name": self.name, "config": self.cfg.to_dict(), "params": self.params,
                "insns": [int(w) for w in words], "uops": [int(u) for u in self.uop_words],
                "uop_addr": self.uop_addr, "dram_bytes": self.dram_bytes, "serial": self.serial,
                "vthreads": self.vthreads, "stats": self.stats}

    @staticmethod
    def from_json(d: dict) -> "Program":
        cfg = VDLAConfig.from_dict(d["config"])
        insns = decode_stream(np.array(d["insns"], dtype=np.uint64), cfg)
        return Program(d["name"], cfg, [dict(p, shape=tuple(p["shape"])) for p in d["params"]], insns,
                       np.array(d["uops"], dtype=np.uint32), int(d["uop_addr"]), int(d["dram_bytes"]),
                       bool(d["serial"]), int(d["vthreads"]), dict(d.get("stats", {})))

    def dumps(self) -> str:
        return json.dumps(self.to_json())


# ---------------------------------------------------------------------------------------------
# expressions over NumPy arrays
# ---------------------------------------------------------------------------------------------
_BIN = {Add: np.add, Sub: np.subtract, Mul: np.multiply, FloorDiv: np.floor_divide, FloorMod: np.mod,
        Min: np.minimum, Max: np.maximum, LT: np.less, LE: np.less_equal, GT: np.greater,
        GE: np.greater_equal, EQ: np.equal, NE: np.not_equal}


def _ev(e, env):
    """The value of an index/condition expression: an int or an int64/bool array."""
    t = type(e)
    if t is IntImm:
        return int(e.value)
    if t is Var or isinstance(e, Var):
        try:
            return env[e]
        except KeyError:
            raise CodegenError(f"variable {e.name!r} has no value here (a symbolic shape? VDLA programs "
                               f"are static)") from None
    f = _BIN.get(t)
    if f is not None:
        return f(_ev(e.a, env), _ev(e.b, env))
    if t is Div or t is Mod:
        a, b = np.asarray(_ev(e.a, env)), np.asarray(_ev(e.b, env))
        q = np.trunc(a / b).astype(np.int64)
        return q if t is Div else a - q * b
    if t is And:
        return np.logical_and(_ev(e.a, env), _ev(e.b, env))
    if t is Or:
        return np.logical_or(_ev(e.a, env), _ev(e.b, env))
    if t is Not:
        return np.logical_not(_ev(e.a, env))
    if t is Select:
        return np.where(_ev(e.condition, env), _ev(e.true_value, env), _ev(e.false_value, env))
    if t is Cast:
        return _ev(e.value, env)
    if t is Let:
        return _ev(e.body, {**env, e.var: _ev(e.value, env)})
    if t is Call and e.op == "if_then_else":
        return np.where(_ev(e.args[0], env), _ev(e.args[1], env), _ev(e.args[2], env))
    raise CodegenError(f"cannot evaluate {e.script()} at compile time (an index or condition of a VDLA "
                       f"program must be integer arithmetic of loop variables)")


def _int(e, env, what) -> int:
    v = _ev(e, env)
    if isinstance(v, np.ndarray):
        if v.size and (v != v.flat[0]).any():
            raise CodegenError(f"{what} {e.script()} varies inside a vectorized nest")
        v = int(v.flat[0])
    return int(v)


def _divisors(n: int) -> list:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# ---------------------------------------------------------------------------------------------
# folding micro-op sequences into iter_out x iter_in x kernel
# ---------------------------------------------------------------------------------------------
_KMAX = 2048


class _Folder:
    def __init__(self, cfg: VDLAConfig, alu: bool):
        lay = {n: w for n, _, w, _ in layout("alu" if alu else "gemm", cfg)}
        self.fbits = [lay["dst_factor_out"], lay["src_factor_out"], 0 if alu else lay["wgt_factor_out"]]
        self.itmax = (1 << lay["iter_out"]) - 1
        self.kmax = min(_KMAX, cfg.depth("uop"))

    def _fits(self, f) -> bool:
        return all(0 <= int(v) < (1 << b) if b else int(v) == 0 for v, b in zip(f, self.fbits))

    def single(self, t: np.ndarray):
        """(kernel, iter_out, iter_in, f_out, f_in) covering t with one instruction, or None. The
        smallest kernel wins; for a kernel size the per-block offsets must be a two-level affine
        sequence, whose inner extent is fixed by the first irregular step."""
        n_all = len(t)
        for k in _divisors(n_all):
            if k > self.kmax:
                break
            n = n_all // k
            blocks = t.reshape(n, k, 3)
            kern = blocks[0]
            if n > 1 and not ((blocks[1] - kern) == (blocks[1, 0] - kern[0])).all():
                continue          # cheap rejection: the second block is no translate of the first
            off = blocks[:, 0, :] - kern[0]
            if not (blocks == kern[None] + off[:, None, :]).all():
                continue
            if n == 1:
                return kern, 1, 1, np.zeros(3, np.int64), np.zeros(3, np.int64)
            d = np.diff(off, axis=0)
            irregular = np.flatnonzero((d != d[0]).any(1))
            cands = [n] if not irregular.size else [int(irregular[0]) + 1]
            if irregular.size:
                cands.append(1)
            for ii in cands:
                if n % ii:
                    continue
                io = n // ii
                if io > self.itmax or ii > self.itmax:
                    continue
                fi = off[1] - off[0] if ii > 1 else np.zeros(3, np.int64)
                fo = off[ii] - off[0] if io > 1 else np.zeros(3, np.int64)
                grid = (np.arange(io)[:, None, None] * fo + np.arange(ii)[None, :, None] * fi).reshape(n, 3)
                if (grid == off).all() and self._fits(fo) and self._fits(fi):
                    return kern, io, ii, fo, fi
        return None

    def fold(self, t: np.ndarray) -> list:
        """A list of single() results covering t in order."""
        one = self.single(t)
        if one is not None:
            return [one]
        n = len(t)
        for c in sorted(_divisors(n), reverse=True):
            if c == n or self.single(t[:c]) is None:
                continue
            out = []
            for i in range(0, n, c):
                out += self.fold(t[i:i + c])
            return out
        # not even one row folds (cannot happen: a 1-step kernel always folds); split in halves
        h = max(n // 2, 1)
        return self.fold(t[:h]) + self.fold(t[h:])


# ---------------------------------------------------------------------------------------------
# fitting row copies to 2-D DMA
# ---------------------------------------------------------------------------------------------
_PADMAX = 15
_SIZEMAX = (1 << 16) - 1


def _fit2d_load(src: np.ndarray, xw: int):
    """(y_size, x_size, stride, base, y_pad_0, y_pad_1, x_pad_0, x_pad_1) describing src (DRAM row per
    SRAM row, -1 = zero padding) as ytot x xw rows, or None."""
    m = len(src)
    ytot = m // xw
    g = src.reshape(ytot, xw)
    real = g >= 0
    rows_real = real.any(1)
    if not rows_real.any():
        return None
    y0 = int(np.argmax(rows_real))
    y1 = int(ytot - np.argmax(rows_real[::-1]))
    mid = real[y0:y1]
    cols = mid[0]
    if not (mid == cols[None]).all() or not cols.any():
        return None
    x0 = int(np.argmax(cols))
    x1 = int(xw - np.argmax(cols[::-1]))
    if not cols[x0:x1].all():
        return None
    v = g[y0:y1, x0:x1]
    ys, xs = v.shape
    base = int(v[0, 0])
    stride = int(v[1, 0] - v[0, 0]) if ys > 1 else xs
    if stride < 0:
        return None
    expect = base + np.arange(ys)[:, None] * stride + np.arange(xs)[None, :]
    if not (v == expect).all():
        return None
    pads = (y0, ytot - y1, x0, xw - x1)
    if max(pads) > _PADMAX or ys > _SIZEMAX or xs > _SIZEMAX or stride > _SIZEMAX:
        return None
    return ys, xs, stride, base, *pads


def _runs(sram: np.ndarray) -> list:
    """[start, end) index ranges of consecutive SRAM rows (sram sorted)."""
    cut = np.flatnonzero(np.diff(sram) != 1) + 1
    edges = np.r_[0, cut, len(sram)]
    return list(zip(edges[:-1], edges[1:]))


def fit_loads(sram: np.ndarray, dram: np.ndarray, mem: str, dram_unit_base: int) -> list:
    """LOAD instructions writing SRAM rows `sram` of `mem` from DRAM rows `dram` (-1: zero row);
    `dram` rows are relative to dram_unit_base (in the memory's row units)."""
    order = np.argsort(sram, kind="stable")
    sram, dram = sram[order], dram[order]
    if len(sram) > 1 and (np.diff(sram) == 0).any():
        raise CodegenError(f"a copy into {mem} writes a row twice")
    out = []
    mid = MEM_IDS[mem]

    def fit_block(s, d):
        for xw in sorted(_divisors(len(s)), reverse=True):
            fit = _fit2d_load(d, xw)
            if fit is not None:
                ys, xs, stride, base, yp0, yp1, xp0, xp1 = fit
                return Load(memory_type=mid, sram_base=int(s[0]), dram_base=dram_unit_base + base, y_size=ys,
                            x_size=xs, x_stride=stride, y_pad_0=yp0, y_pad_1=yp1, x_pad_0=xp0, x_pad_1=xp1)
        return None

    for a, b in _runs(sram):
        s, d = sram[a:b], dram[a:b]
        m = len(s)
        done = False
        for chunks in _divisors(m):          # one 2-D load, else equal chunks of 2-D loads
            if chunks > 64:
                break
            c = m // chunks
            insns = []
            for i in range(0, m, c):
                one = fit_block(s[i:i + c], d[i:i + c])
                if one is None:
                    break
                insns.append(one)
            if len(insns) == chunks:
                out += insns
                done = True
                break
        if done:
            continue
        # row-by-row: maximal segments of consecutive DRAM rows, zero rows as pad-only loads
        k = 0
        while k < m:
            if d[k] < 0:
                e = k
                while e < m and d[e] < 0 and e - k < _PADMAX + 1:
                    e += 1
                out.append(Load(memory_type=mid, sram_base=int(s[k]), dram_base=dram_unit_base, y_size=0,
                                x_size=1, x_stride=1, y_pad_0=1, x_pad_0=e - k - 1))
                k = e
                continue
            e = k + 1
            while e < m and d[e] == d[e - 1] + 1 and e - k < _SIZEMAX:
                e += 1
            out.append(Load(memory_type=mid, sram_base=int(s[k]), dram_base=dram_unit_base + int(d[k]),
                            y_size=1, x_size=e - k, x_stride=e - k))
            k = e
    return out


def fit_stores(sram: np.ndarray, dram: np.ndarray, dram_unit_base: int) -> list:
    """STORE instructions copying out rows `sram` to DRAM rows `dram` (relative to dram_unit_base)."""
    order = np.argsort(sram, kind="stable")
    sram, dram = sram[order], dram[order]
    out = []
    for a, b in _runs(sram):
        s, d = sram[a:b], dram[a:b]
        m = len(s)
        done = False
        for xs in sorted(_divisors(m), reverse=True):
            ys = m // xs
            g = d.reshape(ys, xs)
            stride = int(g[1, 0] - g[0, 0]) if ys > 1 else xs
            if stride < 0 or stride > _SIZEMAX or xs > _SIZEMAX or ys > _SIZEMAX:
                continue
            if (g == g[0, 0] + np.arange(ys)[:, None] * stride + np.arange(xs)[None, :]).all():
                out.append(Store(sram_base=int(s[0]), dram_base=dram_unit_base + int(g[0, 0]), y_size=ys,
                                 x_size=xs, x_stride=stride))
                done = True
                break
        if not done:
            k = 0
            while k < m:
                e = k + 1
                while e < m and d[e] == d[e - 1] + 1:
                    e += 1
                out.append(Store(sram_base=int(s[k]), dram_base=dram_unit_base + int(d[k]), y_size=1,
                                 x_size=e - k, x_stride=e - k))
                k = e
    return out


# ---------------------------------------------------------------------------------------------
# statement analysis
# ---------------------------------------------------------------------------------------------
_ALU_BIN = {Min: AluOp.MIN, Max: AluOp.MAX, Add: AluOp.ADD, Mul: AluOp.MUL}


def _is_const(e) -> bool:
    return type(e) is IntImm


class _Gen:
    def __init__(self, func: PrimFunc, cfg: VDLAConfig):
        self.func, self.cfg = func, cfg
        self.lanes = {"inp": cfg.batch * cfg.block, "wgt": cfg.block * cfg.block, "acc": cfg.batch * cfg.block}
        self.depth = {s: cfg.depth(s) for s in SRAM_SCOPES}
        self.gemm_fold, self.alu_fold = _Folder(cfg, False), _Folder(cfg, True)
        flat = func.attrs.get("flat_params") if func.attrs else None
        if flat is None:
            raise CodegenError(f"function {func.name!r} is not lowered (flatten_buffer gives flat_params)")
        self.params, self.param_of = [], {}
        addr = 256
        for p, fb in zip(func.params, flat):
            if fb is None:
                raise CodegenError(f"function {func.name!r}: scalar parameter {p.name!r}; a VDLA program takes "
                                   f"only tensors")
            if fb.dtype.lanes != 1 or str(fb.dtype) not in ("int8", "int32"):
                raise CodegenError(f"parameter {p.name!r} is {fb.dtype}; VDLA moves int8 and int32 tensors")
            shape = tuple(int(_int(d, {}, "the shape")) for d in p.shape)
            n = int(np.prod(shape)) * np.dtype(str(fb.dtype)).itemsize
            info = {"name": p.name, "dtype": str(fb.dtype), "shape": shape, "addr": addr}
            self.params.append(info)
            self.param_of[fb] = info
            addr = -(-(addr + n) // 256) * 256
        self.dram_top = addr
        self.env = {}
        self.dram_read, self.dram_written = set(), set()
        self.base = {}          # allocated Buffer -> first SRAM row
        self.top = {s: 0 for s in SRAM_SCOPES}
        self.peak = {s: 0 for s in SRAM_SCOPES}
        self.thread = None      # (vthread loop, thread index) while inside a virtual thread
        self.vt_memo = {}
        self.ops = []           # (insn template, kernel (k, 3) or None)
        self.vthreads = 1
        self._loads = {}
        self._count_loads(func.body)
        self.alias = {}
        self._plan_aliases(func.body, [])

    # ---- pre-pass: loads per buffer, in-place chains ---------------------------------------
    def _count_loads(self, body):
        """Reads of each buffer, not counting the GEMM's own accumulator operand (it produces the buffer)."""
        def visit(n):
            if type(n) is BufferLoad:
                self._loads[n.buffer] = self._loads.get(n.buffer, 0) + 1
            elif type(n) is Call and n.op == GEMM_CALL:
                acc = n.args[0]
                if type(acc) is Call and acc.op == "address_of" and type(acc.args[0]) is BufferLoad:
                    b = acc.args[0].buffer
                    self._loads[b] = self._loads.get(b, 0) - 1
        post_order_visit(body, visit)

    def _plan_aliases(self, body, _unused):
        """Y = f(X, ...) on acc buffers shares X's rows (in place, as VTA's ALU works) when X is read
        only there and X, Y are allocated by directly nested Allocates with the same shape."""
        chain_of, alloc_of, stores = {}, {}, []

        def walk(s, chain):
            t = type(s)
            if t is Allocate:
                cid = chain if chain is not None else id(s)
                chain_of[s.buffer], alloc_of[s.buffer] = cid, s
                return walk(s.body, cid)
            if t is SeqStmt:
                for x in s.seq:
                    walk(x, None)
            elif t in (For, AttrStmt, LetStmt):
                walk(s.body, None)
            elif t is IfThenElse:
                walk(s.then_case, None)
                if s.else_case is not None:
                    walk(s.else_case, None)
            elif t is BufferStore and s.buffer.scope == "acc":
                stores.append(s)
        walk(body, None)
        self.alias_candidates = []
        for s in stores:
            leaf = self._spine_leaf(s.value)
            x, y = getattr(leaf, "buffer", None), s.buffer
            if type(leaf) is not BufferLoad or x is y or x.scope != "acc" or self._loads.get(x, 0) != 1:
                continue
            if x not in chain_of or y not in chain_of or chain_of[x] != chain_of[y]:
                continue
            if len(x.shape) != len(y.shape) or not all(structural_equal(a, b) for a, b in zip(x.shape, y.shape)):
                continue
            if len(leaf.indices) == len(s.indices) and all(structural_equal(a, b)
                                                          for a, b in zip(leaf.indices, s.indices)):
                self.alias_candidates.append((y, x))

    def _spine_leaf(self, e):
        while True:
            t = type(e)
            if t in _ALU_BIN or t is Sub:
                e = e.b if _is_const(e.a) else e.a
            elif t is Call and e.op in ("shift_right", "shift_left"):
                e = e.args[0]
            else:
                return e

    # ---- SRAM allocation ---------------------------------------------------------------------
    def _alloc(self, stmt: Allocate):
        buf = stmt.buffer
        scope = buf.scope
        size = int(np.prod([_int(d, self.env, "an allocation's extent") for d in buf.shape]))
        L = self.lanes[scope]
        if size % L:
            raise CodegenError(f"buffer {buf.name!r} in {scope} holds {size} elements, not whole "
                               f"{L}-element rows")
        rows = size // L
        target = self._alias_target(buf)
        if target is not None and target in self.base:
            self.base[buf] = self.base[target]
            return None
        if self.thread is not None:
            key = (id(stmt), self.thread)
            if key in self.vt_memo:
                self.base[buf] = self.vt_memo[key]
                return None
        start = self.top[scope]
        if start + rows > self.depth[scope]:
            cap = self.depth[scope]
            raise FitError(f"the schedule does not fit VDLA: buffer {buf.name!r} (scope {scope!r}) needs "
                           f"{rows} rows ({rows * self.cfg.elem_bytes(scope)} bytes) with {start} rows already in "
                           f"use{' by other virtual threads/buffers' if start else ''}; the {scope} buffer has "
                           f"{cap} rows ({self.cfg.buffer_bytes(scope)} bytes): use smaller tiles")
        self.base[buf] = start
        self.top[scope] = start + rows
        self.peak[scope] = max(self.peak[scope], self.top[scope])
        if self.thread is not None:
            self.vt_memo[(id(stmt), self.thread)] = start
            return None
        return scope, start

    def _alias_target(self, buf):
        for y, x in self.alias_candidates:
            if y is buf:
                seen = set()
                while True:
                    nxt = next((x2 for y2, x2 in self.alias_candidates if y2 is x), None)
                    if nxt is None or id(x) in seen:
                        return x
                    seen.add(id(x))
                    x = nxt
        return None

    # ---- walking the host loops ----------------------------------------------------------------
    def run(self):
        self.visit(self.func.body)

    def visit(self, s):
        t = type(s)
        if t is SeqStmt:
            for x in s.seq:
                self.visit(x)
        elif t is Allocate:
            if s.buffer.scope not in SRAM_SCOPES:
                raise CodegenError(f"buffer {s.buffer.name!r} is allocated in scope {s.buffer.scope!r}; a VDLA "
                                   f"program keeps intermediates on chip (scopes {', '.join(SRAM_SCOPES)})")
            freed = self._alloc(s)
            self.visit(s.body)
            if freed is not None:
                self.top[freed[0]] = freed[1]
        elif t is For:
            if self._is_vthread(s):
                self._vthread(s)
            elif self._vectorizable(s):
                self._leaf(s)
            else:
                lo = _int(s.min, self.env, "a loop start")
                for v in range(lo, lo + _int(s.extent, self.env, "a loop extent")):
                    self.env[s.loop_var] = v
                    self.visit(s.body)
                self.env.pop(s.loop_var, None)
        elif t is AttrStmt:
            self.visit(s.body)
        elif t is LetStmt:
            self.env[s.var] = _ev(s.value, self.env)
            self.visit(s.body)
        elif t is IfThenElse:
            if _int(s.condition, self.env, "a condition"):
                self.visit(s.then_case)
            elif s.else_case is not None:
                self.visit(s.else_case)
        elif t in (BufferStore, Evaluate):
            self._leaf(s)
        else:
            raise CodegenError(f"a {t.__name__} statement has no VDLA meaning: {s.script()[:200]}")

    @staticmethod
    def _is_vthread(s: For) -> bool:
        tag = getattr(s.thread_binding, "thread_tag", s.thread_binding)
        return s.kind == ForKind.THREAD_BINDING and isinstance(tag, str) and tag.startswith(("vthread", "cthread"))

    def _vectorizable(self, s) -> bool:
        ok, points = self._scan(s)
        return ok and points <= 4_000_000

    def _scan(self, s):
        """(no Allocate / vthread inside, iteration points of the subtree)."""
        t = type(s)
        if t is For:
            if self._is_vthread(s) or s.kind == ForKind.THREAD_BINDING:
                return False, 0
            ok, p = self._scan(s.body)
            try:
                ext = _int(s.extent, self.env, "a loop extent")
            except CodegenError:
                return False, 0
            return ok, p * ext
        if t is SeqStmt:
            oks = [self._scan(x) for x in s.seq]
            return all(o for o, _ in oks), sum(p for _, p in oks)
        if t is Allocate:
            return False, 0
        if t in (AttrStmt, LetStmt):
            return self._scan(s.body)
        if t is IfThenElse:
            a = self._scan(s.then_case)
            b = self._scan(s.else_case) if s.else_case is not None else (True, 0)
            return a[0] and b[0], a[1] + b[1]
        return True, 1

    def _vthread(self, s: For):
        if self.thread is not None:
            raise CodegenError(f"virtual thread loop {s.loop_var.name!r} is nested in another; VDLA interleaves "
                               f"one level of virtual threads")
        n = _int(s.extent, self.env, "a vthread extent")
        saved_ops, saved_top = self.ops, dict(self.top)
        lists = []
        for t in range(n):
            self.ops = []
            self.thread = t
            self.env[s.loop_var] = _int(s.min, self.env, "a loop start") + t
            self.visit(s.body)
            lists.append(self.ops)
        self.thread = None
        self.vt_memo = {}
        self.env.pop(s.loop_var, None)
        self.top = saved_top
        self.vthreads = max(self.vthreads, n)
        # interleave the threads run by run (a run: consecutive instructions of one module), so
        # that a thread's loads stay together and wait only for that thread's own earlier GEMMs
        runs = []
        for x in lists:
            rs = []
            for op in x:
                m = module_of(op[0])
                if rs and rs[-1][0] == m:
                    rs[-1][1].append(op)
                else:
                    rs.append((m, [op]))
            runs.append(rs)
        merged = []
        for k in range(max(len(r) for r in runs) if runs else 0):
            for r in runs:
                if k < len(r):
                    merged += r[k][1]
        self.ops = saved_ops + merged

    # ---- a nest evaluated at once -------------------------------------------------------------
    def _leaf(self, s):
        recs = []
        env = dict(self.env)
        self._walk(s, env, [], 1, recs)
        events = []   # (keys matrix rows, record id, payload)
        for rid, (stmt, renv, keys, n) in enumerate(recs):
            if n == 0:
                continue
            events.append(self._events(rid, stmt, renv, keys, n))
        events = [e for e in events if e is not None]
        if not events:
            return
        width = max(k.shape[1] for k, _, _ in events)
        allkeys = np.concatenate([np.pad(k, ((0, 0), (0, width - k.shape[1])), constant_values=-1)
                                  for k, _, _ in events])
        rid = np.concatenate([np.full(len(k), r) for k, r, _ in events])
        idx = np.concatenate([np.arange(len(k)) for k, _, _ in events])
        order = np.lexsort(allkeys.T[::-1]) if width else np.arange(len(rid))
        rid, idx = rid[order], idx[order]
        payload = {r: p for _, r, p in events}
        cut = np.flatnonzero(np.diff(rid)) + 1
        for a, b in zip(np.r_[0, cut], np.r_[cut, len(rid)]):
            r = int(rid[a])
            self._emit(recs[r][0], payload[r], idx[a:b])

    def _walk(self, s, env, keys, n, out):
        t = type(s)
        if t is For:
            lo = _int(s.min, env, "a loop start")
            ext = _int(s.extent, env, "a loop extent")
            ar = np.arange(ext, dtype=np.int64)
            env2 = {k: (np.repeat(v, ext) if isinstance(v, np.ndarray) else v) for k, v in env.items()}
            env2[s.loop_var] = np.tile(ar, n) + lo
            keys2 = [np.repeat(k, ext) for k in keys] + [np.tile(ar, n)]
            return self._walk(s.body, env2, keys2, n * ext, out)
        if t is SeqStmt:
            for pos, x in enumerate(s.seq):
                self._walk(x, env, keys + [np.full(n, pos, np.int64)], n, out)
            return
        if t is AttrStmt:
            return self._walk(s.body, env, keys, n, out)
        if t is LetStmt:
            return self._walk(s.body, {**env, s.var: _ev(s.value, env)}, keys, n, out)
        if t is IfThenElse:
            c = np.broadcast_to(np.asarray(_ev(s.condition, env), dtype=bool), (n,))
            for mask, branch in ((c, s.then_case), (~c, s.else_case)):
                if branch is None or not mask.any():
                    continue
                env2 = {k: (v[mask] if isinstance(v, np.ndarray) else v) for k, v in env.items()}
                self._walk(branch, env2, [k[mask] for k in keys], int(mask.sum()), out)
            return
        if t in (BufferStore, Evaluate):
            out.append((s, env, keys, n))
            return
        raise CodegenError(f"a {t.__name__} statement has no VDLA meaning inside a tile: {s.script()[:200]}")

    def _arr(self, e, env, n):
        return np.broadcast_to(np.asarray(_ev(e, env), dtype=np.int64), (n,))

    def _flat(self, buf, indices, env, n):
        if len(indices) != 1:
            raise CodegenError(f"access to {buf.name!r} is not flattened")
        return self._arr(indices[0], env, n)

    def _rows(self, buf, flat, what):
        """(row, lane) of flat element indices of an SRAM or DRAM buffer."""
        if buf.scope in SRAM_SCOPES:
            L = self.lanes[buf.scope]
            base = self.base.get(buf)
            if base is None:
                raise CodegenError(f"buffer {buf.name!r} is used outside its allocation")
            return base + flat // L, flat % L
        raise CodegenError(f"{what}: {buf.name!r} is not an accelerator buffer")

    def _events(self, rid, stmt, env, keys, n):
        K = np.stack(keys, 1) if keys else np.zeros((n, 0), np.int64)
        if type(stmt) is Evaluate:
            v = stmt.value
            if type(v) is IntImm:
                return None
            if type(v) is not Call or v.op != GEMM_CALL:
                raise CodegenError(f"call {v.script()} is not a VDLA operation (tensorize the GEMM tile with "
                                   f"the vdla_gemm intrinsic)")
            rows = []
            for arg, scope in zip(v.args, ("acc", "inp", "wgt")):
                ld = arg.args[0] if type(arg) is Call and arg.op == "address_of" else None
                if ld is None or type(ld) is not BufferLoad or ld.buffer.scope != scope:
                    raise CodegenError(f"{GEMM_CALL}: argument {arg.script()} must be the address of a "
                                       f"{scope} buffer element")
                flat = self._flat(ld.buffer, ld.indices, env, n)
                r, lane = self._rows(ld.buffer, flat, GEMM_CALL)
                if (lane != 0).any():
                    raise CodegenError(f"{GEMM_CALL}: {ld.buffer.name} is accessed off a row boundary")
                rows.append(r)
            return K, rid, ("gemm", np.stack(rows, 1))
        buf = stmt.buffer
        flat = self._flat(buf, stmt.indices, env, n)
        if buf in self.param_of:
            return self._store_events(rid, stmt, flat, env, n, K)
        if buf.scope not in SRAM_SCOPES:
            raise CodegenError(f"store into {buf.name!r} (scope {buf.scope!r}) is neither an accelerator buffer "
                               f"nor a parameter")
        L = self.lanes[buf.scope]
        row, lane = self._rows(buf, flat, "a store")
        src = self._global_source(stmt.value)
        if src is not None:
            return self._dma_events(rid, stmt, row, lane, src, env, n, K, L)
        if buf.scope != "acc":
            raise CodegenError(f"store into {buf.name!r} (scope {buf.scope}): only copies from DRAM write "
                               f"inp/wgt buffers; got {stmt.value.script()}")
        rows_k = self._row_groups(row, lane, L, f"the elementwise stage writing {buf.name!r}")
        srcs = {}
        for ld in self._acc_operands(stmt.value):
            sflat = self._flat(ld.buffer, ld.indices, env, n)
            srow, slane = self._rows(ld.buffer, sflat, "an elementwise operand")
            if (slane != lane).any():
                raise CodegenError(f"the elementwise stage writing {buf.name!r} reads {ld.buffer.name!r} at other "
                                   f"lanes; VDLA's ALU works lane by lane")
            srcs[id(ld)] = srow[rows_k]
        return K[rows_k], rid, ("alu", row[rows_k], srcs)

    def _row_groups(self, row, lane, L, what):
        """Indices of each row's first lane; checks that the statement covers whole rows lane by lane."""
        n = len(row)
        if n % L or not (row.reshape(-1, L) == row.reshape(-1, L)[:, :1]).all() or \
                not (lane.reshape(-1, L) == np.arange(L)[None]).all():
            raise CodegenError(f"{what} does not cover whole {L}-lane rows with its innermost loop over the lanes")
        return np.arange(0, n, L)

    def _global_source(self, v):
        """(load of a parameter, condition or None, cast) when v copies DRAM (optionally padded)."""
        cond = None
        if type(v) is Call and v.op == "if_then_else":
            cond, a, b = v.args
            if not (type(b) is IntImm and b.value == 0):
                a, b = b, a
                cond = Not(cond)
            if not (type(b) is IntImm and b.value == 0):
                return None
            v = a
        elif type(v) is Select:
            cond, a, b = v.condition, v.true_value, v.false_value
            if not (type(b) is IntImm and b.value == 0):
                return None
            v = a
        cast = False
        if type(v) is Cast:
            v, cast = v.value, True
        if type(v) is BufferLoad and v.buffer in self.param_of:
            return v, cond, cast
        if cond is not None or cast:
            return None
        return None

    def _acc_operands(self, e) -> list:
        out = []

        def go(x):
            if type(x) is BufferLoad:
                if x.buffer.scope != "acc":
                    raise CodegenError(f"elementwise operand {x.buffer.name!r} (scope {x.buffer.scope}) is not in "
                                       f"acc; load it into an acc buffer first")
                out.append(x)
                return
            for c in getattr(x, "args", ()) if type(x) is Call else [getattr(x, f) for f in ("a", "b")
                                                                      if hasattr(x, f)]:
                go(c)
            if type(x) is Cast:
                go(x.value)
        go(e)
        return out

    def _dma_events(self, rid, stmt, row, lane, src, env, n, K, L):
        ld, cond, cast = src
        buf, gbuf = stmt.buffer, ld.buffer
        if buf.scope in ("inp", "wgt") and (str(gbuf.dtype) != "int8" or cast):
            raise CodegenError(f"copy {gbuf.name} -> {buf.name}: {buf.scope} holds int8, {gbuf.name} is {gbuf.dtype}")
        if buf.scope == "acc":
            mem = "acc" if str(gbuf.dtype) == "int32" else "acc8"
        else:
            mem = buf.scope
        keep = np.ones(n, bool) if cond is None else np.broadcast_to(np.asarray(_ev(cond, env), bool), (n,))
        g = np.full(n, -1, np.int64)
        if keep.any():
            envk = {k: (v[keep] if isinstance(v, np.ndarray) else v) for k, v in env.items()}
            g[keep] = self._flat(gbuf, ld.indices, envk, int(keep.sum()))
        rows_k = self._row_groups(row, lane, L, f"the copy into {buf.name!r}")
        gr = g.reshape(-1, L)
        real = gr >= 0
        if not (real.all(1) | (~real).all(1)).all():
            raise CodegenError(f"the copy into {buf.name!r} pads part of a row; VDLA pads whole rows only")
        ok = (gr[real.all(1)] % L == np.arange(L)[None]).all() and \
            (gr[real.all(1)] // L == gr[real.all(1)][:, :1] // L).all()
        if not ok:
            raise CodegenError(f"the copy {gbuf.name} -> {buf.name} does not move whole {L}-element rows of "
                               f"{gbuf.name} (its innermost dimensions must be the accelerator's row)")
        drow = np.where(real.all(1), gr[:, 0] // L, -1)
        info = self.param_of[gbuf]
        self.dram_read.add(info["name"])
        elem = self.cfg.elem_bytes(mem)
        if info["addr"] % elem:
            raise CodegenError(f"{gbuf.name} is not aligned to {elem}-byte rows")
        return K[rows_k], rid, ("load", mem, row[rows_k], drow, info["addr"] // elem)

    def _store_events(self, rid, stmt, flat, env, n, K):
        gbuf = stmt.buffer
        v = stmt.value
        if type(v) is Cast and str(v.dtype) == "int8":
            v = v.value
        if type(v) is not BufferLoad or v.buffer.scope != "acc" or str(gbuf.dtype) != "int8":
            raise CodegenError(f"the store into {gbuf.name!r} must copy an acc buffer to int8 (the out buffer is "
                               f"int8; compute the elementwise tail in scope 'acc'): got {v.script()[:120]}")
        L = self.lanes["acc"]
        sflat = self._flat(v.buffer, v.indices, env, n)
        srow, slane = self._rows(v.buffer, sflat, "a store")
        rows_k = self._row_groups(srow, slane, L, f"the store into {gbuf.name!r}")
        fr = flat.reshape(-1, L)
        if not ((fr % L == np.arange(L)[None]).all() and (fr // L == fr[:, :1] // L).all()):
            raise CodegenError(f"the store into {gbuf.name!r} does not write whole {L}-element rows")
        info = self.param_of[gbuf]
        self.dram_written.add(info["name"])
        return K[rows_k], rid, ("store", srow[rows_k], fr[:, 0] // L, info["addr"] // self.cfg.elem_bytes("out"))

    # ---- instructions from one run of events ------------------------------------------------------
    def _emit(self, stmt, payload, idx):
        kind = payload[0]
        if kind == "gemm":
            trip = payload[1][idx]
            for kern, io, ii, fo, fi in self.gemm_fold.fold(trip):
                self.ops.append((Gemm(iter_out=io, iter_in=ii, dst_factor_out=int(fo[0]), dst_factor_in=int(fi[0]),
                                      src_factor_out=int(fo[1]), src_factor_in=int(fi[1]),
                                      wgt_factor_out=int(fo[2]), wgt_factor_in=int(fi[2])), kern))
        elif kind == "load":
            _, mem, srow, drow, unit = payload
            for insn in fit_loads(srow[idx], drow[idx], mem, unit):
                self.ops.append((insn, None))
        elif kind == "store":
            _, srow, drow, unit = payload
            for insn in fit_stores(srow[idx], drow[idx], unit):
                self.ops.append((insn, None))
        else:
            _, drow, srcs = payload
            self._emit_alu(stmt, drow[idx], {k: v[idx] for k, v in srcs.items()})

    def _alu_steps(self, stmt, e, dst, srcs, steps):
        """ALU operations computing e into dst rows in place; returns nothing, appends to steps as
        (opcode, use_imm, imm, src rows)."""
        t = type(e)
        if t is BufferLoad:
            if self.base.get(e.buffer) is not None and srcs.get(id(e)) is not None and \
                    (srcs[id(e)] == dst).all():
                return           # already in place
            steps.append(("reset",))
            steps.append((AluOp.ADD, False, 0, srcs[id(e)]))
            return
        if t is IntImm:
            steps.append(("reset",))
            if e.value:
                self._imm_check(stmt, e.value)
                steps.append((AluOp.ADD, True, int(e.value), None))
            return
        if t is Cast and str(e.dtype) == "int32":
            return self._alu_steps(stmt, e.value, dst, srcs, steps)
        if t in _ALU_BIN or t is Sub or (t is Call and e.op in ("shift_right", "shift_left")):
            if t is Call:
                a, b = e.args
            else:
                a, b = e.a, e.b
            if t is not Sub and t is not Call and _is_const(a):
                a, b = b, a
            self._alu_steps(stmt, a, dst, srcs, steps)
            if t is Call:
                op = AluOp.SHR
            elif t is Sub:
                op = AluOp.ADD
            else:
                op = _ALU_BIN[t]
            if _is_const(b):
                imm = int(b.value)
                if t is Sub or (t is Call and e.op == "shift_left"):
                    imm = -imm
                self._imm_check(stmt, imm)
                steps.append((op, True, imm, None))
            elif type(b) is BufferLoad and t is not Sub and not (t is Call and e.op == "shift_left"):
                steps.append((op, False, 0, srcs[id(b)]))
            else:
                raise CodegenError(f"elementwise stage {stmt.buffer.name!r}: operand {b.script()} of "
                                   f"{e.script()} is neither a constant nor an acc buffer (VDLA's ALU has "
                                   f"no such operation)")
            return
        raise CodegenError(f"elementwise stage {stmt.buffer.name!r}: {e.script()[:120]} is not a VDLA ALU "
                           f"operation (min, max, +, -const, *, >>, <<const)")

    def _imm_check(self, stmt, v):
        if not -(1 << 15) <= v < (1 << 15):
            raise CodegenError(f"elementwise stage {stmt.buffer.name!r}: immediate {v} does not fit the ALU's "
                               f"16-bit signed field")

    def _emit_alu(self, stmt, drow, srcs):
        steps = []
        self._alu_steps(stmt, stmt.value, drow, srcs, steps)
        for st in steps:
            if st[0] == "reset":
                trip = np.stack([drow, np.zeros_like(drow), np.zeros_like(drow)], 1)
                for kern, io, ii, fo, fi in self.gemm_fold.fold(trip):
                    self.ops.append((Gemm(reset_reg=True, iter_out=io, iter_in=ii, dst_factor_out=int(fo[0]),
                                          dst_factor_in=int(fi[0]), src_factor_out=int(fo[1]),
                                          src_factor_in=int(fi[1]), wgt_factor_out=int(fo[2]),
                                          wgt_factor_in=int(fi[2])), kern))
                continue
            op, use_imm, imm, src = st
            srow = np.zeros_like(drow) if src is None else src
            trip = np.stack([drow, srow, np.zeros_like(drow)], 1)
            for kern, io, ii, fo, fi in self.alu_fold.fold(trip):
                self.ops.append((Alu(alu_opcode=int(op), use_imm=use_imm, imm=imm, iter_out=io, iter_in=ii,
                                     dst_factor_out=int(fo[0]), dst_factor_in=int(fi[0]),
                                     src_factor_out=int(fo[1]), src_factor_in=int(fi[1])), kern))


def _is_reset(e) -> bool:
    return type(e) is IntImm and e.value == 0


def generate(func: PrimFunc, cfg: VDLAConfig = DEFAULT_CONFIG, serial: bool = False) -> Program:
    """The Program of a lowered PrimFunc (see the module docstring)."""
    g = _Gen(func, cfg)
    g.run()
    both = sorted(g.dram_read & g.dram_written)
    if both:   # the load and store modules share no queue: DRAM is not ordered between them
        raise CodegenError(f"function {func.name!r} both loads from and stores to {', '.join(both)}; VDLA does not "
                           f"order DRAM accesses between its load and store modules (use separate tensors)")
    # micro-op kernels: each loaded into the uop buffer when first needed, kept while they fit
    blob, blob_off = [], {}
    resident, utop = {}, 0
    uop_depth = cfg.depth("uop")
    uop_addr = g.dram_top
    insns, steps = [], []
    pending_uop_loads = []
    for insn, kern in g.ops:
        if kern is None:
            insns.append(insn)
            steps.append(None)
            continue
        key = kern.tobytes()
        k = len(kern)
        if key not in blob_off:
            blob_off[key] = sum(len(b) for b in blob)
            blob.append(kern)
        if key not in resident:
            if utop + k > uop_depth:
                resident, utop = {}, 0
            resident[key] = utop
            load = Load(memory_type=MEM_IDS["uop"], sram_base=utop, dram_base=blob_off[key], y_size=1, x_size=k,
                        x_stride=k)
            pending_uop_loads.append(len(insns))
            insns.append(load)
            steps.append(None)
            utop += k
        slot = resident[key]
        insn = replace(insn, uop_bgn=slot, uop_end=slot + k)
        d, s, w = uop_steps(replace(insn, uop_bgn=0, uop_end=k), kern)
        insns.append(insn)
        steps.append((d, s, w))
    words = encode_uops([Uop(int(a), int(b), int(c)) for a, b, c in np.concatenate(blob)]) if blob \
        else np.zeros(0, np.uint32)
    for i in pending_uop_loads:   # the blob's address is known now
        insns[i] = replace(insns[i], dram_base=uop_addr // 4 + insns[i].dram_base)
    insns.append(Finish())
    steps.append(None)
    insns = insert_dependences(insns, steps, cfg, serial=serial)
    dram_bytes = uop_addr + 4 * words.size + 256
    stats = {"sram_rows_peak": dict(g.peak)}
    return Program(func.name, cfg, g.params, insns, words, uop_addr, dram_bytes, serial, g.vthreads, stats)
