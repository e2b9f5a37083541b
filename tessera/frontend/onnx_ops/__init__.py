"""ONNX op converters: one function per ONNX op (per family file), registered by op type.

A converter turns one ONNX node into tessera graph ops through a `ConvertContext` (implemented by
the frontend core in `tessera/frontend/onnx.py`):

    @converter("LeakyRelu")
    def _leaky_relu(ctx):
        return ctx.op("nn.leaky_relu", ctx.input(0), alpha=ctx.attr("alpha", 0.01))

    @converter("Reshape", since=5)          # a version for opset >= 5; older opsets pick `since=1`
    def _reshape(ctx):
        shape = ctx.const_input(1)          # numpy array; UnsupportedOpError if not constant
        ...

A converter returns a Value, or a tuple/list of Values (one per ONNX output; None for an omitted
optional output); sequences and empty optionals are host-side values (onnx_ops/sequence.py). It raises `UnsupportedOpError` via `ctx.unsupported("why")` for a case it cannot
handle (a dynamic shape, an attribute value tessera does not implement), never a bare exception.
"""
from __future__ import annotations

from typing import Callable
import functools
import importlib
import pkgutil

_CONVERTERS: dict[str, list[tuple[int, Callable]]] = {}


def converter(op_type: str, since: int = 1, domain: str = ""):
    """Register `fn(ctx)` as the converter of ONNX `op_type` for opsets >= since (in `domain`)."""

    def deco(fn):
        key = f"{domain}::{op_type}" if domain else op_type
        versions = _CONVERTERS.setdefault(key, [])
        if any(v == since for v, _ in versions):
            raise ValueError(f"converter for {key} since opset {since} registered twice")
        versions.append((since, fn))
        versions.sort(key=lambda p: p[0])
        return fn

    return deco


def find_converter(op_type: str, opset: int, domain: str = "") -> Callable | None:
    """The converter for op_type at this opset: the newest registered `since` <= opset, or None."""
    _load()
    key = f"{domain}::{op_type}" if domain and domain != "ai.onnx" else op_type
    best = None
    for since, fn in _CONVERTERS.get(key, ()):
        if since <= opset:
            best = fn
    return best


def supported_ops() -> list[str]:
    _load()
    return sorted(_CONVERTERS)


class ConvertContext:
    """What a converter sees of the ONNX node being converted (the frontend core implements it).

    node_name, op_type, opset (of the node's domain), num_inputs, num_outputs: plain attributes.
    `op` also takes numpy arrays / Python numbers as inputs (they become constants).
    """

    node_name: str
    op_type: str
    opset: int
    num_inputs: int
    num_outputs: int

    def input(self, i: int, optional: bool = False):
        """The Value of input i; None when it is absent/empty and optional (else an error)."""
        raise NotImplementedError

    def has_input(self, i: int) -> bool:
        """Whether input i is given (ONNX marks omitted optional inputs with an empty name)."""
        raise NotImplementedError

    def any_input(self, i: int, optional: bool = True):
        """Input i as it is: a Value, a sequence (sequence.SequenceValue), an empty optional
        (sequence.EmptyOptional), or None when omitted. `input` refuses the non-tensors."""
        raise NotImplementedError

    def sequence_input(self, i: int):
        """Input i, which must be a sequence (a SequenceValue); UnsupportedOpError otherwise."""
        raise NotImplementedError

    def needs_static_dim(self, dim, why: str):
        """Refuse because the symbolic dimension `dim` must be known here (from_onnx then specializes
        per shape of the runtime inputs that hold it)."""
        raise NotImplementedError

    def const_input(self, i: int, optional: bool = False):
        """Input i as a numpy array when it is constant (initializer, Constant, or a constant
        subgraph such as a shape computation, evaluated here); UnsupportedOpError otherwise."""
        raise NotImplementedError

    def is_const(self, i: int) -> bool:
        raise NotImplementedError

    def attr(self, name: str, default=None):
        """The attribute's Python value: int, float, str (decoded), list, numpy array (TENSOR), or
        `default` when the node does not set it."""
        raise NotImplementedError

    def op(self, op_name: str, *inputs, **attrs):
        """Add a tessera graph op; returns its Value (a tuple of Values for several outputs)."""
        raise NotImplementedError

    def const(self, array, name: str = "const"):
        """A new constant Value holding `array`."""
        raise NotImplementedError

    def has_output(self, i: int) -> bool:
        """Whether output i is asked for (omitted optional outputs have an empty name)."""
        raise NotImplementedError

    def has_attr(self, name: str) -> bool:
        """Whether the node sets attribute `name`."""
        raise NotImplementedError

    def input_name(self, i: int) -> str:
        """The ONNX tensor name of input i ('' when omitted), for messages."""
        raise NotImplementedError

    def dtype(self, elem_type: int) -> str:
        """The tessera dtype of an ONNX element type (Cast's `to`, a `dtype` attribute); raises
        UnsupportedOpError for types tessera lacks (string, complex, float8, int4...)."""
        raise NotImplementedError

    def unsupported(self, detail: str):
        """Raise UnsupportedOpError naming this node's op type, name and opset, with `detail`."""
        raise NotImplementedError


@functools.cache
def _load() -> None:
    """Import every converter family once (each registers on import: `onnx_ops/<family>.py`); the
    folder is scanned on the first lookup, not per node."""
    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")
