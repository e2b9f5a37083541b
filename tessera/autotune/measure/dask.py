"""DaskRunner: the distributed device pool (the TVM paper's RPC tracker and device pool) on Dask.

    # on each device: a Dask worker announcing its target as a resource
    python -m tessera.autotune.measure.dask_worker tcp://scheduler:8786 --target "c -num-threads=2"
    # in the tuner
    runner = DaskRunner("tcp://scheduler:8786", number=3, repeat=1, min_repeat_ms=100)
    results = measure(candidates, "c -num-threads=2", runner=runner)

Each candidate is one Dask task that asks for the resource of its target (`resource_name(target)`),
so only a worker announcing that target runs it, one at a time (a device measures alone). On the
worker the task builds and measures the candidate with a LocalBuilder and LocalRunner of that worker
process (their own subprocesses: a crashing candidate takes down only the measuring subprocess),
so the records are the same as the local pool's: errors, correctness verdicts and all. A worker
that dies mid-measurement loses its task to the scheduler, which runs it again on another worker
with the resource (Dask's own recovery; `retries` adds retries for tasks that raise).

Candidates are built on the device, not here, because (1) "c" and "-mcpu=native" mean the CPU that
runs the code, which only the device knows, so a library built on the tuning host could use
instructions the device lacks or miss ones it has; (2) the build capacity grows with the pool
instead of being capped by the tuning host's cores; (3) a device's on-disk compiler cache serves
its repeated candidates. What travels is small JSON: the workload (IR JSON), the trace, the tensor
intrinsics the trace uses, and the runner settings; what comes back is the MeasureResult.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading

from ...errors import TesseraError
from ...ir import from_json, to_json
from ...target import Target
from ...tir import TensorIntrin
from ..workload import Workload
from .builder import IntrinsicShipper, LocalBuilder
from .candidate import MeasureCandidate, MeasureResult, intrinsics_used
from .runner import LocalRunner, warn_if_busy


def resource_name(target) -> str:
    """The Dask resource a worker measuring for `target` announces (and each of its tasks asks for):
    `tessera-<kind>-<12 hex digits of the canonical target text>`."""
    t = Target(target)
    digest = hashlib.sha256(str(t).encode()).hexdigest()[:12]
    return f"tessera-{re.sub(r'[^A-Za-z0-9]', '', t.kind)}-{digest}"


# ---------------------------------------------------------------------------------------------
# the worker side: runs inside a Dask worker process
# ---------------------------------------------------------------------------------------------
_WORKER_STATE = {"workloads": {}, "pools": {}, "intrins": {}}
_WORKER_LOCK = threading.Lock()


def _worker_pool(settings: dict):
    key = json.dumps(settings, sort_keys=True)
    pool = _WORKER_STATE["pools"].get(key)
    if pool is None:
        s = dict(settings)
        build_timeout = s.pop("build_timeout")
        pool = (LocalBuilder(max_workers=1, timeout=build_timeout), LocalRunner(**s))
        _WORKER_STATE["pools"][key] = pool
    return pool


def measure_task(payload: dict) -> dict:
    """One candidate built and measured on this worker (a Dask task); MeasureResult.as_json()."""
    try:
        from distributed import get_worker

        where = get_worker().address
    except (ImportError, ValueError):
        where = "?"
    with _WORKER_LOCK:
        for it in payload.get("intrinsics", ()):
            if _WORKER_STATE["intrins"].get(it["name"]) != it["sig"]:
                TensorIntrin.register(it["name"], from_json(it["desc"]), from_json(it["impl"]), override=True,
                                      c_source=it["c_source"], features=tuple(it["features"]), doc=it.get("doc", ""))
                _WORKER_STATE["intrins"][it["name"]] = it["sig"]
        wl = _WORKER_STATE["workloads"].get(payload["key"])
        if wl is None:
            wl = Workload(from_json(json.loads(payload["func"])), payload["key"])
            _WORKER_STATE["workloads"][payload["key"]] = wl
        builder, runner = _worker_pool(payload["settings"])
        cand = MeasureCandidate(wl, payload["trace"], payload.get("weights", ()))
        target = payload["target"]
        (br,) = builder.build([cand], target)
        res = runner.run_one(cand, br, str(Target(target)))
    out = res.as_json()
    out["worker"] = where
    return out


# ---------------------------------------------------------------------------------------------
# the tuner side
# ---------------------------------------------------------------------------------------------
class DaskRunner:
    """Measures candidates on the Dask workers that announce the target (module docstring).
    address_or_client: a scheduler address ("tcp://host:8786") or a distributed.Client. The timing
    settings (and env) are LocalRunner's, applied on the device; build_timeout is the device-side LocalBuilder's; retries: Dask
    retries of a task that raises (a dead worker's task is rerun elsewhere regardless);
    connect_timeout: seconds to reach the scheduler given by address."""

    builds_remotely = True

    def __init__(self, address_or_client, number: int = 3, repeat: int = 1, min_repeat_ms: int = 100,
                 timeout: float = 10.0, flush_cache: bool = False, check: bool = True, seed: int = 0,
                 ref_timeout: float = 600.0, build_timeout: float = 30.0, retries: int = 2, env: dict | None = None,
                 connect_timeout: float = 30.0, warmup: bool = True):
        try:
            from distributed import Client
        except ImportError:
            raise TesseraError("DaskRunner needs the 'distributed' package (pip install 'tessera[tune]')") from None
        self._local = LocalRunner(number, repeat, min_repeat_ms, timeout, flush_cache, check, seed, ref_timeout,
                                  env=env, warmup=warmup)
        self._local_settings = self._local.settings()
        if not isinstance(build_timeout, (int, float)) or build_timeout <= 0:
            raise TesseraError(f"DaskRunner: build_timeout must be > 0 seconds, got {build_timeout!r}")
        self.build_timeout, self.retries = float(build_timeout), int(retries)
        if isinstance(address_or_client, Client):
            self.client, self._own_client = address_or_client, False
        elif isinstance(address_or_client, str):
            try:
                self.client = Client(address_or_client, timeout=connect_timeout)
            except (OSError, TimeoutError) as e:
                raise TesseraError(f"DaskRunner: cannot reach the Dask scheduler at {address_or_client}: {e}") from None
            self._own_client = True
        else:
            raise TesseraError(f"DaskRunner takes a scheduler address or a distributed.Client, got "
                               f"{type(address_or_client).__name__}")
        self._intrins = IntrinsicShipper()
        self._func_text = {}

    def settings(self) -> dict:
        s = dict(self._local_settings)
        s["build_timeout"] = self.build_timeout
        return s

    def workers_for(self, target) -> list:
        """Addresses of the workers announcing target's resource."""
        res = resource_name(target)
        info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) else self.client.scheduler_info()
        return sorted(a for a, w in info.get("workers", {}).items() if w.get("resources", {}).get(res, 0) >= 1)

    def _payload(self, cand: MeasureCandidate, target: str) -> dict:
        key = cand.workload.key
        text = self._func_text.get(key)
        if text is None:
            text = self._func_text[key] = json.dumps(to_json(cand.workload.func), separators=(",", ":"))
        intrins = [p for p in (self._intrins.payload(n) for n in intrinsics_used(cand.trace)) if p is not None]
        return {"key": key, "func": text, "trace": cand.trace, "weights": list(cand.weights), "target": target,
                "intrinsics": intrins,
                "settings": self.settings()}

    def measure(self, candidates, target) -> list:
        """Build and measure candidates on the pool: one MeasureResult per candidate, in order."""
        candidates = list(candidates)
        for c in candidates:
            if not isinstance(c, MeasureCandidate):
                raise TesseraError(f"DaskRunner.measure takes MeasureCandidates, got {type(c).__name__}")
        if not candidates:
            return []
        target = str(Target(target))
        res = resource_name(target)
        if not self.workers_for(target):
            raise TesseraError(f"DaskRunner: no worker of the Dask pool announces target {target!r} (resource "
                               f"{res}); start one on a device with: python -m "
                               f"tessera.autotune.measure.dask_worker {self.client.scheduler.address} "
                               f"--target \"{target}\"")
        futures = self.client.map(measure_task, [self._payload(c, target) for c in candidates],
                                  resources={res: 1}, retries=self.retries, pure=False)
        out = []
        for f in futures:
            try:
                out.append(MeasureResult.from_json(f.result()))
            except Exception as e:  # KilledWorker and the like: this candidate only
                out.append(MeasureResult((), "crash", f"the Dask task failed: {type(e).__name__}: {e}", worker="?"))
        warn_if_busy(out)
        return out

    def run(self, candidates, build_results, target) -> list:
        """LocalRunner's signature: candidates whose local build failed keep that error; the others are
        built again and measured on the pool (see the module docstring for why)."""
        candidates, build_results = list(candidates), list(build_results)
        if len(candidates) != len(build_results):
            raise TesseraError(f"DaskRunner.run: {len(candidates)} candidates but {len(build_results)} build results")
        todo = [i for i, b in enumerate(build_results) if b is None or b.ok]
        remote = self.measure([candidates[i] for i in todo], target)
        out = [None] * len(candidates)
        for i, r in zip(todo, remote):
            out[i] = r
        for i, b in enumerate(build_results):
            if out[i] is None:
                out[i] = MeasureResult((), b.error_kind, b.error_msg, b.build_secs, b.compile_secs)
        return out

    def close(self):
        if self._own_client:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"DaskRunner({self.client.scheduler.address}, {self._local!r})"


def _takes_n_workers(client) -> bool:
    import inspect

    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):
        return False


__all__ = ["DaskRunner", "resource_name", "measure_task"]
