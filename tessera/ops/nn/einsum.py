"""einsum (numpy / ONNX Einsum): one TE compute for any equation: output letters are the loop axes,
the other letters are summed over, repeated letters in one operand take a diagonal, and "..."
broadcasts as numpy does. Matmul-like equations get the generic reduction schedule (the ONNX
converter does not rewrite them into nn.matmul).
"""
from __future__ import annotations

import string

from ... import te
from ...errors import ShapeError, TesseraError
from ...ir import TensorType
from .._schedule import schedule_blocks
from ..registry import REQUIRED, OpPattern, register_op
from . import _util as U

_LETTERS = set(string.ascii_letters)


class Equation:
    """A parsed equation: per operand a list of letters with "." standing for the ellipsis, and the
    output (explicit, or numpy's implicit one: the ellipsis then the letters used once, sorted)."""

    def __init__(self, op, text, ranks):
        eq = str(text).replace(" ", "")
        if eq.count("->") > 1:
            raise TesseraError(f"{op}: equation {text!r} has more than one '->'")
        lhs, arrow, rhs = eq.partition("->")
        terms = lhs.split(",") if lhs or len(ranks) else []
        if len(terms) != len(ranks):
            raise ShapeError(f"{op}: equation {text!r} names {len(terms)} operands, got {len(ranks)}")
        self.inputs = [self._term(op, t, text) for t in terms]
        counts = {}
        for t in self.inputs:
            for c in t:
                if c != ".":
                    counts[c] = counts.get(c, 0) + 1
        has_ell = any("." in t for t in self.inputs)
        if arrow:
            self.output = self._term(op, rhs, text)
            if len(set(c for c in self.output if c != ".")) != len([c for c in self.output if c != "."]):
                raise TesseraError(f"{op}: equation {text!r} repeats a letter in its output")
            for c in self.output:
                if c != "." and c not in counts:
                    raise TesseraError(f"{op}: output letter {c!r} of {text!r} is in no operand")
        else:
            self.output = (["."] if has_ell else []) + sorted(c for c, n in counts.items() if n == 1)
        for t, r in zip(self.inputs, ranks):
            named = len([c for c in t if c != "."])
            if ("." in t and named > r) or ("." not in t and named != r):
                raise ShapeError(f"{op}: operand term {''.join(t).replace('.', '...')!r} does not fit a "
                                 f"rank-{r} operand")
        self.ranks = list(ranks)

    @staticmethod
    def _term(op, t, text):
        if t.count("...") > 1:
            raise TesseraError(f"{op}: term {t!r} of {text!r} has more than one ellipsis")
        out = list(t.replace("...", "."))
        for c in out:
            if c != "." and c not in _LETTERS:
                raise TesseraError(f"{op}: {c!r} in equation {text!r} is not a letter")
        return out

    def dims(self, op, shapes):
        """(letter -> extent, ellipsis extents) from the operand shapes."""
        size, ell = {}, []
        for t, shape in zip(self.inputs, shapes):
            e_len = len(shape) - len([c for c in t if c != "."])
            pos = 0
            for c in t:
                if c == ".":
                    part = tuple(shape[pos:pos + e_len])
                    ell = list(U.broadcast_shapes(op, tuple(ell), part)) if ell or part else []
                    pos += e_len
                    continue
                d = shape[pos]
                pos += 1
                if c in size and size[c] != d:
                    if size[c] == 1:
                        size[c] = d
                    elif d != 1:
                        raise ShapeError(f"{op}: letter {c!r} has extents {size[c]} and {d}")
                else:
                    size.setdefault(c, d)
        return size, tuple(ell)

    def out_shape(self, op, shapes):
        size, ell = self.dims(op, shapes)
        if ell and "." not in self.output:
            raise ShapeError(f"{op}: the operands have ellipsis dimensions {ell} but the output has no "
                             f"'...' to keep them (numpy refuses this too)")
        out = []
        for c in self.output:
            out.extend(ell if c == "." else [size[c]])
        return tuple(out)


einsum = register_op("einsum", inputs=("data*",), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                     attrs={"equation": REQUIRED},
                     doc="numpy.einsum / ONNX Einsum over any number of operands.")


@einsum.def_infer
def _einsum_infer(types, attrs):
    op = "einsum"
    if not types:
        raise ShapeError(f"{op}: needs at least one operand")
    for t in types:
        U.check_dtype(op, t, U.NUMERIC, "operand")
    U.same_dtype(op, types, [f"operand {k}" for k in range(len(types))])
    eq = Equation(op, attrs["equation"], [t.ndim for t in types])
    return [TensorType(eq.out_shape(op, [t.shape for t in types]), types[0].dtype)]


@einsum.def_compute
def _einsum_compute(tensors, attrs):
    op = "einsum"
    eq = Equation(op, attrs["equation"], [t.ndim for t in tensors])
    shapes = [U.dims_of(t) for t in tensors]
    size, ell = eq.dims(op, shapes)
    out_shape = U.shape_exprs(eq.out_shape(op, shapes), *tensors)
    dt = tensors[0].dtype
    acc = U.accum_dtype(dt)
    out_letters = [c for c in eq.output if c != "."]
    summed = sorted(set(size) - set(out_letters))
    dim_expr = {}
    for t, shape in zip(tensors, shapes):
        for e, d in zip(t.shape, shape):
            dim_expr.setdefault(d, e)
    raxes = {c: te.reduce_axis((0, dim_expr.get(size[c], size[c])), f"r_{c}") for c in summed}
    rell = []
    names = []
    for c in eq.output:
        names.extend([f"e{k}" for k in range(len(ell))] if c == "." else [c])

    def body(*idx):
        var, e_vars, pos = {}, list(rell), 0
        for c in eq.output:
            if c == ".":
                e_vars = list(idx[pos:pos + len(ell)])
                pos += len(ell)
            else:
                var[c] = idx[pos]
                pos += 1
        for c, ax in raxes.items():
            var[c] = ax
        prod = None
        for t, term, shape in zip(tensors, eq.inputs, shapes):
            e_len = len(shape) - len([c for c in term if c != "."])
            index, k = [], 0
            for c in term:
                if c == ".":
                    part = shape[k:k + e_len]
                    mine = e_vars[len(e_vars) - e_len:] if e_len else []
                    index.extend(0 if d == 1 else v for d, v in zip(part, mine))
                    k += e_len
                else:
                    index.append(0 if shape[k] == 1 and size[c] != 1 else var[c])
                    k += 1
            v = U.cast(t[tuple(index)], acc)
            prod = v if prod is None else prod * v
        axes = [raxes[c] for c in summed] + rell
        return te.sum(prod, axis=axes) if axes else prod

    if not summed and not rell:
        return [U.compute(out_shape, names, lambda *i: U.cast(body(*i), dt), "einsum")]
    total = U.compute(out_shape, names, body, "einsum_acc" if acc != dt else "einsum")
    if acc == dt:
        return [total]
    return [U.compute(out_shape, names, lambda *i: U.cast(total[i], dt), "einsum")]


einsum.def_schedule(schedule_blocks)
