"""tir.Schedule: the state being scheduled, the handles it hands out, its trace and random state.

    sch = tir.Schedule(func, seed=42)
    b = sch.get_block("C"); i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, factors=[None, 8]); sch.parallel(io)
    print(sch.mod.script()); print(sch.trace)

Adding a family of primitives (one file per family, e.g. `placement.py`)
-------------------------------------------------------------------------
Write each primitive as a function of (self: Schedule, ...) in the family's file, decorated with
`instruction_kind` (instruction.py: it registers the trace instruction kind), and write its method
out in the Schedule class below: the same name and signature, a one-line docstring, decorated with
`_traced(family.function)`, which applies the function as one traced instruction and does the
bookkeeping every primitive needs: the call is recorded in `sch.trace` (inputs, attrs, outputs,
decision) only when it succeeds, and a primitive that raises leaves the IR, the handles, the trace
and the random state exactly as they were. (`primitive` does both at once for a primitive added
from outside the class, as a test does.)

    @instruction_kind("ComputeAt", inputs=("block", "loop"), outputs="none")     # placement.py
    def compute_at(self, block, loop, preserve_unit_loops=False, index=-1):
        fname, idx, realize = self._block(block, "compute_at")     # resolve handles
        _, _, loop_node = self._loop(loop, "compute_at", func=fname)
        ...check every precondition; raise ScheduleError(...) naming block/loop and the reason...
        self._replace(fname, {old_stmt: new_stmt, ...})              # commit new IR
        self._retire_loop(fname, var, "was ... by compute_at")       # handles of removed loops
        return None                                                  # or new handles:
        # self._new_loop_rv(fname, var) / self._new_block_rv(fname, name) / self._new_expr_rv(int)

    @_traced(_placement.compute_at)                                   # in class Schedule
    def compute_at(self, block, loop, preserve_unit_loops=False, index=-1):
        '''Move a producer block under a loop of its consumers, computing there the region they need.'''

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
from . import annotate as _annotate
from . import blockize as _blockize
from . import layout as _layout
from . import lookup as _lookup
from . import loops as _loops
from . import memory as _memory
from . import placement as _placement
from . import reduction as _reduction
from . import sampling as _sampling
from . import tensorize as _tensorize
from .handles import INLINE_MARK, ROOT_MARK, RV, BlockRV, ExprRV, LocationMark, LoopRV
from .instruction import Instruction, instruction_kind, normalize_arg
from .state import ScheduleState, verify_func
from .trace import Trace
from .trace import enter_postproc as _enter_postproc

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


def _traced(impl, prepare=None):
    """Make the decorated Schedule method apply `impl` (a primitive family's function, registered with
    instruction_kind) as one traced instruction of its kind; the method gives the name, signature and
    docstring, checked against impl's. prepare(sch, *args, **kwargs), when given, returns the
    positional arguments the trace records (transform_layout's index map as text)."""
    kind = impl.instruction_kind
    sig = inspect.signature(impl)

    def deco(method):
        def shape(f):
            return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]

        if method.__name__ != kind.method or shape(method) != shape(impl):
            raise TesseraError(f"Schedule.{method.__name__}{inspect.signature(method)} does not match its "
                               f"primitive {impl.__module__}.{kind.method}{sig}")

        @functools.wraps(method)
        def call(self, *args, **kwargs):
            if prepare is not None:
                args, kwargs = prepare(self, *args, **kwargs), {}
            return self._apply(kind, impl, sig, args, kwargs)

        call.instruction_kind = kind
        return call

    return deco


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

    # the primitives: each a traced call of its family's function (the decorator names it) --------
    # lookup.py
    @_traced(_lookup.get_block)
    def get_block(self, name, func_name="main"):
        """The BlockRV of the block called `name` in function `func_name`."""

    @_traced(_lookup.get_loops)
    def get_loops(self, block):
        """The LoopRVs of the loops around the block inside its scope, outermost first."""

    @_traced(_lookup.get_child_blocks)
    def get_child_blocks(self, block_or_loop):
        """The BlockRVs of the blocks directly under a block or a loop, in order."""

    @_traced(_lookup.get_producers)
    def get_producers(self, block):
        """The BlockRVs of the blocks of the same scope this block depends on."""

    @_traced(_lookup.get_consumers)
    def get_consumers(self, block):
        """The BlockRVs of the blocks of the same scope that depend on this block."""

    # loops.py
    @_traced(_loops.split)
    def split(self, loop, factors, preserve_unit_iters=True, disable_predication=False):
        """Split a loop into len(factors) nested loops, outermost first (one factor may be None)."""

    @_traced(_loops.fuse)
    def fuse(self, *loops, preserve_unit_iters=True):
        """Fuse consecutive perfectly nested loops (outermost first) into one loop."""

    @_traced(_loops.reorder)
    def reorder(self, *ordered_loops):
        """Reorder loops of one perfect nest: the given loops take the places they occupy, in order."""

    @_traced(_loops.parallel)
    def parallel(self, loop):
        """Run the loop's iterations in parallel threads."""

    @_traced(_loops.vectorize)
    def vectorize(self, loop):
        """Vectorize the loop."""

    @_traced(_loops.unroll)
    def unroll(self, loop):
        """Unroll the loop."""

    @_traced(_loops.bind)
    def bind(self, loop, thread_axis):
        """Bind the loop to a GPU thread axis (blockIdx.x, threadIdx.y, vthread, ...)."""

    # annotate.py
    @_traced(_annotate.annotate)
    def annotate(self, block_or_loop, ann_key, ann_val):
        """Set annotation ann_key = ann_val on a block or a loop."""

    @_traced(_annotate.unannotate)
    def unannotate(self, block_or_loop, ann_key):
        """Remove annotation ann_key from a block or a loop."""

    # sampling.py
    @_traced(_sampling.sample_perfect_tile)
    def sample_perfect_tile(self, loop, n, max_innermost_factor=16, decision=None):
        """n ExprRVs whose product is the loop's extent."""

    @_traced(_sampling.sample_categorical)
    def sample_categorical(self, candidates, probs, decision=None):
        """An ExprRV of one of the integer candidates, drawn with the given probabilities."""

    @_traced(_sampling.sample_compute_location)
    def sample_compute_location(self, block, decision=None):
        """A LoopRV where the block can be computed: a loop, or the ROOT_MARK / INLINE_MARK location."""

    # placement.py
    @_traced(_placement.compute_at)
    def compute_at(self, block, loop, preserve_unit_loops=False, index=-1):
        """Move a producer block under a loop of its consumers, computing there the region they need."""

    @_traced(_placement.reverse_compute_at)
    def reverse_compute_at(self, block, loop, preserve_unit_loops=False, index=-1):
        """Move a consumer block under a loop of its producers (epilogue fusion)."""

    @_traced(_placement.compute_inline)
    def compute_inline(self, block):
        """Inline an injective producer block into its consumers."""

    @_traced(_placement.reverse_compute_inline)
    def reverse_compute_inline(self, block):
        """Fold an injective consumer block into the store of its only producer."""

    # memory.py
    @_traced(_memory.cache_read)
    def cache_read(self, block, read_buffer_index, storage_scope, consumer_blocks=None):
        """A block copying a buffer the block reads into a new buffer of the given scope."""

    @_traced(_memory.cache_write)
    def cache_write(self, block, write_buffer_index, storage_scope, consumer_blocks=None):
        """Make the block write a new buffer of the given scope, and a block copying it back."""

    @_traced(_memory.set_scope)
    def set_scope(self, block, buffer_index, storage_scope):
        """Set the storage scope of a buffer the block writes."""

    @_traced(_memory.storage_align)
    def storage_align(self, block, buffer_index, axis, factor, offset):
        """Pad the strides of a buffer the block writes: stride[axis] = k * factor + offset."""

    # reduction.py
    @_traced(_reduction.decompose_reduction)
    def decompose_reduction(self, block, loop):
        """Split a reduction block into an init block placed before `loop` and an update block."""

    @_traced(_reduction.rfactor)
    def rfactor(self, loop, factor_axis):
        """Factor the reduction over `loop` into a partial-reduction block and a write-back block."""

    # layout.py
    @_traced(_layout.transform_layout, prepare=_layout.recorded_arguments)
    def transform_layout(self, block, buffer, index_map, pad_value=None, assume_injective_transform=False):
        """Give a buffer the layout index_map(*indices) and rewrite every access to it."""

    # blockize.py, tensorize.py
    @_traced(_blockize.blockize)
    def blockize(self, target, preserve_unit_iters=True):
        """Make the subtree under a loop (or consecutive sibling blocks) one new block; returns it."""

    @_traced(_tensorize.tensorize)
    def tensorize(self, block_or_loop, tensor_intrin, preserve_unit_iters=True):
        """Replace the block (or the loop nest under the loop) by the registered tensor intrinsic."""

    # trace.py
    @_traced(_enter_postproc)
    def enter_postproc(self) -> None:
        """Mark where post-processing starts (Trace(remove_postproc=True) stops here)."""


def _what(x) -> str:
    if isinstance(x, RV):
        return repr(x)
    return f"{type(x).__name__} {x!r}"


def primitive(kind_name: str, *, inputs=(), outputs="none", output_type=None, pure=False,
              sampling=False):
    """Add a traced primitive to Schedule from outside the class (tessera's own are written out in it):
    `instruction_kind` for the function, and a Schedule method of its name applying it. Returns the
    method."""

    def deco(fn):
        if fn.__name__ in Schedule.__dict__:
            raise TesseraError(f"Schedule.{fn.__name__} already exists")
        instruction_kind(kind_name, inputs=inputs, outputs=outputs, output_type=output_type, pure=pure,
                         sampling=sampling)(fn)
        method = _traced(fn)(fn)
        setattr(Schedule, fn.__name__, method)
        return method

    return deco


__all__ = ["Schedule", "primitive", "BlockRV", "LoopRV", "ExprRV", "ROOT_MARK", "INLINE_MARK"]
