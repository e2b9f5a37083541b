"""Machine-independent passes over the tile IR, each a function Function -> Function, and the axis
analysis (which pointer axes are contiguous, how aligned) that the lowering and `inspect` read.

    fold_constants   arithmetic on constants computed now; x + 0, x * 1, x // 1 of integers dropped
    peephole         broadcast/expand_dims/reshape/trans chains collapsed, splats broadcast once;
                     `acc + dot(a, b, 0)` becomes `dot(a, b, acc)` (the product accumulates in place)
    cse              one op for each repeated pure computation (loads and ops with regions excepted)
    dce              ops whose results nobody uses, without side effects, removed
    licm             pure ops of a loop body that read nothing the loop changes hoisted before it
    induction        a loop-carried value the body advances by a loop-invariant amount (`ptrs +=
                     BLOCK * stride`) becomes its closed form `init + trip * step` (no carried block:
                     the loads see affine offsets)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir.dtype import numpy_dtype
from . import ir
from .ir import Function, Op, Region, TileType, Value

PURE = frozenset({"constant", "program_id", "num_programs", "arange", "splat", "broadcast", "expand_dims",
                  "reshape", "trans", "binary", "unary", "fma", "where", "cast", "addptr", "hint", "reduce", "dot"})
SIDE_EFFECTS = frozenset({"store", "atomic_add"})


# ---------------------------------------------------------------------------------------------
# a generic rewrite: operands substituted, each op offered to a rule
# ---------------------------------------------------------------------------------------------
class _Rewrite:
    """Walks a function; `rule(op)` (operands already substituted) returns None to keep op, a list
    of Values to stand for its results (op dropped), or (new_ops, result_values)."""

    def __init__(self, rule):
        self.rule, self.subst, self.defs = rule, {}, {}

    def v(self, x: Value) -> Value:
        while x in self.subst:
            x = self.subst[x]
        return x

    def region(self, r: Region) -> Region:
        out = []
        for op in r.ops:
            op = op.replace(operands=tuple(self.v(o) for o in op.operands))
            if op.region is not None:
                op = op.replace(region=self.region(op.region))
            got = self.rule(op, self)
            if got is None:
                out.append(op)
                for res in op.results:
                    self.defs[res] = op
            elif isinstance(got, tuple):
                new_ops, vals = got
                out.extend(new_ops)
                for n in new_ops:
                    for res in n.results:
                        self.defs[res] = n
                for res, val in zip(op.results, vals):
                    if res is not val:
                        self.subst[res] = val
            else:
                for res, val in zip(op.results, got):
                    if res is not val:
                        self.subst[res] = val
        return Region(r.args, tuple(out), tuple(self.v(y) for y in r.yields))

    def def_of(self, v: Value) -> Op | None:
        return self.defs.get(v)


def rewrite(func: Function, rule) -> Function:
    return func.replace(body=_Rewrite(rule).region(func.body))


# ---------------------------------------------------------------------------------------------
# constant folding
# ---------------------------------------------------------------------------------------------
def _const_value(rw, v: Value):
    """The value of v if a scalar constant or a splat of one, else None."""
    op = rw.def_of(v)
    if op is None:
        return None
    if op.kind == "constant":
        return op.attr("value")
    if op.kind in ("splat", "broadcast", "expand_dims", "reshape", "trans"):
        return _const_value(rw, op.operands[0])
    return None


def _np_dtype(el):
    return numpy_dtype(el.ir)


def eval_binary(op: str, a, b, el: ir.DType, out_el: ir.DType):
    """One binary op on numpy values with the kernel's semantics (C's integer division and
    remainder, wrapping integers); the interpreter and constant folding share it."""
    with np.errstate(all="ignore"):
        if op == "add":
            r = a + b
        elif op == "sub":
            r = a - b
        elif op == "mul":
            r = a * b
        elif op == "truediv":
            r = a / b
        elif op == "floordiv":
            if el.is_floating():
                r = np.floor(a / b)
            else:
                q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
                r = np.where((a < 0) != (b < 0), -q, q)
        elif op == "mod":
            r = np.fmod(a, b) if el.is_floating() else np.fmod(a, np.where(b == 0, 1, b))
        elif op == "and":
            r = a & b
        elif op == "or":
            r = a | b
        elif op == "xor":
            r = a ^ b
        elif op == "shl":
            r = a << b
        elif op == "shr":
            r = a >> b
        elif op == "max":
            r = np.maximum(a, b)
        elif op == "min":
            r = np.minimum(a, b)
        else:
            r = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
                 "ne": np.not_equal}[op](a, b)
        return np.asarray(r).astype(_np_dtype(out_el))


def _fold_rule(op: Op, rw):
    if op.kind == "binary" and not op.result.type.shape:
        a, b = (_const_value(rw, o) for o in op.operands)
        el = op.operands[0].type.element
        kind = op.attr("op")
        if a is not None and b is not None and not el.is_ptr():
            if kind in ("floordiv", "mod") and not el.is_floating() and b == 0:
                return None
            val = eval_binary(kind, np.asarray(a, _np_dtype(el)), np.asarray(b, _np_dtype(el)), el,
                              op.result.type.element)
            return _constant(op, val.item())
    if op.kind == "binary" and op.result.type.element.is_int():
        a, b = (_const_value(rw, o) for o in op.operands)
        kind = op.attr("op")
        x, y = op.operands
        same = x.type == op.result.type and y.type == op.result.type
        if same:
            if kind in ("add", "sub", "or", "xor", "shl", "shr") and b == 0:
                return [x]
            if kind in ("add", "or", "xor") and a == 0:
                return [y]
            if kind in ("mul", "floordiv") and b == 1:
                return [x]
            if kind == "mul" and a == 1:
                return [y]
    if op.kind == "cast" and not op.result.type.shape:
        a = _const_value(rw, op.operands[0])
        el = op.result.type.element
        if a is not None and not el.is_bool():
            return _constant(op, np.asarray(a).astype(_np_dtype(el)).item())
    if op.kind == "unary" and not op.result.type.shape and op.attr("op") == "not":
        a = _const_value(rw, op.operands[0])
        if a is not None:
            el = op.result.type.element
            return _constant(op, (not a) if el.is_bool() else np.invert(np.asarray(a, _np_dtype(el))).item())
    return None


def _constant(op: Op, value):
    res = op.result
    return ([Op("constant", (), (res,), (("value", value),), op.loc)], [res])


def fold_constants(func: Function) -> Function:
    return rewrite(func, _fold_rule)


# ---------------------------------------------------------------------------------------------
# peepholes
# ---------------------------------------------------------------------------------------------
def _peephole_rule(op: Op, rw):
    k = op.kind
    if k in ("broadcast", "reshape") and op.operands[0].type == op.result.type:
        return [op.operands[0]]
    if k in ("broadcast", "expand_dims", "reshape"):
        src = rw.def_of(op.operands[0])
        if src is not None and src.kind == "splat":     # a splat takes the final shape at once
            return ([op.replace(kind="splat", operands=src.operands, attrs=())], list(op.results))
        if src is not None and k == "broadcast" and src.kind == "broadcast":
            return ([op.replace(operands=src.operands)], list(op.results))
        if src is not None and k == "reshape" and src.kind == "reshape":
            return ([op.replace(operands=src.operands)], list(op.results))
    if k == "trans":
        src = rw.def_of(op.operands[0])
        if src is not None and src.kind == "trans":
            inner, outer = src.attr("perm"), op.attr("perm")
            perm = tuple(inner[p] for p in outer)
            if perm == tuple(range(len(perm))):
                return [src.operands[0]]
            return ([op.replace(operands=src.operands, attrs=(("perm", perm),))], list(op.results))
        if src is not None and src.kind == "splat":
            return ([op.replace(kind="splat", operands=src.operands, attrs=())], list(op.results))
    if k == "binary" and op.attr("op") == "add" and op.result.type.element.is_floating():
        for i in (0, 1):
            d = rw.def_of(op.operands[i])
            other = op.operands[1 - i]
            if d is not None and d.kind == "dot" and _const_value(rw, d.operands[2]) == 0 \
                    and other.type == op.result.type and d.result.type == op.result.type:
                return ([d.replace(operands=(d.operands[0], d.operands[1], other), results=op.results, loc=d.loc)],
                        list(op.results))
    return None


def peephole(func: Function) -> Function:
    return rewrite(func, _peephole_rule)


# ---------------------------------------------------------------------------------------------
# common subexpressions, dead code
# ---------------------------------------------------------------------------------------------
def _key(op: Op):
    if op.kind not in PURE or op.region is not None or op.kind in ("dot", "reduce"):
        return None
    return (op.kind, tuple(o.uid for o in op.operands), op.attrs, tuple(r.type for r in op.results))


def cse(func: Function) -> Function:
    def region(r: Region, seen: dict, subst: dict) -> Region:
        seen = dict(seen)
        out = []
        for op in r.ops:
            op = op.replace(operands=tuple(subst.get(o, o) for o in op.operands))
            if op.region is not None:
                op = op.replace(region=region(op.region, seen, subst))
            key = _key(op)
            if key is not None and key in seen:
                for a, b in zip(op.results, seen[key].results):
                    subst[a] = b
                continue
            if key is not None:
                seen[key] = op
            out.append(op)
        return Region(r.args, tuple(out), tuple(subst.get(y, y) for y in r.yields))

    return func.replace(body=region(func.body, {}, {}))


def _has_effects(op: Op) -> bool:
    if op.kind in SIDE_EFFECTS:
        return True
    return op.region is not None and any(_has_effects(o) for o in op.region.ops)


def dce(func: Function) -> Function:
    def used_in(r: Region, acc: set):
        for op in r.ops:
            acc.update(op.operands)
            if op.region is not None:
                used_in(op.region, acc)
        acc.update(r.yields)

    while True:
        used: set = set()
        used_in(func.body, used)
        changed = False

        def region(r: Region) -> Region:
            nonlocal changed
            out = []
            for op in r.ops:
                if op.region is not None:
                    op = op.replace(region=region(op.region))
                if not _has_effects(op) and not any(res in used for res in op.results):
                    changed = True
                    continue
                out.append(op)
            return Region(r.args, tuple(out), r.yields)

        func = func.replace(body=region(func.body))
        if not changed:
            return func


# ---------------------------------------------------------------------------------------------
# loops: invariant code motion, induction variables
# ---------------------------------------------------------------------------------------------
def licm(func: Function) -> Function:
    def region(r: Region) -> tuple:
        """(ops of r with each loop's invariant ops hoisted in front of it)."""
        out = []
        for op in r.ops:
            if op.kind == "for":
                body = region(op.region)
                inner = set(op.region.args)
                hoisted, kept = [], []
                for o in body.ops:
                    if o.kind in PURE and o.region is None and not any(x in inner for x in o.operands):
                        hoisted.append(o)
                    else:
                        kept.append(o)
                        inner.update(o.results)
                out.extend(hoisted)
                out.append(op.replace(region=Region(body.args, tuple(kept), body.yields)))
            elif op.region is not None:
                out.append(op.replace(region=region(op.region)))
            else:
                out.append(op)
        return Region(r.args, tuple(out), r.yields)

    return func.replace(body=region(func.body))


def induction(func: Function) -> Function:
    def region(r: Region) -> Region:
        out = []
        for op in r.ops:
            if op.region is not None:
                op = op.replace(region=region(op.region))
            if op.kind != "for":
                out.append(op)
                continue
            out.extend(_closed_forms(op))
        return Region(r.args, tuple(out), r.yields)

    return func.replace(body=region(func.body))


def _closed_forms(loop: Op) -> list:
    """The loop with each carried value of the form `x = x + invariant` replaced by its closed form
    (ops before the loop, inside its body and after it); the loop itself last but for those after."""
    body = loop.region
    iv, args = body.args[0], list(body.args[1:])
    lb, ub, step = loop.operands[:3]
    inits = list(loop.operands[3:])
    defs = {res: o for o in body.ops for res in o.results}
    inner = set(body.args) | set(defs)
    names = list(loop.attr("names") or ())
    found = []
    for i, (arg, y) in enumerate(zip(args, body.yields)):
        d = defs.get(y)
        if d is None or d.kind not in ("addptr", "binary"):
            continue
        if d.kind == "binary" and d.attr("op") != "add":
            continue
        a, b = d.operands
        if a is arg and b not in inner:
            delta = b
        elif b is arg and a not in inner and d.kind == "binary":
            delta = a
        else:
            continue
        uses = [o for o in body.ops for x in o.operands if x is arg]
        if any(o is not d and o.kind == "for" for o in uses):
            continue
        found.append((i, arg, y, d, delta))
    if not found:
        return [loop]
    loc = loop.loc
    idt = iv.type

    def mk(kind, operands, ty, attrs=()):
        v = Value(ty)
        return Op(kind, tuple(operands), (v,), tuple(attrs), loc), v

    # inside: trip = (iv - lb) // step ; value = init + delta * trip
    pre, head, post = [], [], []
    o1, diff = mk("binary", (iv, lb), idt, (("op", "sub"),))
    o2, trip = mk("binary", (diff, step), idt, (("op", "floordiv"),))
    head += [o1, o2]
    # after: trips = max(0, cdiv(ub - lb, step)) (a positive step)
    o3, span = mk("binary", (ub, lb), idt, (("op", "sub"),))
    o4, one = mk("constant", (), idt, (("value", 1),))
    o5, sm1 = mk("binary", (step, one), idt, (("op", "sub"),))
    o6, num = mk("binary", (span, sm1), idt, (("op", "add"),))
    o7, trips0 = mk("binary", (num, step), idt, (("op", "floordiv"),))
    o8, zero = mk("constant", (), idt, (("value", 0),))
    o9, trips = mk("binary", (trips0, zero), idt, (("op", "max"),))
    post += [o3, o4, o5, o6, o7, o8, o9]
    subst, drop, results = {}, set(), {}
    for i, arg, y, d, delta in found:
        for t, sink, key in ((trip, head, "in"), (trips, post, "out")):
            dt = delta.type.element
            cnt = t
            if dt.is_int() and dt != idt.element:
                oc, cnt = mk("cast", (t,), TileType(dt, ()), ())
                sink.append(oc)
            cnt_el = dt if dt.is_int() else idt.element
            if delta.type.shape:
                os_, cnt = mk("splat", (cnt,), TileType(cnt_el, delta.type.shape), ())
                sink.append(os_)
            om, off = mk("binary", (delta, cnt), TileType(cnt_el, delta.type.shape), (("op", "mul"),))
            sink.append(om)
            init = inits[i]
            shape = arg.type.shape
            if off.type.shape != shape:
                ob, off = mk("splat" if not off.type.shape else "broadcast", (off,), TileType(cnt_el, shape), ())
                sink.append(ob)
            kind = "addptr" if arg.type.element.is_ptr() else "binary"
            attrs = () if kind == "addptr" else (("op", "add"),)
            oa, val = mk(kind, (init, off), arg.type, attrs)
            sink.append(oa)
            if key == "in":
                subst[arg] = val
            else:
                results[loop.results[i]] = val
        drop.add(i)
    keep = [i for i in range(len(args)) if i not in drop]

    def sub(v):
        return subst.get(v, v)

    new_ops = head + [o.replace(operands=tuple(sub(x) for x in o.operands)) for o in body.ops]
    new_body = Region((iv,) + tuple(args[i] for i in keep), tuple(new_ops), tuple(sub(body.yields[i]) for i in keep))
    new_loop = loop.replace(operands=(lb, ub, step) + tuple(inits[i] for i in keep),
                            results=tuple(loop.results[i] for i in keep), region=new_body,
                            attrs=(("names", tuple(names[i] for i in keep if i < len(names))),))
    # the loop's results that became closed forms: computed after it (same Values)
    tail = []
    for o in post:
        tail.append(o)
    fix = []
    for res, val in results.items():
        d = tail[[id(o.results[0]) for o in tail].index(id(val))]
        tail[tail.index(d)] = d.replace(results=(res,))
    return pre + [new_loop] + tail + fix


def optimize(func: Function) -> Function:
    """The machine-independent pipeline: fold, peephole, cse, licm, induction, dce (to a fixed
    point, at most 4 rounds)."""
    for _ in range(4):
        before = ir.script(func, locations=False)
        func = dce(induction(licm(cse(peephole(fold_constants(func))))))
        if ir.script(func, locations=False) == before:
            break
    return func


PIPELINE = (("fold_constants", fold_constants), ("peephole", peephole), ("cse", cse), ("licm", licm),
            ("induction", induction), ("dce", dce))


# ---------------------------------------------------------------------------------------------
# axis analysis
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AxisInfo:
    """Of an integer or pointer block: per axis, `contiguity` (the length of the runs of consecutive
    values / addresses along it), `divisibility` (a power of two every run's first value is a
    multiple of) and `constancy` (runs of equal values)."""

    contiguity: tuple
    divisibility: tuple
    constancy: tuple

    def __str__(self):
        return f"contiguity={list(self.contiguity)} divisibility={list(self.divisibility)} " \
               f"constancy={list(self.constancy)}"


def _pow2_divisor(n: int) -> int:
    n = abs(int(n))
    if n == 0:
        return 1 << 30
    return n & -n


def axis_info(func: Function) -> dict:
    """AxisInfo of every integer and pointer value (Triton's AxisInfo analysis, on affine forms)."""
    info: dict = {}

    def of(v: Value) -> AxisInfo:
        if v in info:
            return info[v]
        nd = max(1, len(v.type.shape))
        return AxisInfo((1,) * nd, (1,) * nd, (1,) * nd)

    def set_(v, ci, di, ki):
        info[v] = AxisInfo(tuple(ci), tuple(di), tuple(ki))

    def visit(r: Region):
        for op in r.ops:
            if op.region is not None:
                visit(op.region)
            if not op.results:
                continue
            res = op.results[0]
            el = res.type.element
            if not (el.is_int() or el.is_ptr() or el.is_bool()):
                continue
            shape = res.type.shape or (1,)
            nd = len(shape)
            k = op.kind
            if k == "constant":
                set_(res, [1], [_pow2_divisor(op.attr("value")) if el.is_int() else 1], [1])
            elif k == "program_id" or k == "num_programs":
                set_(res, [1], [1], [1])
            elif k == "arange":
                n = op.attr("end") - op.attr("start")
                set_(res, [n], [_pow2_divisor(op.attr("start"))], [1])
            elif k == "splat":
                s = of(op.operands[0])
                set_(res, [1] * nd, [s.divisibility[0]] * nd, list(shape))
            elif k in ("broadcast", "expand_dims", "reshape", "trans"):
                s = of(op.operands[0])
                src_shape = op.operands[0].type.shape or (1,)
                if k == "trans":
                    p = op.attr("perm")
                    set_(res, [s.contiguity[i] for i in p], [s.divisibility[i] for i in p], [s.constancy[i] for i in p])
                elif k == "expand_dims":
                    a = op.attr("axis")
                    c, d, q = list(s.contiguity), list(s.divisibility), list(s.constancy)
                    if not op.operands[0].type.shape:
                        c, d, q = [], [], []
                    c.insert(a, 1), d.insert(a, d[0] if d else s.divisibility[0]), q.insert(a, 1)
                    set_(res, c, d, q)
                elif k == "broadcast":
                    set_(res, [s.contiguity[i] if src_shape[i] == shape[i] else 1 for i in range(nd)],
                         [s.divisibility[i] for i in range(nd)],
                         [s.constancy[i] if src_shape[i] == shape[i] else shape[i] for i in range(nd)])
                else:
                    set_(res, [1] * nd, [1] * nd, [1] * nd)
            elif k == "hint":
                s = of(op.operands[0])
                vals = op.attr("values")
                if op.attr("kind") == "multiple_of":
                    set_(res, s.contiguity, [max(a, _pow2_divisor(b)) for a, b in zip(s.divisibility, vals)],
                         s.constancy)
                else:
                    set_(res, [max(a, b) for a, b in zip(s.contiguity, vals)], s.divisibility, s.constancy)
            elif k in ("binary", "addptr"):
                a, b = (of(o) for o in op.operands)
                kind = op.attr("op") if k == "binary" else "add"
                if kind in ("add", "sub"):
                    # runs of consecutive values plus runs of constants stay consecutive
                    c = [max(min(a.contiguity[i], b.constancy[i]), min(b.contiguity[i], a.constancy[i]))
                         for i in range(nd)]
                    d = [math.gcd(a.divisibility[i], b.divisibility[i]) for i in range(nd)]
                    q = [math.gcd(a.constancy[i], b.constancy[i]) for i in range(nd)]
                    set_(res, c, d, q)
                elif kind == "mul":
                    c = [1] * nd
                    d = [min(a.divisibility[i] * b.divisibility[i], 1 << 30) for i in range(nd)]
                    q = [math.gcd(a.constancy[i], b.constancy[i]) for i in range(nd)]
                    set_(res, c, d, q)
                else:
                    q = [math.gcd(a.constancy[i], b.constancy[i]) for i in range(nd)]
                    set_(res, [1] * nd, [1] * nd, q)
            else:
                set_(res, [1] * nd, [1] * nd, [1] * nd)

    visit(func.body)
    return info
