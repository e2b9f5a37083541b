"""AutoTVM-style templates: a schedule function whose knobs (`cfg.define_split`, `define_knob`,
`define_reorder`) are sampling instructions of the schedule, so a hand-narrowed space is searched by
the same strategies, cost model and database as a generated one.

    @autotune.template("my_gemm")
    def my_gemm(cfg, M, N, K):
        func = te.create_prim_func([A, B, C])            # the program, built from the arguments
        sch = cfg.schedule(func)                          # the schedule whose knobs cfg records
        i, j, k = sch.get_loops(sch.get_block("C"))
        cfg.define_split("tile_i", i, num_outputs=2, max_factor=32)
        cfg.define_knob("vectorize", [True, False])
        io, ii = cfg["tile_i"].apply(sch, i)
        if cfg["vectorize"].val: ...
        return sch

    task = my_gemm.task(1024, 1024, 1024, target="c -num-threads=2")
    autotune.tune_tir(task, max_trials=200, database=db)

A knob is sampled when the template runs; the candidate's trace records every primitive it applied,
so a record replays exactly even when the template branches on a knob. Sampling another candidate
runs the template again (a branch can change the instructions); mutating one runs it with the
decisions of the mutated trace, in the order of the define_* calls.
"""
from __future__ import annotations

import itertools
import math

from ..errors import ScheduleError, TesseraError
from ..ir import PrimFunc
from ..target import Target
from ..tir import Schedule
from .task import Space, TuneTask, sampling_decisions

_TEMPLATES: dict = {}


class SplitEntity:
    """A define_split knob's value: the factors (`.size`) and `apply(sch, loop)` splitting by them."""

    def __init__(self, rvs, size):
        self._rvs = list(rvs)
        self.size = list(size)

    def apply(self, sch: Schedule, loop) -> list:
        return sch.split(loop, factors=self._rvs)

    def __repr__(self):
        return f"SplitEntity({self.size})"


class OtherOptionEntity:
    """A define_knob knob's value (`.val`)."""

    def __init__(self, val):
        self.val = val

    def __repr__(self):
        return f"OtherOptionEntity({self.val!r})"


class ReorderEntity:
    """A define_reorder knob's value: a permutation (`.perm`) and `apply(sch, loops)` reordering them."""

    def __init__(self, perm):
        self.perm = list(perm)

    def apply(self, sch: Schedule, loops) -> list:
        if len(loops) != len(self.perm):
            raise ScheduleError(f"reorder knob: {len(loops)} loops given for a permutation of {len(self.perm)}")
        ordered = [loops[p] for p in self.perm]
        sch.reorder(*ordered)
        return ordered

    def __repr__(self):
        return f"ReorderEntity({self.perm})"


class ConfigSpace:
    """The `cfg` a template receives: it owns the schedule and turns each define_* into a sampling
    instruction (drawn from the schedule's random state, or taken from `decisions` in call order)."""

    def __init__(self, seed=None, decisions=None):
        self._seed = seed
        self._decisions = list(decisions) if decisions is not None else None
        self._k = 0
        self._sch = None
        self._entities: dict = {}
        self.func: PrimFunc | None = None

    # the schedule -----------------------------------------------------------------------------
    def schedule(self, func: PrimFunc) -> Schedule:
        """The schedule of func whose knobs this config records (call once per template run)."""
        if self._sch is not None:
            raise TesseraError("a template calls cfg.schedule(func) once")
        if not isinstance(func, PrimFunc):
            raise TesseraError(f"cfg.schedule takes the template's PrimFunc, got {type(func).__name__}")
        self.func = func
        self._sch = Schedule(func, seed=self._seed)
        return self._sch

    def _need(self, what: str, name: str) -> Schedule:
        if self._sch is None:
            raise TesseraError(f"cfg.{what}({name!r}): call cfg.schedule(func) first; knobs are "
                               f"sampling instructions of that schedule")
        if not isinstance(name, str) or not name:
            raise TesseraError(f"cfg.{what}: a knob is named by a non-empty string, got {name!r}")
        if name in self._entities:
            raise TesseraError(f"cfg.{what}: knob {name!r} is defined twice")
        return self._sch

    def _sample(self, fn, *args):
        """fn(*args, decision=...) with the next given decision; one the knob cannot take (the
        template branched differently) is drawn anew."""
        d = None
        if self._decisions is not None and self._k < len(self._decisions):
            d = self._decisions[self._k]
        self._k += 1
        if d is not None:
            try:
                return fn(*args, decision=d)
            except ScheduleError:
                pass
        return fn(*args)

    # knobs --------------------------------------------------------------------------------------
    def define_split(self, name: str, loop, num_outputs: int = 2, max_factor: int | None = None,
                     policy: str = "factors"):
        """A split of loop into num_outputs factors whose product is its extent (innermost at most
        max_factor): sample_perfect_tile."""
        sch = self._need("define_split", name)
        if policy != "factors":
            raise TesseraError(f"cfg.define_split({name!r}): policy {policy!r} is not supported; splits are "
                               f"perfect ('factors'), as sample_perfect_tile draws them")
        if not isinstance(num_outputs, int) or num_outputs < 1:
            raise TesseraError(f"cfg.define_split({name!r}): num_outputs must be an int >= 1, got {num_outputs!r}")
        rvs = self._sample(sch.sample_perfect_tile, loop, num_outputs, -1 if max_factor is None else max_factor)
        self._entities[name] = SplitEntity(rvs, [sch.get(r) for r in rvs])
        return self._entities[name]

    def define_knob(self, name: str, candidates):
        """One of candidates (any values), equally likely: sample_categorical over their indices."""
        sch = self._need("define_knob", name)
        candidates = list(candidates)
        if not candidates:
            raise TesseraError(f"cfg.define_knob({name!r}): no candidates")
        n = len(candidates)
        rv = self._sample(sch.sample_categorical, list(range(n)), [1.0 / n] * n)
        self._entities[name] = OtherOptionEntity(candidates[sch.get(rv)])
        return self._entities[name]

    def define_reorder(self, name: str, loops, policy: str = "all", candidate=None):
        """An order of loops: every permutation ("all", at most 7 loops), the given order only
        ("identity"), or one of `candidate` (lists of positions into loops)."""
        sch = self._need("define_reorder", name)
        n = len(loops)
        if policy == "all":
            if n > 7:
                raise TesseraError(f"cfg.define_reorder({name!r}): {math.factorial(n)} orders of {n} loops are "
                                   f"too many; give policy='candidate' with the orders to try")
            perms = list(itertools.permutations(range(n)))
        elif policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "candidate":
            perms = [tuple(p) for p in (candidate or [])]
            for p in perms:
                if sorted(p) != list(range(n)):
                    raise TesseraError(f"cfg.define_reorder({name!r}): {list(p)} is not a permutation of "
                                       f"the positions 0..{n - 1}")
            if not perms:
                raise TesseraError(f"cfg.define_reorder({name!r}): policy='candidate' needs candidate orders")
        else:
            raise TesseraError(f"cfg.define_reorder({name!r}): policy must be 'all', 'identity' or "
                               f"'candidate', got {policy!r}")
        k = len(perms)
        rv = self._sample(sch.sample_categorical, list(range(k)), [1.0 / k] * k)
        self._entities[name] = ReorderEntity(perms[sch.get(rv)])
        return self._entities[name]

    def __getitem__(self, name):
        try:
            return self._entities[name]
        except KeyError:
            raise TesseraError(f"cfg[{name!r}]: no such knob; defined: {', '.join(self._entities) or 'none'}") \
                from None

    def __contains__(self, name):
        return name in self._entities


class Template:
    """A registered template: `instantiate(*args)` runs it once; `task(*args, target=...)` makes a
    tuning task whose space it is."""

    def __init__(self, name: str, fn):
        self.name = name
        self.fn = fn
        self.__doc__ = fn.__doc__

    def run(self, *args, seed=None, decisions=None) -> tuple:
        """Run the template: (its cfg, the schedule with its knobs sampled, or set by `decisions`)."""
        cfg = ConfigSpace(seed=seed, decisions=decisions)
        sch = self.fn(cfg, *args)
        if not isinstance(sch, Schedule) or sch is not cfg._sch:
            raise TesseraError(f"template {self.name!r} must return the schedule of cfg.schedule(func), "
                               f"got {type(sch).__name__}")
        return cfg, sch

    def instantiate(self, *args, seed=None, decisions=None) -> Schedule:
        """The schedule of one run of the template (see run)."""
        return self.run(*args, seed=seed, decisions=decisions)[1]

    def space(self, *args, target="c") -> "TemplateSpace":
        return TemplateSpace(self, args, target)

    def task(self, *args, target="c") -> TuneTask:
        """A TuneTask over this template's space for args."""
        space = self.space(*args, target=target)
        return TuneTask(space.func, target, space=space, name=f"{self.name}{args}")

    def __call__(self, *args, **kwargs):
        """Like AutoTVM's: the template with its knobs drawn (seed= for a fixed draw)."""
        return self.instantiate(*args, **kwargs)

    def __repr__(self):
        return f"<autotune template {self.name!r}>"


class TemplateSpace(Space):
    """A template's space for one set of arguments: sampling runs the template, mutating runs it with
    the mutated trace's decisions."""

    def __init__(self, tmpl: Template, args: tuple, target):
        self.template = tmpl
        self.args = tuple(args)
        self.target = Target(target)
        self.func = tmpl.run(*self.args, seed=0)[0].func

    def sample(self, rng):
        sch = self.template.instantiate(*self.args, seed=int(rng.integers(2 ** 31 - 1)))
        return self.finish(sch)

    def mutate(self, sch, rng):
        trace = self.mutate_trace(sch.trace, rng)
        if trace is None:
            return None
        sch = self.template.instantiate(*self.args, seed=int(rng.integers(2 ** 31 - 1)),
                                        decisions=sampling_decisions(trace))
        return self.finish(sch)


def template(name: str):
    """Register fn(cfg, *args) -> tir.Schedule as the template `name`."""
    if not isinstance(name, str) or not name:
        raise TesseraError(f"autotune.template takes a non-empty name, got {name!r}")

    def register(fn):
        t = Template(name, fn)
        _TEMPLATES[name] = t
        return t

    return register


def get_template(name: str) -> Template:
    try:
        return _TEMPLATES[name]
    except KeyError:
        raise TesseraError(f"no autotune template {name!r}; registered: {', '.join(sorted(_TEMPLATES)) or 'none'}") \
            from None


__all__ = ["ConfigSpace", "Template", "template", "get_template", "SplitEntity", "OtherOptionEntity",
           "ReorderEntity"]
