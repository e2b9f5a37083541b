"""A differential fuzzer of the ONNX path: random valid ONNX graphs, run by tessera (opt_level 0 and 3)
and by onnxruntime, compared.

    model, feeds = random_model(seed)     # onnx.ModelProto built with onnx.helper + its input values
    result = check(seed)                  # FuzzResult: status "ok" | "refused" | "failed", detail
    print(minimize(model, feeds).text)    # a failing model cut down while it keeps failing the same way

The generator draws ops only from those the frontend claims (`tessera.frontend.onnx_ops.supported_ops`):
elementwise unary/binary ops with numpy broadcasting, comparisons, logic, Where, Cast, Clip, reductions
(axes as attribute or, where the opset says so, as an initializer input), ArgMax/ArgMin, MatMul, Gemm,
Conv, pooling, Softmax/LogSoftmax, Transpose, Reshape (with 0 and -1), Flatten, Concat, Split, Slice,
Gather, Squeeze/Unsqueeze, Expand, Pad, shape subgraphs (Shape -> Gather -> Concat -> Reshape),
constants as initializers and Constant nodes, several graph outputs; float32 mostly, some float16,
int32, int64 and bool. Inputs are kept where the reference is well defined: divisors, Sqrt/Log/Pow
bases are made positive (Abs + 0.5), Exp and products are bounded (Tanh in front when a value could
grow), comparisons, casts to integers and Floor/Ceil/Round see only "exact" floats (values that every
correct implementation computes bit for bit, so that a flipped comparison is a real bug, not rounding).

A failure is a mismatch (value, shape or dtype) against onnxruntime at either opt_level, or an
exception from tessera that is not a TesseraError. A TesseraError (a refusal) is reported as
"refused": the generator builds only from claimed ops, so each one is worth a look.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_F32, _F16, _I32, _I64, _BOOL = "float32", "float16", "int32", "int64", "bool"
_ELEM = {_F32: TensorProto.FLOAT, _F16: TensorProto.FLOAT16, _I32: TensorProto.INT32,
         _I64: TensorProto.INT64, _BOOL: TensorProto.BOOL}
_FLOATS = (_F32, _F16)
_INTS = (_I32, _I64)
_INT64_MAX = np.iinfo(np.int64).max
OPSETS = (11, 13, 14, 15, 17, 18)


@dataclass
class T:
    """A tensor of the graph being built: its ONNX name, static shape, dtype, a bound on |value|,
    whether it is 'exact' (bit-identical in every correct implementation), and whether all its
    values are >= 0.5 (positive)."""
    name: str
    shape: tuple
    dtype: str
    bound: float
    exact: bool
    pos: bool = False


def _bcast(a, b):
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))


class _Gen:
    def __init__(self, seed: int, max_nodes: int | None = None):
        self.seed = seed
        self.r = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.opset = self.r.choice(OPSETS)
        self.nodes, self.inputs, self.inits = [], [], []
        self.feeds = {}
        self.pool: list[T] = []
        self.node_outs: list[T] = []
        self.n = 0
        self.max_nodes = self.r.randint(2, max_nodes or 6)     # nodes other than Constant, at least
        self.dims = [self.r.choice([1, 2, 3, 4, 5]) for _ in range(4)]   # a few shared extents

    # ---- names, leaves ---------------------------------------------------------------------
    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def shape(self, rank=None):
        rank = self.r.randint(1, 4) if rank is None else rank
        return tuple(self.r.choice(self.dims + [1, 2, 3]) for _ in range(rank))

    def array(self, shape, dtype, lo=-2.0, hi=2.0, nonzero=False):
        if dtype == _BOOL:
            return np.asarray(self.np.random(shape) < 0.5)
        if dtype in _INTS:
            lo_i, hi_i = int(np.floor(lo)), int(np.ceil(hi))
            a = self.np.integers(lo_i, hi_i + 1, size=shape)
            if nonzero:
                a = np.where(a == 0, 1, a)
            return np.asarray(a).astype(dtype)
        a = self.np.uniform(lo, hi, size=shape)
        if dtype == _F16 or self.r.random() < 0.3:      # short mantissas: exact sums, some ties
            a = np.round(a * 8) / 8
        if nonzero:
            a = np.where(np.abs(a) < 0.25, 0.5, a)
        return np.asarray(a).astype(dtype)

    def leaf(self, shape, dtype, kind=None, lo=-2.0, hi=2.0, nonzero=False):
        """A new tensor: a graph input, an initializer or a Constant node."""
        kind = kind or self.r.choice(["input", "input", "init", "const"])
        a = self.array(shape, dtype, lo, hi, nonzero)
        name = self.name({"input": "x", "init": "w", "const": "k"}[kind])
        if kind == "input":
            self.inputs.append(helper.make_tensor_value_info(name, _ELEM[dtype], list(shape)))
            self.feeds[name] = a
        elif kind == "init":
            self.inits.append(numpy_helper.from_array(a, name))
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(a, name + "_v")))
        b = float(np.max(np.abs(a.astype(np.float64)))) if a.size and dtype != _BOOL else 1.0
        t = T(name, tuple(shape), dtype, max(b, 1.0), True, bool(a.size and dtype != _BOOL and a.min() >= 0.5))
        self.pool.append(t)
        return t

    def const_i64(self, values, kind=None):
        """An int64 initializer or Constant node (shapes, axes, indices): its name."""
        a = np.asarray(values, dtype=np.int64)
        kind = kind or self.r.choice(["init", "const"])
        name = self.name("c")
        if kind == "init":
            self.inits.append(numpy_helper.from_array(a, name))
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(a, name + "_v")))
        return name

    def scalar(self, value, dtype):
        name = self.name("s")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    # ---- nodes -------------------------------------------------------------------------------
    def node(self, op, ins, out_specs, **attrs):
        """Add a node; out_specs: [(shape, dtype, bound, exact, pos)]; returns the output T(s)."""
        outs = [T(self.name("t"), tuple(int(d) for d in s), dt, float(b), bool(e), bool(p))
                for s, dt, b, e, p in out_specs]
        self.nodes.append(helper.make_node(op, [getattr(i, "name", i) for i in ins], [o.name for o in outs],
                                           name=f"{op}_{len(self.nodes)}", **attrs))
        self.pool.extend(outs)
        self.node_outs.extend(outs)
        return outs[0] if len(outs) == 1 else outs

    def pick(self, pred=lambda t: True, make=None):
        """An existing tensor satisfying pred (recent ones preferred), else make()."""
        cands = [t for t in self.pool if pred(t)]
        if cands and (make is None or self.r.random() < 0.85):
            w = [1.0 + 3.0 * (i >= len(cands) - 3) for i in range(len(cands))]
            return self.r.choices(cands, weights=w)[0]
        return make() if make else None

    def fresh_float(self, rank=None):
        return self.leaf(self.shape(rank), _F32 if self.r.random() < 0.85 else _F16)

    def bounded(self, t, limit):
        """t itself when |t| <= limit, else Tanh(t) (floats) so that Exp/products stay finite."""
        if t.bound <= limit:
            return t
        return self.node("Tanh", [t], [(t.shape, t.dtype, 1.0, False, False)])

    def positive(self, t):
        """A tensor >= 0.5: t when it is, else Abs(t) + 0.5."""
        if t.pos:
            return t
        a = self.node("Abs", [t], [(t.shape, t.dtype, t.bound, t.exact, False)])
        half = self.scalar(0.5, t.dtype)
        return self.node("Add", [a, half], [(t.shape, t.dtype, t.bound + 0.5, t.exact, True)])

    def partner(self, t, dtype=None, exact_needed=False, against=None, **leaf_kw):
        """A second operand broadcastable with t (or with the shape `against`): an existing tensor or a
        new leaf."""
        dtype = dtype or t.dtype
        target = tuple(against) if against is not None else t.shape

        def ok(u):
            if u is t or u.dtype != dtype or (exact_needed and not u.exact):
                return False
            try:
                _bcast(target, u.shape)
                return True
            except ValueError:
                return False

        if not leaf_kw and self.r.random() < 0.4:
            u = self.pick(ok)
            if u is not None:
                return u
        s = list(target)
        drop = self.r.randint(0, len(s)) if self.r.random() < 0.4 else 0
        s = s[drop:]
        for i in range(len(s)):
            if self.r.random() < 0.3:
                s[i] = 1
            elif s[i] == 1 and self.r.random() < 0.3:
                s[i] = self.r.choice([2, 3])
        if drop == 0 and self.r.random() < 0.15 and len(target) < 4:
            s = [self.r.choice([1, 2])] + s
        return self.leaf(tuple(s), dtype, **leaf_kw)

    # ---- op families -------------------------------------------------------------------------
    def op_unary(self):
        t = self.pick(lambda u: u.dtype in _FLOATS, self.fresh_float)
        op = self.r.choice(["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Sqrt", "Log", "Reciprocal", "Erf",
                            "Softplus", "LeakyRelu", "Elu", "HardSigmoid", "Sin", "Cos", "Floor", "Ceil",
                            "Round", "Sign", "Identity", "Softsign", "HardSwish", "Selu"])
        if t.dtype == _F16 and op not in ("Relu", "Abs", "Neg", "Sqrt", "Exp", "Sigmoid", "Tanh", "Identity",
                                          "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Log", "LeakyRelu",
                                          "Erf", "Softplus"):
            op = "Relu"
        attrs = {}
        if op == "HardSwish" and self.opset < 14:
            op = "HardSigmoid"
        if op in ("Floor", "Ceil", "Round", "Sign") and not t.exact:
            op = "Abs"
        if op in ("Sqrt", "Log", "Reciprocal"):
            t = self.positive(t)
        if op in ("Exp", "Softplus", "HardSwish", "Selu", "Elu") or op in ("Sin", "Cos"):
            t = self.bounded(t, 4.0)
        b, exact, pos = t.bound, False, False
        if op == "Exp":
            b, pos = float(np.exp(t.bound)), t.bound <= 0.69
        elif op in ("Sigmoid", "Tanh", "Erf", "Sin", "Cos", "HardSigmoid", "Sign", "Softsign"):
            b = 1.0
        elif op in ("Relu", "Abs", "Neg", "Identity", "Floor", "Ceil", "Round", "Sign"):
            exact, pos = t.exact, op in ("Identity",) and t.pos
            b = t.bound + 1
        elif op == "Sqrt":
            b = float(np.sqrt(t.bound)) + 1
            pos = t.bound >= 0.25
        elif op == "Log":
            b = abs(float(np.log(t.bound))) + 1
        elif op == "Reciprocal":
            b, pos = 2.0, t.bound <= 2.0
        elif op in ("Softplus", "Selu", "Elu", "HardSwish", "LeakyRelu"):
            b = t.bound * 1.1 + 2
        if op == "LeakyRelu":
            attrs["alpha"] = self.r.choice([0.01, 0.1, 0.5])
        if op == "Elu":
            attrs["alpha"] = self.r.choice([1.0, 0.5])
        if op == "HardSigmoid" and self.r.random() < 0.5:
            attrs.update(alpha=0.3, beta=0.4)
        return self.node(op, [t], [(t.shape, t.dtype, b, exact, pos)], **attrs)

    def op_binary(self):
        t = self.pick(lambda u: u.dtype != _BOOL, self.fresh_float)
        isint = t.dtype in _INTS
        ops = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"] + (["Mod"] if isint else ["Pow", "Mod"])
        op = self.r.choice(ops)
        if op in ("Mean", "Sum") and isint:
            op = "Add"
        if op in ("Max", "Min") and isint and self.opset < 12:
            op = "Sub"
        if op in ("Div", "Mod"):
            if isint:
                u = self.partner(t, nonzero=True, lo=-4, hi=4)
            else:
                u = self.positive(self.partner(t))
                if self.r.random() < 0.5:
                    u = self.node("Neg", [u], [(u.shape, u.dtype, u.bound, u.exact, False)])
            if not isint and op == "Mod":     # fmod of floats: only on exact operands, away from ties
                if not (t.exact and u.exact):
                    op = "Div"
            attrs = {"fmod": 1} if op == "Mod" and (not isint or self.r.random() < 0.5) else {}
            shape = _bcast(t.shape, u.shape)
            b = t.bound * 2 + 1 if op == "Div" else u.bound
            return self.node(op, [t, u], [(shape, t.dtype, b, isint, False)], **attrs)
        if op == "Pow":
            base = self.positive(self.bounded(t, 3.0))
            e = self.partner(t, lo=-2.0, hi=2.0) if self.r.random() < 0.6 else self.leaf((), t.dtype, "init", -2, 2)
            e = self.bounded(e, 2.0)
            shape = _bcast(base.shape, e.shape)
            return self.node("Pow", [base, e], [(shape, t.dtype, (base.bound + 1) ** 2 + 4, False, True)])
        if op == "Mul":
            limit = 1e3 if isint else 30.0
            if not isint:
                t = self.bounded(t, 8.0)
            u = self.partner(t)
            if not isint:
                u = self.bounded(u, 8.0)
            if isint and t.bound * u.bound > limit:
                op = "Add"
            shape = _bcast(t.shape, u.shape)
            b = t.bound * u.bound if op == "Mul" else t.bound + u.bound
            return self.node(op, [t, u], [(shape, t.dtype, b, isint or (op == "Add" and t.exact and u.exact),
                                           False)])
        u = self.partner(t)
        ins = [t, u]
        if op in ("Sum", "Mean", "Max", "Min") and self.r.random() < 0.4:
            ins.append(self.partner(t, against=_bcast(t.shape, u.shape)))
        shape = t.shape
        for v in ins[1:]:
            shape = _bcast(shape, v.shape)
        b = sum(v.bound for v in ins)
        if op in ("Max", "Min"):
            exact = all(v.exact for v in ins)
            pos = op == "Max" and any(v.pos for v in ins) or op == "Min" and all(v.pos for v in ins)
            return self.node(op, ins, [(shape, t.dtype, max(v.bound for v in ins), exact, pos)])
        exact = isint or (op in ("Add", "Sub") and all(v.exact for v in ins) and len(ins) == 2)
        return self.node(op, ins, [(shape, t.dtype, b, exact, False)])

    def op_compare(self):
        t = self.pick(lambda u: u.dtype in _INTS or (u.dtype in _FLOATS and u.exact),
                      lambda: self.leaf(self.shape(), self.r.choice([_F32, _I64, _I32])))
        ops = ["Less", "Greater", "Equal"] + (["LessOrEqual", "GreaterOrEqual"] if self.opset >= 12 else [])
        op = self.r.choice(ops)
        if op == "Equal" and t.dtype in _FLOATS and self.r.random() < 0.5:
            u = t      # x == x is all true; x == Abs(x) is interesting enough
            u = self.node("Abs", [t], [(t.shape, t.dtype, t.bound, True, False)])
        else:
            u = self.partner(t, exact_needed=True)
        return self.node(op, [t, u], [(_bcast(t.shape, u.shape), _BOOL, 1, True, False)])

    def op_logic(self):
        t = self.pick(lambda u: u.dtype == _BOOL, lambda: self.leaf(self.shape(), _BOOL))
        op = self.r.choice(["And", "Or", "Xor", "Not"])
        if op == "Not":
            return self.node("Not", [t], [(t.shape, _BOOL, 1, True, False)])
        u = self.partner(t)
        return self.node(op, [t, u], [(_bcast(t.shape, u.shape), _BOOL, 1, True, False)])

    def op_where(self):
        x = self.pick(lambda u: u.dtype != _BOOL, self.fresh_float)
        c = self.pick(lambda u: u.dtype == _BOOL and self._bc(u.shape, x.shape),
                      lambda: self.partner(x, dtype=_BOOL))
        y = self.partner(x, against=_bcast(c.shape, x.shape))
        shape = _bcast(_bcast(c.shape, x.shape), y.shape)
        return self.node("Where", [c, x, y], [(shape, x.dtype, max(x.bound, y.bound), x.exact and y.exact,
                                               x.pos and y.pos)])

    @staticmethod
    def _bc(a, b):
        try:
            _bcast(a, b)
            return True
        except ValueError:
            return False

    def op_cast(self):
        t = self.pick()
        if t is None:
            t = self.fresh_float()
        choices = [_F32, _I64, _I32, _BOOL] + ([_F16] if t.bound < 1e3 else [])
        to = self.r.choice(choices)
        if t.dtype in _FLOATS and to in _INTS + (_BOOL,) and not t.exact:
            to = _F32 if t.dtype == _F16 else _F16 if t.bound < 1e3 else _F32
        exact = t.exact and not (t.dtype == _F32 and to == _F16) and not (t.dtype in _INTS and to == _F16)
        b = 1.0 if to == _BOOL else t.bound + 1
        return self.node("Cast", [t], [(t.shape, to, b, exact or to != _F16 and t.exact, False)],
                         to=_ELEM[to])

    def op_clip(self):
        t = self.pick(lambda u: u.dtype == _F32 or (u.dtype in _INTS and self.opset >= 12), self.fresh_float)
        lo = self.r.choice([None, -1.0, -0.5, 0.0])
        hi = self.r.choice([None, 0.5, 1.0, 6.0])
        if t.dtype in _INTS:
            lo, hi = (None if lo is None else int(lo) - 1), (None if hi is None else int(hi) + 1)
        ins = [t, self.scalar(lo, t.dtype) if lo is not None else ""]
        if hi is not None:
            ins.append(self.scalar(hi, t.dtype))
        while ins and ins[-1] == "":
            ins.pop()
        b = min(t.bound, max(abs(lo or 0), abs(hi or 0))) if hi is not None and lo is not None else t.bound
        return self.node("Clip", ins, [(t.shape, t.dtype, b, t.exact, False)])

    def op_reduce(self):
        t = self.pick(lambda u: u.dtype in (_F32, _I32, _I64) and len(u.shape) >= 1,
                      lambda: self.fresh_float(self.r.randint(1, 4)))
        ops = ["ReduceSum", "ReduceMax", "ReduceMin"]
        if t.dtype == _F32:
            ops += ["ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
                    "ReduceLogSum"]
        op = self.r.choice(ops)
        if op in ("ReduceProd", "ReduceLogSumExp", "ReduceSumSquare"):
            t = self.bounded(t, 2.0)
        if op == "ReduceLogSum":
            t = self.positive(t)
        if op == "ReduceSum" and t.dtype in _INTS and t.bound > 1e6:
            op = "ReduceMax"
        r = len(t.shape)
        axes = None
        if self.r.random() < 0.8:
            axes = sorted(self.r.sample(range(r), self.r.randint(1, r)))
            axes = [a - r if self.r.random() < 0.3 else a for a in axes]
        keep = self.r.randint(0, 1)
        red = set(range(r)) if axes is None else {a % r for a in axes}
        shape = tuple((1 if i in red else d) for i, d in enumerate(t.shape) if keep or i not in red)
        n = int(np.prod([t.shape[i] for i in red])) if red else 1
        b = {"ReduceMax": t.bound, "ReduceMin": t.bound, "ReduceProd": t.bound ** max(n, 1) + 1,
             "ReduceMean": t.bound, "ReduceLogSumExp": t.bound + np.log(n) + 1,
             "ReduceLogSum": abs(np.log(max(n * t.bound, 1))) + 1}.get(op, (t.bound ** (2 if op == "ReduceSumSquare" else 1)) * n)
        exact = t.exact and op in ("ReduceMax", "ReduceMin") or t.dtype in _INTS
        axes_as_input = self.opset >= 18 or (op == "ReduceSum" and self.opset >= 13)
        ins, attrs = [t], {"keepdims": keep}
        if axes is not None:
            if axes_as_input:
                ins.append(self.const_i64(axes))
            else:
                attrs["axes"] = axes
        return self.node(op, ins, [(shape, t.dtype, b, exact, op in ("ReduceL2", "ReduceL1") and False)], **attrs)

    def op_argmax(self):
        t = self.pick(lambda u: (u.dtype == _F32 and u.exact) or u.dtype in _INTS,
                      lambda: self.leaf(self.shape(), self.r.choice([_F32, _I32])))
        r = len(t.shape)
        if r == 0:
            return None
        axis = self.r.randint(-r, r - 1)
        keep = self.r.randint(0, 1)
        attrs = {"axis": axis, "keepdims": keep}
        if self.opset >= 12 and self.r.random() < 0.4:
            attrs["select_last_index"] = self.r.randint(0, 1)
        shape = tuple((1 if i == axis % r else d) for i, d in enumerate(t.shape) if keep or i != axis % r)
        return self.node(self.r.choice(["ArgMax", "ArgMin"]), [t], [(shape, _I64, max(t.shape), True, False)],
                         **attrs)

    def op_matmul(self):
        t = self.pick(lambda u: u.dtype in _FLOATS and len(u.shape) >= 1, self.fresh_float)
        t = self.bounded(t, 3.0)
        s = t.shape
        n = self.r.choice(self.dims + [1, 2])
        if len(s) == 1 or self.r.random() < 0.15:
            if len(s) == 1:
                other = (s[0], n) if self.r.random() < 0.7 else (s[0],)
            else:
                other = (s[-1],)
        else:
            batch = list(s[:-2])
            if batch and self.r.random() < 0.3:
                batch = [1 if self.r.random() < 0.5 else d for d in batch][self.r.randint(0, len(batch)):]
            elif not batch and self.r.random() < 0.15:
                batch = [self.r.choice([1, 2])]
            else:
                batch = []
            other = tuple(batch) + (s[-1], n)
        u = self.leaf(other, t.dtype, self.r.choice(["init", "init", "input"]), -1.5, 1.5)
        a, b = t, u
        # output shape via numpy on empty arrays
        shape = np.matmul(np.zeros(a.shape), np.zeros(b.shape)).shape
        k = s[-1]
        return self.node("MatMul", [a, b], [(shape, t.dtype, a.bound * b.bound * k, False, False)])

    def op_gemm(self):
        t = self.pick(lambda u: u.dtype == _F32 and len(u.shape) == 2, lambda: self.fresh_float(2))
        if t.dtype != _F32:
            return None
        t = self.bounded(t, 3.0)
        ta, tb = self.r.randint(0, 1), self.r.randint(0, 1)
        m, k = (t.shape[1], t.shape[0]) if ta else t.shape
        n = self.r.choice(self.dims)
        b = self.leaf((n, k) if tb else (k, n), _F32, self.r.choice(["init", "init", "input"]), -1.5, 1.5)
        ins = [t, b]
        attrs = {}
        if ta:
            attrs["transA"] = 1
        if tb:
            attrs["transB"] = 1
        if self.r.random() < 0.3:
            attrs["alpha"] = self.r.choice([0.5, 2.0])
        if self.r.random() < 0.7:
            cshape = self.r.choice([(n,), (1, n), (m, 1), (m, n), ()])
            ins.append(self.leaf(cshape, _F32, self.r.choice(["init", "input"])))
            if self.r.random() < 0.3:
                attrs["beta"] = self.r.choice([0.5, 2.0])
        return self.node("Gemm", ins, [((m, n), _F32, 3 * k * t.bound * 1.5 + 8, False, False)], **attrs)

    def spatial(self, rank):
        def make():
            c = self.r.choice([1, 2, 3, 4])
            return self.leaf((self.r.choice([1, 2]), c) + tuple(self.r.randint(3, 6) for _ in range(rank - 2)), _F32,
                             "input")
        return self.pick(lambda u: u.dtype == _F32 and len(u.shape) == rank and min(u.shape[2:]) >= 2, make)

    def op_conv(self):
        rank = self.r.choice([4, 4, 3])
        t = self.bounded(self.spatial(rank), 3.0)
        c = t.shape[1]
        groups = self.r.choice([g for g in (1, 2, 3, 4) if c % g == 0])
        if self.r.random() < 0.5:
            groups = 1
        m = groups * self.r.choice([1, 2])
        sp = t.shape[2:]
        ks = [self.r.randint(1, min(3, d)) for d in sp]
        strides = [self.r.choice([1, 1, 2]) for _ in sp]
        dil = [1 if ks[i] == 1 or self.r.random() < 0.7 else 2 for i in range(len(sp))]
        pads = [self.r.randint(0, k - 1) if k > 1 else 0 for k in ks] * 2
        for i, d in enumerate(sp):              # the dilated kernel must fit in the padded input
            while (ks[i] - 1) * dil[i] + 1 > d + pads[i] + pads[i + len(sp)]:
                dil[i] = 1
                if (ks[i] - 1) + 1 > d + pads[i] + pads[i + len(sp)]:
                    ks[i] -= 1
        w = self.leaf((m, c // groups) + tuple(ks), _F32, "init", -1, 1)
        ins = [t, w]
        if self.r.random() < 0.6:
            ins.append(self.leaf((m,), _F32, "init"))
        out = tuple((sp[i] + pads[i] + pads[i + len(sp)] - ((ks[i] - 1) * dil[i] + 1)) // strides[i] + 1
                    for i in range(len(sp)))
        attrs = {"strides": strides, "pads": pads, "group": groups}
        if any(d != 1 for d in dil) or self.r.random() < 0.3:
            attrs["dilations"] = dil
        if self.r.random() < 0.5:
            attrs["kernel_shape"] = ks
        kn = c // groups * int(np.prod(ks))
        return self.node("Conv", ins, [((t.shape[0], m) + out, _F32, kn * t.bound + 1, False, False)], **attrs)

    def op_pool(self):
        rank = self.r.choice([4, 4, 3])
        t = self.spatial(rank)
        op = self.r.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
        if op.startswith("Global"):
            return self.node(op, [t], [(t.shape[:2] + (1,) * (rank - 2), _F32, t.bound,
                                        t.exact and op == "GlobalMaxPool", False)])
        sp = t.shape[2:]
        ks = [self.r.randint(1, min(3, d)) for d in sp]
        strides = [self.r.choice([1, 2]) for _ in sp]
        pads = [self.r.randint(0, k - 1) if k > 1 else 0 for k in ks] * 2
        ceil = self.r.random() < 0.3
        attrs = {"kernel_shape": ks, "strides": strides, "pads": pads}
        if ceil:
            attrs["ceil_mode"] = 1
        if op == "AveragePool" and self.r.random() < 0.5:
            attrs["count_include_pad"] = 1
        out = []
        for i, d in enumerate(sp):
            span = d + pads[i] + pads[i + len(sp)] - ks[i]
            o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
            if ceil and (o - 1) * strides[i] >= d + pads[i]:
                # a last window starting in the padding: ONNX's shape inference and runtimes have
                # disagreed on dropping it; leave the case out
                return None
            out.append(o)
        return self.node(op, [t], [(t.shape[:2] + tuple(out), _F32, t.bound, t.exact and op == "MaxPool", False)],
                         **attrs)

    def op_softmax(self):
        t = self.pick(lambda u: u.dtype == _F32 and len(u.shape) >= 1, self.fresh_float)
        if t.dtype != _F32:
            return None
        t = self.bounded(t, 20.0)
        r = len(t.shape)
        op = self.r.choice(["Softmax", "LogSoftmax"])
        attrs = {}
        if self.opset >= 13 or r < 2 or self.r.random() < 0.6:
            attrs["axis"] = self.r.randint(-r, r - 1)
        b = 1.0 if op == "Softmax" else 2 * t.bound + np.log(max(np.prod(t.shape), 1)) + 1
        return self.node(op, [t], [(t.shape, _F32, b, False, False)], **attrs)

    def op_transpose(self):
        t = self.pick(lambda u: len(u.shape) >= 2, lambda: self.fresh_float(self.r.randint(2, 4)))
        perm = list(range(len(t.shape)))
        self.r.shuffle(perm)
        attrs = {"perm": perm}
        if self.r.random() < 0.2:
            attrs, perm = {}, perm[::-1] if False else list(range(len(t.shape)))[::-1]
        return self.node("Transpose", [t], [(tuple(t.shape[p] for p in perm), t.dtype, t.bound, t.exact, t.pos)],
                         **attrs)

    def _factor(self, n, parts):
        out = []
        for _ in range(parts - 1):
            ds = [d for d in range(1, n + 1) if n % d == 0]
            d = self.r.choice(ds)
            out.append(d)
            n //= d
        out.append(n)
        self.r.shuffle(out)
        return out

    def op_reshape(self):
        t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
        size = int(np.prod(t.shape))
        target = self._factor(size, self.r.randint(1, 4))
        spec = list(target)
        for i in range(min(len(spec), len(t.shape))):
            if spec[i] == t.shape[i] and self.r.random() < 0.4:
                spec[i] = 0
        if self.r.random() < 0.6:
            j = self.r.randrange(len(spec))
            if spec[j] != 0:
                spec[j] = -1
        if self.r.random() < 0.35:
            return self.shape_subgraph(t)
        return self.node("Reshape", [t, self.const_i64(spec)], [(tuple(target), t.dtype, t.bound, t.exact, t.pos)])

    def shape_subgraph(self, t):
        """Reshape(t, Concat(Gather(Shape(t), leading dims), [-1])): the exported-model flatten."""
        r = len(t.shape)
        k = self.r.randint(0, max(r - 1, 0))
        src = t
        sh = self.node("Shape", [src], [((r,), _I64, max(src.shape + (1,)), True, False)])
        parts = []
        if k:
            idx = self.const_i64(list(range(k)) if self.r.random() < 0.7 else [i - r for i in range(k)])
            parts.append(self.node("Gather", [sh, idx], [((k,), _I64, 1, True, False)], axis=0))
        parts.append(self.const_i64([-1]))
        if len(parts) == 1:
            new = parts[0]
        else:
            new = self.node("Concat", parts, [((k + 1,), _I64, 1, True, False)], axis=0)
        target = tuple(t.shape[:k]) + (int(np.prod(t.shape[k:])),)
        return self.node("Reshape", [t, new], [(target, t.dtype, t.bound, t.exact, t.pos)])

    def op_flatten(self):
        t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
        r = len(t.shape)
        axis = self.r.randint(-r, r)
        a = axis % (r + 1) if axis >= 0 else axis + r
        shape = (int(np.prod(t.shape[:a])), int(np.prod(t.shape[a:])))
        return self.node("Flatten", [t], [(shape, t.dtype, t.bound, t.exact, t.pos)], axis=axis)

    def op_concat(self):
        t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
        r = len(t.shape)
        axis = self.r.randint(-r, r - 1)
        ins = [t]
        for _ in range(self.r.randint(1, 2)):
            s = list(t.shape)
            same = [u for u in self.pool if u.dtype == t.dtype and u.shape == t.shape]
            if same and self.r.random() < 0.4:
                ins.append(self.r.choice(same))
                continue
            s[axis] = self.r.randint(1, 3)
            ins.append(self.leaf(tuple(s), t.dtype))
        shape = list(t.shape)
        shape[axis] = sum(u.shape[axis] for u in ins)
        return self.node("Concat", ins, [(tuple(shape), t.dtype, max(u.bound for u in ins),
                                          all(u.exact for u in ins), all(u.pos for u in ins))], axis=axis)

    def op_split(self):
        t = self.pick(lambda u: len(u.shape) >= 1 and max(u.shape) >= 2, lambda: self.fresh_float(2))
        r = len(t.shape)
        cand = [i for i in range(r) if t.shape[i] >= 2]
        if not cand:
            return None
        ax = self.r.choice(cand)
        d = t.shape[ax]
        if self.r.random() < 0.5:
            cut = self.r.randint(1, d - 1)
            sizes = [cut, d - cut]
        else:
            sizes = None
        attrs = {"axis": ax - r if self.r.random() < 0.3 else ax}
        ins = [t]
        if sizes is None:
            n = 2
            if self.opset >= 18:
                attrs["num_outputs"] = n
                chunk = -(-d // n)
                sizes = [chunk, d - chunk]
                if sizes[1] <= 0:
                    return None
            else:
                if d % 2:
                    return None
                sizes = [d // 2, d // 2]
        elif self.opset >= 13:
            ins.append(self.const_i64(sizes))
        else:
            attrs["split"] = sizes
        specs = []
        for s in sizes:
            sh = list(t.shape)
            sh[ax] = s
            specs.append((tuple(sh), t.dtype, t.bound, t.exact, t.pos))
        outs = self.node("Split", ins, specs, **attrs)
        return outs

    def op_slice(self):
        t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
        r = len(t.shape)
        axes = self.r.sample(range(r), self.r.randint(1, r))
        starts, ends, steps, shape = [], [], [], list(t.shape)
        for a in axes:
            d = t.shape[a]
            step = self.r.choice([1, 1, 1, 2, -1, -2])
            if step > 0:
                s = self.r.randint(-d, d - 1) if d > 0 else 0
                e = self.r.choice([self.r.randint(-d, d), _INT64_MAX, d + 3])
            else:
                s = self.r.choice([self.r.randint(-d, d - 1), _INT64_MAX, -1])
                e = self.r.choice([self.r.randint(-d - 1, d - 1), -_INT64_MAX - 1, -d - 5])
            n = len(range(*slice(s, e, step).indices(d)))
            if n == 0:   # keep tensors non-empty
                s, e, step, n = 0, d, 1, d
            starts.append(s)
            ends.append(e)
            steps.append(step)
            shape[a] = n
        ins = [t, self.const_i64(starts), self.const_i64(ends)]
        with_steps = any(st != 1 for st in steps) or self.r.random() < 0.3
        if with_steps or axes != list(range(len(axes))) or self.r.random() < 0.7:
            ins.append(self.const_i64([a - r if self.r.random() < 0.3 else a for a in axes]))
        if with_steps:
            ins.append(self.const_i64(steps))
        return self.node("Slice", ins, [(tuple(shape), t.dtype, t.bound, t.exact, t.pos)])

    def op_gather(self):
        t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
        r = len(t.shape)
        axis = self.r.randint(-r, r - 1)
        d = t.shape[axis]
        ishape = self.r.choice([(), (self.r.randint(1, 3),), (2, 2)])
        idx = self.np.integers(-d, d, size=ishape)
        name = self.const_i64(idx) if self.r.random() < 0.8 else None
        if name is None:
            name = self.name("x")
            dt = self.r.choice([_I64, _I32])
            self.inputs.append(helper.make_tensor_value_info(name, _ELEM[dt], list(ishape)))
            self.feeds[name] = idx.astype(dt)
        a = axis % r
        shape = t.shape[:a] + tuple(ishape) + t.shape[a + 1:]
        return self.node("Gather", [t, name], [(shape, t.dtype, t.bound, t.exact, t.pos)], axis=axis)

    def op_squeeze(self):
        t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
        r = len(t.shape)
        if self.r.random() < 0.5 and 1 in t.shape:
            ones = [i for i, d in enumerate(t.shape) if d == 1]
            axes = sorted(self.r.sample(ones, self.r.randint(1, len(ones))))
            shape = tuple(d for i, d in enumerate(t.shape) if i not in axes)
            axes = [a - r if self.r.random() < 0.3 else a for a in axes]
            op = "Squeeze"
        else:
            if r >= 4:
                return None
            k = self.r.randint(1, min(2, 4 - r))
            out_r = r + k
            axes = sorted(self.r.sample(range(out_r), k))
            it = iter(t.shape)
            shape = tuple(1 if i in axes else next(it) for i in range(out_r))
            axes = [a - out_r if self.r.random() < 0.3 else a for a in axes]
            op = "Unsqueeze"
        if self.opset >= 13:
            return self.node(op, [t, self.const_i64(axes)], [(shape, t.dtype, t.bound, t.exact, t.pos)])
        return self.node(op, [t], [(shape, t.dtype, t.bound, t.exact, t.pos)], axes=axes)

    def op_expand(self):
        t = self.pick(lambda u: len(u.shape) <= 3, self.fresh_float)
        s = list(t.shape)
        target = [self.r.choice([2, 3]) if d == 1 and self.r.random() < 0.6 else
                  (1 if self.r.random() < 0.2 else d) for d in s]
        if self.r.random() < 0.4:
            target = [self.r.choice([1, 2])] + target
        if self.r.random() < 0.2 and target:
            target = target[self.r.randint(1, len(target)):]        # a shorter shape: still broadcasts
        shape = _bcast(t.shape, target)
        return self.node("Expand", [t, self.const_i64(target)], [(shape, t.dtype, t.bound, t.exact, t.pos)])

    def op_pad(self):
        t = self.pick(lambda u: u.dtype in (_F32, _I64, _I32) and 1 <= len(u.shape) <= 4, self.fresh_float)
        if t.dtype == _F16:
            return None
        r = len(t.shape)
        mode = self.r.choice(["constant", "constant", "reflect", "edge"])
        pads = []
        for i in range(2 * r):
            d = t.shape[i % r]
            lim = d - 1 if mode == "reflect" else 2
            pads.append(self.r.randint(0, max(lim, 0)) if (mode != "reflect" or d > 1) else 0)
        if mode == "constant" and self.r.random() < 0.3:
            pads = [p - (self.r.randint(0, min(1, t.shape[i % r] - 1)) if p == 0 else 0) for i, p in enumerate(pads)]
            for i in range(r):
                if t.shape[i] + pads[i] + pads[i + r] <= 0:
                    pads[i] = pads[i + r] = 0
        ins = [t, self.const_i64(pads)]
        if mode == "constant" and self.r.random() < 0.5:
            ins.append(self.scalar(1.5 if t.dtype == _F32 else 3, t.dtype))
        shape = tuple(t.shape[i] + pads[i] + pads[i + r] for i in range(r))
        return self.node("Pad", ins, [(shape, t.dtype, t.bound + 2, t.exact, False)], mode=mode)

    def op_channel_affine(self):
        """x * scale + shift with per-channel constants after a Conv (simplify_inference folds these
        into the convolution), or a BatchNormalization (folded too)."""
        t = self.pick(lambda u: u.dtype == _F32 and len(u.shape) in (3, 4), lambda: self.spatial(4))
        t = self.bounded(t, 50.0)
        c = t.shape[1]
        rest = (1,) * (len(t.shape) - 2)
        if self.r.random() < 0.5:
            scale = self.leaf((c,), _F32, "init", 0.5, 1.5)
            bias = self.leaf((c,), _F32, "init")
            mean = self.leaf((c,), _F32, "init", -1, 1)
            var = self.leaf((c,), _F32, "init", 0.5, 2.0)
            return self.node("BatchNormalization", [t, scale, bias, mean, var],
                             [(t.shape, _F32, 2 * t.bound * 1.5 / 0.7 + 4, False, False)],
                             epsilon=self.r.choice([1e-5, 1e-3]))
        op = self.r.choice(["Mul", "Add"])
        cshape = self.r.choice([(c,) + rest, (1, c) + rest])
        k = self.leaf(cshape, _F32, self.r.choice(["init", "init", "const"]), 0.5 if op == "Mul" else -2, 2)
        ins = [t, k] if self.r.random() < 0.7 else [k, t]
        b = t.bound * 2 if op == "Mul" else t.bound + 2
        return self.node(op, ins, [(t.shape, _F32, b, False, False)])

    def op_norm(self):
        t = self.pick(lambda u: u.dtype == _F32 and len(u.shape) >= 2, lambda: self.fresh_float(self.r.randint(2, 4)))
        if t.dtype != _F32:
            return None
        t = self.bounded(t, 20.0)
        r = len(t.shape)
        if self.opset >= 17 and self.r.random() < 0.6:
            axis = self.r.randint(-r, r - 1)
            nshape = t.shape[axis % r:]
            ins = [t, self.leaf(nshape, _F32, "init", 0.5, 1.5)]
            if self.r.random() < 0.6:
                ins.append(self.leaf(nshape, _F32, "init"))
            return self.node("LayerNormalization", ins, [(t.shape, _F32, 10 * t.bound + 4, False, False)],
                             axis=axis, epsilon=1e-5)
        if r < 3:
            return None
        c = t.shape[1]
        ins = [t, self.leaf((c,), _F32, "init", 0.5, 1.5), self.leaf((c,), _F32, "init")]
        return self.node("InstanceNormalization", ins, [(t.shape, _F32, 10 * t.bound + 4, False, False)],
                         epsilon=1e-5)

    def op_tile(self):
        t = self.pick(lambda u: 1 <= len(u.shape) <= 3, self.fresh_float)
        reps = [self.r.choice([1, 1, 2, 3]) for _ in t.shape]
        return self.node("Tile", [t, self.const_i64(reps)],
                         [(tuple(d * k for d, k in zip(t.shape, reps)), t.dtype, t.bound, t.exact, t.pos)])

    def op_shape_of(self):
        """Shape (with start/end at opset >= 15) of one tensor reshaping another of the same size,
        or feeding Expand / ConstantOfShape-free arithmetic on shapes."""
        t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
        r = len(t.shape)
        same = [u for u in self.pool if u is not t and len(u.shape) >= 1 and np.prod(u.shape) == np.prod(t.shape)]
        src = self.r.choice(same) if same and self.r.random() < 0.7 else t
        attrs = {}
        sr = len(src.shape)
        start, end = 0, sr
        if self.opset >= 15 and self.r.random() < 0.5:
            start = self.r.randint(-sr, sr - 1)
            end = self.r.choice([None, self.r.randint(start % sr + 1, sr)])
            attrs["start"] = start
            if end is not None:
                attrs["end"] = end
            start = start % sr
            end = sr if end is None else end
        dims = src.shape[start:end]
        sh = self.node("Shape", [src], [((len(dims),), _I64, max(dims + (1,)), True, False)], **attrs)
        rest = int(np.prod(t.shape)) // int(np.prod(dims))
        if int(np.prod(dims)) * rest != int(np.prod(t.shape)):
            return None
        if rest == 1 and self.r.random() < 0.5:
            new = sh
            target = tuple(dims)
        else:
            new = self.node("Concat", [sh, self.const_i64([-1])], [((len(dims) + 1,), _I64, 1, True, False)], axis=0)
            target = tuple(dims) + (rest,)
        if self.r.random() < 0.3:                     # arithmetic on the shape: Mul by ones
            ones = self.const_i64([1] * len(target))
            new = self.node("Mul", [new, ones], [((len(target),), _I64, 1, True, False)])
        return self.node("Reshape", [t, new], [(target, t.dtype, t.bound, t.exact, t.pos)])

    def op_misc(self):
        """CumSum, Trilu, DepthToSpace / SpaceToDepth, GatherElements, ConstantOfShape + Add, Hardmax."""
        kind = self.r.choice(["CumSum", "Trilu", "DepthToSpace", "SpaceToDepth", "GatherElements",
                              "ConstantOfShape", "Hardmax"])
        if kind == "CumSum":
            t = self.pick(lambda u: u.dtype in (_F32, _I32, _I64) and len(u.shape) >= 1, self.fresh_float)
            if t.dtype == _F16:
                return None
            r = len(t.shape)
            axis = self.scalar(self.r.randint(-r, r - 1), np.int64)
            attrs = {k: 1 for k in ("exclusive", "reverse") if self.r.random() < 0.4}
            return self.node("CumSum", [t, axis], [(t.shape, t.dtype, t.bound * max(t.shape), t.dtype in _INTS,
                                                    False)], **attrs)
        if kind == "Trilu":
            if self.opset < 14:
                return None
            t = self.pick(lambda u: len(u.shape) >= 2, lambda: self.fresh_float(self.r.randint(2, 3)))
            ins = [t] + ([self.scalar(self.r.randint(-2, 2), np.int64)] if self.r.random() < 0.6 else [])
            return self.node("Trilu", ins, [(t.shape, t.dtype, t.bound, t.exact, False)], upper=self.r.randint(0, 1))
        if kind in ("DepthToSpace", "SpaceToDepth"):
            b = 2
            if kind == "DepthToSpace":
                def make():
                    return self.leaf((1, 4 * self.r.choice([1, 2]), self.r.randint(1, 3), self.r.randint(1, 3)), _F32)
                t = self.pick(lambda u: len(u.shape) == 4 and u.shape[1] % 4 == 0, make)
                n, c, h, w = t.shape
                attrs = {"blocksize": b}
                if self.opset >= 11 and self.r.random() < 0.5:
                    attrs["mode"] = self.r.choice(["DCR", "CRD"])
                return self.node(kind, [t], [((n, c // 4, h * 2, w * 2), t.dtype, t.bound, t.exact, t.pos)], **attrs)

            def make():
                return self.leaf((1, self.r.randint(1, 3), 2 * self.r.randint(1, 2), 2 * self.r.randint(1, 2)), _F32)
            t = self.pick(lambda u: len(u.shape) == 4 and u.shape[2] % 2 == 0 and u.shape[3] % 2 == 0, make)
            n, c, h, w = t.shape
            return self.node(kind, [t], [((n, c * 4, h // 2, w // 2), t.dtype, t.bound, t.exact, t.pos)], blocksize=b)
        if kind == "GatherElements":
            t = self.pick(lambda u: len(u.shape) >= 1, self.fresh_float)
            r = len(t.shape)
            axis = self.r.randint(-r, r - 1)
            ishape = tuple(self.r.randint(1, d) for d in t.shape)
            d = t.shape[axis]
            idx = self.const_i64(self.np.integers(-d, d, size=ishape))
            return self.node("GatherElements", [t, idx], [(ishape, t.dtype, t.bound, t.exact, t.pos)], axis=axis)
        if kind == "ConstantOfShape":
            t = self.pick(lambda u: u.dtype in (_F32, _I64) and len(u.shape) >= 1, self.fresh_float)
            if t.dtype == _F16:
                return None
            sh = self.node("Shape", [t], [((len(t.shape),), _I64, 8, True, False)])
            val = numpy_helper.from_array(np.array([self.r.choice([0, 1, 3])], dtype=t.dtype), "value")
            c = self.node("ConstantOfShape", [sh], [(t.shape, t.dtype, 3, True, False)], value=val)
            return self.node("Add", [t, c], [(t.shape, t.dtype, t.bound + 3, t.exact, False)])
        t = self.pick(lambda u: u.dtype == _F32 and u.exact and len(u.shape) >= 1,
                      lambda: self.leaf(self.shape(), _F32))
        r = len(t.shape)
        attrs = {"axis": self.r.randint(-r, r - 1)} if self.opset >= 13 or r >= 2 else {"axis": 0}
        return self.node("Hardmax", [t], [(t.shape, _F32, 1, True, False)], **attrs)

    OPS = [("op_unary", 6), ("op_binary", 8), ("op_compare", 2), ("op_logic", 1), ("op_where", 2), ("op_cast", 2),
           ("op_clip", 1), ("op_reduce", 3), ("op_argmax", 1), ("op_matmul", 2), ("op_gemm", 1), ("op_conv", 1),
           ("op_pool", 1), ("op_softmax", 1), ("op_transpose", 2), ("op_reshape", 2), ("op_flatten", 1),
           ("op_concat", 2), ("op_split", 1), ("op_slice", 2), ("op_gather", 1), ("op_squeeze", 2),
           ("op_expand", 1), ("op_pad", 1), ("op_channel_affine", 2), ("op_norm", 1), ("op_tile", 1),
           ("op_shape_of", 1), ("op_misc", 2)]

    def build(self):
        names, weights = zip(*self.OPS)
        self.fresh_float()
        steps = 0
        while len([n for n in self.nodes if n.op_type != "Constant"]) < self.max_nodes and steps < 40:
            steps += 1
            getattr(self, self.r.choices(names, weights=weights)[0])()
        outs = self.pick_outputs()
        # some models (15%) declare some input dims symbolic (one symbol per extent, so that
        # equal dims stay equal), as exported models with dynamic axes do; fed with the same values
        sym = random.Random(self.seed * 7919 + 1)
        symbolic = sym.random() < 0.15
        if symbolic:
            for vi in self.inputs:
                for d in vi.type.tensor_type.shape.dim:
                    if d.dim_value > 1 and sym.random() < 0.5:
                        d.dim_param = f"d{d.dim_value}"
        g = helper.make_graph(self.nodes, f"fuzz_{self.seed}", self.inputs,
                              [helper.make_tensor_value_info(o.name, _ELEM[o.dtype], [None] * len(o.shape) if symbolic
                                                             else list(o.shape))
                               for o in outs],
                              initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="onnx_fuzz")
        m.ir_version = 8
        return m, dict(self.feeds), outs

    def pick_outputs(self):
        cands = list(self.node_outs)
        last = cands[-1]
        extra = [t for t in cands[:-1] if self.r.random() < 0.25][:2]
        return extra + [last] if self.r.random() < 0.5 else [last] + extra


def random_model(seed: int, max_nodes: int | None = None):
    """(onnx.ModelProto, feeds {input name: array}) of a random valid graph, reproducible from seed."""
    m, feeds, _ = _Gen(seed, max_nodes).build()
    return m, feeds


# ---------------------------------------------------------------------------------------------
# running and comparing
# ---------------------------------------------------------------------------------------------
class ReferenceError_(Exception):
    """onnxruntime (or the ONNX checker) rejected the model: a generator bug, not a tessera one."""


def run_ort(model, feeds, check=True):
    import onnxruntime as ort

    try:
        if check:
            onnx.checker.check_model(model, full_check=True)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return [np.asarray(o) for o in sess.run(None, feeds)]
    except Exception as e:  # noqa: BLE001 - any rejection by the reference is the generator's fault
        raise ReferenceError_(f"{type(e).__name__}: {e}") from e


TARGET = os.environ.get("TESSERA_FUZZ_TARGET", "c")     # e.g. "c -mcpu=haswell" for the AVX2 code paths


def run_tessera(model, feeds, opt_level):
    import tessera

    graph, params = tessera.frontend.from_onnx(model, target=TARGET)
    exe = tessera.compile(graph, params, target=TARGET, opt_level=opt_level)
    return [np.asarray(o) for o in exe.run(dict(feeds))]


def tolerance(dtype) -> float:
    return {np.dtype("float16"): 2e-2, np.dtype("float32"): 2e-4}.get(np.dtype(dtype), 1e-9)


def compare(got, want, label):
    """None when tessera's outputs match onnxruntime's; else a description of the first difference."""
    if len(got) != len(want):
        return f"{label}: {len(got)} outputs, onnxruntime gave {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{label}: output {i} is {g.dtype}{list(g.shape)}, onnxruntime gave {w.dtype}{list(w.shape)}"
        if w.dtype.kind == "f":
            tol = tolerance(w.dtype)
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            finite = np.isfinite(w64)
            scale = max(1.0, float(np.max(np.abs(w64[finite]))) if finite.any() else 1.0)
            bad = ~np.isclose(g64, w64, rtol=tol, atol=tol * scale, equal_nan=True)
            if bad.any():
                j = np.unravel_index(int(np.argmax(bad)), bad.shape)
                return (f"{label}: output {i} differs at {int(bad.sum())} of {bad.size} elements; first at "
                        f"{tuple(int(x) for x in j)}: tessera {g[j]!r}, onnxruntime {w[j]!r} (tol {tol:g}, "
                        f"scale {scale:g})")
        elif not np.array_equal(g, w):
            j = np.unravel_index(int(np.argmax(g != w)), g.shape) if g.ndim else ()
            return (f"{label}: output {i} differs at {int(np.sum(g != w))} of {g.size} elements; first at "
                    f"{tuple(int(x) for x in j)}: tessera {g[j]!r}, onnxruntime {w[j]!r}")
    return None


@dataclass
class FuzzResult:
    seed: object
    status: str                 # "ok" | "refused" | "failed"
    detail: str = ""
    kind: tuple = ()            # what failed, for the minimizer: ("mismatch", level) | ("crash", level, type)
    model: object = None
    feeds: dict = field(default_factory=dict)

    def report(self, minimize_it=True) -> str:
        text = f"onnx fuzz seed {self.seed}: {self.status}: {self.detail}"
        if self.model is not None and self.status == "failed":
            m = self.model
            if minimize_it:
                try:
                    m, feeds = minimize(self.model, self.feeds, self.kind)
                except Exception as e:  # noqa: BLE001 - the report must still come out
                    text += f"\n(minimizing failed: {type(e).__name__}: {e})"
            text += f"\nopset {m.opset_import[0].version}, the model:\n" + onnx.printer.to_text(m)
        return text


def is_symbolic(model) -> bool:
    """Whether some input of the model has a symbolic dimension (dim_param)."""
    return any(d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim)


def check_model(model, feeds, seed=None, levels=(0, 3)) -> FuzzResult:
    """Run model through onnxruntime and tessera at each opt level; the first failure, a refusal, or ok."""
    from tessera.errors import TesseraError

    want = run_ort(model, feeds)
    for level in levels:
        try:
            got = run_tessera(model, feeds, level)
        except TesseraError as e:
            return FuzzResult(seed, "refused", f"opt_level {level}: {type(e).__name__}: {e}", ("refused", level),
                              model, feeds)
        except Exception as e:  # noqa: BLE001 - exactly what the fuzzer looks for
            import traceback

            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
            return FuzzResult(seed, "failed", f"opt_level {level}: {type(e).__name__} (not a TesseraError): "
                                              f"{e}\n{tb}", ("crash", type(e).__name__), model, feeds)
        diff = compare(got, want, f"opt_level {level}")
        if diff:
            return FuzzResult(seed, "failed", diff, ("mismatch",), model, feeds)
    return FuzzResult(seed, "ok", "", (), model, feeds)


def check(seed: int, max_nodes: int | None = None) -> FuzzResult:
    model, feeds = random_model(seed, max_nodes)
    return check_model(model, feeds, seed)


# ---------------------------------------------------------------------------------------------
# minimizing
# ---------------------------------------------------------------------------------------------
def _all_values(model, feeds):
    """Every tensor of the model computed by onnxruntime: {name: array}."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(helper.make_empty_tensor_value_info(o))
    outs = run_ort(m, feeds, check=False)
    vals = dict(feeds)
    vals.update({o.name: v for o, v in zip(m.graph.output, outs)})
    for init in m.graph.initializer:
        vals[init.name] = numpy_helper.to_array(init)
    return vals


def _rebuild(model, nodes, outputs, vals, as_input=(), as_const=()):
    """The model with `nodes` and `outputs` (names), tensors in as_input fed as graph inputs, those in
    as_const as initializers (values from vals), and unused inputs and initializers dropped."""
    g = model.graph
    used = {i for n in nodes for i in n.input} | set(outputs)
    produced = {o for n in nodes for o in n.output}
    inputs = [i for i in g.input if i.name in used and i.name not in produced]
    inputs += [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(vals[n].dtype), list(vals[n].shape))
               for n in as_input if n in used]
    inits = [i for i in g.initializer if i.name in used]
    inits += [numpy_helper.from_array(vals[n], n) for n in as_const if n in used]
    outs = []
    for o in outputs:
        old = [v for v in g.output if v.name == o]
        outs.append(old[0] if old else helper.make_tensor_value_info(
            o, helper.np_dtype_to_tensor_dtype(vals[o].dtype), list(vals[o].shape)))
    ng = helper.make_graph(nodes, g.name, inputs, outs, initializer=inits)
    m = helper.make_model(ng, opset_imports=list(model.opset_import), producer_name="onnx_fuzz")
    m.ir_version = model.ir_version
    feeds = {i.name: vals[i.name] for i in inputs}
    return m, feeds


def _live(nodes, outputs):
    need, keep = set(outputs), []
    for n in reversed(nodes):
        if any(o in need for o in n.output):
            keep.append(n)
            need.update(i for i in n.input if i)
    return keep[::-1]


def minimize(model, feeds, kind, max_tries=200):
    """Cut the failing model down while it fails the same way (same kind): drop outputs, then replace
    nodes by their values (fed as inputs, or as initializers). Returns (model, feeds)."""
    vals = _all_values(model, feeds)
    nodes = list(model.graph.node)
    outputs = [o.name for o in model.graph.output]
    cut_in, cut_const = set(), set()
    tries = 0

    def fails(nodes_, outputs_, cin, cconst):
        nonlocal tries
        tries += 1
        m, f = _rebuild(model, _live(nodes_, outputs_), outputs_, vals, cin, cconst)
        try:
            r = check_model(m, f)
        except ReferenceError_:
            return False
        return r.status == "failed" and r.kind == kind

    changed = True
    while changed and tries < max_tries:
        changed = False
        for o in list(outputs):
            if len(outputs) > 1 and tries < max_tries and fails(nodes, [x for x in outputs if x != o], cut_in,
                                                                 cut_const):
                outputs.remove(o)
                changed = True
        nodes = _live(nodes, outputs)
        for n in list(nodes):
            if tries >= max_tries:
                break
            rest = [x for x in nodes if x is not n]
            new = {o for o in n.output if o}
            for cin, cconst in ((cut_in | new, cut_const), (cut_in, cut_const | new)):
                if fails(rest, outputs, cin, cconst):
                    nodes, cut_in, cut_const = _live(rest, outputs), cin, cconst
                    changed = True
                    break
    return _rebuild(model, _live(nodes, outputs), outputs, vals, cut_in, cut_const)
