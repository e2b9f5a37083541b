"""Fixtures shared by the whole suite.

`isa_target`: the C targets an ISA-sensitive test (vector widths in generated code, micro-kernel
intrinsics, matrix-vector and row schedules) runs for: an AVX2+FMA target ("c -mcpu=haswell"), and
the host's own target where the host has more (AVX-512, VNNI, AMX). A test derives what it expects
from the Target it gets (its lanes, its features), never from the machine it was written on; an
AVX-512 host thus checks the AVX2 code paths too.
"""
import pytest

from tessera.target import Target

AVX2_TARGET = "c -mcpu=haswell"


def _isa_targets():
    host = Target("c")
    avx2 = host.has_feature("avx2") and host.has_feature("fma")
    more = host.vector_bits > 256 or any(host.has_feature(f) for f in ("avx512_vnni", "amx_tile"))
    out = [pytest.param(AVX2_TARGET, id="avx2")] if avx2 else []
    if more or not avx2:
        out.append(pytest.param("c", id="host"))
    return out


@pytest.fixture(params=_isa_targets())
def isa_target(request) -> str:
    """A C target's text ("c -mcpu=haswell" or "c"); add options with f"{isa_target} -num-threads=2"."""
    return request.param
