"""A model whose graph depends on the values of some of its runtime inputs.

An ONNX model may take a reduction's axes, Resize's scales, Reshape's target shape, Trilu's k or an
If's condition as a graph input: the value decides the structure of what is computed (an axis, a
rank, a mode), so no single Graph describes the model. `from_onnx` then returns a DeferredGraph:
`specialize(arrays)` builds the Graph (and its params) for the values those inputs have in one run,
and `tessera.compile` makes an executor that specializes per distinct value on first use and keeps
each compiled specialization (tessera/compile_graph.py, SpecializingExecutor).

Which inputs decide the structure is learned while building: a build that finds it needs the value
of another runtime input raises UnsupportedOpError with `needs_constant` naming it, and
`specialize` retries with that input's value too. Likewise `needs_shape` (a value computed from a
dynamic axis that the frontend does not track symbolically): the graph is then built per distinct
shape of those inputs (`shape_inputs`).

A model input of sequence or optional type (ONNX's seq(tensor), optional(...)) is a shape input too:
its *structure* (structure_of: a sequence's element shapes, whether an optional is empty) decides the
graph, which takes a sequence as one tensor input per element (named 'name[0]', 'name[1]', ...,
flat_name). A build may also return, per model output, how the graph's tensor outputs make it up
(`outputs`: an index, a list of those for a sequence, None for an empty optional), and the executor
regroups them (regroup): a sequence output comes back as a list of arrays.
"""
from __future__ import annotations

import hashlib
from typing import Callable

from ..errors import ShapeError, TesseraError, UnsupportedOpError
from ..ir.dtype import DataType
from ..ir.tensor_type import TensorType
from ..runtime.inputs import input_array


class SequenceType:
    """A sequence-typed model input: a list of tensors of one dtype; `elem` is the declared element
    TensorType, or None when the model leaves the element's shape unknown (shapes may differ)."""

    __slots__ = ("dtype", "elem")

    def __init__(self, dtype, elem: TensorType | None = None):
        object.__setattr__(self, "dtype", DataType(str(dtype)))
        object.__setattr__(self, "elem", elem)

    def __setattr__(self, key, value):
        raise AttributeError("SequenceType is immutable")

    def __eq__(self, other):
        return isinstance(other, SequenceType) and (self.dtype, self.elem) == (other.dtype, other.elem)

    def __hash__(self):
        return hash(("sequence", self.dtype, self.elem))

    def __str__(self):
        return f"sequence<{self.elem if self.elem is not None else self.dtype}>"

    __repr__ = __str__


class OptionalType:
    """An optional-typed model input: None (empty) or a value of `elem`: a TensorType, a SequenceType,
    or None for a tensor of `dtype` whose shape the model leaves open."""

    __slots__ = ("elem", "dtype")

    def __init__(self, elem, dtype=None):
        if elem is None and dtype is None or elem is not None and not isinstance(elem, (TensorType, SequenceType)):
            raise TesseraError(f"OptionalType holds a TensorType, a SequenceType or a dtype, got {elem!r}")
        object.__setattr__(self, "elem", elem)
        object.__setattr__(self, "dtype", elem.dtype if elem is not None else DataType(str(dtype)))

    def __setattr__(self, key, value):
        raise AttributeError("OptionalType is immutable")

    def __eq__(self, other):
        return isinstance(other, OptionalType) and (self.elem, self.dtype) == (other.elem, other.dtype)

    def __hash__(self):
        return hash(("optional", self.elem, self.dtype))

    def __str__(self):
        return f"optional<{self.elem if self.elem is not None else self.dtype}>"

    __repr__ = __str__


INPUT_TYPES = (TensorType, SequenceType, OptionalType)


def flat_name(name: str, index: int) -> str:
    """The public name of element `index` of sequence input (or output) `name` in a built graph."""
    return f"{name}[{index}]"


def check_input(name: str, x, t):
    """Input `name`'s value checked against its type t: an array of TensorType t (dtype and static
    extents checked), a list of those for a SequenceType (element i named flat_name(name, i)), None
    or the element's value for an OptionalType."""
    if isinstance(t, TensorType):
        x = input_array(name, x, t.dtype.numpy(), t.dtype, t)
        if x.ndim != t.ndim or any(isinstance(d, int) and d != g for d, g in zip(t.shape, x.shape)):
            raise ShapeError(f"input {name!r}: shape {x.shape}, the model expects {t}")
        return x
    if isinstance(t, OptionalType):
        if x is None:
            return None
        if t.elem is None:
            return input_array(name, x, t.dtype.numpy(), t.dtype, t)
        return check_input(name, x, t.elem)
    if isinstance(t, SequenceType):
        if not isinstance(x, (list, tuple)):
            raise TesseraError(f"input {name!r} is a {t}: give a list of arrays, got {type(x).__name__}")
        if t.elem is None:
            return [input_array(flat_name(name, i), e, t.dtype.numpy(), t.dtype, t) for i, e in enumerate(x)]
        return [check_input(flat_name(name, i), e, t.elem) for i, e in enumerate(x)]
    raise TesseraError(f"input {name!r}: unknown input type {t!r}")


def structure_of(x, t):
    """What of input value x (checked by check_input) decides the graph: a tensor's shape, a
    sequence's element shapes (a tuple of shapes), None for an empty optional (a given optional
    tensor: its declared shape, when the model declares one)."""
    if isinstance(t, OptionalType):
        if x is None or isinstance(t.elem, TensorType):
            return None if x is None else t.elem.shape      # given: its declared shape (symbols stay symbolic)
        return structure_of(x, t.elem) if t.elem is not None else tuple(x.shape)
    if isinstance(t, SequenceType):
        return tuple(tuple(e.shape) for e in x)
    return tuple(x.shape)


def value_key(x) -> tuple:
    """A hashable key of an input's value (dtype, shape and bytes; through sequences and optionals)."""
    if x is None:
        return (None,)
    if isinstance(x, list):
        return ("sequence",) + tuple(value_key(e) for e in x)
    return (x.dtype.str, x.shape, hashlib.blake2b(x.tobytes(), digest_size=16).digest())


def flatten(name: str, x, t, into: dict) -> dict:
    """Add the graph inputs that input `name`'s value x makes (flat_name per sequence element) to `into`."""
    if isinstance(t, OptionalType):
        if x is not None:
            flatten(name, x, t.elem if t.elem is not None else TensorType((), t.dtype), into)
    elif isinstance(t, SequenceType):
        for i, e in enumerate(x):
            into[flat_name(name, i)] = e
    else:
        into[name] = x
    return into


def regroup(outputs: list, layout) -> list:
    """The model's outputs from a built graph's tensor outputs: layout holds per model output an index
    into `outputs`, a list of layouts (a sequence), or None (an empty optional); layout None: as they are."""
    if layout is None:
        return list(outputs)

    def make(item):
        if item is None:
            return None
        if isinstance(item, list):
            return [make(x) for x in item]
        return outputs[item]

    return [make(item) for item in layout]


class DeferredGraph:
    """A graph built per distinct value of its `value_inputs` (see the module docstring).

    name: the model's name; input_names / input_types: every runtime input, in order (public names,
    TensorTypes with symbolic dimensions as the model declares them); output_names: the outputs;
    value_inputs / shape_inputs: the inputs whose values / shapes (structures, for sequence and
    optional inputs: structure_of) are known so far to decide the structure; build(values, shapes) ->
    (Graph, params) or (Graph, params, outputs layout: see regroup) for {input name: array} and {input
    name: shape} of (at least) those; reason: the refusal that deferred it. input_types may hold
    SequenceType / OptionalType for inputs of those types (always shape inputs).
    """

    __slots__ = ("name", "input_names", "input_types", "output_names", "value_inputs", "shape_inputs", "_build",
                 "reason")

    def __init__(self, name: str, input_names, input_types, output_names, value_inputs, build: Callable,
                 reason: str = "", shape_inputs=()):
        self.name = str(name)
        self.input_names = tuple(input_names)
        self.input_types = tuple(input_types)
        if len(self.input_names) != len(self.input_types):
            raise TesseraError(f"DeferredGraph {name!r}: {len(self.input_names)} input names for "
                               f"{len(self.input_types)} types")
        if not all(isinstance(t, INPUT_TYPES) for t in self.input_types):
            raise TesseraError(f"DeferredGraph {name!r}: input_types must be TensorTypes, SequenceTypes or "
                               f"OptionalTypes")
        self.output_names = tuple(output_names)
        unknown = [n for n in value_inputs if n not in self.input_names]
        if unknown:
            raise TesseraError(f"DeferredGraph {name!r}: value inputs {unknown} are not among its inputs "
                               f"{list(self.input_names)}")
        self.value_inputs = tuple(value_inputs)
        unknown = [n for n in shape_inputs if n not in self.input_names]
        if unknown:
            raise TesseraError(f"DeferredGraph {name!r}: shape inputs {unknown} are not among its inputs")
        self.shape_inputs = tuple(shape_inputs)
        self._build = build
        self.reason = reason

    def input_type(self, name: str):
        return self.input_types[self.input_names.index(name)]

    def specialize(self, arrays: dict, value_inputs=None, shape_inputs=None) -> tuple:
        """(names, shaped, graph, params, layout): the Graph for these inputs, built from the values of
        `names` and the shapes of `shaped` (value_inputs / shape_inputs, or this graph's, plus any
        the build found it needs); layout: how its outputs make the model's (regroup), or None."""
        names = list(self.value_inputs if value_inputs is None else value_inputs)
        shaped = list(self.shape_inputs if shape_inputs is None else shape_inputs)
        for _ in range(2 * len(self.input_names) + 1):
            missing = [n for n in names + shaped if n not in arrays]
            if missing:
                raise TesseraError(f"model {self.name!r}: inputs {missing} decide its graph; they must be given")
            try:
                built = self._build({n: arrays[n] for n in names},
                                    {n: structure_of(arrays[n], self.input_type(n)) for n in shaped})
            except UnsupportedOpError as e:
                need = getattr(e, "needs_constant", None)
                if need in self.input_names and need not in names:
                    names.append(need)
                    continue
                more = [n for n in getattr(e, "needs_shape", None) or () if n in self.input_names and n not in shaped]
                if more:
                    shaped.extend(more)
                    continue
                raise
            graph, params, layout = built if len(built) == 3 else (*built, None)
            return tuple(names), tuple(shaped), graph, params, layout
        raise TesseraError(f"model {self.name!r}: building its graph did not settle which inputs decide it")

    # a Graph's text and passes need the structure: say why there is none yet
    def script(self) -> str:
        return (f"# model {self.name!r}: its graph depends on the values of inputs {list(self.value_inputs)} and "
                f"the shapes of {list(self.shape_inputs)} ({self.reason}); it is built per distinct value when it "
                f"runs\n")

    def __repr__(self):
        return (f"<DeferredGraph {self.name!r}: {len(self.input_names)} inputs, built per value of "
                f"{list(self.value_inputs)}>")


class Params(dict):
    """A model's params ({graph input name: array}, what tessera.compile binds) that knows which of
    them are defaults: `defaults` names the params whose inputs a run may also give (ONNX: an
    initializer that is also a graph input, IR version >= 4, whose value is the input's default).
    tessera.compile binds them all (the defaults folded in) and its executor takes those inputs too
    (exe.defaults). A plain dict made from it ({**params}) forgets which are defaults."""

    def __init__(self, params=(), defaults=()):
        super().__init__(params)
        self.defaults = tuple(defaults)
        unknown = [n for n in self.defaults if n not in self]
        if unknown:
            raise TesseraError(f"Params: defaults {unknown} are not among the params")


__all__ = ["DeferredGraph", "OptionalType", "Params", "SequenceType", "check_input", "flat_name", "flatten", "regroup",
           "structure_of", "value_key"]
