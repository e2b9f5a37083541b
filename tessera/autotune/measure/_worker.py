"""The measurement worker program: `python -m tessera.autotune.measure._worker FD`.

It reads one JSON request per line on stdin and writes one JSON answer per line to file descriptor
FD (stdout stays free for whatever a kernel prints). Builder workers answer "build" (replay the
trace, lower, render, compile through the build layer); the runner's worker answers "prepare" (the
workload's reference outputs) and "run" (load a library, check its outputs, time it in C). State
kept between requests: workloads by key, tensor intrinsics shipped by the parent, references,
loaded modules. The parent kills it on a timeout and restarts it when it dies (a crashing candidate
takes only this process down); it exits when its stdin closes or its parent dies.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import OrderedDict

from ...backend import build as build_artifact
from ...backend import generate, get_backend
from ...errors import BuildError, TesseraError
from ...ir import from_json
from ...ops.gpu import schedule_gpu_default
from ...runtime.contention import STALL_RATIO, WaitMeter, split_stalls
from ...runtime.module import Module
from ...target import Target
from ...tir import Schedule, TensorIntrin
from ...tir.schedule import Trace
from .check import EntryTimer, Reference, reference_folder

MAX_REFERENCES = 4
MAX_MODULES = 256
STALL_RETRIES = 2       # timings taken again while they stall or the machine is busy


def _die_with_parent():
    """Exit when the parent process is gone, even while a kernel runs (a hung candidate is not left
    spinning): a thread polls the parent's pid (ctypes calls release the GIL). Not PR_SET_PDEATHSIG:
    that fires when the parent's *thread* that started us ends, and builders start workers from
    short-lived threads."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="tessera-parent-watch").start()


class State:
    def __init__(self):
        self.funcs = {}
        self.intrins = {}
        self.refs = OrderedDict()
        self.modules = OrderedDict()
        self.timers = {}

    def func(self, req):
        key = req["key"]
        f = self.funcs.get(key)
        if f is None:
            text = req.get("func")
            if text is None:
                raise TesseraError(f"worker: workload {key} was never sent")
            f = self.funcs[key] = from_json(json.loads(text))
        return f

    def register_intrinsics(self, items):
        for it in items or ():
            name, sig = it["name"], it["sig"]
            if self.intrins.get(name) == sig:
                continue
            TensorIntrin.register(name, from_json(it["desc"]), from_json(it["impl"]), override=True,
                                  c_source=it["c_source"], features=tuple(it["features"]), doc=it.get("doc", ""))
            self.intrins[name] = sig

    def module(self, path, target=None):
        m = self.modules.get(path)
        if m is None:
            t = Target(target) if target is not None else None
            m = self.modules[path] = get_backend(t).load(path) if t is not None and is_gpu(t) else Module(path)
            if len(self.modules) > MAX_MODULES:
                self.modules.popitem(last=False)
        return m


def is_gpu(target: Target) -> bool:
    """Whether candidates for target are GPU programs (built and run through the GPU backends)."""
    return target.kind in ("opencl", "cuda")


def do_build(state: State, req) -> dict:
    t0 = time.perf_counter()
    func = state.func(req)
    state.register_intrinsics(req.get("intrinsics"))
    target = Target(req["target"])
    try:
        sch = Schedule(func)
        Trace.apply_json_to_schedule(req["trace"], sch)
    except TesseraError as e:
        return {"error_kind": "invalid", "error_msg": str(e), "build_secs": time.perf_counter() - t0}
    except Exception as e:  # a trace that trips the schedule code is still only this candidate's error
        return {"error_kind": "invalid", "error_msg": f"replaying the trace raised {type(e).__name__}: {e}",
                "build_secs": time.perf_counter() - t0}
    try:
        src = generate(sch, target)
        t1 = time.perf_counter()
        path = get_backend(target).compile(src)
    except BuildError as e:
        return {"error_kind": "build", "error_msg": str(e), "build_secs": time.perf_counter() - t0}
    except TesseraError as e:
        return {"error_kind": "build", "error_msg": f"lowering failed: {e}", "build_secs": time.perf_counter() - t0}
    t2 = time.perf_counter()
    return {"path": path, "func_name": src.functions[0].name, "build_secs": t2 - t0, "compile_secs": t2 - t1}


def _reference_artifact(func, target: Target):
    """The untuned program built for target. A GPU program needs its loops bound to run at all: its
    reference is the default GPU schedule (ops.gpu), or, where that does not build (a block
    auto_bind cannot bind), the untuned program on the host CPU (target "c")."""
    if not is_gpu(target):
        return build_artifact(func, target)
    try:
        return build_artifact(schedule_gpu_default(Schedule(func), target), target)
    except TesseraError:
        return build_artifact(func, Target("c"))


def do_prepare(state: State, req) -> dict:
    key = req["key"]
    if key in state.refs:
        return {"ok": True}
    func = state.func(req)
    ref = Reference(func, int(req["seed"]))
    target = Target(req["target"])
    art = _reference_artifact(func, target)
    # the cache is keyed by the untuned library itself (named by a hash of its source and flags), so a
    # change of lowering or code generation computes the reference again
    ref.compute_expected(art.module.get_function(art.source.functions[0].name),
                         reference_folder(key, os.path.basename(art.path), int(req["seed"])))
    state.refs[key] = ref
    if len(state.refs) > MAX_REFERENCES:
        state.refs.popitem(last=False)
    return {"ok": True}


def do_run(state: State, req) -> dict:
    """Load, run once, check, time. "kernel_secs": the time spent in the candidate's calls (the
    checked call and the timer calls), so the parent can tell its own overhead apart. A timing whose
    rounds stalled or during which the machine was busy is taken again (settled_time); "remeasured"
    says how often, "busy" that even the last one was contended."""
    started = time.perf_counter()
    ref = state.refs.get(req["key"])
    if ref is None:
        raise TesseraError(f"worker: workload {req['key']} was not prepared")
    gpu = is_gpu(Target(req["target"]))
    if gpu and req.get("flush"):
        return {"error_kind": "run", "error_msg": f"flush_cache applies to CPU targets; target {req['target']!r} "
                                                  f"is timed on its device"}
    try:
        mod = state.module(req["path"], req["target"])
        fn = mod.get_function(req["func_name"])
        args = ref.fresh_args()
        with WaitMeter() as checked:
            fn(*args)
        kernel = checked.wall
    except TesseraError as e:
        return {"error_kind": "run", "error_msg": str(e)}
    if req.get("check", True):
        bad = ref.compare(args)
        if bad is not None:
            return {"error_kind": "wrong_result", "error_msg": bad, "kernel_secs": kernel}
    cutoff = req.get("cutoff_secs")
    if cutoff is not None and kernel > cutoff and not checked.busy:
        return {"run_secs": [kernel], "kernel_secs": kernel}  # a sure loser: its checked call is its time
    flush = req.get("flush") or False       # True, False or the argument positions to evict

    def time_rounds() -> list:
        if not gpu and (flush or not req.get("warmup", True)):
            timer = state.timers.get(req["target"])
            if timer is None:
                timer = state.timers[req["target"]] = EntryTimer(req["target"])
            return timer.time(fn, mod, args, req["number"], req["repeat"], req["min_repeat_ms"],
                              flush=flush, warmup=req.get("warmup", True))
        return list(fn.time(args, req["number"], req["repeat"], req["min_repeat_ms"]).results)
    # re-measuring never makes a candidate run past the runner's timeout: the attempts fit in half of it
    budget = None if req.get("timeout") is None else 0.5 * req["timeout"] - (time.perf_counter() - started)
    try:
        secs, remeasured, busy, spent = settled_time(time_rounds, budget=budget)
    except TesseraError as e:
        return {"error_kind": "run", "error_msg": str(e)}
    return {"run_secs": secs, "kernel_secs": kernel + spent, "remeasured": remeasured, "busy": busy}


def settled_time(time_rounds, retries: int = STALL_RETRIES, pause: float = 0.02,
                 budget: float | None = None) -> tuple:
    """(seconds per round, times re-measured, still busy, seconds spent timing): time_rounds() is
    taken again, after a growing pause, while its rounds stall (contention.split_stalls) or the
    machine was busy across it (its threads waited for a CPU), up to `retries` times and while
    another attempt fits in `budget` seconds of timing (None: no bound). A stall never becomes the
    time: the rounds come from the least contended attempts first, without their stalls (as many as
    one attempt has, where the attempts have that many)."""
    attempts, spent = [], 0.0
    for k in range(retries + 1):
        with WaitMeter() as m:
            secs = time_rounds()
        spent += m.wall
        if not split_stalls(secs)[1] and not m.busy:
            return secs, k, False, spent
        attempts.append((m.busy, m.share or 0.0, secs))
        wait = pause * 2 ** k
        if k == retries or (budget is not None and spent + wait + m.wall > budget):
            break
        time.sleep(wait)          # a moment for the other work to pass
        spent += wait
    attempts.sort(key=lambda a: a[:2])
    fastest = min(s for a in attempts for s in a[2])
    kept, busy = [], False
    for was_busy, _, secs in attempts:
        if len(kept) < len(secs):
            busy |= was_busy
            kept += [s for s in secs if s <= STALL_RATIO * fastest][:len(secs) - len(kept)]
    return kept, len(attempts) - 1, busy, spent


HANDLERS = {"build": do_build, "prepare": do_prepare, "run": do_run}


def main():
    out = os.fdopen(int(sys.argv[1]), "w", encoding="utf-8")
    _die_with_parent()
    state = State()

    def answer(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    answer({"ready": os.getpid()})
    for line in sys.stdin:
        try:
            req = json.loads(line)
            resp = HANDLERS[req["op"]](state, req)
        except Exception as e:  # reported to the parent, which decides
            resp = {"fault": f"{type(e).__name__}: {e}"}
        answer(resp)


if __name__ == "__main__":
    main()
