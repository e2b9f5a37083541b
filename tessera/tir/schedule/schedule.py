"""tir.Schedule: the state being scheduled, the handles it hands out, its trace and random state.

    sch = tir.Schedule(func, seed=42)
    b = sch.get_block("C"); i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, factors=[None, 8]); sch.parallel(io)
    print(sch.mod.script()); print(sch.trace)

Adding a family of primitives (one file per family, e.g. `placement.py`)
-------------------------------------------------------------------------
Write each primitive as a function of (self: Schedule, ...) decorated with `primitive`; import the
file from `tessera/tir/schedule/__init__.py`. The decorator adds the Schedule method, registers the
trace instruction kind and does the bookkeeping every primitive needs: the call is recorded in
`sch.trace` (inputs, attrs, outputs, decision) only when it succeeds, and a primitive that raises
leaves the IR, the handles, the trace and the random state exactly as they were.

    @primitive("ComputeAt", inputs=("block", "loop"), outputs="none")
    def compute_at(self, block, loop, preserve_unit_loops=False, index=-1):
        fname, idx, realize = self._block(block, "compute_at")     # resolve handles
        _, _, loop_node = self._loop(loop, "compute_at", func=fname)
        ...check every precondition; raise ScheduleError(...) naming block/loop and the reason...
        self._replace(fname, {old_stmt: new_stmt, ...})              # commit new IR
        self._retire_loop(fname, var, "was ... by compute_at")       # handles of removed loops
        return None                                                  # or new handles:
        # self._new_loop_rv(fname, var) / self._new_block_rv(fname, name) / self._new_expr_rv(int)

Resolving handles: `self._block(rv, prim)`, `self._loop(rv, prim)`, `self._block_or_loop(rv, prim)`
return (function name, FuncIndex, BlockRealize or For) and raise a ScheduleError naming the
primitive for a wrong, foreign or retired handle; `self._location(rv, prim)` also accepts the
ROOT_MARK / INLINE_MARK that sample_compute_location returns; `self._int(x, prim)` reads an int or
an ExprRV.

Parameters named in `inputs` may hold handles (BlockRV, LoopRV, ExprRV or lists of them); every
other parameter is an attribute (a plain value: int, float, str, bool, None or lists of them);
`*args` makes the inputs variadic (fuse, reorder). `outputs` is "none", "one" or "list" and
`output_type` the handle class returned. A sampling primitive takes `decision=None` and returns
(result, decision actually used); pass `sampling=True, pure=True`.

A primitive keeps the state's invariants: block names unique in a function (new blocks get fresh
names), every For has its own Var, surviving loops keep their Var and blocks their name (that is
what keeps handles valid). Blocks are isolated: a non-opaque block's body refers to loop variables
only through its iteration variables. Reusable helpers: state.py (index navigation, child blocks),
rewrite.py (substituting loop variables with simplified bindings), analysis.py (dependences, iter
types), locations.py (compute-at locations), region.py (block regions), and tir/analysis (index
bounds, affine forms, statement edits, shared with the lowering passes).
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from ...errors import ScheduleError, TesseraError
from ...ir import IRModule, PrimFunc
from .handles import INLINE_MARK, ROOT_MARK, RV, BlockRV, ExprRV, LocationMark, LoopRV
from .instruction import INSTRUCTION_KINDS, Instruction, InstructionKind, normalize_arg
from .state import ScheduleState, verify_func
from .trace import Trace

_DEBUG_MASKS = {"none": 0, "all": -1}


def _parse_mod(mod) -> dict:
    if isinstance(mod, Schedule):
        mod = mod.mod
    if isinstance(mod, PrimFunc):
        return {"main": mod}
    if isinstance(mod, IRModule):
        if not mod.functions:
            raise TesseraError("tir.Schedule: the IRModule has no functions")
        for name, f in mod:
            if not isinstance(f, PrimFunc):
                raise TesseraError(f"tir.Schedule: function {name!r} is a {type(f).__name__}, not a PrimFunc")
        return dict(mod.functions)
    raise TesseraError(f"tir.Schedule takes a PrimFunc or an IRModule, got {type(mod).__name__}; make one "
                       f"with te.create_prim_func([...])")


def _parse_seed(seed):
    if seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed == -1):
        return np.random.default_rng()
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TesseraError(f"a schedule seed is an int >= 0 (or None / -1 for a random one), got {seed!r}")
    return np.random.default_rng(int(seed))


def _parse_debug_mask(mask) -> bool:
    if isinstance(mask, str):
        if mask not in _DEBUG_MASKS:
            raise TesseraError(f"debug_mask must be 'none', 'all' or an int, got {mask!r}")
        return _DEBUG_MASKS[mask] != 0
    if isinstance(mask, bool) or not isinstance(mask, int):
        raise TesseraError(f"debug_mask must be 'none', 'all' or an int, got {mask!r}")
    return mask != 0


class Schedule:
    """A traced schedule of a PrimFunc (or of every PrimFunc of an IRModule).

    seed: the random state of the sampling instructions (None or -1: from the OS).
    debug_mask: "all" (or a nonzero int) checks the IR is well formed after every primitive.
    """

    def __init__(self, mod, *, seed=None, debug_mask="none"):
        debug = _parse_debug_mask(debug_mask)
        self._state = ScheduleState(_parse_mod(mod), debug)
        for name in self._state.funcs:  # unique block names and loop vars, checked up front
            self._state.index(name)
            if debug:
                verify_func(self._state.funcs[name], name)
        self._sym: dict = {}    # handle -> key: ("b", func, block name) | ("l", func, Var) | int | mark
        self._gone: dict = {}   # key of a removed loop/block -> why it is gone
        self._trace = Trace()
        self._rng = _parse_seed(seed)
        self._depth = 0

    # the program ------------------------------------------------------------------------------
    @property
    def mod(self) -> IRModule:
        """The scheduled module (functions by name; a PrimFunc was scheduled as "main")."""
        return self._state.mod

    @property
    def func(self) -> PrimFunc:
        """The scheduled function: "main", or the only function of the module."""
        funcs = self._state.funcs
        if "main" in funcs:
            return funcs["main"]
        if len(funcs) == 1:
            return next(iter(funcs.values()))
        raise TesseraError(f"the schedule holds functions {sorted(funcs)}; use sch.mod[name]")

    @property
    def state(self) -> ScheduleState:
        return self._state

    @property
    def trace(self) -> Trace:
        """The instructions applied so far (a live object: it grows as primitives are applied)."""
        return self._trace

    def __repr__(self):
        return f"<tir.Schedule of {sorted(self._state.funcs)}, {len(self._trace)} instructions>"

    # random state -----------------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Reseed the random state of the sampling instructions."""
        self._rng = _parse_seed(seed)

    def fork_seed(self) -> int:
        """A seed drawn from this schedule's random state (for a new schedule)."""
        return int(self._rng.integers(1, 2 ** 31 - 1))

    def copy(self) -> "Schedule":
        """An independent schedule with the same IR, handles and trace; its random state is forked
        from this one (so the two draw different samples)."""
        new = Schedule.__new__(Schedule)
        new._state = self._state.copy()
        new._sym = dict(self._sym)
        new._gone = dict(self._gone)
        new._trace = self._trace.copy()
        new._rng = np.random.default_rng(self.fork_seed())
        new._depth = 0
        return new

    # handles ----------------------------------------------------------------------------------
    def get(self, rv):
        """The current Block of a BlockRV, For of a LoopRV, int of an ExprRV (lists map)."""
        if isinstance(rv, (list, tuple)):
            return [self.get(x) for x in rv]
        if isinstance(rv, BlockRV):
            return self._block(rv, "get")[2].block
        if isinstance(rv, LoopRV):
            key = self._key(rv, "get")
            if isinstance(key, LocationMark):
                return key
            return self._loop(rv, "get")[2]
        if isinstance(rv, ExprRV):
            return self._key(rv, "get")
        raise TesseraError(f"sch.get takes a BlockRV, LoopRV or ExprRV, got {type(rv).__name__}")

    def show(self, rv) -> str:
        return str(self.get(rv))

    def remove_rv(self, rv) -> None:
        """Forget a handle (it can no longer be used with this schedule)."""
        self._key(rv, "remove_rv")
        del self._sym[rv]

    def _key(self, rv, prim):
        try:
            return self._sym[rv]
        except KeyError:
            pass
        except TypeError:
            raise ScheduleError(f"{prim}: expected a schedule handle, got {rv!r}") from None
        if not isinstance(rv, RV):
            raise ScheduleError(f"{prim}: expected a schedule handle (BlockRV, LoopRV, ExprRV), got "
                                f"{type(rv).__name__} {rv!r}")
        raise ScheduleError(f"{prim}: {rv!r} does not belong to this schedule (or was removed)")

    def _block(self, rv, prim, func=None):
        """(function name, FuncIndex, BlockRealize) of a BlockRV."""
        if not isinstance(rv, BlockRV):
            raise ScheduleError(f"{prim}: expected a BlockRV, got {_what(rv)}")
        key = self._key(rv, prim)
        _, fname, name = key
        idx = self._state.index(fname)
        realize = idx.blocks.get(name)
        if realize is None:
            why = self._gone.get(key, "it is no longer in the function")
            raise ScheduleError(f"{prim}: the handle of block {name!r} is no longer valid: {why}")
        if func is not None and fname != func:
            raise ScheduleError(f"{prim}: block {name!r} is in function {fname!r}, not {func!r}")
        return fname, idx, realize

    def _loop(self, rv, prim, func=None):
        """(function name, FuncIndex, For) of a LoopRV."""
        if not isinstance(rv, LoopRV):
            raise ScheduleError(f"{prim}: expected a LoopRV, got {_what(rv)}")
        key = self._key(rv, prim)
        if isinstance(key, LocationMark):
            raise ScheduleError(f"{prim}: {rv!r} is the {key.name} location mark of "
                                f"sample_compute_location, not a loop")
        _, fname, var = key
        idx = self._state.index(fname)
        loop = idx.loops.get(var)
        if loop is None:
            why = self._gone.get(key, "it is no longer in the function")
            raise ScheduleError(f"{prim}: the handle of loop {var.name!r} is no longer valid: {why}")
        if func is not None and fname != func:
            raise ScheduleError(f"{prim}: loop {var.name!r} is in function {fname!r}, not {func!r}")
        return fname, idx, loop

    def _block_or_loop(self, rv, prim):
        """(function name, FuncIndex, BlockRealize or For)."""
        if isinstance(rv, BlockRV):
            return self._block(rv, prim)
        if isinstance(rv, LoopRV):
            return self._loop(rv, prim)
        raise ScheduleError(f"{prim}: expected a BlockRV or a LoopRV, got {_what(rv)}")

    def _location(self, rv, prim):
        """ROOT_MARK, INLINE_MARK, or (function name, FuncIndex, For) of a LoopRV."""
        key = self._key(rv, prim) if isinstance(rv, LoopRV) else None
        if isinstance(key, LocationMark):
            return key
        return self._loop(rv, prim)

    def _int(self, x, prim, what="value"):
        """The int of an ExprRV or a Python int."""
        if isinstance(x, ExprRV):
            return self._key(x, prim)
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise ScheduleError(f"{prim}: {what} must be an int or an ExprRV, got {_what(x)}")
        return int(x)

    def _new_block_rv(self, fname, name) -> BlockRV:
        rv = BlockRV(name)
        self._sym[rv] = ("b", fname, name)
        return rv

    def _new_loop_rv(self, fname, var) -> LoopRV:
        rv = LoopRV(var.name)
        self._sym[rv] = ("l", fname, var)
        return rv

    def _new_mark_rv(self, mark: LocationMark) -> LoopRV:
        rv = LoopRV(mark.name)
        self._sym[rv] = mark
        return rv

    def _new_expr_rv(self, value: int) -> ExprRV:
        rv = ExprRV(str(value))
        self._sym[rv] = int(value)
        return rv

    def _retire_loop(self, fname, var, why: str):
        self._gone[("l", fname, var)] = why

    def _retire_block(self, fname, name, why: str):
        self._gone[("b", fname, name)] = why

    def _replace(self, fname, repl: dict):
        """Commit: put new statements where old ones were ({old statement: new or None})."""
        return self._state.replace(fname, {id(k): v for k, v in repl.items()})

    # the primitive protocol -------------------------------------------------------------------
    def _apply(self, kind, fn, sig, args, kwargs):
        if self._depth:  # a primitive calling another: neither recorded nor snapshotted again
            out = fn(self, *args, **kwargs)
            return out[0] if kind.sampling else out
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError as e:
            raise TesseraError(f"{kind.method}: {e}") from None
        bound.apply_defaults()
        a = bound.arguments
        where = kind.method
        if kind.varargs:
            inputs = [normalize_arg(x, where) for x in a[kind.inputs[0]]]
        else:
            inputs = [normalize_arg(a[n], where) for n in kind.inputs]
        attrs = [normalize_arg(a[n], where) for n in kind.attrs]
        # the primitive sees exactly what the trace records (numpy scalars -> Python, tuples -> lists)
        kw = dict(zip(kind.attrs, attrs))
        if kind.sampling:
            kw["decision"] = normalize_arg(a.get("decision"), where)
        if not kind.varargs:
            kw.update(zip(kind.inputs, inputs))
        state, sym, gone, n_inst = self._state.snapshot(), dict(self._sym), dict(self._gone), len(self._trace.insts)
        rng_state = self._rng.bit_generator.state if kind.sampling else None
        self._depth = 1
        try:
            out = fn(self, *inputs, **kw) if kind.varargs else fn(self, **kw)
        except BaseException:
            self._state.restore(state)
            self._sym, self._gone = sym, gone
            del self._trace.insts[n_inst:]
            if rng_state is not None:
                self._rng.bit_generator.state = rng_state
            raise
        finally:
            self._depth = 0
        decision = None
        if kind.sampling:
            out, decision = out
        outputs = [] if out is None else list(out) if isinstance(out, (list, tuple)) else [out]
        self._trace.append(Instruction(kind, inputs, attrs, outputs), decision)
        return out


def _what(x) -> str:
    if isinstance(x, RV):
        return repr(x)
    return f"{type(x).__name__} {x!r}"


def primitive(kind_name: str, *, inputs=(), outputs="none", output_type=None, pure=False,
              sampling=False):
    """Make a function (self: Schedule, ...) a traced Schedule method and an instruction kind.

    See the module docstring for the contract. Returns the method."""

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
        if fn.__name__ in Schedule.__dict__:
            raise TesseraError(f"Schedule.{fn.__name__} already exists")
        kind = InstructionKind(kind_name, fn.__name__, ins, bool(varargs), attrs, outputs, output_type,
                               pure, sampling, [n for n in names if n != "decision"])
        INSTRUCTION_KINDS[kind_name] = kind

        @functools.wraps(fn)
        def method(self, *args, **kwargs):
            return self._apply(kind, fn, sig, args, kwargs)

        method.instruction_kind = kind
        setattr(Schedule, fn.__name__, method)
        return method

    return deco


@primitive("EnterPostproc", pure=False)
def enter_postproc(self) -> None:
    """Mark where post-processing starts (Trace(remove_postproc=True) stops here)."""
    return None


__all__ = ["Schedule", "primitive", "BlockRV", "LoopRV", "ExprRV", "ROOT_MARK", "INLINE_MARK"]
