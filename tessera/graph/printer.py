"""The text form of a graph (`graph.script()`) and structural equality of graphs.

    graph main(%x: float32[N, 3, 224, 224]) {
      const %conv1.weight: float32[64, 3, 7, 7]
      %conv1 = nn.conv2d(%x, %conv1.weight, strides=(2, 2), padding=(3, 3, 3, 3)) : float32[N, 64, 112, 112]
      return %conv1
    }

An input or output whose public name (graph.input_names / output_names: an ONNX model's own
name) is not its value's name shows it: `%gpu_0_data_0: float32[1, 3, 224, 224] as "gpu_0/data_0"`,
`return %prob as "prob:0"`. Attributes equal to the op's defaults are left out; constants show
their values when small (or always with show_constants=True). The functions that fused nodes call are printed first, and a
fused node reads as a call:

    fn @fused_nn_conv2d_add_nn_relu(%data: float32[1, 3, 32, 32], %weight: ..., %rhs: ...) {
      %conv1 = nn.conv2d(%data, %weight, padding=(1, 1, 1, 1)) : float32[1, 16, 32, 32]
      ...
    }
    graph main(%x: float32[1, 3, 32, 32]) {
      %relu1 = @fused_nn_conv2d_add_nn_relu(%x, %conv1.weight, %conv1.bias) : float32[1, 16, 32, 32]
"""
from __future__ import annotations

import json
import re

import numpy as np

from ..ops.registry import get_op
from ..ir.names import fresh_name
from .ir import FUSED_OP, PRINTER, Function, Graph, Value

_PLAIN = re.compile(r"^[A-Za-z0-9_.\-]+$")
SMALL_CONSTANT = 8   # constants with at most this many elements print their values


def _name(v: Value) -> str:
    return "%" + (v.name if _PLAIN.match(v.name) else '"' + v.name.replace('"', '\\"') + '"')


def _attr(v) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _array_text(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    if a.dtype == np.bool_:
        items = ["true" if x else "false" for x in flat]
    elif np.issubdtype(a.dtype, np.integer):
        items = [str(int(x)) for x in flat]
    else:
        items = [repr(float(x)) for x in flat.astype(np.float64)]
    if a.ndim == 0:
        return items[0]
    return "[" + ", ".join(items) + "]"


def _defaults(op: str) -> dict:
    try:
        return dict(get_op(op).attrs)
    except Exception:  # noqa: BLE001 - printing never fails on an unknown op
        return {}


def script(graph: Graph, show_constants: bool = False) -> str:
    """The readable text of `graph` (the functions its fused nodes call first)."""
    lines = []
    fn_names = _function_names(graph.functions)
    for fn in graph.functions:
        lines.extend(_function_lines(fn, fn_names[id(fn)]))
        lines.append("")
    params = ", ".join(f"{_name(v)}: {v.type}{_public(v, n)}" for v, n in zip(graph.inputs, graph.input_names))
    lines.append(f"graph {graph.name}({params}) {{")
    for v, arr in graph.constants.items():
        text = f"  const {_name(v)}: {v.type}"
        if show_constants or arr.size <= SMALL_CONSTANT:
            text += " = " + _array_text(arr)
        lines.append(text)
    _node_lines(graph.nodes, lines, fn_names)
    lines.append("  return " + ", ".join(_name(v) + _public(v, n) for v, n in zip(graph.outputs, graph.output_names)))
    lines.append("}")
    return "\n".join(lines)


def _public(v: Value, name: str) -> str:
    """` as "public name"` where an input's or output's public name is not its value's name."""
    return "" if name == v.name else " as " + json.dumps(name)


def script_function(fn: Function) -> str:
    """The readable text of one Function."""
    return "\n".join(_function_lines(fn, fn.name))


def _function_names(functions) -> dict:
    """id(function) -> the name it is printed under (distinct functions sharing a name get _1, _2...)."""
    out, used = {}, set()
    for fn in functions:
        name = fresh_name(fn.name, used)
        used.add(name)
        out[id(fn)] = name
    return out


def _function_lines(fn: Function, name: str) -> list:
    params = ", ".join(f"{_name(v)}: {v.type}" for v in fn.params)
    lines = [f"fn @{name}({params}) {{"]
    _node_lines(fn.body.nodes, lines, {})
    lines.append("  return " + ", ".join(_name(v) for v in fn.body.outputs))
    lines.append("}")
    return lines


def _node_lines(nodes, lines, fn_names) -> None:
    defaults_of: dict = {}
    for n in nodes:
        args = [_name(v) for v in n.inputs]
        if n.op == FUSED_OP:
            fn = n.attrs["function"]
            callee = "@" + fn_names.get(id(fn), fn.name)
        else:
            callee = n.op
            defaults = defaults_of.get(n.op)
            if defaults is None:
                defaults = defaults_of[n.op] = _defaults(n.op)
            for k, val in n.attrs.items():
                if k in defaults and _same(defaults[k], val):
                    continue
                args.append(f"{k}={_attr(val)}")
        outs = ", ".join(_name(o) for o in n.outputs)
        types = ", ".join(str(o.type) for o in n.outputs)
        if len(n.outputs) != 1:
            types = f"({types})"
        label = f"  /* {n.name} */" if len(n.outputs) != 1 and not all(
            o.name.startswith(n.name) for o in n.outputs) else ""
        lines.append(f"  {outs or '()'} = {callee}({', '.join(args)}) : {types}{label}")


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, float) and isinstance(b, float) and a == b)


# ---------------------------------------------------------------------------------------------
# structural equality
# ---------------------------------------------------------------------------------------------
def structural_equal(a: Graph, b: Graph, compare_names: bool = False) -> bool:
    """Whether two graphs compute the same thing the same way, up to renaming of values and nodes.

    Inputs correspond by position; nodes by op, attributes, output types and wiring (shared
    values must be shared in both); constants by dtype, shape and array equality (NaN == NaN).
    Nodes no output depends on are compared by count only. compare_names: also the public
    input and output names (graph.input_names / output_names).
    """
    return _Matcher(a, b, compare_names).run()


class _Matcher:
    def __init__(self, a, b, names):
        self.a, self.b, self.names = a, b, names
        self.fwd: dict = {}
        self.bwd: dict = {}

    def run(self) -> bool:
        a, b = self.a, self.b
        if len(a.inputs) != len(b.inputs) or len(a.outputs) != len(b.outputs):
            return False
        if self.names and a.interface != b.interface:
            return False
        if len(a.nodes) != len(b.nodes):
            return False
        for x, y in zip(a.inputs, b.inputs):
            if x.type != y.type or not self._bind(x, y):
                return False
        return all(self._value(x, y) for x, y in zip(a.outputs, b.outputs))

    def _bind(self, x, y) -> bool:
        fx, by = self.fwd.get(x), self.bwd.get(y)
        if fx is None and by is None:
            self.fwd[x], self.bwd[y] = y, x
            return True
        return fx is y and by is x

    def _value(self, x, y) -> bool:
        # iterative over producers so deep graphs do not hit the recursion limit
        stack = [(x, y)]
        while stack:
            x, y = stack.pop()
            known = self.fwd.get(x)
            if known is not None or self.bwd.get(y) is not None:
                if known is not y or self.bwd.get(y) is not x:
                    return False
                continue
            if x.type != y.type or (self.names and x.name != y.name):
                return False
            if (x.producer is None) != (y.producer is None):
                return False
            if x.producer is None:
                ca, cb = self.a.constants.get(x), self.b.constants.get(y)
                if ca is None or cb is None:   # inputs were bound up front; anything else differs
                    return False
                if not _arrays_equal(ca, cb):
                    return False
                self._bind(x, y)
                continue
            nx, ny = x.producer, y.producer
            if (x.index != y.index or nx.op != ny.op or len(nx.inputs) != len(ny.inputs)
                    or len(nx.outputs) != len(ny.outputs)
                    or any(o.type != p.type for o, p in zip(nx.outputs, ny.outputs))
                    or not _attrs_equal(nx.attrs, ny.attrs)):
                return False
            for o, p in zip(nx.outputs, ny.outputs):
                if not self._bind(o, p):
                    return False
            stack.extend(zip(nx.inputs, ny.inputs))
        return True


def _attrs_equal(a, b) -> bool:
    if set(a) != set(b):
        return False
    return all(_attr_eq(a[k], b[k]) for k in a)


def _attr_eq(x, y) -> bool:
    if isinstance(x, Function) or isinstance(y, Function):
        return isinstance(x, Function) and isinstance(y, Function) and x.key == y.key
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(_attr_eq(p, q) for p, q in zip(x, y))
    if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
        return True
    return type(x) is type(y) and x == y


def _arrays_equal(x: np.ndarray, y: np.ndarray) -> bool:
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if np.issubdtype(x.dtype, np.inexact) or x.dtype.name == "bfloat16":
        xf, yf = x.astype(np.float64), y.astype(np.float64)
        return bool(np.array_equal(xf, yf, equal_nan=True))
    return bool(np.array_equal(x, y))


PRINTER["graph"] = script
PRINTER["function"] = script_function
