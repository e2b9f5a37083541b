"""A kernel's Python source, made traceable: its runtime `for` loops become calls.

`for i in range(lb, ub, step): body` (or `tl.range`) in a @jit kernel is a loop of the compiled
kernel, not of the trace, so the source is rewritten (Python's ast) into

    def __tl_body_<line>(i, acc, ptrs):      # the loop-carried values: names the body assigns
        body                                 # that are bound before the loop
        return (acc, ptrs)
    (acc, ptrs) = __tl_for__((lb, ub, step), __tl_body_<line>, (acc, ptrs), ('acc', 'ptrs'))

and __tl_for__ is the builder's loop: the tracer records a `for` op with a region, the interpreter
runs the Python loop. `tl.static_range` and loops over other iterables stay Python loops (unrolled
when traced). Line numbers are the file's own, so an op knows the kernel line that made it.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import sys
import textwrap

from ..errors import TesseraError
from .core import KernelError
from .ir import Loc

# every code object of a rewritten kernel (its body functions too) -> the kernel's name
_KERNEL_CODES: dict = {}


def location() -> Loc | None:
    """The innermost kernel line running now (the frame of a rewritten kernel's code)."""
    f = sys._getframe(1)
    while f is not None:
        name = _KERNEL_CODES.get(f.f_code)
        if name is not None:
            file = f.f_code.co_filename
            return Loc(file, f.f_lineno, name, linecache.getline(file, f.f_lineno).rstrip())
        f = f.f_back
    return None


def _loc_of(node, file, name) -> Loc:
    return Loc(file, node.lineno, name, linecache.getline(file, node.lineno).rstrip())


def _is_runtime_range(it) -> bool:
    if not isinstance(it, ast.Call):
        return False
    f = it.func
    return (isinstance(f, ast.Name) and f.id == "range") or (isinstance(f, ast.Attribute) and f.attr == "range")


def _stored_names(stmts) -> set:
    """Names a list of statements binds in its scope (not inside nested functions or comprehensions)."""
    out = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
                             ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for s in stmts:
        visit(s)
    return out


class _Rewriter:
    def __init__(self, file: str, name: str):
        self.file, self.name = file, name

    def error(self, node, message):
        return KernelError(message, _loc_of(node, self.file, self.name))

    def block(self, stmts, defined: set) -> list:
        out = []
        for s in stmts:
            if isinstance(s, ast.For) and _is_runtime_range(s.iter):
                out.extend(self.loop(s, set(defined)))   # its carried names were bound before it
            else:
                self.nested(s, defined)
                out.append(s)
                defined |= _stored_names([s])
        return out

    def nested(self, s, defined):
        """Rewrite the statement lists inside a Python-level compound statement."""
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(s, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                inner = set(defined)
                if isinstance(s, ast.For):
                    inner |= _stored_names([ast.Assign(targets=[s.target], value=ast.Constant(0))])
                setattr(s, field, self.block(stmts, inner))
        for h in getattr(s, "handlers", []) or []:
            h.body = self.block(h.body, set(defined))

    def loop(self, s: ast.For, defined: set) -> list:
        if s.orelse:
            raise self.error(s, "a runtime for loop cannot have an else clause")
        if not isinstance(s.target, ast.Name):
            raise self.error(s, "a runtime for loop's variable must be a single name")
        if s.iter.keywords and not all(k.arg in ("num_stages", "loop_unroll_factor", "warp_specialize",
                                                 "flatten") for k in s.iter.keywords):
            raise self.error(s, f"range() in a kernel takes (start, stop, step), got keywords "
                                f"{[k.arg for k in s.iter.keywords]}")
        if not 1 <= len(s.iter.args) <= 3:
            raise self.error(s, "range() in a kernel takes 1 to 3 arguments")
        for node in ast.walk(ast.Module(body=s.body, type_ignores=[])):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, (ast.Break, ast.Continue, ast.Return)):
                kind = type(node).__name__.lower()
                raise self.error(node, f"'{kind}' inside a runtime for loop is not supported (the loop runs for "
                                       f"its whole range; use masks, or tl.static_range for a loop unrolled "
                                       f"at compile time)")
        target = s.target.id
        carried = sorted((_stored_names(s.body) & defined) - {target})
        inner = set(defined) | {target}
        body = self.block(s.body, inner)
        fname = f"__tl_body_{s.lineno}_{s.col_offset}"
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in [target] + carried], vararg=None,
                             kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
        ret = ast.Return(value=ast.Tuple(elts=[ast.Name(id=c, ctx=ast.Load()) for c in carried], ctx=ast.Load()))
        fdef = ast.FunctionDef(name=fname, args=args, body=body + [ret], decorator_list=[], returns=None,
                               type_comment=None)
        rng = ast.Tuple(elts=list(s.iter.args), ctx=ast.Load())
        inits = ast.Tuple(elts=[ast.Name(id=c, ctx=ast.Load()) for c in carried], ctx=ast.Load())
        names = ast.Tuple(elts=[ast.Constant(c) for c in carried], ctx=ast.Load())
        call = ast.Call(func=ast.Name(id="__tl_for__", ctx=ast.Load()),
                        args=[rng, ast.Name(id=fname, ctx=ast.Load()), inits, names], keywords=[])
        if carried:
            assign = ast.Assign(targets=[ast.Tuple(elts=[ast.Name(id=c, ctx=ast.Store()) for c in carried],
                                                   ctx=ast.Store())], value=call)
        else:
            assign = ast.Expr(value=call)
        for node in (fdef, assign):
            ast.copy_location(node, s)
        return [fdef, assign]


def rewrite(fn, loop_fn_name="__tl_for__"):
    """fn with its runtime loops rewritten: a new function (same globals, closure values bound) whose
    code objects are registered for `location()`. Raises KernelError for loops it cannot take."""
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError) as e:
        raise TesseraError(f"@jit needs the source of {fn.__qualname__} (a function defined in a file): {e}") from None
    src = textwrap.dedent("".join(lines))
    tree = ast.parse(src)
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise TesseraError(f"@jit applies to a function defined with def, got {type(fdef).__name__}")
    fdef.decorator_list = []
    params = {a.arg for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs}
    fdef.body = _Rewriter(file, fn.__name__).block(fdef.body, set(params))
    freevars = list(fn.__code__.co_freevars)
    maker = ast.FunctionDef(
        name="__tl_make", args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in [loop_fn_name] + freevars],
                                             vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))], decorator_list=[], returns=None,
        type_comment=None)
    ast.copy_location(maker, fdef)
    module = ast.fix_missing_locations(ast.Module(body=[maker], type_ignores=[]))
    code = compile(module, file, "exec")
    for c in _code_objects(code):
        if c.co_name != "__tl_make" and c.co_name != "<module>":
            _KERNEL_CODES[c] = fn.__name__
    namespace: dict = {}
    exec(code, fn.__globals__, namespace)   # noqa: S102 - the kernel's own source, as Python would run it
    cells = [c.cell_contents for c in (fn.__closure__ or ())]

    def make(loop_fn):
        out = namespace["__tl_make"](loop_fn, *cells)
        out.__defaults__ = fn.__defaults__
        out.__kwdefaults__ = fn.__kwdefaults__
        return out

    return make


def _code_objects(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            yield from _code_objects(c)
