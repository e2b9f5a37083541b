"""Random integer expressions: the simplified form must evaluate like the original everywhere.

A seeded generator builds expressions over a few variables with small ranges (negative ones
included); a tiny evaluator checks every assignment of the variables in their ranges.
"""
import itertools
import random

import pytest

from tessera import ir
from tessera.arith import Analyzer, const_int_bound
from tessera.ir import (EQ, GE, GT, LE, LT, NE, Add, And, Cast, Div, FloorDiv, FloorMod, IntImm, Max,
                        Min, Mod, Mul, Not, Or, Select, Sub, Var)


def _trunc_div(x, y):
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def ev(e, env):
    """Evaluate an integer/bool expression with Python ints (floor semantics for // and %)."""
    t = type(e)
    if t is IntImm:
        return e.value
    if isinstance(e, Var):
        return env[e]
    if t is Add:
        return ev(e.a, env) + ev(e.b, env)
    if t is Sub:
        return ev(e.a, env) - ev(e.b, env)
    if t is Mul:
        return ev(e.a, env) * ev(e.b, env)
    if t is FloorDiv:
        return ev(e.a, env) // ev(e.b, env)
    if t is FloorMod:
        return ev(e.a, env) % ev(e.b, env)
    if t is Div:
        return _trunc_div(ev(e.a, env), ev(e.b, env))
    if t is Mod:
        x, y = ev(e.a, env), ev(e.b, env)
        return x - _trunc_div(x, y) * y
    if t is Min:
        return min(ev(e.a, env), ev(e.b, env))
    if t is Max:
        return max(ev(e.a, env), ev(e.b, env))
    if t is Select:
        return ev(e.true_value, env) if ev(e.condition, env) else ev(e.false_value, env)
    if t is Cast:
        return ev(e.value, env)
    if t is LT:
        return int(ev(e.a, env) < ev(e.b, env))
    if t is LE:
        return int(ev(e.a, env) <= ev(e.b, env))
    if t is GT:
        return int(ev(e.a, env) > ev(e.b, env))
    if t is GE:
        return int(ev(e.a, env) >= ev(e.b, env))
    if t is EQ:
        return int(ev(e.a, env) == ev(e.b, env))
    if t is NE:
        return int(ev(e.a, env) != ev(e.b, env))
    if t is And:
        return int(bool(ev(e.a, env)) and bool(ev(e.b, env)))
    if t is Or:
        return int(bool(ev(e.a, env)) or bool(ev(e.b, env)))
    if t is Not:
        return int(not ev(e.a, env))
    if t is ir.Call and e.op == "abs":
        return abs(ev(e.args[0], env))
    raise TypeError(f"evaluator has no rule for {t.__name__}")


RANGES = [(0, 7), (0, 3), (-3, 4), (1, 6), (0, 11)]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.vars = [Var(n) for n in "ijkmn"]
        # n is always >= 1 so it can be a divisor
        self.ranges = dict(zip(self.vars, RANGES))

    def leaf(self):
        r = self.r
        if r.random() < 0.3:
            return ir.const(r.randint(-9, 9))
        return r.choice(self.vars)

    def expr(self, depth):
        r = self.r
        if depth == 0 or r.random() < 0.2:
            return self.leaf()
        a = self.expr(depth - 1)
        op = r.choice(["add", "add", "sub", "mulc", "mulc", "mulv", "fdiv", "fmod", "fdiv", "fmod",
                       "tdiv", "tmod", "min", "max", "select", "fdivv", "fuse", "neg"])
        if op == "add":
            return a + self.expr(depth - 1)
        if op == "sub":
            return a - self.expr(depth - 1)
        if op == "mulc":
            return a * r.choice([-3, -1, 0, 1, 2, 4, 8])
        if op == "mulv":
            return a * self.expr(depth - 1)
        if op in ("fdiv", "fmod", "tdiv", "tmod"):
            c = r.choice([1, 2, 3, 4, 8, 16, -2, -4])
            return {"fdiv": ir.floordiv, "fmod": ir.floormod, "tdiv": ir.truncdiv,
                    "tmod": ir.truncmod}[op](a, c)
        if op == "fdivv":
            n = self.vars[3]  # in [1, 6]
            return ir.floordiv(a, n) if r.random() < 0.5 else ir.floormod(a, n)
        if op == "fuse":  # (x // c) * c + x % c, possibly scaled, the fuse-then-split shape
            c, s = r.choice([2, 4, 8]), r.choice([1, 2, 3])
            return ir.floordiv(a, c) * (c * s) + ir.floormod(a, c) * s
        if op == "neg":
            return 0 - a
        if op == "min":
            return ir.min_expr(a, self.expr(depth - 1))
        if op == "max":
            return ir.max_expr(a, self.expr(depth - 1))
        cond = self.cond(depth - 1)
        return Select(cond, a, self.expr(depth - 1))

    def cond(self, depth):
        r = self.r
        cls = r.choice([LT, LE, GT, GE, EQ, NE])
        c = cls(self.expr(depth), self.expr(depth))
        k = r.random()
        if k < 0.15:
            return And(c, cls(self.expr(depth), self.expr(depth)))
        if k < 0.3:
            return Or(c, Not(cls(self.expr(depth), self.expr(depth))))
        return c


_PY = {Add: "+", Sub: "-", Mul: "*", FloorDiv: "//", FloorMod: "%", LT: "<", LE: "<=", GT: ">",
       GE: ">=", EQ: "==", NE: "!="}


def to_python(e, names):
    """Python source computing e (same semantics as ev), to check many assignments quickly."""
    t = type(e)
    if t is IntImm:
        return f"({e.value})"
    if isinstance(e, Var):
        return names[e]
    if t in _PY:
        return f"({to_python(e.a, names)} {_PY[t]} {to_python(e.b, names)})"
    if t is Div or t is Mod:
        return f"_t{'div' if t is Div else 'mod'}({to_python(e.a, names)}, {to_python(e.b, names)})"
    if t is Min or t is Max:
        return f"{t.__name__.lower()}({to_python(e.a, names)}, {to_python(e.b, names)})"
    if t is Select:
        return (f"({to_python(e.true_value, names)} if {to_python(e.condition, names)} "
                f"else {to_python(e.false_value, names)})")
    if t is Cast:
        return to_python(e.value, names)
    if t is And or t is Or:
        return f"({to_python(e.a, names)} {t.__name__.lower()} {to_python(e.b, names)})"
    if t is Not:
        return f"(not {to_python(e.a, names)})"
    if t is ir.Call and e.op == "abs":
        return f"abs({to_python(e.args[0], names)})"
    raise TypeError(f"no Python form for {t.__name__}")


def compile_expr(e, used):
    names = {v: f"v{n}" for n, v in enumerate(used)}
    src = f"lambda {', '.join(names.values()) or '_=None'}: int({to_python(e, names)})"
    return eval(src, {"_tdiv": _trunc_div, "_tmod": lambda x, y: x - _trunc_div(x, y) * y})


def _envs(gen, used):
    used = [v for v in gen.vars if v in used]
    for values in itertools.product(*[range(gen.ranges[v][0], gen.ranges[v][1] + 1) for v in used]):
        yield dict(zip(used, values))


def _check(gen, e, simplified):
    used = [v for v in gen.vars if v in ir.collect_vars(e)]
    fe, fs = compile_expr(e, used), compile_expr(simplified, used)
    for env in _envs(gen, used):
        args = [env[v] for v in used]
        try:
            want = fe(*args)
        except ZeroDivisionError:
            continue
        got = fs(*args)
        if got != want:  # the tree evaluator says the same, and gives a readable failure
            assert ev(simplified, env) == ev(e, env), (
                f"{e.script()}  ->  {simplified.script()}: at "
                f"{ {v.name: x for v, x in env.items()} } got {got}, want {want}")
            raise AssertionError("compiled and tree evaluators disagree")


def _values(gen, e):
    used = [v for v in gen.vars if v in ir.collect_vars(e)]
    fe = compile_expr(e, used)
    out = []
    for env in _envs(gen, used):
        try:
            out.append(fe(*[env[v] for v in used]))
        except ZeroDivisionError:
            pass
    return out


def test_the_two_evaluators_agree():
    gen = Gen(999)
    rng = random.Random(5)
    for _ in range(100):
        e = gen.expr(4) if rng.random() < 0.7 else gen.cond(3)
        used = [v for v in gen.vars if v in ir.collect_vars(e)]
        fe = compile_expr(e, used)
        for _ in range(20):
            env = {v: rng.randint(*gen.ranges[v]) for v in used}
            try:
                want = ev(e, env)
            except ZeroDivisionError:
                continue
            assert fe(*[env[v] for v in used]) == want, e.script()


@pytest.mark.parametrize("seed", range(8))
def test_random_integer_expressions_keep_their_value(seed):
    gen = Gen(seed)
    ana = Analyzer()
    for v, (lo, hi) in gen.ranges.items():
        ana.bind(v, ir.Range(lo, hi + 1))
    for _ in range(60):
        e = gen.expr(4)
        s = ana.simplify(e)
        assert s.dtype == e.dtype
        _check(gen, e, s)
        # simplifying twice changes nothing more in value
        _check(gen, e, ana.simplify(s))


@pytest.mark.parametrize("seed", range(4))
def test_random_conditions_keep_their_value(seed):
    gen = Gen(100 + seed)
    ana = Analyzer()
    for v, (lo, hi) in gen.ranges.items():
        ana.bind(v, ir.Range(lo, hi + 1))
    for _ in range(60):
        c = gen.cond(3)
        s = ana.simplify(c)
        assert s.dtype == c.dtype
        _check(gen, c, s)


@pytest.mark.parametrize("seed", range(4))
def test_random_bounds_contain_every_value(seed):
    gen = Gen(200 + seed)
    ana = Analyzer()
    for v, (lo, hi) in gen.ranges.items():
        ana.bind(v, ir.Range(lo, hi + 1))
    for _ in range(60):
        e = gen.expr(4)
        lo, hi = ana.const_int_bound(e)
        lo2, hi2 = const_int_bound(e, gen.ranges)
        values = _values(gen, e)
        if values:
            assert lo <= min(values) and max(values) <= hi, (e.script(), (lo, hi), min(values), max(values))
            assert lo2 <= min(values) and max(values) <= hi2, (e.script(), (lo2, hi2))


@pytest.mark.parametrize("seed", range(4))
def test_random_provable_conditions_are_true(seed):
    gen = Gen(300 + seed)
    ana = Analyzer()
    for v, (lo, hi) in gen.ranges.items():
        ana.bind(v, ir.Range(lo, hi + 1))
    proved = 0
    for _ in range(80):
        c = gen.cond(2)
        if ana.can_prove(c):
            proved += 1
            assert set(_values(gen, c)) <= {1}, c.script()
    assert proved > 0  # the generator does produce provable conditions


@pytest.mark.parametrize("seed", range(4))
def test_random_expressions_under_constraints(seed):
    """Simplified under a constraint, the value must be kept wherever the constraint holds."""
    gen = Gen(400 + seed)
    ana = Analyzer()
    for v, (lo, hi) in gen.ranges.items():
        ana.bind(v, ir.Range(lo, hi + 1))
    r = random.Random(seed)
    changed = 0
    for _ in range(25):
        a, b = r.sample(gen.vars, 2)
        lhs = r.choice([a, a * r.choice([2, 3]) + b, a - b, a + 1])
        cond = r.choice([LT, LE, GT, GE, EQ])(lhs, r.choice([ir.const(r.randint(-2, 8)), b]))
        if r.random() < 0.3:
            cond = And(cond, GE(b, r.randint(0, 3)))
        exprs = [gen.expr(3), ir.min_expr(lhs, r.randint(0, 9)), ir.max_expr(a, r.randint(-2, 6)) // 4,
                 Select(LT(lhs, r.randint(0, 9)), a, b), LT(lhs, r.randint(-2, 9)), GE(b, r.randint(0, 4)),
                 cond, gen.cond(2)]
        with ana.constraint_scope(cond):
            outs = [ana.simplify(e) for e in exprs]
        changed += sum(not ir.structural_equal(o, ana.simplify(e)) for e, o in zip(exprs, outs))
        used = [v for v in gen.vars if v in ir.collect_vars(ir.all_of(cond, *[x >= 0 if x.dtype == "int32" else x for x in exprs]))]
        fc = compile_expr(cond, used)
        pairs = [(compile_expr(e, used), compile_expr(o, used), e, o) for e, o in zip(exprs, outs)]
        for env in _envs(gen, used):
            args = [env[v] for v in used]
            try:
                if not fc(*args):
                    continue
            except ZeroDivisionError:
                continue
            for fe, fo, e, o in pairs:
                try:
                    want = fe(*args)
                except ZeroDivisionError:
                    continue
                assert fo(*args) == want, (f"under {cond.script()}: {e.script()} -> {o.script()} at "
                                           f"{ {v.name: x for v, x in env.items()} }")
    assert changed > 5  # the constraints do teach the simplifier something


def _lane(e, lane):
    """The scalar expression of one lane of a vector expression."""
    t = type(e)
    if t is ir.Ramp:
        return e.base + e.stride * lane
    if t is ir.Broadcast:
        return e.value
    if e.dtype.lanes == 1:
        return e
    if t is Select:
        return Select(_lane(e.condition, lane), _lane(e.true_value, lane), _lane(e.false_value, lane))
    if t is Not:
        return Not(_lane(e.a, lane))
    return t(_lane(e.a, lane), _lane(e.b, lane))


@pytest.mark.parametrize("seed", range(4))
def test_random_vector_expressions_keep_their_value(seed):
    gen = Gen(500 + seed)
    r = random.Random(seed)
    ana = Analyzer()
    for v, (lo, hi) in gen.ranges.items():
        ana.bind(v, ir.Range(lo, hi + 1))

    def vec(depth, lanes):
        if depth == 0 or r.random() < 0.3:
            if r.random() < 0.5:
                return ir.Ramp(gen.expr(1), r.choice([0, 1, 2, -1, 4, 8]), lanes)
            return ir.Broadcast(gen.expr(1), lanes)
        op = r.choice(["+", "-", "*", "//", "%", "min", "max", "sel"])
        a = vec(depth - 1, lanes)
        if op in ("//", "%"):
            b = ir.Broadcast(ir.const(r.choice([2, 4, 8, 16])), lanes)
            return FloorDiv(a, b) if op == "//" else FloorMod(a, b)
        b = vec(depth - 1, lanes)
        if op == "sel":
            return Select(LT(a, b), a, b)
        return {"+": Add, "-": Sub, "*": Mul, "min": Min, "max": Max}[op](a, b)

    for _ in range(30):
        lanes = r.choice([2, 4, 8])
        e = vec(3, lanes)
        if r.random() < 0.3:
            e = r.choice([LT, LE, EQ, NE])(e, vec(2, lanes))
        s = ana.simplify(e)
        assert s.dtype == e.dtype
        for lane in range(lanes):
            _check(gen, _lane(e, lane), _lane(s, lane))


@pytest.mark.parametrize("seed", range(3))
def test_random_expressions_without_ranges_hold_for_all_integers(seed):
    """With nothing known, only identities valid for every integer may fire."""
    gen = Gen(600 + seed)
    ana = Analyzer()
    ana.bind(gen.vars[3], (1, None))  # the variable used as a divisor is nonzero
    gen.ranges = dict(zip(gen.vars, [(-5, 5), (-3, 2), (-2, 3), (1, 4), (-8, 2)]))
    for _ in range(40):
        e = gen.expr(4) if seed % 2 else gen.cond(3)
        _check(gen, e, ana.simplify(e))
