"""LocalBuilder: candidates built in parallel in persistent worker processes.

    builder = LocalBuilder(max_workers=2, timeout=30)
    results = builder.build(candidates, "c -num-threads=2")    # one BuildResult per candidate

Each worker replays a candidate's trace on its workload (sent as JSON once per worker and kept by
key), lowers and renders it through the build layer (`tessera.backend.generate`) and compiles it
with the target's backend (the on-disk compiler cache: a candidate built before costs no compiler
run). A trace that does not replay is an "invalid" result, a compiler error a "build" result with
BuildError's message, a build past `timeout` seconds a "timeout" (the worker and its compiler are
killed, and the worker restarted). Tensor intrinsics a trace uses travel with it (desc and impl as
IR JSON, the C source), so intrinsics registered at run time in the tuning process build too.
"""
from __future__ import annotations

import hashlib
import json
import queue
import threading

from ...errors import TesseraError
from ...ir import to_json
from ...target import Target, host_cores
from ...tir import TensorIntrin
from ._proc import WorkerDied, WorkerProcess, WorkerTimeout
from .candidate import BuildResult, MeasureCandidate, intrinsics_used


def intrinsic_payload(intrin: TensorIntrin) -> dict:
    """A registered tensor intrinsic as JSON (what a worker registers again)."""
    body = {"name": intrin.name, "desc": to_json(intrin.desc), "impl": to_json(intrin.impl),
            "c_source": intrin.c_source, "features": list(intrin.features), "doc": intrin.doc}
    body["sig"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    return body


class IntrinsicShipper:
    """The payloads of the intrinsics a trace uses that a given worker does not have yet."""

    def __init__(self):
        self._cache = {}   # name -> (intrin object, payload)

    def payload(self, name):
        intrin = TensorIntrin.get(name, allow_missing=True)
        if intrin is None:
            return None
        got = self._cache.get(name)
        if got is None or got[0] is not intrin:
            got = self._cache[name] = (intrin, intrinsic_payload(intrin))
        return got[1]

    def for_worker(self, trace, have: dict) -> list:
        out = []
        for name in intrinsics_used(trace):
            p = self.payload(name)
            if p is not None and have.get(name) != p["sig"]:
                out.append(p)
                have[name] = p["sig"]
        return out


class LocalBuilder:
    """Builds candidates in `max_workers` persistent processes (default: one per usable core)."""

    def __init__(self, max_workers: int | None = None, timeout: float = 30.0):
        n = host_cores() if max_workers is None else max_workers
        if not isinstance(n, int) or n < 1:
            raise TesseraError(f"LocalBuilder: max_workers must be an int >= 1, got {max_workers!r}")
        if not timeout or timeout <= 0:
            raise TesseraError(f"LocalBuilder: timeout must be > 0 seconds, got {timeout!r}")
        self.max_workers, self.timeout = n, float(timeout)
        self._workers = [WorkerProcess(f"builder worker {i}") for i in range(n)]
        self._func_text = {}
        self._intrins = IntrinsicShipper()
        self._lock = threading.Lock()

    def _func_json(self, wl) -> str:
        text = self._func_text.get(wl.key)
        if text is None:
            text = self._func_text[wl.key] = json.dumps(to_json(wl.func), separators=(",", ":"))
        return text

    def _build_one(self, worker: WorkerProcess, cand: MeasureCandidate, target: str) -> BuildResult:
        key = cand.workload.key
        if not worker.alive:
            worker.start()
        req = {"op": "build", "key": key, "trace": cand.trace, "target": target,
               "func": None if key in worker.sent_keys else self._func_json(cand.workload),
               "intrinsics": self._intrins.for_worker(cand.trace, worker.intrins)}
        try:
            ans = worker.call(req, self.timeout)
        except WorkerTimeout:
            return BuildResult(None, None, "timeout", f"the build took longer than {self.timeout:g} s "
                                                      f"(the builder and its compiler were killed)", self.timeout)
        except WorkerDied as e:
            return BuildResult(None, None, "build", str(e))
        worker.sent_keys.add(key)
        if "fault" in ans:
            return BuildResult(None, None, "build", f"{worker.name}: {ans['fault']}")
        if ans.get("error_kind"):
            return BuildResult(None, None, ans["error_kind"], ans["error_msg"], ans.get("build_secs", 0.0))
        return BuildResult(ans["path"], ans["func_name"], None, None, ans["build_secs"], ans["compile_secs"])

    def build(self, candidates, target) -> list:
        """One BuildResult per candidate, in order (candidates built in parallel)."""
        candidates = list(candidates)
        for c in candidates:
            if not isinstance(c, MeasureCandidate):
                raise TesseraError(f"LocalBuilder.build takes MeasureCandidates, got {type(c).__name__}")
        target = str(Target(target))
        results = [None] * len(candidates)
        if not candidates:
            return results
        with self._lock:     # one batch at a time: the workers are this builder's
            todo = queue.SimpleQueue()
            for i, c in enumerate(candidates):
                todo.put((i, c))
            workers = self._workers[:min(len(candidates), len(self._workers))]
            failures = []

            def serve(worker):
                try:
                    while True:
                        try:
                            i, c = todo.get_nowait()
                        except queue.Empty:
                            return
                        results[i] = self._build_one(worker, c, target)
                except BaseException as e:  # re-raised in the caller's thread
                    failures.append(e)

            if len(workers) == 1:
                serve(workers[0])
            else:
                threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in workers]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            if failures:
                raise failures[0]
        return results

    def close(self):
        """Stop the worker processes (they start again on the next build)."""
        for w in self._workers:
            w.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"LocalBuilder(max_workers={self.max_workers}, timeout={self.timeout:g})"


__all__ = ["LocalBuilder", "intrinsic_payload", "IntrinsicShipper"]
