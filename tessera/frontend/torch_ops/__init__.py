"""PyTorch op converters: one function per ATen overload (per family file), registered by its name.

A converter turns one `call_function` node of a core-ATen FX graph (torch.export after
`run_decompositions`, or the graph aot_autograd gives the torch.compile backend) into tessera graph
ops through a `TorchContext` (implemented by the frontend core, `tessera/frontend/torch.py`):

    @converter("aten.leaky_relu.default")
    def _leaky_relu(ctx):
        return ctx.op("nn.leaky_relu", ctx.input("self"), alpha=ctx.arg("negative_slope"))

Arguments are read by their schema names (`ctx.arg("stride")`, defaults filled in from the schema);
a tensor argument is a Value through `ctx.input(name)`; a symbolic size (a SymInt) is an int where it
is constant and a sympy expression otherwise, `ctx.dim(expr)` turning it into a tessera dimension (an
int or a symbol name). A converter returns a Value (or a tuple with one entry per output of the
overload, None for an output the graph does not use) whose type is the node's: the core checks it
against the node's own shape and dtype. It refuses a case it cannot handle with `ctx.unsupported(why)`
(an UnsupportedOpError naming the node), never with a bare exception.

A user adds or replaces converters without editing tessera: `from_exported_program(ep,
converters={"aten.foo.default": fn})`, fn taking the same context.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Callable

_CONVERTERS: dict[str, Callable] = {}


def converter(*targets: str):
    """Register `fn(ctx)` as the converter of each ATen overload named in `targets`
    ("aten.add.Tensor"): the name torch prints for `node.target`."""

    def deco(fn):
        for t in targets:
            if t in _CONVERTERS:
                raise ValueError(f"converter for {t} registered twice")
            _CONVERTERS[t] = fn
        return fn

    return deco


def find_converter(target: str, extra: dict | None = None) -> Callable | None:
    """The converter of ATen overload `target`: the caller's (`extra`) first, then tessera's."""
    if extra and target in extra:
        return extra[target]
    _load()
    return _CONVERTERS.get(target)


def supported_ops() -> list[str]:
    """The ATen overloads tessera converts, sorted."""
    _load()
    return sorted(_CONVERTERS)


class TorchContext:
    """What a converter sees of the node being converted (the frontend core implements it).

    node: the torch.fx Node; target: its overload's name ("aten.conv2d.default"); name: the node's
    name (the name torch prints, used in messages)."""

    target: str
    name: str

    def arg(self, name: str):
        """The argument `name` of the overload's schema: an int, float, bool, None, list, a
        torch.dtype, a sympy expression for a symbolic size, or a tensor's entry (use `input` for
        those); the schema's default when the node does not give it."""
        raise NotImplementedError

    def has_arg(self, name: str) -> bool:
        """Whether the node gives the argument (positionally or by keyword) and it is not None."""
        raise NotImplementedError

    def input(self, name: str, dtype: str | None = None):
        """The tensor argument `name` as a Value of the tensor's own shape (cast to `dtype` when
        given); a Python number there becomes a 0-d constant (of `dtype`, else the output's)."""
        raise NotImplementedError

    def inputs(self, name: str) -> list:
        """A list-of-tensors argument (cat's `tensors`) as Values."""
        raise NotImplementedError

    def tensor(self, name: str) -> "TorchTensor":
        """Tensor argument `name` as converted: a TorchTensor, whose value may hold a torch dimension
        that is a product of symbolic sizes as its factors (see TorchTensor and _layout.py)."""
        raise NotImplementedError

    def flat(self, t: "TorchTensor", what: str = "a tensor"):
        """A TorchTensor as a Value of the torch tensor's own shape (refused where a dimension is a
        product of symbolic sizes)."""
        raise NotImplementedError

    def arg_dtype(self, name: str):
        """The tessera dtype of tensor argument `name`; None for a Python number."""
        raise NotImplementedError

    def out_sizes(self, k: int = 0) -> tuple:
        """Output k's shape as torch gives it: ints and sympy expressions."""
        raise NotImplementedError

    def shape(self, name: str) -> tuple:
        """The torch shape of tensor argument `name`: ints and sympy expressions."""
        raise NotImplementedError

    def dim(self, expr, why: str = ""):
        """A size as a tessera dimension: an int, or the name of a symbolic dimension; refused
        (naming `why`) when it is an expression of symbols (s0 * s1, s0 + 1)."""
        raise NotImplementedError

    def out_shape(self, k: int = 0) -> tuple:
        """The shape of output k as tessera dimensions (ints and symbol names)."""
        raise NotImplementedError

    def out_dtype(self, k: int = 0) -> str:
        """The tessera dtype of output k."""
        raise NotImplementedError

    def dtype(self, torch_dtype) -> str:
        """The tessera dtype of a torch.dtype (UnsupportedOpError for those tessera lacks)."""
        raise NotImplementedError

    def used(self, k: int) -> bool:
        """Whether output k of the node is read by the graph."""
        raise NotImplementedError

    def op(self, op_name: str, *inputs, **attrs):
        """Add a tessera graph op; returns its Value (a tuple of Values for several outputs)."""
        raise NotImplementedError

    def const(self, array, name: str = "const"):
        """A new constant Value holding `array` (a numpy array)."""
        raise NotImplementedError

    def scalar(self, x, dtype):
        """A 0-d constant of `dtype` holding the Python number x."""
        raise NotImplementedError

    def cast(self, v, dtype: str):
        """v cast to `dtype` (v itself when it has that dtype)."""
        raise NotImplementedError

    def const_value(self, name: str):
        """The value of tensor argument `name` as a numpy array when it is a constant of the graph
        (a bound parameter, a constant the converter made), else None."""
        raise NotImplementedError

    def unsupported(self, detail: str):
        """Raise UnsupportedOpError naming this node's overload and name, with `detail`."""
        raise NotImplementedError


@functools.cache
def _load() -> None:
    """Import every converter family once (each registers on import: `torch_ops/<family>.py`)."""
    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")


class TorchTensor:
    """A torch tensor in the tessera graph: `value`, whose dimensions, `parts[i]` of them for torch
    dimension i (row-major: their product is its size), are the torch tensor's. parts None: one
    each (the value has the torch tensor's shape). A torch dimension that is a product of symbolic
    sizes (core ATen's (B*T, C) around a matrix product) keeps its factors as dimensions of their
    own, since a tessera dimension is an int or a single symbol."""

    __slots__ = ("value", "parts")

    def __init__(self, value, parts=None):
        if parts is not None:
            parts = tuple(int(p) for p in parts)
            if sum(parts) != len(value.shape) or any(p < 1 for p in parts):
                raise ValueError(f"parts {parts} do not cover the {len(value.shape)} dimensions of {value!r}")
            if all(p == 1 for p in parts):
                parts = None
        self.value = value
        self.parts = parts

    @property
    def ndim(self) -> int:
        """The torch tensor's rank."""
        return len(self.value.shape) if self.parts is None else len(self.parts)

    def groups(self) -> list:
        """Per torch dimension, the tuple of the value's axes that make it."""
        if self.parts is None:
            return [(a,) for a in range(len(self.value.shape))]
        out, a = [], 0
        for p in self.parts:
            out.append(tuple(range(a, a + p)))
            a += p
        return out

    def factors(self, dim: int) -> tuple:
        """The value's extents that make torch dimension `dim` (ints and symbol names)."""
        return tuple(self.value.shape[a] for a in self.groups()[dim])

    def __repr__(self):
        return f"TorchTensor({self.value!r}, parts={self.parts})"
