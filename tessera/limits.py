"""Limits on the work and memory a model may make tessera spend while it is converted and compiled.

A model is input: a 387-byte ONNX file whose Loop nests another would unroll a million iterations,
a 162-byte one asks ConstantOfShape for 4 GB. Each limit refuses such a model at once, with an error
naming the node, the size and the limit. One place configures them all: a `Limits` passed where
a model comes in (`tessera.frontend.from_onnx(model, limits=Limits(...))`), or, for every
conversion and compilation that is not given one, environment variables:

    TESSERA_MAX_UNROLLED_NODES   nodes that unrolling Loop and Scan bodies may convert in one model
                                 (nested loops count every inner iteration)         default 65536
    TESSERA_MAX_LOOP_ITERATIONS  iterations of one Loop (steps of one Scan) to unroll  default 1024
    TESSERA_MAX_CONSTANT_BYTES   bytes of one constant made while converting (ConstantOfShape, a
                                 folded value); larger values are not folded when compiling
                                                                                    default 1 GiB
    TESSERA_MAX_ROI_ALIGN_SAMPLES  bilinear samples RoiAlign may take per ROI and channel (output bins
                                 x the sampling grid of a bin: a huge ROI with sampling_ratio 0, or a
                                 huge sampling_ratio, asks for an unbounded grid)   default 16777216
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields

from .errors import TesseraError

_ENV = {"max_unrolled_nodes": "TESSERA_MAX_UNROLLED_NODES",
        "max_loop_iterations": "TESSERA_MAX_LOOP_ITERATIONS",
        "max_constant_bytes": "TESSERA_MAX_CONSTANT_BYTES",
        "max_roi_align_samples": "TESSERA_MAX_ROI_ALIGN_SAMPLES"}


@dataclass(frozen=True)
class Limits:
    """The limits (see the module docstring); `Limits.from_env()` reads the environment variables."""

    max_unrolled_nodes: int = 65536
    max_loop_iterations: int = 1024
    max_constant_bytes: int = 1 << 30
    max_roi_align_samples: int = 1 << 24

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise TesseraError(f"Limits.{f.name} must be an int >= 0, got {v!r}")

    @classmethod
    def from_env(cls) -> "Limits":
        """The defaults, each overridden by its environment variable when that is set."""
        given = {}
        for name, var in _ENV.items():
            text = os.environ.get(var, "").strip()
            if text:
                try:
                    given[name] = int(text)
                except ValueError:
                    raise TesseraError(f"{var}={text!r}: expected a whole number") from None
                if given[name] < 0:
                    raise TesseraError(f"{var}={text!r}: expected a number >= 0")
        return cls(**given)

    def where(self, name: str) -> str:
        """How to raise limit `name`, for messages."""
        return f"Limits({name}=...) or {_ENV[name]}"


def resolve(limits: Limits | None) -> Limits:
    """`limits`, or the environment's (Limits.from_env) when None."""
    if limits is None:
        return Limits.from_env()
    if not isinstance(limits, Limits):
        raise TesseraError(f"limits must be a tessera.limits.Limits, got {type(limits).__name__}")
    return limits


def size_text(nbytes: int) -> str:
    """nbytes for people: '4.0 GiB', '512 B'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


__all__ = ["Limits", "resolve", "size_text"]
