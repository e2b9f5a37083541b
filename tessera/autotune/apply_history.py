"""Compile with tuning records: the fastest record of each kernel's workload for the target.

    exe = tessera.compile(graph, params, target, database="tune.jsonl")   # uses ApplyHistoryBest

ApplyHistoryBest (AutoTVM's name) answers the graph compiler's `lookup(func, target)` from the
records of func's workload under the target's record key (record_target: records of another CPU
level or thread count never apply), searching its databases in order (the user's, then the records
shipped with tessera for the zoo models, `builtin_databases`). The rule, per database:
1. the workload's pick, when its latest record is one: tune_graph's in-model check compiled the
   whole model with each heavy kernel's top candidates and its default and timed them there; a
   pick "record" applies its trace, a pick "default" keeps the default schedule (lookup answers
   None). Records measured after a pick (a later tuning without the check) void it;
2. else the fastest error-free record.
A record whose trace tensorizes with an intrinsic the target lacks the CPU features of (AVX-512
VNNI, say: an x86-64 level does not imply it) is passed over for the next fastest. It keeps which
kernels it found records for, for the compile summary and the profile's marks.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import TesseraError
from ..target import Target
from ..tir.tensor_intrin import TensorIntrin
from .database import Database, record_target
from .measure.candidate import intrinsics_used
from .workload import workload_key

BUILTIN_DIR = Path(__file__).resolve().parent / "records"


def builtin_databases(target) -> list:
    """The record files shipped with tessera (tessera/autotune/records/*.jsonl) that hold records for
    target's record key, as Databases (opened read-only in effect: nothing writes to them)."""
    key = record_target(target)
    out = []
    if os.environ.get("TESSERA_NO_BUILTIN_RECORDS"):
        return out
    for path in sorted(BUILTIN_DIR.glob("*.jsonl")):
        db = _open_builtin(path)
        if db is not None and db.has_target(key):
            out.append(db)
    return out


_BUILTIN: dict = {}


def _open_builtin(path):
    db = _BUILTIN.get(path)
    if db is None:
        db = _BUILTIN[path] = Database(path)
    return db


def _buildable(trace, target) -> bool:
    """Whether every tensor intrinsic trace tensorizes with is known and, on a CPU target, target has
    its CPU features (TensorIntrin.missing_features speaks of CPU features only)."""
    for name in intrinsics_used(trace):
        intrin = TensorIntrin.get(name, allow_missing=True)
        if intrin is None or (target.is_cpu and intrin.missing_features(target)):
            return False
    return True


def fastest_buildable(db, key, record_key, target):
    """The fastest error-free record of workload key under record_key that target can build, or None
    (the records are read fastest first, a few more each time one is passed over)."""
    k = 1
    while True:
        top = db.get_top_k(key, record_key, k)
        for rec in top[k // 4 if k > 1 else 0:]:
            if _buildable(rec.trace, target):
                return rec
        if len(top) < k:
            return None
        k *= 4


def chosen_record(db, key, record_key, target):
    """(record, kept_default) of workload key in db by the rule of the module docstring: the
    workload's pick where its latest record is one the target can build (kept_default: the pick
    keeps the default schedule), else (fastest buildable record or None, False)."""
    pick = db.get_pick(key, record_key)
    if pick is not None and _buildable(pick.trace, target):
        return pick, pick.pick == "default"
    return fastest_buildable(db, key, record_key, target), False


class ApplyHistoryBest:
    """The tuned schedules of one or more databases for tessera.compile (see the module docstring).

    databases: a Database, a path, or a list of them, searched in order; builtin: also search the
    records shipped with tessera after them."""

    def __init__(self, databases=(), builtin: bool = True):
        if databases is None:
            databases = []
        elif isinstance(databases, (list, tuple)):
            databases = list(databases)
        else:
            databases = [databases]
        self.databases = []
        for d in databases:
            if isinstance(d, (str, bytes)) or hasattr(d, "__fspath__"):
                if not Path(os.fsdecode(d)).exists():
                    raise TesseraError(f"tuning database {os.fsdecode(d)!r} does not exist (tune a model with "
                                       f"`tessera tune model.onnx --db {os.fsdecode(d)}` or autotune.tune_graph)")
                d = Database(d)
            if not isinstance(d, Database):
                raise TesseraError(f"database must be an autotune.Database or a path, got {type(d).__name__}")
            self.databases.append(d)
        self.builtin = builtin
        self._by_target: dict = {}
        self._answers: dict = {}   # (id(func), target) -> (func, trace or None)
        self._keys: dict = {}      # id(func) -> (func, workload key)
        self.used: dict = {}       # workload key -> (record's mean seconds, where it came from)
        self.kept: dict = {}       # workload key -> database whose pick keeps the default schedule
        self.defaults: set = set() # workload keys whose chosen record is the default schedule's trace
        self.missed: set = set()   # workload keys without a record

    def _sources(self, target) -> list:
        """The databases to search for target, in order (the shipped ones found once per target)."""
        t = str(Target(target))
        got = self._by_target.get(t)
        if got is None:
            got = self._by_target[t] = self.databases + (builtin_databases(target) if self.builtin else [])
        return got

    def lookup(self, func, target):
        """The trace JSON of the fastest error-free record of func's workload for target that
        target can build (its tensor intrinsics exist and target has their CPU features), or None."""
        sources = self._sources(target)
        if not sources:
            return None
        target = Target(target)
        # every node of one signature asks with the same (cached) program: answer it once
        memo = self._answers.get((id(func), target))
        if memo is not None and memo[0] is func:
            return memo[1]
        key = workload_key(func)
        self._keys[id(func)] = (func, key)
        tk = record_target(target)
        trace = None
        for db in sources:
            rec, kept_default = chosen_record(db, key, tk, target)
            if kept_default:
                self.kept[key] = str(db.path)
                break
            if rec is not None:
                self.used[key] = (rec.secs, str(db.path))
                trace = rec.trace
                break
        else:
            self.missed.add(key)
        self._answers[(id(func), target)] = (func, trace)
        return trace

    def key_of(self, func):
        """The workload key lookup found for func (None when lookup never saw it)."""
        got = self._keys.get(id(func))
        return got[1] if got is not None and got[0] is func else None

    def default_record(self, func) -> None:
        """The graph compiler found that the record lookup chose for func is its default schedule
        (measured by the tuner, nothing faster found): func builds untuned, and the summary says so."""
        key = self.key_of(func)
        if key is not None:
            self.defaults.add(key)

    def summary(self, kernels) -> str:
        """One line: how many of the compiled kernels use tuned schedules, from which databases
        (only records that applied), how many an in-model pick kept at the default, and the kernels
        whose record did not apply (they run the default schedule)."""
        kernels = [k for k in kernels if not getattr(k, "host", False)]
        where, failed, kept, default = set(), [], 0, 0
        for k in kernels:
            key = self.key_of(getattr(k, "func", None))
            if key is None:
                continue
            if getattr(k, "tuned", False) and key in self.used:
                where.add(self.used[key][1])
            elif key in self.defaults:
                default += 1
            elif key in self.used:
                failed.append(f"{k.op} (node {k.node!r}) from {Path(self.used[key][1]).name}" if k.node
                              else f"{k.op} from {Path(self.used[key][1]).name}")
            elif key in self.kept:
                kept += 1
        tuned = sum(1 for k in kernels if getattr(k, "tuned", False))
        names = ", ".join(Path(w).name for w in sorted(where)) or "none"
        line = (f"tuned schedules for {tuned} of {len(kernels)} kernels (records: {names}); "
                f"the other {len(kernels) - tuned} use the default schedules")
        notes = [f"{kept} kept there by the tuner's in-model check"] if kept else []
        if default:
            notes.append(f"{default} whose fastest record is the default schedule")
        untuned = len(kernels) - tuned - kept - default - len(failed)
        if notes and untuned > 0:
            notes.append(f"{untuned} without a record")
        if notes:
            line += f" ({'; '.join(notes)})"
        if failed:
            line += f"; records that did not apply: {', '.join(failed)}"
        return line


__all__ = ["ApplyHistoryBest", "builtin_databases", "chosen_record", "fastest_buildable", "BUILTIN_DIR"]
