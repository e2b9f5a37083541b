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
"""
from __future__ import annotations

from typing import Callable

from ..errors import TesseraError, UnsupportedOpError
from ..ir.tensor_type import TensorType


class DeferredGraph:
    """A graph built per distinct value of its `value_inputs` (see the module docstring).

    name: the model's name; input_names / input_types: every runtime input, in order (public names,
    TensorTypes with symbolic dimensions as the model declares them); output_names: the outputs;
    value_inputs / shape_inputs: the inputs whose values / shapes are known so far to decide the
    structure; build(values, shapes) -> (Graph, params) for {input name: array} and {input name:
    shape} of (at least) those; reason: the refusal that deferred it.
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
        if not all(isinstance(t, TensorType) for t in self.input_types):
            raise TesseraError(f"DeferredGraph {name!r}: input_types must be TensorTypes")
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

    def specialize(self, arrays: dict, value_inputs=None, shape_inputs=None) -> tuple:
        """(names, shaped, graph, params): the Graph for these inputs, built from the values of
        `names` and the shapes of `shaped` (value_inputs / shape_inputs, or this graph's, plus any
        the build found it needs)."""
        names = list(self.value_inputs if value_inputs is None else value_inputs)
        shaped = list(self.shape_inputs if shape_inputs is None else shape_inputs)
        for _ in range(2 * len(self.input_names) + 1):
            missing = [n for n in names + shaped if n not in arrays]
            if missing:
                raise TesseraError(f"model {self.name!r}: inputs {missing} decide its graph; they must be given")
            try:
                graph, params = self._build({n: arrays[n] for n in names},
                                            {n: tuple(arrays[n].shape) for n in shaped})
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
            return tuple(names), tuple(shaped), graph, params
        raise TesseraError(f"model {self.name!r}: building its graph did not settle which inputs decide it")

    # a Graph's text and passes need the structure: say why there is none yet
    def script(self) -> str:
        return (f"# model {self.name!r}: its graph depends on the values of inputs {list(self.value_inputs)} and "
                f"the shapes of {list(self.shape_inputs)} ({self.reason}); it is built per distinct value when it "
                f"runs\n")

    def __repr__(self):
        return (f"<DeferredGraph {self.name!r}: {len(self.input_names)} inputs, built per value of "
                f"{list(self.value_inputs)}>")


__all__ = ["DeferredGraph"]
