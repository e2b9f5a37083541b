"""The tuning database: JSON lines, append-only, crash-safe (MetaSchedule's JSONDatabase, one file).

    db = Database("tune.jsonl")                  # opens an existing file: tuning resumes from it
    wl = db.commit_workload(func)                # once per workload: {"workload": key, "func": ...}
    db.commit([TuningRecord(wl.key, "c -num-threads=2", sch.trace.as_json(), [1.2e-3, 1.1e-3])])
    best = db.get_top_k(wl, "c -num-threads=2", k=1)[0]

Two kinds of line: a workload line `{"workload": key, "func": <ir.to_json>}`, written once per
workload so the file alone rebuilds every candidate's program; and a record line
`{"workload_key", "target", "run_secs", "error", "time", "version", "trace"}` (the trace last).
Each commit is one write, flushed and fsynced, so a process killed at any moment loses at most the
batch in flight. Loading skips (with a warning naming the file and line) any line that does not
parse, e.g. the torn last line of a killed writer; the next append starts a fresh line after it.

Loading is fast because a record's trace stays text until asked for: a record line is split at its
`,"trace":` member (the sequence cannot occur inside a JSON string, where quotes are escaped), the
header parsed and checked, the trace parsed on first use: `records()` and `get_top_k` read the traces
of what they return and drop (with a warning naming the file and line) a record whose trace does
not parse, so a corrupt line is never fatal there either.
"""
from __future__ import annotations

import gc
import importlib.metadata
import json
import math
import os
import statistics
import threading
import time as _time
import warnings

from ..backend.cuda import DEFAULT_ARCH as _CUDA_ARCH
from ..errors import TesseraError, resource_errors
from ..target import Target
from .workload import Workload


def _tessera_version() -> str:
    """tessera's version as installed (the package root is above this layer, so not tessera.__version__)."""
    try:
        return importlib.metadata.version("tessera")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


__version__ = _tessera_version()
ERROR_KINDS = ("build", "run", "crash", "timeout", "wrong_result", "invalid")
_TRACE_SEP = ',"trace":'
_MAX_WARNINGS = 20


# x86-64 micro-architecture levels (the psABI's), highest first: the features each needs
_X86_LEVELS = (
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
    ("x86-64-v3", ("avx2", "fma", "bmi1", "bmi2", "f16c", "movbe")),
    ("x86-64-v2", ("sse4_2", "popcnt", "ssse3")),
)


def record_target(target) -> str:
    """The target text records are kept and looked up under: the target's own text, except that a C
    target for the host CPU (-mcpu=native, the default) is named by the x86-64 level its features
    reach and its thread count, e.g. "c -mcpu=x86-64-v4 -num-threads=2": records tuned on one
    AVX-512 machine apply on another, never on an AVX2-only one (x86-64-v3), and a schedule tuned
    for 2 threads is not applied to 16."""
    t = Target(target)
    if t.kind == "cuda":
        return _cuda_key(str(t))
    if t.kind != "c" or t.mcpu != "native":
        return str(t)
    feats = t.features
    level = next((name for name, need in _X86_LEVELS if all(f in feats for f in need)), None)
    if level is None:
        return str(t)
    parts = ["c", f"-mcpu={level}", f"-num-threads={t.num_threads}"]
    parts += [f"-{k}={v}" for k, v in t.attrs.items()]
    return " ".join(parts)


def _target_text(target) -> str:
    """A target's canonical text as records keep it (_cuda_key applied)."""
    return _cuda_key(str(Target(target)))


def _key_of(workload) -> str:
    """A workload key from a key, a Workload or a PrimFunc."""
    if isinstance(workload, str):
        return workload
    return workload.key if isinstance(workload, Workload) else Workload(workload).key


def _cuda_key(text: str) -> str:
    """A CUDA target's record key names its architecture ("cuda -arch=sm_90"): a kernel tuned for
    one GPU generation is not applied to another. Keys written before that ("cuda", no -arch) were
    all compiled for the backend's default architecture, so they read as that one."""
    if text.startswith("cuda") and "-arch=" not in text:
        try:
            return str(Target(f"{text} -arch={_CUDA_ARCH}"))
        except TesseraError:
            return text
    return text


PICKS = ("record", "default")


class TuningRecord:
    """One measured candidate: workload key, canonical target text, trace JSON, seconds per run
    (one per repeat; empty on error), error (None or {"kind": one of ERROR_KINDS, "msg": str}),
    unix time and tessera version.

    pick (optional): tune_graph's in-model check chose this record's trace for its workload
    ("record") or kept the default schedule ("default"; the trace is the default's); its run_secs
    repeat the candidate's isolated time, in_model_secs its median seconds per node inside the
    compiled model. ApplyHistoryBest applies a pick that is the workload's latest record."""

    __slots__ = ("workload_key", "target", "run_secs", "error", "time", "version", "pick", "in_model_secs",
                 "_trace", "_line", "_at", "_path", "_lineno")

    def __init__(self, workload_key: str, target, trace, run_secs=(), error=None, time=None, version=None,
                 pick=None, in_model_secs=None):
        if not isinstance(workload_key, str) or not workload_key:
            raise TesseraError(f"TuningRecord: workload_key must be a non-empty string, got {workload_key!r}")
        self.workload_key = workload_key
        self.target = _target_text(target)
        self.run_secs = tuple(float(s) for s in run_secs)
        if not all(math.isfinite(s) and s >= 0 for s in self.run_secs):
            raise TesseraError(f"TuningRecord: run_secs must be finite seconds >= 0, got {list(self.run_secs)}")
        self.error = _check_error(error)
        if self.error is None and not self.run_secs:
            raise TesseraError("TuningRecord: a record without an error needs its run_secs")
        if not isinstance(trace, (list, tuple)):
            raise TesseraError(f"TuningRecord: trace must be the JSON list of Trace.as_json(), got "
                               f"{type(trace).__name__}")
        self._trace, self._line, self._at, self._path, self._lineno = trace, None, 0, None, 0
        self.time = float(time) if time is not None else _time.time()
        self.version = version if version is not None else __version__
        self.pick, self.in_model_secs = _check_pick(pick, in_model_secs, self.error)

    @classmethod
    def _from_line(cls, head: dict, line: str | None, at: int, trace, path, lineno: int) -> "TuningRecord":
        """A record from a parsed line: header fields checked here; the trace either given or left as
        text in `line[at:-1]` until asked for."""
        r = cls.__new__(cls)
        key, target, secs, err, t, ver = (head["workload_key"], head["target"], head["run_secs"], head["error"],
                                          head["time"], head["version"])
        if type(key) is not str or type(target) is not str or type(ver) is not str:
            raise ValueError("workload_key, target and version must be strings")
        if type(secs) is not list:
            raise ValueError("run_secs must be a list of numbers")
        if secs:
            sum(secs)   # a TypeError unless all are numbers
        if type(t) is not float and type(t) is not int:
            raise ValueError("time must be a number")
        if target.startswith("cuda"):
            target = _cuda_key(target)
        r.workload_key, r.target, r.run_secs, r.time, r.version = key, target, tuple(secs), t, ver
        r.error = _check_error(err)
        if r.error is None and not secs:
            raise ValueError("a record without an error has no run_secs")
        r.pick, r.in_model_secs = (None, None) if "pick" not in head else _check_pick(
            head["pick"], head.get("in_model_secs"), r.error)
        r._trace, r._line, r._at, r._path, r._lineno = trace, line, at, path, lineno
        return r

    @property
    def trace(self) -> list:
        """The trace JSON (`Trace.as_json()`), parsed from the file on first use."""
        if self._trace is None:
            try:
                t = json.loads(self._line[self._at:-1])
            except ValueError as e:
                raise TesseraError(f"{self._path}:{self._lineno}: the record's trace is not JSON ({e})") from None
            except RecursionError:
                raise TesseraError(f"{self._path}:{self._lineno}: the record's trace is nested too deeply to "
                                   f"read") from None
            if not isinstance(t, list):
                raise TesseraError(f"{self._path}:{self._lineno}: the record's trace is not a list")
            self._trace, self._line = t, None
        return self._trace

    @property
    def is_valid(self) -> bool:
        """Error-free with times: a candidate that may be chosen."""
        return self.error is None and bool(self.run_secs)

    @property
    def mean_secs(self) -> float:
        """Mean of run_secs; inf for a record with an error."""
        return sum(self.run_secs) / len(self.run_secs) if self.is_valid else math.inf

    @property
    def secs(self) -> float:
        """Median of run_secs, what records are ranked by: one round stalled on a shared machine (a
        descheduled thread: a 5 us kernel's round measured 0.8 ms) does not move it, where it
        multiplies the mean; inf for a record with an error."""
        return statistics.median(self.run_secs) if self.is_valid else math.inf

    def _head(self) -> dict:
        head = {"workload_key": self.workload_key, "target": self.target, "run_secs": list(self.run_secs),
                "error": self.error, "time": self.time, "version": self.version}
        if self.pick is not None:                # only on picks: older readers see a plain record
            head["pick"] = self.pick
            head["in_model_secs"] = self.in_model_secs
        return head

    def as_json(self) -> dict:
        """The record line's object (the trace last)."""
        return {**self._head(), "trace": self.trace}

    def to_line(self) -> str:
        head = json.dumps(self._head(), separators=(",", ":"), allow_nan=False)
        text = self._line[self._at:-1] if self._trace is None else json.dumps(self._trace, separators=(",", ":"))
        return head[:-1] + _TRACE_SEP + text + "}"

    @staticmethod
    def from_json(obj) -> "TuningRecord":
        """The record of an as_json object (TesseraError when malformed)."""
        try:
            return TuningRecord._from_line(obj, None, 0, list(obj["trace"]), "record", 0)
        except (KeyError, TypeError, ValueError) as e:
            raise TesseraError(f"malformed tuning record ({type(e).__name__}: {e})") from None

    def __repr__(self):
        what = f"error={self.error['kind']}" if self.error else f"median={self.secs * 1e3:.4f} ms"
        if self.pick is not None:
            what += f", pick={self.pick}"
        return f"TuningRecord({self.workload_key}, {self.target!r}, {what})"


def _check_pick(pick, in_model_secs, error):
    """(pick, in_model_secs) checked: pick None or one of PICKS (on an error-free record),
    in_model_secs None or seconds >= 0."""
    if pick is None:
        return None, None
    if pick not in PICKS or error is not None:
        raise TesseraError(f"a record's pick is one of {PICKS} on an error-free record, got {pick!r}")
    if in_model_secs is not None:
        if isinstance(in_model_secs, bool) or not isinstance(in_model_secs, (int, float)) or \
                not math.isfinite(in_model_secs) or in_model_secs < 0:
            raise TesseraError(f"a pick's in_model_secs must be seconds >= 0, got {in_model_secs!r}")
        in_model_secs = float(in_model_secs)
    return pick, in_model_secs


def _check_error(err):
    if err is None:
        return None
    if (not isinstance(err, dict) or set(err) != {"kind", "msg"} or err["kind"] not in ERROR_KINDS
            or not isinstance(err["msg"], str)):
        raise TesseraError(f"a record's error is None or {{'kind': one of {ERROR_KINDS}, 'msg': str}}, "
                           f"got {str(err)[:120]}")
    return err


# what a line that does not load raises: malformed JSON or fields, or nesting deeper than the parsers recurse
_CORRUPT = (ValueError, KeyError, TypeError, RecursionError, TesseraError)


def _why(e: Exception) -> str:
    """The reason a line is skipped, for its warning."""
    if isinstance(e, RecursionError):
        return "its JSON is nested too deeply to read"
    return f"{type(e).__name__}: {str(e)[:200]}"


class Database:
    """Workloads and tuning records in one JSON-lines file (module docstring); opening an existing
    file loads it, so a tuner resumes where it stopped."""

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise TesseraError(f"Database: folder {folder} does not exist")
        self._lock = threading.Lock()
        self._workloads: dict = {}
        self._records: list = []
        self._by_key: dict = {}
        self._needs_newline = False
        self._warned = 0
        if os.path.isdir(self.path):
            raise TesseraError(f"Database: {self.path} is a folder; give the path of a .jsonl file")
        if os.path.exists(self.path):
            try:
                with resource_errors(f"Database: loading {self.path}"):
                    self._load()
            except OSError as e:
                raise TesseraError(f"Database: cannot read {self.path}: {e}") from None

    # ------------------------------------------------------------------ loading
    def _warn(self, lineno: int, why: str):
        self._warned += 1
        if self._warned <= _MAX_WARNINGS:
            warnings.warn(f"{self.path}:{lineno}: skipped a corrupt line ({why})", stacklevel=3)

    def _load(self):
        with open(self.path, "rb") as f:
            data = f.read()
        self._needs_newline = bool(data) and not data.endswith(b"\n")
        lines = data.decode("utf-8", "replace").split("\n")
        fast, slow = [], []           # record lines to split at the trace; other lines
        sep, n = _TRACE_SEP, len(_TRACE_SEP)
        for lineno, line in enumerate(lines, 1):
            i = line.find(sep)
            if i > 0 and line.endswith("]}"):
                fast.append((lineno, line[:i] + "}", line, i + n))
            elif line and not line.isspace():
                slow.append((lineno, line))
        enabled = gc.isenabled()
        gc.disable()   # 100k records allocate no cycles; collections would only slow the load
        try:
            try:      # every header in one parse; per line only when one of them does not parse
                heads = json.loads("[" + ",".join([f[1] for f in fast]) + "]")
            except (ValueError, RecursionError):
                heads = None
            records, path, from_line = [], self.path, TuningRecord._from_line
            for j, (lineno, head, line, at) in enumerate(fast):
                try:
                    h = heads[j] if heads is not None else json.loads(head)
                    records.append(from_line(h, line, at, None, path, lineno))
                except _CORRUPT as e:
                    self._warn(lineno, _why(e))
            extra = []
            for lineno, line in slow:
                try:
                    r = self._load_line(line, lineno)
                    if r is not None:
                        extra.append(r)
                except _CORRUPT as e:
                    self._warn(lineno, _why(e))
            if extra:   # records written in another form: back into file order
                records = sorted(records + extra, key=lambda r: r._lineno)
            for r in records:
                self._add_record(r)
        finally:
            if enabled:
                gc.enable()
        if self._warned > _MAX_WARNINGS:
            warnings.warn(f"{self.path}: {self._warned} corrupt lines skipped in all "
                          f"({self._warned - _MAX_WARNINGS} more not shown)", stacklevel=2)

    def _load_line(self, line: str, lineno: int):
        """A workload line (None), or the record of a line not in the written form (fully parsed)."""
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("a line is a JSON object")
        if "workload" in obj:
            key = obj["workload"]
            if key not in self._workloads:
                self._workloads[key] = Workload.from_json({"key": key, "func": obj["func"]})
            return None
        trace = obj["trace"]
        if not isinstance(trace, list):
            raise ValueError("trace must be a list")
        return TuningRecord._from_line(obj, None, 0, trace, self.path, lineno)

    def _add_record(self, r: TuningRecord):
        self._records.append(r)
        lst = self._by_key.get((r.workload_key, r.target))
        if lst is None:
            self._by_key[(r.workload_key, r.target)] = [r]
        else:
            lst.append(r)

    # ------------------------------------------------------------------ writing
    def _append(self, lines: list):
        """One write of the lines, flushed and fsynced (a torn tail gets its own line first)."""
        text = ("\n" if self._needs_newline else "") + "\n".join(lines) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = text.encode("utf-8")
            while data:
                n = os.write(fd, data)
                data = data[n:]
            os.fsync(fd)
        except OSError as e:
            raise TesseraError(f"Database: cannot append to {self.path}: {e}") from None
        finally:
            os.close(fd)
        self._needs_newline = False

    def commit_workload(self, func) -> Workload:
        """The Workload of func (PrimFunc, one-function IRModule, Schedule or Workload), written to the
        file the first time it is seen."""
        wl = func if isinstance(func, Workload) else Workload(func)
        with self._lock:
            known = self._workloads.get(wl.key)
            if known is not None:
                return known
            line = json.dumps({"workload": wl.key, "func": wl.as_json()["func"]}, separators=(",", ":"),
                              allow_nan=False)
            self._append([line])
            self._workloads[wl.key] = wl
        return wl

    def commit(self, records) -> None:
        """Append a batch of TuningRecords in one write (flushed and fsynced). Each record's workload
        must have been committed (so the file can rebuild its program)."""
        records = list(records)
        for r in records:
            if not isinstance(r, TuningRecord):
                raise TesseraError(f"Database.commit takes TuningRecords, got {type(r).__name__}")
            if r.workload_key not in self._workloads:
                raise TesseraError(f"Database.commit: workload {r.workload_key} is not in {self.path}; "
                                   f"commit_workload(func) first")
        if not records:
            return
        lines = [r.to_line() for r in records]
        with self._lock:
            self._append(lines)
            for r in records:
                self._add_record(r)

    # ------------------------------------------------------------------ reading
    def records(self, workload_key=None, target=None) -> list:
        """Records in file order, optionally only those of one workload (a key or Workload) and/or
        target. Their traces are read here: a record whose stored trace is unreadable is warned
        about (file and line) and dropped, so every record returned replays as JSON."""
        if isinstance(workload_key, Workload):
            workload_key = workload_key.key
        if target is not None:
            target = _target_text(target)
        if workload_key is not None and target is not None:
            found = self._by_key.get((workload_key, target), ())
        else:
            found = [r for r in self._records if (workload_key is None or r.workload_key == workload_key)
                     and (target is None or r.target == target)]
        return self._readable(found)

    def _readable(self, records) -> list:
        """records without those whose trace does not parse (warned about and dropped from the index)."""
        out, bad = [], []
        for r in records:
            if r._trace is None:
                try:
                    _ = r.trace
                except TesseraError as e:
                    warnings.warn(f"{e}; the record is skipped", stacklevel=3)
                    bad.append(r)
                    continue
            out.append(r)
        if bad:
            drop = {id(r) for r in bad}
            with self._lock:
                self._records = [r for r in self._records if id(r) not in drop]
                for r in bad:
                    lst = self._by_key.get((r.workload_key, r.target))
                    if lst is not None:
                        lst[:] = [x for x in lst if id(x) not in drop]
        return out

    def workloads(self) -> list:
        """Every workload of the file, in the order first written."""
        return list(self._workloads.values())

    def has_workload(self, key) -> bool:
        return (key.key if isinstance(key, Workload) else key) in self._workloads

    def get_workload(self, key) -> Workload:
        """The workload with this key (or of this PrimFunc); a TesseraError when the file has none."""
        key = _key_of(key)
        wl = self._workloads.get(key)
        if wl is None:
            raise TesseraError(f"{self.path} has no workload {key} ({len(self._workloads)} workloads)")
        return wl

    def get_top_k(self, workload, target, k: int = 1) -> list:
        """The k error-free records of workload on target with the smallest time (TuningRecord.secs), fastest first
        (a record whose stored trace turns out unreadable is warned about and dropped)."""
        key = _key_of(workload)
        if not isinstance(k, int) or k < 0:
            raise TesseraError(f"get_top_k: k must be an int >= 0, got {k!r}")
        valid = [r for r in self._by_key.get((key, _target_text(target)), ()) if r.is_valid]
        valid.sort(key=lambda r: r.secs)
        out = []
        for r in valid:     # traces read only until k readable ones are found
            if len(out) == k:
                break
            out.extend(self._readable([r]))
        return out

    def has_target(self, target) -> bool:
        """Whether the file holds any record for target (its text as records keep it)."""
        t = _target_text(target)
        return any(tk == t for _, tk in self._by_key)

    def get_pick(self, workload, target):
        """The workload's pick for target: its latest record when that is a pick (tune_graph's
        in-model check ran after every measurement of it), else None (see TuningRecord.pick)."""
        lst = self._by_key.get((_key_of(workload), _target_text(target)))
        if not lst or lst[-1].pick is None:
            return None
        got = self._readable([lst[-1]])
        return got[0] if got else None

    def export_best(self, path, k: int = 1) -> "Database":
        """A new database at path with each (workload, target)'s k fastest error-free records (and
        their workloads), and its pick (tune_graph's in-model choice) last where it has one: a small
        file to ship or share. path must not exist yet."""
        if os.path.exists(os.fspath(path)):
            raise TesseraError(f"export_best: {os.fspath(path)} exists; give a new file")
        out = Database(path)
        for (key, target) in list(self._by_key):
            top = self.get_top_k(key, target, k)
            pick = self.get_pick(key, target)
            if pick is not None:          # the in-model pick goes too, and last, so that it still applies
                top = [r for r in top if r is not pick] + [pick]
            if top:
                out.commit_workload(self._workloads[key])
                out.commit(top)
        return out

    def __len__(self):
        return len(self._records)

    def __repr__(self):
        return f"Database({self.path!r}: {len(self._workloads)} workloads, {len(self._records)} records)"


__all__ = ["Database", "TuningRecord", "ERROR_KINDS", "PICKS", "record_target"]
