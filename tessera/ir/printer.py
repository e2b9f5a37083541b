"""Text form of the IR in the spirit of TVMScript: `script(node)` is what `str(node)` shows.

Expressions print with the fewest parentheses Python's precedence allows; statements print one per
line with loops, blocks and allocations spelled out. Names come from the IR; two different
variables (or buffers) that share a name in one printed program get suffixes (`i`, `i_1`) in
order of first appearance, so the text never shows two things under one name. Variables and
buffers that a statement or function uses without defining are declared at its top.
"""
from __future__ import annotations

import json
import keyword
import math
from numbers import Integral, Real
from types import MappingProxyType

import numpy as np

from ..errors import DTypeError

from . import expr as E
from . import stmt as S
from .buffer import Buffer, BufferRegion
from .function import IRModule, PrimFunc
from .functor import collect_vars
from .names import numbered_name
from .node import PRINTER, Node

# Python precedence levels (higher binds tighter)
_OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY, _ATOM = 1, 2, 3, 4, 9, 10, 11, 13

# names a printed variable must not take: they would read as keywords or as the printer's own
_RESERVED = frozenset(keyword.kwlist) | {"T", "I", "range"}

_AXIS_KIND = {"data_par": "spatial", "reduce": "reduce", "opaque": "opaque", "thread": "thread"}
_LOOP_KIND = {S.ForKind.PARALLEL: "T.parallel", S.ForKind.VECTORIZED: "T.vectorized",
              S.ForKind.UNROLLED: "T.unroll", S.ForKind.THREAD_BINDING: "T.thread_binding",
              S.ForKind.SERIAL: "T.serial"}
_INDENT = ["    " * i for i in range(32)]


def script(node) -> str:
    """The text of any IR node: one line for expressions and small nodes, a program otherwise."""
    if isinstance(node, E.PrimExpr):
        return _Printer().expr(node)
    if isinstance(node, (PrimFunc, IRModule, S.Stmt)):
        p = _Printer()
        if isinstance(node, IRModule):
            return p.module(node)
        if isinstance(node, PrimFunc):
            return "\n".join(p.func(node, node.name))
        return "\n".join(p.stmt_with_decls(node))
    if isinstance(node, Buffer):
        p = _Printer()
        return f"{p.name_of(node)} = {p.buffer_decl(node)}"
    if isinstance(node, Node):
        return _Printer().expr(node)
    return repr(node)


PRINTER["script"] = script


def _sanitize(name: str) -> str:
    """A Python identifier close to `name` ("i.outer" -> "i_outer", "" -> "v")."""
    if name.isidentifier():
        return name if name not in _RESERVED else name + "_"
    out = "".join(c if (c.isalnum() or c == "_") else "_" for c in name) or "v"
    if not out[0].isalpha() and out[0] != "_":
        out = "v" + out
    return out if out not in _RESERVED else out + "_"


def _quote(s: str) -> str:
    return json.dumps(s)


def _float_text(v: float) -> str:
    if math.isfinite(v):
        return repr(v)
    return _quote("nan" if v != v else ("inf" if v > 0 else "-inf"))


def _is_zero(e) -> bool:
    return type(e) is E.IntImm and e.value == 0


def _mentions(e, variables) -> bool:
    """Whether expression e uses any of `variables` (a T.grid extent must not use outer loop vars)."""
    if e.__class__ is E.IntImm:
        return False
    return any(v in variables for v in collect_vars(e))


def _is_true(e) -> bool:
    return type(e) is E.IntImm and e.value == 1 and e.dtype == "bool"


def _listed(exprs) -> list:
    """The parts of `a, b, c`: the expressions, each at the lowest precedence, comma-separated."""
    parts = []
    for i, x in enumerate(exprs):
        parts.extend((", ", (x, 0)) if i else ((x, 0),))
    return parts


def _one_or_tuple(exprs) -> list:
    """The parts of `a` for one expression, of `(a, b)` for several."""
    return [(exprs[0], 0)] if len(exprs) == 1 else ["(", *_listed(exprs), ")"]


class _Printer:
    """One printing session: the name table and the definitions seen so far."""

    __slots__ = ("names", "taken", "suffix", "defined", "lines")

    def __init__(self):
        self.names = {}        # Var/Buffer -> printed name, in order of first appearance
        self.taken = set()     # printed names in use
        self.suffix = {}       # base name -> last numeric suffix tried
        self.defined = set()   # Vars/Buffers some printed node defines
        self.lines = []

    # names ---------------------------------------------------------------------------------
    def name_of(self, obj) -> str:
        name = self.names.get(obj)
        if name is None:
            base = _sanitize(obj.name)
            name = base
            if name in self.taken:
                name = numbered_name(base, self.suffix, self.taken)
            self.taken.add(name)
            self.names[obj] = name
        return name

    def define(self, obj) -> str:
        self.defined.add(obj)
        return self.name_of(obj)

    # expressions ---------------------------------------------------------------------------
    def expr(self, node, min_prec: int = 0) -> str:
        """Text of an expression-like node; iterative, so deep expressions do not recurse."""
        out = []
        stack = [(node, min_prec)]
        pop, push, emit = stack.pop, stack.append, out.append
        handlers = _EXPR_HANDLERS
        while stack:
            item = pop()
            if item.__class__ is str:
                emit(item)
                continue
            n, ctx = item
            cls = n.__class__
            if cls is E.Var or cls is E.SizeVar:
                emit(self.name_of(n))
                continue
            h = handlers.get(cls)
            if h is None:
                h = _handler_for(cls)
            prec, parts = h(self, n)
            if parts.__class__ is str:
                emit(parts if prec >= ctx else f"({parts})")
                continue
            if prec < ctx:
                push(")")
                stack.extend(reversed(parts))
                push("(")
            else:
                stack.extend(reversed(parts))
        return "".join(out)

    def _e_int(self, e):
        v, dt = e.value, e.dtype
        if dt == "int32":
            return (_ATOM if v >= 0 else _UNARY), str(v)
        if dt == "bool":
            return _ATOM, "True" if v else "False"
        return _ATOM, f"T.{dt}({v})"

    def _e_float(self, e):
        return _ATOM, f"T.{e.dtype}({_float_text(e.value)})"

    def _e_str(self, e):
        return _ATOM, _quote(e.value)

    def _e_binop(self, e):
        prec = _BINOP_PREC[e.__class__]
        return prec, [(e.a, prec), _BINOP_SYMBOL[e.__class__], (e.b, prec + 1)]

    def _e_div(self, e):
        if e.dtype.is_float():
            return _MUL, [(e.a, _MUL), " / ", (e.b, _MUL + 1)]
        return _ATOM, ["T.truncdiv(", (e.a, 0), ", ", (e.b, 0), ")"]

    def _e_call2(self, e):
        return _ATOM, [_CALL2_NAME[e.__class__], (e.a, 0), ", ", (e.b, 0), ")"]

    def _e_cmp(self, e):
        return _CMP, [(e.a, _CMP + 1), _BINOP_SYMBOL[e.__class__], (e.b, _CMP + 1)]

    def _e_and(self, e):
        prec = _AND if e.__class__ is E.And else _OR
        return prec, [(e.a, prec), " and " if prec == _AND else " or ", (e.b, prec + 1)]

    def _e_not(self, e):
        return _NOT, ["not ", (e.a, _NOT)]

    def _e_select(self, e):
        return _ATOM, ["T.Select(", (e.condition, 0), ", ", (e.true_value, 0), ", ",
                       (e.false_value, 0), ")"]

    def _e_cast(self, e):
        return _ATOM, [f'T.Cast("{e.dtype}", ', (e.value, 0), ")"]

    def _e_let(self, e):
        return _ATOM, ["T.Let(", self.define(e.var), ", ", (e.value, 0), ", ", (e.body, 0), ")"]

    def _e_call(self, e):
        op, args = e.op, e.args
        if op.isidentifier() and not keyword.iskeyword(op):
            parts = [f"T.{op}("]
        else:
            parts = [f"T.call_extern({_quote(op)}"] + ([", "] if args else [])
        parts.extend(_listed(args))
        if not args or args[0].dtype != e.dtype:  # the dtype is shown where args do not imply it
            parts.append(f'{", " if args or parts[0][-1] != "(" else ""}dtype="{e.dtype}"')
        parts.append(")")
        return _ATOM, parts

    def _e_ramp(self, e):
        return _ATOM, ["T.Ramp(", (e.base, 0), ", ", (e.stride, 0), f", {e.lanes})"]

    def _e_broadcast(self, e):
        return _ATOM, ["T.Broadcast(", (e.value, 0), f", {e.lanes})"]

    def _e_load(self, e):
        return _ATOM, [self.name_of(e.buffer), "[", *_listed(e.indices), "]"]

    def _e_reduce(self, e):
        parts = [f"T.reduce({_quote(e.combiner.name)}, ", *_one_or_tuple(e.source), ", axis={"]
        for i, iv in enumerate(e.axis):
            if i:
                parts.append(", ")
            parts.extend((self.define(iv.var), ": ", (iv.dom, 0)))
        parts.append("}")
        if not _is_true(e.condition):
            parts.extend((", where=", (e.condition, 0)))
        if len(e.source) > 1:
            parts.append(f", value_index={e.value_index}")
        if e.init:
            parts.extend((", init=[", *_listed(e.init), "]"))
        parts.append(")")
        return _ATOM, parts

    def _e_range(self, r):
        return _ATOM, ["T.Range(", (r.min, 0), ", ", *self._end_parts(r.min, r.extent), ")"]

    def _end_parts(self, lo, extent):
        """Parts for `lo + extent` (folded when lo is 0 or both are constants)."""
        if _is_zero(lo):
            return [(extent, 0)]
        if type(lo) is E.IntImm and type(extent) is E.IntImm and lo.dtype == extent.dtype:
            try:
                return [(E.const(lo.value + extent.value, lo.dtype), 0)]
            except DTypeError:  # the end does not fit the dtype: show the sum
                pass
        return [(lo, _ADD), " + ", (extent, _ADD + 1)]

    def _e_itervar(self, iv):
        parts = ["T.iter_var(", self.define(iv.var), ", "]
        parts.append((iv.dom, 0) if iv.dom is not None else "None")
        parts.append(f", {_quote(iv.iter_type)}")
        if iv.thread_tag:
            parts.append(f", {_quote(iv.thread_tag)}")
        parts.append(")")
        return _ATOM, parts

    def _e_region(self, br):
        parts = [self.name_of(br.buffer), "["]
        for i, r in enumerate(br.region):
            if i:
                parts.append(", ")
            if type(r.extent) is E.IntImm and r.extent.value == 1:
                parts.append((r.min, 0))
            else:
                parts.extend(((r.min, 0), ":", *self._end_parts(r.min, r.extent)))
        parts.append("]")
        return _ATOM, parts

    def _e_reducer(self, c):
        names = [self.define(v) for v in c.lhs + c.rhs]
        return _ATOM, [f"T.comm_reducer(lambda {', '.join(names)}: ", *_one_or_tuple(c.result), ", [",
                       *_listed(c.identity_element), f"], name={_quote(c.name)})"]

    def _e_buffer(self, b):
        return _ATOM, self.name_of(b)

    def _e_other(self, n):
        return _ATOM, f"<{type(n).__name__}>"

    def value(self, v) -> str:
        """Text of an annotation/attribute value: expressions, Python scalars, containers."""
        if isinstance(v, Node):
            return self.expr(v)
        if isinstance(v, str):
            return _quote(v)
        if isinstance(v, (bool, np.bool_)):
            return "True" if v else "False"
        if isinstance(v, Integral):
            return str(int(v))
        if isinstance(v, Real):
            v = float(v)
            return repr(v) if math.isfinite(v) else f"float({_float_text(v)})"
        if isinstance(v, (tuple, list)):
            inner = ", ".join(self.value(x) for x in v)
            return f"({inner},)" if isinstance(v, tuple) and len(v) == 1 else \
                (f"({inner})" if isinstance(v, tuple) else f"[{inner}]")
        if isinstance(v, (dict, MappingProxyType)):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(x)}" for k, x in v.items()) + "}"
        return repr(v)

    # buffers -------------------------------------------------------------------------------
    def buffer_decl(self, b, head="T.Buffer", extra="") -> str:
        """`T.Buffer((n, 64), "float32", ...)` with non-default strides/offset/scope/alignment."""
        shape = ", ".join(self.expr(s) for s in b.shape)
        text = f'{head}(({shape}{"," if len(b.shape) == 1 else ""}), "{b.dtype}"'
        if b.strides:
            text += f', strides=({", ".join(self.expr(s) for s in b.strides)}' \
                    f'{"," if len(b.strides) == 1 else ""})'
        if not _is_zero(b.elem_offset):
            text += f", elem_offset={self.expr(b.elem_offset)}"
        if b.scope != "global":
            text += f", scope={_quote(b.scope)}"
        if b.data_alignment != 64:
            text += f", align={b.data_alignment}"
        return text + extra + ")"

    # statements ----------------------------------------------------------------------------
    def stmt_with_decls(self, node, depth: int = 0) -> list:
        """Lines of a statement, preceded by declarations of what it uses but does not define."""
        self.lines = []
        self.stmt(node, depth)
        body = self.lines
        return self.declarations(depth) + body

    def declarations(self, depth: int) -> list:
        """`n = T.int32()` / `A = T.Buffer(...)` for every free variable and buffer named so far."""
        ind = self._indent(depth)
        buf_lines = []
        i = 0
        # declaring a buffer may name new variables (its shape), so walk a growing table
        while True:
            free = [o for o in list(self.names)[i:] if isinstance(o, Buffer) and o not in self.defined]
            if not free:
                break
            i = len(self.names)
            for b in free:
                self.defined.add(b)
                buf_lines.append(f"{ind}{self.names[b]} = {self.buffer_decl(b)}")
        var_lines = []
        for o, name in self.names.items():
            if o not in self.defined and isinstance(o, E.Var):
                size = ", is_size_var=True" if isinstance(o, E.SizeVar) else ""
                var_lines.append(f"{ind}{name} = T.{o.dtype}({size.lstrip(', ')})")
        return var_lines + buf_lines

    @staticmethod
    def _indent(depth):
        return _INDENT[depth] if depth < len(_INDENT) else "    " * depth

    def stmt(self, s, depth: int):
        """Append the lines of statement s at indentation depth."""
        lines = self.lines
        ind = self._indent(depth)
        while True:  # statements whose body continues at the same indentation loop here
            cls = s.__class__
            if cls is S.SeqStmt:
                for x in s.seq:
                    self.stmt(x, depth)
                return
            if cls is S.BufferStore:
                idx = ", ".join(self.expr(i) for i in s.indices)
                lines.append(f"{ind}{self.name_of(s.buffer)}[{idx}] = {self.expr(s.value)}")
                return
            if cls is S.For:
                self._for(s, depth)
                return
            if cls is S.BlockRealize:
                self._block(s.block, s, depth)
                return
            if cls is S.Block:
                self._block(s, None, depth)
                return
            if cls is S.IfThenElse:
                self._if(s, depth)
                return
            if cls is S.Evaluate:
                lines.append(f"{ind}T.evaluate({self.expr(s.value)})")
                return
            if cls is S.LetStmt:
                name = self.define(s.var)
                lines.append(f"{ind}{name}: T.{s.var.dtype} = {self.expr(s.value)}")
            elif cls is S.Allocate:
                b = s.buffer
                name = self.define(b)
                shape = ", ".join(self.expr(x) for x in b.shape)
                extra = ""
                if b.strides:
                    extra += f", strides=[{', '.join(self.expr(x) for x in b.strides)}]"
                if b.data_alignment != 64:
                    extra += f", align={b.data_alignment}"
                lines.append(f'{ind}{name} = T.allocate([{shape}], "{b.dtype}", {_quote(b.scope)}{extra})')
            elif cls is S.AssertStmt:
                msg = _quote(s.message)
                if s.args:   # the message's {} are filled with args: shown as a tuple
                    msg = f"({msg}{''.join(f', {self.expr(a)}' for a in s.args)})"
                lines.append(f"{ind}assert {self.expr(s.condition)}, {msg}")
            elif cls is S.AttrStmt:
                node = s.node
                if isinstance(node, E.IterVar):
                    self.defined.add(node.var)
                lines.append(f"{ind}with T.attr({self.value(node)}, {_quote(s.attr_key)}, "
                             f"{self.expr(s.value)}):")
                self.stmt(s.body, depth + 1)
                return
            else:
                lines.append(f"{ind}{self.value(s)}")
                return
            s = s.body

    def _for(self, loop, depth):
        ind = self._indent(depth)
        simple = loop.kind == "serial" and _is_zero(loop.min) and not loop.annotations
        if simple:  # fold perfectly nested serial loops from 0 into one T.grid
            names, extents, outer_vars = [], [], set()
            while True:
                names.append(self.define(loop.loop_var))
                outer_vars.add(loop.loop_var)
                extents.append(self.expr(loop.extent))
                inner = loop.body
                if not (inner.__class__ is S.For and inner.kind == "serial" and _is_zero(inner.min)
                        and not inner.annotations and not _mentions(inner.extent, outer_vars)):
                    break
                loop = inner
            if len(names) == 1:
                head = f"for {names[0]} in range({extents[0]}):"
            else:
                head = f"for {', '.join(names)} in T.grid({', '.join(extents)}):"
        else:
            name = self.define(loop.loop_var)
            lo = self.expr(loop.min)
            hi = self.expr_parts(self._end_parts(loop.min, loop.extent))
            if loop.kind == "serial" and not loop.annotations:
                head = f"for {name} in range({lo}, {hi}):"
            else:
                args = f"{lo}, {hi}"
                if loop.kind == S.ForKind.THREAD_BINDING and loop.thread_binding is not None:
                    tb = loop.thread_binding
                    tag = tb.thread_tag if isinstance(tb, E.IterVar) else tb
                    args += f", thread={self.value(tag)}"
                if loop.annotations:
                    args += f", annotations={self.value(loop.annotations)}"
                head = f"for {name} in {_LOOP_KIND[loop.kind]}({args}):"
        self.lines.append(ind + head)
        self.stmt(loop.body, depth + 1)

    def expr_parts(self, parts) -> str:
        """Text of a parts list as the expression handlers build them."""
        return "".join(p if p.__class__ is str else self.expr(*p) for p in parts)

    def _if(self, s, depth):
        ind = self._indent(depth)
        self.lines.append(f"{ind}if {self.expr(s.condition)}:")
        self.stmt(s.then_case, depth + 1)
        e = s.else_case
        while e is not None:
            if e.__class__ is S.IfThenElse:
                self.lines.append(f"{ind}elif {self.expr(e.condition)}:")
                self.stmt(e.then_case, depth + 1)
                e = e.else_case
            else:
                self.lines.append(f"{ind}else:")
                self.stmt(e, depth + 1)
                break

    def _block(self, block, realize, depth):
        lines = self.lines
        ind = self._indent(depth)
        lines.append(f"{ind}with T.block({_quote(block.name_hint)}):")
        ind1 = self._indent(depth + 1)
        for k, iv in enumerate(block.iter_vars):
            name = self.define(iv.var)
            dom = iv.dom
            if dom is None:
                dom_text = "None"
            elif _is_zero(dom.min):
                dom_text = self.expr(dom.extent)
            else:
                dom_text = f"({self.expr(dom.min)}, {self.expr_parts(self._end_parts(dom.min, dom.extent))})"
            args = dom_text
            if realize is not None:
                args += f", {self.expr(realize.iter_values[k])}"
            kind = _AXIS_KIND.get(iv.iter_type, iv.iter_type)
            lines.append(f"{ind1}{name} = T.axis.{kind}({args})")
        if realize is not None and not _is_true(realize.predicate):
            lines.append(f"{ind1}T.where({self.expr(realize.predicate)})")
        if block.iter_vars or block.reads or block.writes:  # a root block's empty sets are noise
            lines.append(f"{ind1}T.reads({', '.join(self.expr(r) for r in block.reads)})")
            lines.append(f"{ind1}T.writes({', '.join(self.expr(r) for r in block.writes)})")
        if block.annotations:
            lines.append(f"{ind1}T.block_attr({self.value(block.annotations)})")
        for b in block.alloc_buffers:
            name = self.define(b)
            lines.append(f"{ind1}{name} = {self.buffer_decl(b, 'T.alloc_buffer')}")
        for m in block.match_buffers:
            if isinstance(m, tuple) and len(m) == 2:
                buf, region = m
            else:
                buf, region = getattr(m, "buffer", None), getattr(m, "source", None)
            if isinstance(buf, Buffer):
                name = self.define(buf)
                decl = self.buffer_decl(buf, "T.match_buffer", f", source={self.value(region)}")
                lines.append(f"{ind1}{name} = {decl}")
            else:
                lines.append(f"{ind1}T.match_buffer({self.value(m)})")
        if block.init is not None:
            lines.append(f"{ind1}with T.init():")
            self.stmt(block.init, depth + 2)
        self.stmt(block.body, depth + 1)

    # functions -----------------------------------------------------------------------------
    def func(self, f: PrimFunc, name: str, depth: int = 0) -> list:
        """Lines of one PrimFunc: decorator, signature, attributes, declarations, body."""
        ind, ind1 = self._indent(depth), self._indent(depth + 1)
        params = []
        for p in f.params:
            pname = self.define(p)
            if isinstance(p, Buffer):
                params.append(f"{pname}: {self.buffer_decl(p)}")
            else:
                params.append(f"{pname}: T.{p.dtype}")
        head = [f"{ind}@T.prim_func", f"{ind}def {_sanitize(name)}({', '.join(params)}):"]
        attrs = {k: v for k, v in f.attrs.items() if k != "flat_params"}
        if attrs:
            head.append(f"{ind1}T.func_attr({self.value(attrs)})")
        aliases = []
        flat = f.attrs.get("flat_params")
        if flat:
            for p, fb in zip(f.params, flat):
                if isinstance(fb, Buffer) and fb is not p:
                    fname = self.define(fb)
                    aliases.append(f"{ind1}{fname} = "
                                   f"{self.buffer_decl(fb, extra=f', data={self.names[p]}.data')}")
        self.lines = []
        self.stmt(f.body, depth + 1)
        body = self.lines
        return head + self.declarations(depth + 1) + aliases + body

    def module(self, mod: IRModule) -> str:
        out = ["@I.ir_module", "class Module:"]
        for i, (name, f) in enumerate(mod.functions.items()):
            if i:
                out.append("")
            self.__init__()  # each function is its own scope
            out.extend(self.func(f, name, 1))
        if not mod.functions:
            out.append("    pass")
        return "\n".join(out)


_BINOP_PREC = {E.Add: _ADD, E.Sub: _ADD, E.Mul: _MUL, E.FloorDiv: _MUL, E.FloorMod: _MUL}
_BINOP_SYMBOL = {E.Add: " + ", E.Sub: " - ", E.Mul: " * ", E.FloorDiv: " // ", E.FloorMod: " % ",
                 E.EQ: " == ", E.NE: " != ", E.LT: " < ", E.LE: " <= ", E.GT: " > ", E.GE: " >= "}
_CALL2_NAME = {E.Min: "T.min(", E.Max: "T.max(", E.Mod: "T.truncmod("}

_P = _Printer
_EXPR_HANDLERS = {
    E.IntImm: _P._e_int, E.FloatImm: _P._e_float, E.StringImm: _P._e_str,
    E.Add: _P._e_binop, E.Sub: _P._e_binop, E.Mul: _P._e_binop, E.FloorDiv: _P._e_binop,
    E.FloorMod: _P._e_binop, E.Div: _P._e_div, E.Mod: _P._e_call2, E.Min: _P._e_call2,
    E.Max: _P._e_call2, E.EQ: _P._e_cmp, E.NE: _P._e_cmp, E.LT: _P._e_cmp, E.LE: _P._e_cmp,
    E.GT: _P._e_cmp, E.GE: _P._e_cmp, E.And: _P._e_and, E.Or: _P._e_and, E.Not: _P._e_not,
    E.Select: _P._e_select, E.Cast: _P._e_cast, E.Let: _P._e_let, E.Call: _P._e_call,
    E.Ramp: _P._e_ramp, E.Broadcast: _P._e_broadcast, E.BufferLoad: _P._e_load,
    E.Reduce: _P._e_reduce, E.Range: _P._e_range, E.IterVar: _P._e_itervar,
    BufferRegion: _P._e_region, E.CommReducer: _P._e_reducer, Buffer: _P._e_buffer,
}


def _handler_for(cls):
    """Handler of a node class (subclasses use their base's), cached in the table."""
    if issubclass(cls, E.Var):
        h = lambda p, v: (_ATOM, p.name_of(v))  # noqa: E731
    else:
        h = next((_EXPR_HANDLERS[k] for k in cls.__mro__ if k in _EXPR_HANDLERS), _P._e_other)
    _EXPR_HANDLERS[cls] = h
    return h


__all__ = ["script"]
