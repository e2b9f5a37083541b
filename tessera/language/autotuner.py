"""Autotuning tile kernels: Triton's `@autotune(configs=[...], key=[...])`, winners kept in tessera's
tuning database, and a model-guided search over declared ranges.

    @tl.autotune(configs=[tessera.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4), ...],
                 key=["M", "N", "K"])
    @tessera.jit
    def matmul(A, B, C, M, N, K, ..., BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr): ...

    @tl.autotune(space={"BLOCK_M": [32, 64, 128], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [16, 32, 64]},
                 key=["M", "N", "K"], max_trials=10)      # cost-model search instead of a sweep

    matmul[grid](a, b, c, M, N, K, ...)     # grid may read the chosen config: lambda meta: meta["BLOCK_M"]

The first launch for a key (the values of the `key` arguments, the dtypes of the arrays, the target)
times every config (or the search's trials) on the launch's own arguments with the compiled kernel's
C timer and keeps the fastest; every measurement is a record in the database (`database=`, default
$TESSERA_CACHE_DIR/tile/autotune.jsonl), so a later process starts with the winner. A tuning run
writes to the arguments: outputs are restored (`restore_value`) or zeroed (`reset_to_zero`) between
configs where a kernel accumulates into them, as Triton has it.

The search (`space=`): the cartesian product of the ranges is traced and lowered without compiling,
each candidate described by tessera's program features (autotune.features of its loop program);
a few random candidates are measured, then the cost model (autotune.cost_model, XGBoost) ranks the
rest and the best predicted are measured, in rounds, up to max_trials.
"""
from __future__ import annotations

import hashlib
import inspect as _inspect
import itertools
import json
import math
import os
import random
import threading

import numpy as np

from ..autotune import Database, TuningRecord
from ..autotune.cost_model import make_cost_model
from ..autotune.database import record_target
from ..autotune.features import extract_features
from ..autotune.measure import MeasureResult
from ..autotune.workload import Workload
from ..errors import TesseraError
from ..ir import Evaluate, PrimFunc
from ..runtime import cache
from .arguments import as_array, flat
from .jit import JITFunction


class Config:
    """One point of an autotuning space: constexpr values (kwargs), num_warps and num_stages (GPU
    launch shape; num_stages is accepted for Triton compatibility)."""

    def __init__(self, kwargs, num_warps=4, num_stages=2, num_ctas=1, maxnreg=None, pre_hook=None):
        if not isinstance(kwargs, dict):
            raise TesseraError(f"Config takes a dict of constexpr values, got {kwargs!r}")
        self.kwargs = dict(kwargs)
        self.num_warps, self.num_stages, self.pre_hook = int(num_warps), int(num_stages), pre_hook

    def all_kwargs(self) -> dict:
        return dict(self.kwargs, num_warps=self.num_warps, num_stages=self.num_stages)

    def as_json(self) -> dict:
        return {"kwargs": self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}

    @staticmethod
    def from_json(obj) -> "Config":
        return Config(dict(obj["kwargs"]), obj.get("num_warps", 4), obj.get("num_stages", 2))

    def __eq__(self, other):
        return isinstance(other, Config) and self.as_json() == other.as_json()

    def __hash__(self):
        return hash(json.dumps(self.as_json(), sort_keys=True))

    def __repr__(self):
        kw = ", ".join(f"{k}: {v}" for k, v in self.kwargs.items())
        return f"Config({{{kw}}}, num_warps={self.num_warps}, num_stages={self.num_stages})"


def default_database_path() -> str:
    return os.path.join(cache.folder("tile"), "autotune.jsonl")


class Autotuner:
    """A @jit kernel with a space of configs (see the module docstring)."""

    def __init__(self, kernel: JITFunction, configs=None, key=(), space=None, max_trials=16, initial=4,
                 reset_to_zero=(), restore_value=(), prune_configs_by=None, database=None, cost_model="xgb",
                 number=5, repeat=3, seed=0, warmup=None, rep=None):
        if not isinstance(kernel, JITFunction):
            raise TesseraError("autotune decorates a @tessera.jit kernel: put @tessera.autotune(...) above @tessera.jit")
        if (configs is None) == (space is None):
            raise TesseraError("autotune takes either configs=[Config(...), ...] (a sweep) or space={name: [values]} "
                               "(a cost-model search)")
        self.kernel = kernel
        self.__name__ = kernel.__name__
        self.key = list(key)
        for k in self.key + list(reset_to_zero) + list(restore_value):
            if k not in kernel.arg_names:
                raise TesseraError(f"autotune of {kernel.__name__}: {k!r} is not a parameter "
                                   f"({', '.join(kernel.arg_names)})")
        if configs is not None:
            self.configs = [c if isinstance(c, Config) else Config(c) for c in configs]
            if not self.configs:
                raise TesseraError(f"autotune of {kernel.__name__}: configs is empty")
        else:
            if not isinstance(space, dict) or not space:
                raise TesseraError("autotune: space must be a non-empty dict {constexpr name: [values]}")
            names = list(space)
            warps = list(space.get("num_warps", [4]))     # the caller's dict is left as it is
            names = [n for n in names if n != "num_warps"]
            self.configs = [Config(dict(zip(names, vals)), num_warps=w)
                            for vals in itertools.product(*(list(space[n]) for n in names)) for w in warps]
        for c in self.configs:
            for k in c.kwargs:
                if k not in kernel.constexpr_names:
                    raise TesseraError(f"autotune of {kernel.__name__}: config value {k!r} is not a tl.constexpr "
                                       f"parameter of the kernel")
        self.search = space is not None
        self.max_trials, self.initial, self.seed = int(max_trials), int(initial), seed
        self.reset_to_zero, self.restore_value = list(reset_to_zero), list(restore_value)
        self.prune = prune_configs_by
        self.database, self.cost_model = database, cost_model
        self.number, self.repeat = number, repeat
        for name, ms in (("warmup", warmup), ("rep", rep)):
            if ms is not None and (isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms >= 0):
                raise TesseraError(f"autotune of {kernel.__name__}: {name} is milliseconds (a number >= 0), got {ms!r}")
        # Triton's do_bench budgets: `warmup` ms of untimed launches before a config is timed, and its
        # `repeat` measurements each at least rep / repeat ms long (more launches a measurement)
        self.warmup_ms, self.rep_ms = warmup, rep
        self.best: dict = {}
        self.timings: dict = {}
        self._lock = threading.Lock()
        self._database = None
        self._source_hash = hashlib.sha256(_inspect.getsource(kernel.fn).encode()).hexdigest()[:16]

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    # ----------------------------------------------------------------------------------------
    def _db(self):
        """The tuning database, its file loaded once per tuner (not on every new key's lookup and commit)."""
        if isinstance(self.database, Database):
            return self.database
        with self._lock:
            if self._database is None:
                self._database = Database(self.database or default_database_path())
            return self._database

    def _key(self, bound, target) -> tuple:
        vals = []
        for k in self.key:
            v = bound[k]
            if hasattr(v, "dtype") and hasattr(v, "shape"):
                vals.append(str(v.dtype))
            else:
                vals.append(v if isinstance(v, (int, float, str, bool)) or v is None else repr(v))
        dtypes = tuple(str(getattr(bound[n], "dtype", "")) for n in self.kernel.arg_names
                       if hasattr(bound[n], "dtype") and hasattr(bound[n], "shape"))
        return (str(target), tuple(vals), dtypes)

    def _workload(self, key):
        attrs = {"tile_kernel": f"{self.kernel.fn.__module__}.{self.kernel.fn.__qualname__}",
                 "tile_source": self._source_hash, "tile_key": json.dumps(list(key[1:]), default=str)}
        return PrimFunc([], Evaluate(0), attrs=attrs, name=f"tile_{self.kernel.__name__}")

    def run(self, *args, grid, **kwargs):
        bound, opts = self.kernel.bind(args, {**kwargs, **{k: None for k in self._config_names() if k not in kwargs}})
        target = self.kernel.target_of(opts, bound.values())
        key = self._key(bound, target)
        with self._lock:
            config = self.best.get(key)
        if config is None:
            config = self._from_database(key, target)
        if config is None:
            config = self.tune(args, kwargs, grid, key, target)
        return self.kernel.run(*args, grid=grid, **{**kwargs, **config.kwargs, "num_warps": config.num_warps})

    def _config_names(self):
        return sorted({k for c in self.configs for k in c.kwargs})

    def _from_database(self, key, target):
        db = self._db()
        wl = self._workload(key)
        w = Workload(wl)
        if not db.has_workload(w.key):
            return None
        # the fastest record that names one of this tuner's configs: a record is read back from a file
        # (any shape it has is checked), and one of a config since taken out of configs= is passed over
        # (not re-tuned for in every later process)
        tgt, k = record_target(target), 4
        while True:
            top = db.get_top_k(w, tgt, k=k)
            for r in top:
                config = self._config_of(r)
                if config is not None:
                    with self._lock:
                        self.best[key] = config
                    return config
            if len(top) < k:
                return None
            k *= 4

    def _config_of(self, record):
        """The declared config a database record names, None for a malformed record or one not in configs."""
        try:
            kind, _, obj, _ = record.trace[0]
            if kind != "TileConfig":
                return None
            config = Config.from_json(obj)
        except (TypeError, KeyError, ValueError, IndexError, AttributeError, TesseraError):
            return None
        return next((c for c in self.configs if c == config), None)

    def _measure(self, config, args, kwargs, grid, target, saved):
        """Seconds of one launch with config (None when it does not build or run)."""
        call_kwargs = {**kwargs, **config.kwargs, "num_warps": config.num_warps}
        call_kwargs.setdefault("target", str(target))
        bound, _ = self.kernel.bind(args, dict(call_kwargs))
        self._reset(bound, saved)
        if config.pre_hook is not None:
            config.pre_hook(bound)
        try:
            if self.warmup_ms:
                self.kernel.time(*args, grid=grid, number=1, repeat=1, min_repeat_ms=math.ceil(self.warmup_ms),
                                 **call_kwargs)
            res = self.kernel.time(*args, grid=grid, number=self.number, repeat=self.repeat,
                                   min_repeat_ms=math.ceil((self.rep_ms or 0) / self.repeat), **call_kwargs)
        except TesseraError as e:
            return None, str(e).splitlines()[0]
        return min(res.results), None

    def _reset(self, bound, saved):
        for name in self.reset_to_zero:
            a = flat(as_array(bound[name], name, self.__name__, None))
            a[...] = 0
        for name, copy in saved.items():
            flat(as_array(bound[name], name, self.__name__, None))[...] = copy

    def tune(self, args, kwargs, grid, key, target) -> Config:
        """Measure the configs (all of them, or the search's trials) and keep and record the fastest."""
        bound, _ = self.kernel.bind(args, {**kwargs, **{k: None for k in self._config_names() if k not in kwargs}})
        saved = {name: flat(as_array(bound[name], name, self.__name__, None)).copy() for name in self.restore_value}
        configs = list(self.configs)
        if self.prune is not None:
            fn = self.prune.get("early_config_prune") if isinstance(self.prune, dict) else self.prune
            if fn is not None:
                configs = list(fn(configs, bound))
        timed = {}
        if self.search and len(configs) > self.max_trials:
            order = self._search_order(configs, args, kwargs, grid, target, timed, saved)
        else:
            order = configs
        for c in order:
            if c not in timed:
                timed[c] = self._measure(c, args, kwargs, grid, target, saved)
        self._reset(bound, saved)
        ok = {c: t for c, (t, _) in timed.items() if t is not None}
        if not ok:
            errs = "; ".join(f"{c}: {e}" for c, (_, e) in timed.items())
            raise TesseraError(f"autotune of {self.__name__}: no config built and ran ({errs})")
        best = min(ok, key=ok.get)
        db = self._db()
        wl = db.commit_workload(self._workload(key))
        records = []
        for c, (t, err) in timed.items():
            trace = [["TileConfig", [], c.as_json(), []]]
            if t is None:
                records.append(TuningRecord(wl.key, record_target(target), trace,
                                            error={"kind": "build", "msg": err or "failed"}))
            else:
                records.append(TuningRecord(wl.key, record_target(target), trace, [t]))
        db.commit(records)
        with self._lock:
            self.best[key] = best
            self.timings[key] = {c: t for c, (t, _) in timed.items()}
        return best

    def _search_order(self, configs, args, kwargs, grid, target, timed, saved) -> list:
        """Measure random candidates, then the cost model's best predicted, in rounds, up to max_trials;
        returns the measured configs (timed is filled)."""
        feats = {}
        for c in configs:
            call_kwargs = {**kwargs, **c.kwargs, "num_warps": c.num_warps}
            call_kwargs.setdefault("target", str(target))
            try:
                r = self.kernel.lowered(*args, grid=grid, static=True, **call_kwargs)
                feats[c] = extract_features(r, target)
            except TesseraError:
                continue
        cands = [c for c in configs if c in feats]
        rng = random.Random(self.seed)
        model = make_cost_model(self.cost_model, seed=self.seed)
        first = rng.sample(cands, min(self.initial, len(cands), self.max_trials))
        measured = []
        for c in first:
            timed[c] = self._measure(c, args, kwargs, grid, target, saved)
            measured.append(c)
        while len(measured) < min(self.max_trials, len(cands)):
            results = [MeasureResult(run_secs=(timed[c][0],) if timed[c][0] is not None else (),
                                     error_kind=None if timed[c][0] is not None else "build")
                       for c in measured]
            model.update([feats[c] for c in measured], results, ["tile"] * len(measured))
            rest = [c for c in cands if c not in timed]
            scores = model.predict([feats[c] for c in rest])
            batch = [rest[i] for i in np.argsort(-np.asarray(scores))[:2]]
            for c in batch:
                if len(measured) >= self.max_trials:
                    break
                timed[c] = self._measure(c, args, kwargs, grid, target, saved)
                measured.append(c)
        return measured


def autotune(configs=None, key=(), space=None, max_trials=16, prune_configs_by=None, reset_to_zero=(),
             restore_value=(), database=None, cost_model="xgb", warmup=None, rep=None, **unknown):
    """Decorate a @tessera.jit kernel with a space of configs (see the module docstring). warmup / rep:
    Triton's benchmark budgets in milliseconds (untimed launches before timing a config; the least time
    its measurements take together)."""
    if unknown:
        raise TesseraError(f"autotune: unknown argument(s) {sorted(unknown)} (it takes configs, key, space, "
                           f"max_trials, prune_configs_by, reset_to_zero, restore_value, database, cost_model, "
                           f"warmup, rep; Triton's pre_hook / post_hook / do_bench / use_cuda_graph are not "
                           f"supported: a Config's pre_hook runs before each of its launches)")

    def wrap(kernel):
        return Autotuner(kernel, configs=configs, key=key, space=space, max_trials=max_trials,
                         prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, database=database, cost_model=cost_model,
                         warmup=warmup, rep=rep)

    return wrap


def heuristics(values: dict):
    """Triton's @heuristics: constexprs computed from the other arguments at launch
    (`@tl.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})`)."""
    def wrap(kernel):
        return _Heuristics(kernel, values)

    return wrap


class _Heuristics:
    def __init__(self, kernel, values):
        self.kernel, self.values = kernel, dict(values)
        self.__name__ = getattr(kernel, "__name__", "kernel")

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args, grid, **kwargs):
        inner = self.kernel.kernel if isinstance(self.kernel, Autotuner) else self.kernel
        names = inner.arg_names
        bound = dict(zip(names, args))
        bound.update(kwargs)
        for k, fn in self.values.items():
            kwargs[k] = fn(bound)
        return self.kernel.run(*args, grid=grid, **kwargs)

