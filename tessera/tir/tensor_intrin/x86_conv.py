"""x86 micro-kernel of the blocked (NCHW[x]c) convolution: output rows, registers tiled.

The tensor intrinsic `x86_{isa}_conv2d_nchwc_{ROWS}x{OW}_{V}x{L}o{CB}i_s{sh}x{sw}_d{dh}x{dw}[_pf]`
computes, for ROWS output rows of OW pixels, V output-channel blocks of L lanes (L = the ISA's fp32
vector width; isa avx2_fma, avx512, or avx512vl: 8-lane ymm vectors in AVX-512's 32 registers):

    for v < V, r < ROWS, i < OW, j < L; reduce c < CC, kh < KH, kw < KW, ci < CB:
        C[v, r, i, j] += A[c, r * sh + kh * dh, i * sw + kw * dw, ci] * B[v, c, kh, kw, ci, j]

A: the (padded) input NCHW{CB}c from the first row's first tap, B: the weight OIHW{CB}i{L}o from the
first output block, C: the output NCHW{L}c. CC, KH and KW are free (desc extents); the strides, the
dilations and CB are part of the name (they are index coefficients), and so are ROWS and OW, which fix
the tiling (only the tile sizes the rows need are generated). The C code walks each row in register
tiles of R pixels x V vectors (R * V accumulators, V weight vectors and a broadcast input value in the
16 ymm / 32 zmm registers; a row is cut into tiles of equal size, each size with its own code) and
keeps every accumulator in a register over a chunk of the reduction: per input channel V loads of
weights and R broadcasts feed R * V FMAs. The reduction goes in chunks of input-channel blocks whose
weights fit L1 (L1_WEIGHT_BYTES), each chunk through every tile of the rows in turn; a tile is added
to C at the end of its chunk (the schedule's init zeroes C first), one vector store per accumulator.

Stride 1 rows whose pixels are contiguous (input rows as long as the output's, as in an unpadded 1x1
convolution: checked at run time from the strides) are tiled as one run across the rows where that
takes fewer tiles (flat_tiles: a 7x7 map in 13 + 3 x 12 pixels, not 7 rows of 4 + 3). With `_pf` the
first tile of each chunk also prefetches the weights that come next (the next chunk's; after the last,
the next output blocks', the next call's in the default loop orders), for weights that stream from
memory.

Variants (_fused_variant, made by the lowering pass fuse_intrin_epilogue, not by the schedule): `_z`
starts the first chunk's accumulators at zero instead of loading the tile (the init nest before the
call dropped), `_e<hash>` applies an elementwise epilogue (bias per output block, a residual per pixel,
ReLU / clip as MAXPS / MINPS) to the accumulators after the last chunk and stores them to the epilogue's
output instead of the tile, so that nothing reads the tile back.

A and the output blocks are passed by addresses (A: its first element and the next one along c, h
and w; C: one pointer a block, and block 0 of row 1), so the strides follow from the pointers: right
also where lowering has compacted the tile's C or a per-row-group padded A into a smaller buffer. A
pixel is CB floats of A and L floats of C.

The kernel's fixed C is x86_conv.c beside this file (package data, read at import): `//@ name`
sections with `$name` placeholders; c_source fills them with the parameters and the lines it
generates per accumulator. Registered when imported (the blocked convolution of ops/nn does).
"""
from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import string

from ...arith import simplify
from ...codegen import c_files
from ...codegen.c import x86_minmax
from ...errors import TesseraError
from ...ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Call, Evaluate, For, IntImm,
                   IterVar, PrimFunc, Range, Var, min_expr)
from ...target import Target
from .epilogue import EpilogueHook, Tile
from .intrin import TensorIntrin

ISA = {  # isa -> (fp32 lanes, vector registers, features, predefined macros the code needs)
    "avx2": (8, 16, ("avx2", "fma"), ("__AVX2__", "__FMA__")),
    "avx512": (16, 32, ("avx512f",), ("__AVX512F__",)),
    # 8-lane blocks on an AVX-512 CPU: ymm vectors, but AVX-512VL gives them all 32 registers
    "avx512vl8": (8, 32, ("avx512f", "avx512vl"), ("__AVX512F__", "__AVX512VL__")),
}
_PREFIX = {"avx2": "x86_avx2_fma", "avx512": "x86_avx512", "avx512vl8": "x86_avx512vl"}
MAX_V = 4

# the kernel's fixed C (a template of `//@ name` sections, package data), read once here
_TEMPLATE = c_files.sections("x86_conv.c", directory=os.path.dirname(os.path.abspath(__file__)))
_WHOLE_LINE = re.compile(r"\$\{?\w+\}?")


def isa_of(target) -> str | None:
    """The ISA whose conv micro-kernel `target` can run ("avx512", "avx2"), or None."""
    t = Target(target)
    if t.has_feature("avx512f"):       # features are a CPU target's (empty for other kinds)
        return "avx512"
    if t.has_feature("avx2") and t.has_feature("fma"):
        return "avx2"
    return None


def lanes_of(isa: str) -> int:
    return ISA[isa][0]


def row_tile(isa: str, v: int) -> int:
    """Pixels per register tile for V output vectors: R * V accumulators + V weights + 1 broadcast
    fit the register file (AVX2: 1 -> 14, 2 -> 6, 3 -> 4, 4 -> 3; AVX-512, also 8-lane with VL:
    1 -> 28 capped at 14, 2 -> 14, 3 -> 9, 4 -> 6)."""
    regs = ISA[isa][1]
    return max(1, min(14, (regs - v - 1) // v))


def intrin_name(isa, v, cb, strides, dilation, ow, rows=1, prefetch=False) -> str:
    lanes = lanes_of(isa)
    pre = _PREFIX[isa]
    (sh, sw), (dh, dw) = strides, dilation
    return f"{pre}_conv2d_nchwc_{rows}x{ow}_{v}x{lanes}o{cb}i_s{sh}x{sw}_d{dh}x{dw}" + ("_pf" if prefetch else "")


def _fn_name(isa, v, cb, strides, dilation, ow, rows=1, prefetch=False) -> str:
    (sh, sw), (dh, dw) = strides, dilation
    return (f"tintrin_{isa}_conv_{rows}x{ow}_{v}x{lanes_of(isa)}o{cb}i_s{sh}x{sw}_d{dh}x{dw}"
            + ("_pf" if prefetch else ""))


def row_tiles(isa, v, ow) -> list:
    """[(tile size, count)]: the row of `ow` pixels in tiles of equal size (at most one pixel
    apart), e.g. 7 -> 4 + 3, 56 -> 6 x 6 + 4 x 5 with a 6-pixel register tile."""
    R = row_tile(isa, v)
    tiles = -(-ow // R)
    base, longer = divmod(ow, tiles)
    return [(r, c) for r, c in ((base + 1, longer), (base, tiles - longer)) if c]


def flat_tiles(isa, v, ow, rows, strides) -> list | None:
    """The register tiles of `rows` rows of `ow` pixels taken as one run of rows * ow pixels (stride 1:
    when the input rows are ow pixels long, as in an unpadded 1x1 convolution, the rows' pixels are
    contiguous; e.g. a 7x7 map as 13 + 3 x 12 pixels instead of 7 x (4 + 3)), or None where that
    saves no tile over row by row. Not for rows of one pixel: the kernel then has no w stride to compare
    (a_w1 is a itself), and its run-time test could never hold."""
    if rows < 2 or ow < 2 or tuple(strides) != (1, 1):
        return None
    plan = row_tiles(isa, v, rows * ow)
    if sum(c for _, c in plan) >= rows * sum(c for _, c in row_tiles(isa, v, ow)):
        return None
    return plan


def _rng(n):
    return Range.from_min_extent(0, n)


def _desc(lanes, v, cb, strides, dilation, OW, rows) -> PrimFunc:
    (sh, sw), (dh, dw) = strides, dilation
    CC, KH, KW = Var("CC"), Var("KH"), Var("KW")
    HA, WA = Var("HA"), Var("WA")
    A = Buffer((CC, HA, WA, cb), "float32", "A")
    B = Buffer((v, CC, KH, KW, cb, lanes), "float32", "B")
    C = Buffer((v, rows, OW, lanes), "float32", "C")
    lv, lr, li, lj, lc, lh, lw, lk = (Var(n) for n in ("v", "r", "i", "j", "c", "kh", "kw", "ci"))
    ivs = [IterVar(_rng(v), "vv"), IterVar(_rng(rows), "vr"), IterVar(_rng(OW), "vi"), IterVar(_rng(lanes), "vj"),
           IterVar(_rng(CC), "vc", "reduce"), IterVar(_rng(KH), "vkh", "reduce"),
           IterVar(_rng(KW), "vkw", "reduce"), IterVar(_rng(cb), "vci", "reduce")]
    vv, vr, vi, vj, vc, vkh, vkw, vci = (iv.var for iv in ivs)
    value = C[vv, vr, vi, vj] + A[vc, vr * sh + vkh * dh, vi * sw + vkw * dw, vci] * B[vv, vc, vkh, vkw, vci, vj]
    reads = [BufferRegion(A, [_rng(x) for x in A.shape]), BufferRegion(B, [_rng(x) for x in B.shape])]
    writes = [BufferRegion(C, [_rng(x) for x in C.shape])]
    block = Block(ivs, reads, writes, "update", BufferStore(C, value, [vv, vr, vi, vj]))
    loops = [(lv, v), (lr, rows), (li, OW), (lj, lanes), (lc, CC), (lh, KH), (lw, KW), (lk, cb)]
    body = BlockRealize([x for x, _ in loops], True, block)
    for var, ext in reversed(loops):
        body = For(var, 0, ext, "serial", body)
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], reads, writes, "root", body)))


# the call's arguments: CC, KH, KW, A's four addresses, B's address and its four strides, then C's
# addresses (one a block, and row 1's where rows > 1): _tile_of reads them from here
C_ARGS_AT = 12


def _impl(fn, lanes, v, cb, strides, dilation, OW, rows) -> PrimFunc:
    CC, KH, KW = Var("CC"), Var("KH"), Var("KW")
    HA, WA = Var("HA"), Var("WA")
    sac, sah, saw = Var("sa_c"), Var("sa_h"), Var("sa_w")
    sbv, sbc, sbh, sbw = Var("sb_v"), Var("sb_c"), Var("sb_h"), Var("sb_w")
    scv, sch_ = Var("sc_v"), Var("sc_h")
    A = Buffer((CC, HA, WA, cb), "float32", "A", strides=(sac, sah, saw, 1))
    B = Buffer((v, CC, KH, KW, cb, lanes), "float32", "B", strides=(sbv, sbc, sbh, sbw, lanes, 1))
    C = Buffer((v, rows, OW, lanes), "float32", "C", strides=(scv, sch_, lanes, 1))
    # A by addresses too: the first element and the next one along c, h and w (the strides follow,
    # also after lowering has compacted a per-row-group padded input); an axis of extent 1 gives its
    # own first element (stride 0: never used)
    (sh, sw), (dh, dw) = strides, dilation
    last = (CC - 1, (rows - 1) * sh + (KH - 1) * dh, (OW - 1) * sw + (KW - 1) * dw)   # the region's last index
    one = [min_expr(IntImm("int32", 1), x) for x in last]
    args = [CC, KH, KW, Call("handle", "address_of", [A[0, 0, 0, 0]]),
            Call("handle", "address_of", [A[one[0], 0, 0, 0]]), Call("handle", "address_of", [A[0, one[1], 0, 0]]),
            Call("handle", "address_of", [A[0, 0, one[2], 0]]),
            Call("handle", "address_of", [B[0, 0, 0, 0, 0, 0]]), sbv, sbc, sbh, sbw]
    assert len(args) == C_ARGS_AT
    # C by addresses (its block and row strides follow from them, also after the tile buffer has
    # been compacted by lowering): block k of row 0, and row 1 of block 0
    args += [Call("handle", "address_of", [C[k, 0, 0, 0]]) for k in range(v)]
    if rows > 1:
        args.append(Call("handle", "address_of", [C[0, 1, 0, 0]]))
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], [], [], "root", Evaluate(Call("handle", fn, args)))))


def _variant_suffix(zero_init, epi, split=False) -> str:
    """`_z` (accumulators from zero), `_e<hash>` (an epilogue) and `_s` (one of several calls over the
    reduction: told whether it is the first / last) on a variant's function names."""
    out = "_z" if zero_init else ""
    if epi is not None:
        out += "_e" + hashlib.sha256(repr(epi).encode()).hexdigest()[:8]
    return out + ("_s" if split else "")


def _c(name, **values) -> str:
    """Section `name` of x86_conv.c with its placeholders filled; a line that is only a placeholder is
    left out where its value is empty."""
    lines = [line for line in _TEMPLATE[name].code.split("\n")
             if not (_WHOLE_LINE.fullmatch(line) and values[line.strip("${}")] == "")]
    return string.Template("\n".join(lines)).substitute(values)


def _minmax_helpers(lanes, vt) -> str:
    """tintrin_max_/tintrin_min_f32x{lanes}(x, c): x against a constant that is not NaN, x's NaN kept
    (x86's MAXPS / MINPS, as the C renderer spells them: codegen.c.x86_minmax)."""
    functions = []
    for op in ("max", "min"):
        branches = []
        for k, (cond, call) in enumerate(x86_minmax(op, "float32", 4 * lanes, "cv", "x")):
            branches += [f"#{'el' if k else ''}if {cond}", f"  return {call};"]
        functions.append(_c("minmax_function", vt=vt, op=op, lanes=lanes, branches="\n".join(branches)))
    return _c("minmax_helpers", lanes=lanes, functions="\n".join(functions))


def _epi_c(tree, kinds, i, k, lanes, vt) -> str:
    """C of the epilogue tree for pixel i of output block k (tensor_intrin/epilogue.py's trees)."""
    op = tree[0]
    if op == "acc":
        return f"acc{i}_{k}"
    if op == "in":
        j = tree[1]
        return f"e{j}_{k}" if kinds[j] == "vec" else f"(*(const {vt}*)(e{j} + {k} * se{j}_v + {i * lanes}))"
    if op == "add":
        return f"({_epi_c(tree[1], kinds, i, k, lanes, vt)} + {_epi_c(tree[2], kinds, i, k, lanes, vt)})"
    return f"tintrin_{op}_f32x{lanes}({_epi_c(tree[1], kinds, i, k, lanes, vt)}, {_c_float(tree[2])})"


def _c_float(v) -> str:
    """A float constant as C (infinities included: a clip with one bound open)."""
    v = float(v)
    if math.isinf(v):
        return "__builtin_inff()" if v > 0 else "(-__builtin_inff())"
    return f"{v!r}f"


def _epi_text(tree) -> str:
    """The epilogue tree as a formula for the kernel's comment."""
    op = tree[0]
    if op == "acc":
        return "acc"
    if op == "in":
        return f"in{tree[1]}"
    if op == "add":
        return f"({_epi_text(tree[1])} + {_epi_text(tree[2])})"
    return f"{op}({_epi_text(tree[1])}, {tree[2]!r})"


# the weights of one input-channel block that a call keeps in L1 while it sweeps its rows' tiles
L1_WEIGHT_BYTES = 16384      # (32 KB measured no faster inside ResNet-50: 1.01x its convs' time)


@functools.lru_cache(maxsize=512)   # lowering asks again for each call of a repeated layer, and per candidate
def c_source(isa, v, cb, strides, dilation, ow, rows=1, prefetch=False, zero_init=False, epi=None,
             split=False) -> str:
    """The C code of the kernel (see the module docstring); zero_init / epi: the variant that starts
    its accumulators at zero / applies an epilogue (expr tree, kinds of its inputs) before its store
    (_fused_variant); split: the call is one of several over the reduction and takes whether it is the
    first and the last (its first chunk then starts at zero only in the first call, its last applies the
    epilogue only in the last)."""
    lanes, _, feats, macros = ISA[isa]
    (sh, sw), (dh, dw) = strides, dilation
    fn = _fn_name(isa, v, cb, strides, dilation, ow, rows, prefetch) + _variant_suffix(zero_init, epi, split)
    flags = zero_init or epi is not None       # the tiles learn whether their chunk is the first / last
    kinds = epi[1] if epi is not None else ()
    vt = f"tintrin_f32x{lanes}"
    plan = row_tiles(isa, v, ow)
    flat = flat_tiles(isa, v, ow, rows, strides)
    outs = ", ".join(f"float* restrict c{k}" for k in range(v))
    # with dw == 1 the taps kw and the lanes ci of one input row are one contiguous run of KW * CB
    # floats (a pixel is CB floats): one loop over them, unrolled by CB
    fused = dw == 1
    # the tap loop unrolled 4 times, not a whole pixel (CB): gcc then keeps the 28 accumulators of a
    # 14 x 2 AVX-512 tile in registers (unrolled 16 times it spilled some to the stack)
    unroll = min(cb, 4)
    # GNU C vectors (no immintrin.h: it costs more compile time than the kernel): a float times a
    # vector broadcasts it (vbroadcastss), `acc + x * w` contracts into an FMA under -march
    L = [_c("vector_type", lanes=lanes, vt=vt, bytes=4 * lanes),
         _c("isa_guard", cond=" || ".join(f"!defined({m})" for m in macros), fn=fn, features=", ".join(feats))]
    if epi is not None:
        L.append(_minmax_helpers(lanes, vt))
    L.append(_c("comment", rows=rows, ow=ow, v=v, lanes=lanes, cb=cb, sh=sh, sw=sw, dh=dh, dw=dw,
                tiles=_tiles_text(plan),
                flat=_c("comment_flat", tiles=_tiles_text(flat)) if flat else "",
                prefetch=_c("comment_prefetch") if prefetch else ""))
    if zero_init or epi is not None:
        what = [_c("variant_zero")] if zero_init else []
        if epi is not None:
            inputs = ", ".join(f"{j}: " + ("per block" if kd == "vec" else "per pixel") for j, kd in enumerate(kinds))
            what.append(_c("variant_epilogue", formula=_epi_text(epi[0]), inputs=inputs, lanes=lanes))
        L.append(_c("variant_comment", what="; ".join(what)))

    def tile(r):
        def per_pixel(ind, fmt):   # one line a pixel, one statement a vector
            return "\n".join(ind + " ".join(fmt.format(i=i, k=k, at=i * lanes) for k in range(v)) for i in range(r))

        def step(a_at, b_at, ind):
            body = [ind + " ".join(f"const {vt} w{k} = *(const {vt}*)({b_at(k)});" for k in range(v))]
            for i in range(r):
                body.append(ind + f"{{ const float x = {a_at(i)}; " +
                            " ".join(f"acc{i}_{k} += x * w{k};" for k in range(v)) + " }")
            return "\n".join(body)

        epi_args = ""
        if epi is not None:
            epi_args = ", float* o, int64_t so_v" + "".join(f", const float* e{j}, int64_t se{j}_v"
                                                          for j in range(len(kinds)))
        loads = per_pixel("    " if zero_init else "  ", f"acc{{i}}_{{k}} = *({vt}*)(c{{k}} + {{at}});")
        if zero_init:
            start = _c("tile_start_zero", zeros=per_pixel("    ", f"acc{{i}}_{{k}} = ({vt}){{{{0}}}};"), loads=loads)
        else:
            start = loads
        pf = ""
        if prefetch:
            # addresses as integers: past the last output blocks they lie beyond the weights, where
            # pointer arithmetic would be undefined (a prefetch of any address is harmless)
            pf = _c("tile_prefetch", floats=cb * lanes, prefetches=" ".join(
                f"__builtin_prefetch((const void*)(ph + 4 * (uintptr_t)({k} * sb_v + o)));" for k in range(v)))
        if fused:
            taps = _c("taps_contiguous", cb=cb, unroll=unroll, step=step(
                lambda i: f"ah[{i} * px + t]", lambda k: f"bh + {k} * sb_v + t * {lanes}", "        "))
        else:
            taps = _c("taps_by_kw", dw=dw, cb=cb, unroll=unroll, step=step(
                lambda i: f"ak[{i} * px + ci]", lambda k: f"bk + {k} * sb_v + ci * {lanes}", "          "))
        epilogue = ""
        if epi is not None:
            inputs = "\n".join("    " + " ".join(f"const {vt} e{j}_{k} = *(const {vt}*)(e{j} + {k} * se{j}_v);"
                                                  for k in range(v))
                               for j, kind in enumerate(kinds) if kind == "vec")
            stores = "\n".join(f"    *({vt}*)(o + {k} * so_v + {i * lanes}) = {_epi_c(epi[0], kinds, i, k, lanes, vt)};"
                               for i in range(r) for k in range(v))
            epilogue = _c("tile_epilogue", inputs=inputs, stores=stores)
        return _c("tile", fn=fn, r=r, outs=outs, flag_args=", int first, int last" if flags else "",
                  epi_args=epi_args, pf_arg=", uintptr_t pf" if prefetch else "",
                  accumulators=per_pixel("  ", f"{vt} acc{{i}}_{{k}};"), start=start, sw=sw, dh=dh, prefetch=pf,
                  taps=taps, epilogue=epilogue, stores=per_pixel("  ", f"*({vt}*)(c{{k}} + {{at}}) = acc{{i}}_{{k}};"))

    for r in sorted({r for r, _ in plan} | {r for r, _ in flat or ()}, reverse=True):
        L.append(tile(r))

    def sweep(tiles, ind, a0, out0):
        """Calls of the tiles along one run of pixels; the first call of a chunk prefetches."""
        body = [ind + "int32_t x = 0;"]
        def at(ptr, stride):        # a pointer at the tile's first pixel
            return f"{ptr} + r * {stride} + x * {lanes}" if out0 else f"{ptr} + x * {lanes}"
        for i, (r, c) in enumerate(tiles):
            args = (f"c_lo, c_hi, KH, KW, {a0} + x * px, sa_c, sa_h, sa_w, b, sb_v, sb_c, sb_h, sb_w, "
                    + ", ".join(f"c{k}{out0} + x * {lanes}" for k in range(v)))
            if flags:
                args += ", first_call && c_lo == 0, last_call && c_hi == CC" if split else ", c_lo == 0, c_hi == CC"
            if epi is not None:
                args += f", {at('o', 'so_r')}, so_v" + "".join(
                    (f", {at(f'e{j}', f'se{j}_r')}, se{j}_v" if kind == "tile" else f", e{j}, se{j}_v")
                    for j, kind in enumerate(kinds))
            if prefetch and i == 0:
                body.append(ind + f"{fn}_t{r}({args}, {'r == 0 ? pf : 0' if out0 else 'pf'}); x += {r};")
                if c > 1:
                    body.append(ind + f"for (int32_t k = 1; k < {c}; ++k, x += {r}) {fn}_t{r}({args}, 0);")
            else:
                tail = ", 0" if prefetch else ""
                body.append(ind + f"for (int32_t k = 0; k < {c}; ++k, x += {r}) {fn}_t{r}({args}{tail});")
        return "\n".join(body)

    epi_params = ""
    if epi is not None:
        epi_params = ", float* o, int64_t so_v, int64_t so_r" + "".join(
            f", const float* e{j}, int64_t se{j}_v, int64_t se{j}_r" for j in range(len(kinds)))
    flat_test = ""
    if flat:
        same = "".join([f" && so_r == {ow * lanes}" if epi is not None else ""]
                       + [f" && se{j}_r == {ow * lanes}" for j, kind in enumerate(kinds) if kind == "tile"])
        flat_test = _c("kernel_flat_test", ow=ow, row_floats=ow * lanes, same=same)
    L.append(_c("kernel", fn=fn, outs=outs, row_arg=", float* restrict c_row1" if rows > 1 else "",
                epi_params=epi_params, split_args=", int first_call, int last_call" if split else "", sw=sw,
                row_stride="c_row1 - c0" if rows > 1 else "0", block_bytes=cb * v * lanes * 4,
                l1_bytes=L1_WEIGHT_BYTES, flat_test=flat_test,
                prefetch=_c("kernel_prefetch", v=v) if prefetch else "",
                flat_sweep=_c("kernel_flat_sweep", sweep=sweep(flat, "      ", "a", "")) if flat else "",
                rows=rows, sh=sh, sweep=sweep(plan, "      ", "ar", " + r * c_rs")))
    return "\n".join(L)


def _tiles_text(plan) -> str:
    """`2 x 6 + 1 x 5`: a plan's tiles (count x size) for the kernel's comment."""
    return " + ".join(f"{c} x {r}" for r, c in plan)


def _address(e):
    """(buffer, flat index) of `address_of(buf[i])`, or None."""
    if type(e) is Call and e.op == "address_of" and len(e.args) == 1 and type(e.args[0]) is BufferLoad \
            and len(e.args[0].indices) == 1:
        return e.args[0].buffer, e.args[0].indices[0]
    return None


def _const_diff(a, b):
    d = simplify(a - b)
    return d.value if type(d) is IntImm else None


def _tile_of(params, call):
    """The output tile of a call of the kernel (EpilogueHook.tile): its C argument addresses give the
    buffer, the origin and the block and row strides; pixel i is at + i * L."""
    isa, v, _, _, _, ow, rows, _ = params
    lanes = lanes_of(isa)
    n = v + (1 if rows > 1 else 0)
    if len(call.args) != C_ARGS_AT + n:
        return None
    got = [_address(a) for a in call.args[C_ARGS_AT:C_ARGS_AT + n]]
    if any(g is None for g in got) or any(g[0] is not got[0][0] for g in got):
        return None
    buf, origin = got[0]
    if str(buf.dtype) != "float32":
        return None
    sv = _const_diff(got[1][1], origin) if v > 1 else 0
    if sv is None or any(_const_diff(got[k][1], origin) != k * sv for k in range(2, v)):
        return None
    sr = _const_diff(got[v][1], origin) if rows > 1 else 0
    if sr is None:
        return None
    return Tile(buf, origin, ((sv, v), (sr, rows), (lanes, ow)), lanes, "float32")


def _fused_variant(params, call, epi):
    """The call of the variant that starts at zero and/or applies the epilogue (EpilogueHook.fuse):
    (Call, its function names, its C source), or None where the epilogue's accesses do not fit the
    kernel (pixels lanes apart; an input either per block or per pixel)."""
    isa, v, cb, strides, dilation, ow, rows, prefetch = params
    lanes = lanes_of(isa)
    args = list(call.args)
    spec = None
    if epi.out is not None:
        o = epi.out
        if ow > 1 and o.strides[2] != lanes:
            return None
        kinds = []
        for acc in epi.inputs:
            _, srow, spx = acc.strides
            if srow == 0 and spx == 0:
                kinds.append("vec")
            elif ow == 1 or spx == lanes:
                kinds.append("tile")
            else:
                return None
        spec = (epi.expr, tuple(kinds))
        for acc in (o, *epi.inputs):       # the output's and each input's address, block and row strides
            args += [Call("handle", "address_of", [BufferLoad(acc.buffer, [acc.origin])]),
                     IntImm("int64", int(acc.strides[0])), IntImm("int64", int(acc.strides[1]))]
    split = epi.first is not None
    if split:
        args += [epi.first, epi.last]
    fn = _fn_name(isa, v, cb, strides, dilation, ow, rows, prefetch) + _variant_suffix(epi.zero_init, spec, split)
    src = c_source(isa, v, cb, strides, dilation, ow, rows, prefetch, epi.zero_init, spec, split)
    return Call("handle", fn, args), (fn,), src


def conv_row_intrin(isa: str, v: int, cb: int, strides, dilation, ow: int, rows: int = 1,
                    prefetch: bool = False) -> str:
    """The name of the intrinsic for these parameters (`rows` output rows of `ow` pixels a call;
    `prefetch`: the first tile of each chunk prefetches the next weights), registered on first use."""
    if isa not in ISA:
        raise TesseraError(f"conv row micro-kernel: unknown ISA {isa!r} ({', '.join(ISA)})")
    if not 1 <= v <= MAX_V:
        raise TesseraError(f"conv row micro-kernel: {v} output vectors a tile; 1 to {MAX_V} are generated")
    strides, dilation = tuple(strides), tuple(dilation)
    name = intrin_name(isa, v, cb, strides, dilation, ow, rows, prefetch)
    if TensorIntrin.get(name, allow_missing=True) is None:
        lanes = lanes_of(isa)
        fn = _fn_name(isa, v, cb, strides, dilation, ow, rows, prefetch)
        params = (isa, v, cb, strides, dilation, ow, rows, prefetch)
        TensorIntrin.register(name, _desc(lanes, v, cb, strides, dilation, ow, rows),
                              _impl(fn, lanes, v, cb, strides, dilation, ow, rows),
                              c_source=c_source(isa, v, cb, strides, dilation, ow, rows, prefetch),
                              features=ISA[isa][2],
                              epilogue=EpilogueHook(functools.partial(_tile_of, params),
                                                    functools.partial(_fused_variant, params)),
                              doc=f"{rows} output row(s) of {ow} pixels of a blocked fp32 convolution, {v} x {lanes} "
                                  f"channels ({isa})" + (", weights prefetched" if prefetch else ""))
    return name


def _make_from_name(m) -> None:
    """Register the intrinsic a name of intrin_name's form spells (TensorIntrin.register_family)."""
    isa = {"avx2_fma": "avx2", "avx512vl": "avx512vl8", "avx512": "avx512"}[m.group(1)]
    rows, ow, v, lanes, cb, sh, sw, dh, dw = (int(g) for g in m.groups()[1:10])
    if lanes == lanes_of(isa) and 1 <= v <= MAX_V:
        conv_row_intrin(isa, v, cb, (sh, sw), (dh, dw), ow, rows, prefetch=m.group(11) is not None)


TensorIntrin.register_family(r"x86_(avx2_fma|avx512vl|avx512)_conv2d_nchwc_(\d+)x(\d+)_(\d+)x(\d+)o(\d+)i_s(\d+)x(\d+)"
                             r"_d(\d+)x(\d+)(_pf)?",
                             _make_from_name)


__all__ = ["conv_row_intrin", "isa_of", "lanes_of", "row_tile", "intrin_name", "c_source"]
