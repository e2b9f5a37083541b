"""The VDLA GEMM tensor intrinsic: one micro-op of the GEMM core,
`C[b, o] += int32(A[b, i]) * int32(B[o, i])` over a BATCH x BLOCK_OUT x BLOCK_IN tile (VTA's
intrinsic; B holds one weight row o-major). Tensorizing a block onto it makes its body a call
`vdla.gemm(&C, &A, &B)` whose three addresses the VDLA code generator turns into a micro-op
(acc row, inp row, wgt row).

    sch.tensorize(loop, gemm_intrin_name())      # "vdla_gemm_1x16x16" for the default config
"""
from __future__ import annotations

from ...ir import Block, BlockRealize, Buffer, Call, Evaluate, PrimFunc
from ...tir.tensor_intrin import TensorIntrin
from ...tir.tensor_intrin.gemm_desc import gemm_tile_desc
from .config import DEFAULT_CONFIG, VDLAConfig

GEMM_CALL = "vdla.gemm"


def gemm_desc(batch: int, block_in: int, block_out: int) -> PrimFunc:
    """The pattern: a (batch, block_out, block_in) loop nest around the int8 x int8 -> int32 update."""
    A = Buffer((batch, block_in), "int8", "A")
    B = Buffer((block_out, block_in), "int8", "B")
    C = Buffer((batch, block_out), "int32", "C")
    return gemm_tile_desc(A, B, C, batch, block_out, block_in, lambda i, k: A[i, k], lambda k, j: B[j, k], "int32")


def gemm_impl(batch: int, block_in: int, block_out: int) -> PrimFunc:
    """What the tile becomes: vdla.gemm(&C[0, 0], &A[0, 0], &B[0, 0]) on compact regions."""
    A = Buffer((batch, block_in), "int8", "A")
    B = Buffer((block_out, block_in), "int8", "B")
    C = Buffer((batch, block_out), "int32", "C")

    def addr(load):
        return Call("handle", "address_of", [load])

    call = Call("handle", GEMM_CALL, [addr(C[0, 0]), addr(A[0, 0]), addr(B[0, 0])])
    return PrimFunc([A, B, C], BlockRealize([], True, Block([], [], [], "root", Evaluate(call))))


def gemm_intrin_name(cfg: VDLAConfig = DEFAULT_CONFIG) -> str:
    """The registered name of cfg's GEMM intrinsic (registering it on first use)."""
    name = f"vdla_gemm_{cfg.batch}x{cfg.block_in}x{cfg.block_out}"
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, gemm_desc(cfg.batch, cfg.block_in, cfg.block_out),
                              gemm_impl(cfg.batch, cfg.block_in, cfg.block_out),
                              doc="VDLA GEMM core: acc[1x16] += inp[1x16] . wgt[16x16]^T")
    return name


gemm_intrin_name()   # the default configuration's intrinsic is always registered
