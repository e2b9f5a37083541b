"""Instructions: one recorded call of a schedule primitive, and the registry of their kinds.

An `InstructionKind` describes a primitive once (TVM's InstructionKind/InstTraits): its name in
traces ("Split"), the Schedule method that applies it, which arguments are inputs (may hold
handles) and which are attributes (plain values), how many outputs it has, whether it is pure
(no effect on the IR: lookups and sampling, which Trace.simplified may drop) and whether it takes
a sampling `decision`. A primitive family's function becomes a kind with the `instruction_kind`
decorator; the Schedule method of the same name (schedule.py) applies it as one traced instruction.
This module holds the data, the registry and the printing of one instruction.
"""
from __future__ import annotations

import inspect
import json
import math

from ...errors import ScheduleError, TesseraError
from ...ir import FloatImm, IntImm, StringImm
from .handles import RV, RV_TYPES

INSTRUCTION_KINDS: dict = {}


class InstructionKind:
    """What a trace needs to know about one primitive."""

    __slots__ = ("name", "method", "inputs", "varargs", "attrs", "outputs", "output_type", "pure",
                 "sampling", "params")

    def __init__(self, name, method, inputs, varargs, attrs, outputs, output_type, pure, sampling,
                 params=None):
        if outputs not in ("none", "one", "list"):
            raise TesseraError(f"instruction kind {name!r}: outputs must be 'none', 'one' or 'list'")
        self.name = name
        self.method = method            # name of the Schedule method
        self.inputs = tuple(inputs)     # parameter names that may hold handles, in order
        self.varargs = varargs          # True when the inputs are the method's *args
        self.attrs = tuple(attrs)       # parameter names of plain values, in order
        self.outputs = outputs          # "none" | "one" | "list"
        self.output_type = output_type  # the handle class of the outputs (None: no outputs)
        self.pure = pure
        self.sampling = sampling
        # every parameter in the method's order (how as_python prints keyword arguments)
        self.params = tuple(params) if params is not None else self.inputs + self.attrs

    def __repr__(self):
        return f"InstructionKind({self.name!r})"

    def apply(self, sch, inputs, attrs, decision=None):
        """Call the primitive on sch with already-mapped inputs; returns its outputs as a list."""
        kw = dict(zip(self.attrs, attrs))
        if self.sampling:
            kw["decision"] = decision
        method = getattr(sch, self.method)
        if self.varargs:
            result = method(*inputs, **kw)
        else:
            kw.update(zip(self.inputs, inputs))
            result = method(**kw)
        if result is None:
            return []
        if isinstance(result, (list, tuple)):
            return list(result)
        return [result]

    def as_python(self, inputs, attrs, outputs, decision, names) -> str:
        """One line of Python replaying the instruction, handles printed by `names`."""
        args = []
        if self.varargs:
            args.extend(py_value(x, names) for x in inputs)
            values = dict(zip(self.attrs, attrs))
        else:
            values = dict(zip(self.inputs, inputs))
            values.update(zip(self.attrs, attrs))
        args.extend(f"{k}={py_value(values[k], names)}" for k in self.params if k in values)
        if self.sampling and decision is not None:
            args.append(f"decision={py_value(decision, names)}")
        call = f"sch.{self.method}({', '.join(args)})"
        if not outputs:
            return call
        outs = [names[o] for o in outputs]
        if self.outputs == "one":
            return f"{outs[0]} = {call}"
        return f"{', '.join(outs)}{',' if len(outs) == 1 else ''} = {call}"


class Instruction:
    """One primitive call: its kind, inputs (handles and literals), attrs and output handles.

    Compared by identity (a trace's decisions are keyed by the instruction)."""

    __slots__ = ("kind", "inputs", "attrs", "outputs")

    def __init__(self, kind, inputs, attrs, outputs):
        if isinstance(kind, str):
            k = INSTRUCTION_KINDS.get(kind)
            if k is None:
                raise TesseraError(f"unknown instruction kind {kind!r}; known: {sorted(INSTRUCTION_KINDS)}")
            kind = k
        self.kind = kind
        self.inputs = tuple(inputs)
        self.attrs = tuple(attrs)
        self.outputs = tuple(outputs)

    def __repr__(self):
        return f"Instruction({self.kind.name}, inputs={list(self.inputs)!r}, attrs={list(self.attrs)!r})"


def instruction_kind(kind_name: str, *, inputs=(), outputs="none", output_type=None, pure=False,
                     sampling=False):
    """Register a function (self: Schedule, ...) as the implementation of instruction kind `kind_name`
    (fn.instruction_kind); returns fn. See schedule.py's docstring for the contract."""

    def deco(fn):
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())[1:]
        varargs = [p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL]
        ins = tuple(varargs) if varargs else tuple(inputs)
        names = [p.name for p in params]
        for n in ins:
            if n not in names:
                raise TesseraError(f"primitive {kind_name}: input {n!r} is not a parameter of {fn.__name__}")
        if sampling and "decision" not in names:
            raise TesseraError(f"primitive {kind_name}: a sampling primitive takes decision=None")
        attrs = tuple(n for n in names if n not in ins and n != "decision")
        if kind_name in INSTRUCTION_KINDS:
            raise TesseraError(f"instruction kind {kind_name!r} is registered twice")
        kind = InstructionKind(kind_name, fn.__name__, ins, bool(varargs), attrs, outputs, output_type,
                               pure, sampling, [n for n in names if n != "decision"])
        INSTRUCTION_KINDS[kind_name] = kind
        fn.instruction_kind = kind
        return fn

    return deco


def py_value(x, names) -> str:
    """Python source of an argument: handles by name, literals as Python literals."""
    if isinstance(x, RV):
        name = names.get(x)
        if name is None:
            raise TesseraError(f"trace: {x!r} is used before any instruction defines it")
        return name
    if x is None or isinstance(x, bool):
        return repr(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return f'float("{x}")'
        return repr(x)
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(py_value(y, names) for y in x) + "]"
    raise TesseraError(f"trace: cannot print argument {x!r} of type {type(x).__name__}")


def normalize_arg(x, where: str):
    """A recorded argument: handles, None, bool, int, float, str and (nested) lists of them."""
    t = type(x)
    if x is None or t is bool or t is int or t is float or t is str or isinstance(x, RV):
        return x
    if isinstance(x, (list, tuple)):
        return [normalize_arg(y, where) for y in x]
    import numpy as np

    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x)
    if isinstance(x, str):
        return str(x)
    if isinstance(x, IntImm):
        return bool(x.value) if x.dtype.is_bool() else x.value
    if isinstance(x, FloatImm):
        return x.value
    if isinstance(x, StringImm):
        return x.value
    raise ScheduleError(f"{where}: cannot record argument {x!r} of type {type(x).__name__} in a trace; "
                       f"use handles, ints, floats, strings, bools, None or lists of them")


__all__ = ["InstructionKind", "Instruction", "INSTRUCTION_KINDS", "instruction_kind", "py_value", "normalize_arg",
           "RV_TYPES"]
