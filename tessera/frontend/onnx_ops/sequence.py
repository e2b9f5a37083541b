"""ONNX sequences and optionals, resolved while converting (the graph itself stays tensor-only).

A sequence is a host-side list of the converter's tensor Values (`SequenceValue`); an optional that
holds a value is that value, an empty one is an `EmptyOptional`. So SequenceConstruct / Empty /
Insert / Erase / At / Length, SplitToSequence, ConcatFromSequence and SequenceMap (its body
converted once per element, like an unrolled Loop) cost nothing at run time: they decide which
tensors the kernels read and write. Positions and split sizes must be known while converting; when
one comes from a runtime input, `ctx.const_input` refuses with `needs_constant` and `from_onnx`
returns a DeferredGraph built per value. A sequence's length must be known too: splitting a symbolic
extent asks for the input's shape (`needs_shape`).

Sequence- and optional-typed model inputs and outputs are flattened by the frontend (one graph input
or output per element; tessera/graph/deferred.py regroups them for the executor).
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, TesseraError
from ...ops._common import normalize_axis
from . import converter

MAX_ELEMENTS = 4096   # elements of one sequence; beyond this the flattened graph is too large to be useful


class SequenceValue:
    """A sequence while converting: its elements' Values, in order, and their dtype (which an empty
    sequence still has). Element shapes may differ. Immutable: the ops make new ones."""

    __slots__ = ("items", "dtype")

    def __init__(self, items, dtype):
        object.__setattr__(self, "items", tuple(items))
        object.__setattr__(self, "dtype", str(dtype))

    def __setattr__(self, key, value):
        raise AttributeError("SequenceValue is immutable")

    def __len__(self):
        return len(self.items)

    def __repr__(self):
        return f"sequence<{self.dtype}>[{', '.join(str(v.type) for v in self.items)}]"


class EmptyOptional:
    """An optional known, while converting, to hold nothing; `of` says what it would hold ('a tensor',
    'a sequence'), for messages."""

    __slots__ = ("of",)

    def __init__(self, of: str = "a value"):
        object.__setattr__(self, "of", of)

    def __setattr__(self, key, value):
        raise AttributeError("EmptyOptional is immutable")

    def __repr__(self):
        return f"optional(empty, of {self.of})"


def kind_of(x) -> str:
    """'a tensor', 'a sequence', 'an empty optional' (for messages)."""
    if isinstance(x, SequenceValue):
        return "a sequence"
    if isinstance(x, EmptyOptional):
        return "an empty optional"
    return "a tensor"


def _new(ctx, items, dtype) -> SequenceValue:
    if len(items) > MAX_ELEMENTS:
        ctx.unsupported(f"a sequence of {len(items)} elements is too long to flatten (at most {MAX_ELEMENTS})")
    for v in items:
        if str(v.type.dtype) != str(dtype):
            ctx.unsupported(f"a sequence of {dtype} cannot hold a {v.type.dtype} tensor ({v.type})")
    return SequenceValue(items, dtype)


def _position(ctx, i, n: int, default: int, insert: bool = False) -> int:
    """Input i (a scalar position; `default` when omitted) in [-n, n-1] ([-n, n] to insert) as 0..n."""
    if not ctx.has_input(i):
        return default
    a = np.asarray(ctx.const_input(i))
    if a.size != 1 or a.dtype.kind not in "iu":
        ctx.unsupported(f"the position must be one integer, got {a.dtype}{list(a.shape)}")
    p = int(a.reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise ShapeError(f"position {p} is out of range for a sequence of {n} elements (valid: {-n}..{hi})")
    return p + n if p < 0 else p


def _static_extent(ctx, x, axis: int, what: str) -> int:
    d = x.type.shape[axis]
    if not isinstance(d, int):
        ctx.needs_static_dim(d, f"{what}: the extent {d!r} of axis {axis} decides the sequence's length")
    return d


# ---------------------------------------------------------------------------------------------
# building and reading sequences
# ---------------------------------------------------------------------------------------------
@converter("SequenceConstruct", since=11)
def _sequence_construct(ctx):
    items = [ctx.input(i) for i in range(ctx.num_inputs)]
    if not items:
        ctx.unsupported("SequenceConstruct needs at least one input (SequenceEmpty makes an empty sequence)")
    return _new(ctx, items, items[0].type.dtype)


@converter("SequenceEmpty", since=11)
def _sequence_empty(ctx):
    return SequenceValue((), ctx.dtype(ctx.attr("dtype", 1)))


@converter("SequenceInsert", since=11)
def _sequence_insert(ctx):
    seq = ctx.sequence_input(0)
    x = ctx.input(1)
    n = len(seq)
    pos = _position(ctx, 2, n, n, insert=True)
    return _new(ctx, seq.items[:pos] + (x,) + seq.items[pos:], seq.dtype)


@converter("SequenceErase", since=11)
def _sequence_erase(ctx):
    seq = ctx.sequence_input(0)
    n = len(seq)
    if n == 0:
        raise ShapeError("erasing from an empty sequence")
    pos = _position(ctx, 1, n, n - 1)
    return SequenceValue(seq.items[:pos] + seq.items[pos + 1:], seq.dtype)


@converter("SequenceAt", since=11)
def _sequence_at(ctx):
    seq = ctx.sequence_input(0)
    if not ctx.has_input(1):
        ctx.unsupported("SequenceAt needs the position input")
    n = len(seq)
    if n == 0:
        raise ShapeError("SequenceAt of an empty sequence")
    return seq.items[_position(ctx, 1, n, 0)]


@converter("SequenceLength", since=11)
def _sequence_length(ctx):
    return ctx.const(np.array(len(ctx.sequence_input(0)), np.int64), "length")


# ---------------------------------------------------------------------------------------------
# tensors <-> sequences
# ---------------------------------------------------------------------------------------------
@converter("SplitToSequence", since=11)
def _split_to_sequence(ctx):
    x = ctx.input(0)
    axis = normalize_axis("SplitToSequence", ctx.attr("axis", 0), x.type.ndim)
    keepdims = int(ctx.attr("keepdims", 1))
    dtype = x.type.dtype
    if not ctx.has_input(1):
        # one element per index of the axis; keepdims=0 drops the axis
        d = _static_extent(ctx, x, axis, "SplitToSequence without split")
        parts = _split(ctx, x, [1] * d, axis)
        if not keepdims:
            parts = [ctx.op("squeeze", p, axes=(axis,)) for p in parts]
        return _new(ctx, parts, dtype)
    split = np.asarray(ctx.const_input(1))
    if split.dtype.kind not in "iu" or split.ndim > 1:
        ctx.unsupported(f"split must be an integer scalar or 1-D tensor, got {split.dtype}{list(split.shape)}")
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            raise ShapeError(f"SplitToSequence: split {size} must be positive")
        d = _static_extent(ctx, x, axis, "SplitToSequence with a scalar split")
        sizes = [min(size, d - k) for k in range(0, d, size)]
    else:
        sizes = [int(s) for s in split]
        if any(s < 0 for s in sizes):
            raise ShapeError(f"SplitToSequence: split sizes {sizes} must not be negative")
        # the sizes must add up to the extent: a symbolic one is asked for (per shape), not assumed
        d = _static_extent(ctx, x, axis, "SplitToSequence with split sizes")
        if sum(sizes) != d:
            raise ShapeError(f"SplitToSequence: split sizes {sizes} do not add up to the extent {d} of axis {axis}")
    return _new(ctx, _split(ctx, x, sizes, axis), dtype)


def _split(ctx, x, sizes, axis) -> list:
    """x cut along `axis` into parts of `sizes` (a list of Values)."""
    if len(sizes) > MAX_ELEMENTS:
        ctx.unsupported(f"splitting into {len(sizes)} parts is too many to flatten (at most {MAX_ELEMENTS})")
    if len(sizes) <= 1:
        return [x] * len(sizes)
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    parts = ctx.op("split", x, indices_or_sections=points, axis=axis)
    return list(parts) if isinstance(parts, tuple) else [parts]


@converter("ConcatFromSequence", since=11)
def _concat_from_sequence(ctx):
    seq = ctx.sequence_input(0)
    if ctx.attr("axis") is None:
        ctx.unsupported("ConcatFromSequence needs the axis attribute")
    new_axis = int(ctx.attr("new_axis", 0))
    if not len(seq):
        raise ShapeError("ConcatFromSequence of an empty sequence: there is no tensor to concatenate")
    rank = seq.items[0].type.ndim
    for v in seq.items[1:]:
        if v.type.ndim != rank:
            raise ShapeError(f"ConcatFromSequence: elements of ranks {rank} and {v.type.ndim} ({v.type})")
    axis = normalize_axis("ConcatFromSequence", ctx.attr("axis"), rank + (1 if new_axis else 0))
    items = list(seq.items)
    if new_axis:
        items = [ctx.op("expand_dims", v, axis=axis) for v in items]
    return items[0] if len(items) == 1 else ctx.op("concatenate", *items, axis=axis)


# ---------------------------------------------------------------------------------------------
# SequenceMap: the body once per element
# ---------------------------------------------------------------------------------------------
@converter("SequenceMap", since=17)
def _sequence_map(ctx):
    body = ctx.attr("body")
    if body is None:
        ctx.unsupported("the 'body' subgraph attribute is missing")
    seq = ctx.sequence_input(0)
    extra = [ctx.any_input(i) for i in range(1, ctx.num_inputs)]
    n = len(seq)
    for k, x in enumerate(extra):
        if isinstance(x, SequenceValue) and len(x) != n:
            raise ShapeError(f"SequenceMap: input {k + 1} has {len(x)} elements, input 0 has {n}")
        if x is None or isinstance(x, EmptyOptional):
            ctx.unsupported(f"input {k + 1} is {'omitted' if x is None else kind_of(x)}; SequenceMap takes "
                            f"sequences and tensors")
    outs_per_elem = []
    for i in range(n):
        args = [seq.items[i]] + [x.items[i] if isinstance(x, SequenceValue) else x for x in extra]
        outs = ctx.subgraph(body, args)
        for k, o in enumerate(outs):
            if isinstance(o, (SequenceValue, EmptyOptional)):
                ctx.unsupported(f"body output {k} is {kind_of(o)}; SequenceMap's body makes tensors")
        outs_per_elem.append(outs)
    results = []
    for k, out in enumerate(body.output):
        if n:
            parts = [outs[k] for outs in outs_per_elem]
            results.append(_new(ctx, parts, parts[0].type.dtype))
        else:
            tt = out.type.tensor_type if out.type.HasField("tensor_type") else None
            if tt is None or not tt.elem_type:
                ctx.unsupported(f"body output {k} has no declared tensor type, so the empty result has no dtype")
            results.append(SequenceValue((), ctx.dtype(tt.elem_type)))
    return results


# ---------------------------------------------------------------------------------------------
# optionals
# ---------------------------------------------------------------------------------------------
@converter("Optional", since=15)
def _optional(ctx):
    if ctx.has_input(0):
        return ctx.any_input(0)
    ty = ctx.attr("type")
    what = getattr(ty, "WhichOneof", lambda _: None)("value")
    return EmptyOptional({"tensor_type": "a tensor", "sequence_type": "a sequence"}.get(what, "a value"))


@converter("OptionalHasElement", since=15)
def _optional_has_element(ctx):
    x = ctx.any_input(0)       # opset 18 also takes a tensor or sequence, or nothing
    return ctx.const(np.array(x is not None and not isinstance(x, EmptyOptional)), "has_element")


@converter("OptionalGetElement", since=15)
def _optional_get_element(ctx):
    x = ctx.any_input(0)
    if x is None or isinstance(x, EmptyOptional):
        raise TesseraError("OptionalGetElement of an empty optional: it holds no element")
    return x
