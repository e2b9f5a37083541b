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

The transport: Dask ships tasks as pickled functions, so whoever can reach the scheduler's port (or a
worker's) can run any code as the workers' user. A pool across machines therefore runs on Dask's TLS
(`tls://` addresses; every side presents a certificate signed by the pool's CA, `pool_security`);
plain `tcp://` is accepted only to a loopback address unless the caller allows it (`allow_insecure`,
with a warning), and the worker module applies the same rule.

    runner = DaskRunner("tls://scheduler:8786", security=("ca.pem", "client.pem", "client.key"))
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import socket
import threading
import warnings

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
# the transport: TLS, or plain TCP on this machine only unless allowed
# ---------------------------------------------------------------------------------------------
_ENCRYPTED = ("tls", "wss")


def pool_security(security=None, role: str = "client"):
    """The distributed.security.Security a `role` ("client": the tuner, or "worker") reaches the pool with.

    security: a Security, used as it is; a tuple of PEM paths (ca, cert) or (ca, cert, key), the CA
    that signed the pool's certificates and this side's certificate and key (None or left out when
    the key is inside cert's file), TLS then required; None: Dask's configuration
    (distributed.comm.tls.*, distributed.comm.require-encryption), plain TCP where it sets nothing."""
    try:
        from distributed.security import Security
    except ImportError:
        raise TesseraError("the Dask pool needs the 'distributed' package (pip install 'tessera[tune]')") from None
    if role not in ("client", "worker"):
        raise TesseraError(f"pool_security: role must be 'client' or 'worker', got {role!r}")
    if security is None:
        return Security()
    if isinstance(security, Security):
        return security
    if not isinstance(security, (tuple, list)) or len(security) not in (2, 3):
        raise TesseraError(f"the Dask pool's security must be a distributed.security.Security or the PEM paths "
                           f"(ca, cert) or (ca, cert, key), got {security!r}")
    ca, cert, key = (tuple(security) + (None,))[:3]
    for what, path in (("CA certificate", ca), ("certificate", cert), ("key", key)):
        if path is None and what == "key":
            continue
        if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
            raise TesseraError(f"the Dask pool's {what} {path!r} is not a file")
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise TesseraError(f"the Dask pool's {what} {os.fspath(path)!r} cannot be read: {e}") from None
    files = {f"tls_{role}_cert": os.fspath(cert)}
    if key is not None:
        files[f"tls_{role}_key"] = os.fspath(key)
    return Security(require_encryption=True, tls_ca_file=os.fspath(ca), **files)


def check_pool_address(address: str, security, allow_insecure: bool = False, role: str = "client",
                       how_to_allow: str = "DaskRunner(allow_insecure=True), tessera tune --pool-insecure",
                       how_to_secure: str = "DaskRunner(security=(ca, cert, key)), tessera tune --pool-ca/--pool-cert/"
                                            "--pool-key"):
    """Refuse to reach the Dask pool at address in a way that lets others run code as its workers' user:
    a tls:// address without this side's certificates, or a plain one (tcp://, ws://, ucx://) to a
    host that is not this machine's loopback unless allow_insecure; then the warning to give (what it
    allows) is returned, else None. how_to_allow / how_to_secure: how the caller's user says so."""
    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address)
    except (ValueError, TypeError) as e:
        raise TesseraError(f"the Dask pool's address {address!r} is not a scheduler address such as "
                           f"tls://host:8786: {e}") from None
    if scheme == "inproc":
        return None
    if scheme in _ENCRYPTED:
        if not (security.tls_ca_file and getattr(security, f"tls_{role}_cert")):
            raise TesseraError(f"the Dask pool at {address} is reached over TLS, which needs the CA certificate "
                               f"that signed the pool's certificates and this {role}'s certificate and key "
                               f"({how_to_secure}, or Dask's configuration distributed.comm.tls.*)")
        return None
    try:
        host = parse_host_port(loc)[0]
    except (ValueError, TypeError) as e:
        raise TesseraError(f"the Dask pool's address {address!r} has no host and port: {e}") from None
    if _is_loopback(host):
        return None
    risk = (f"the Dask pool at {address} is plain {scheme}:// to another machine: anyone who can reach that "
            f"scheduler's port (or a worker's) can submit tasks, and Dask ships pickled functions, so they run "
            f"arbitrary code as the workers' user; nothing authenticates the scheduler or its results either")
    if not allow_insecure:
        raise TesseraError(f"refusing: {risk}. Use tls:// with certificates ({how_to_secure}), or accept the "
                           f"risk on a network only you can reach with {how_to_allow}")
    return f"{risk} (allowed by {how_to_allow})"


def _is_loopback(host: str) -> bool:
    """Whether host is this machine's loopback (an address, or a name that resolves only to loopback)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


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
    address_or_client: a scheduler address ("tls://host:8786") or a distributed.Client. The timing
    settings (and env) are LocalRunner's, applied on the device; build_timeout is the device-side LocalBuilder's; retries: Dask
    retries of a task that raises (a dead worker's task is rerun elsewhere regardless);
    connect_timeout: seconds to reach the scheduler given by address.
    security: how to reach it (pool_security): a distributed.security.Security, the PEM paths (ca, cert,
    key), or None for Dask's configuration. allow_insecure: accept a plain tcp:// scheduler on another
    machine (with a warning; refused otherwise: anyone reaching it runs code as the workers' user)."""

    builds_remotely = True

    def __init__(self, address_or_client, number: int = 3, repeat: int = 1, min_repeat_ms: int = 100,
                 timeout: float = 10.0, flush_cache: bool = False, check: bool = True, seed: int = 0,
                 ref_timeout: float = 600.0, build_timeout: float = 30.0, retries: int = 2, env: dict | None = None,
                 connect_timeout: float = 30.0, warmup: bool = True, security=None, allow_insecure: bool = False):
        try:
            from distributed import Client
        except ImportError:
            raise TesseraError("DaskRunner needs the 'distributed' package (pip install 'tessera[tune]')") from None
        if not isinstance(address_or_client, (str, Client)):
            raise TesseraError(f"DaskRunner takes a scheduler address or a distributed.Client, got "
                               f"{type(address_or_client).__name__}")
        if isinstance(address_or_client, str):
            security = pool_security(security)
            risk = check_pool_address(address_or_client, security, allow_insecure)
        else:
            risk = check_pool_address(address_or_client.scheduler.address, address_or_client.security, allow_insecure)
        if risk:
            warnings.warn(risk, RuntimeWarning, stacklevel=2)
        self._local = LocalRunner(number, repeat, min_repeat_ms, timeout, flush_cache, check, seed, ref_timeout,
                                  env=env, warmup=warmup)
        self._local_settings = self._local.settings()
        if not isinstance(build_timeout, (int, float)) or build_timeout <= 0:
            raise TesseraError(f"DaskRunner: build_timeout must be > 0 seconds, got {build_timeout!r}")
        self.build_timeout, self.retries = float(build_timeout), int(retries)
        if isinstance(address_or_client, Client):
            self.client, self._own_client = address_or_client, False
        else:
            try:
                self.client = Client(address_or_client, timeout=connect_timeout, security=security)
            except Exception as e:  # noqa: BLE001 - whatever answered there is not a pool this runner can use
                raise TesseraError(f"DaskRunner: cannot reach the Dask scheduler at {address_or_client}: "
                                   f"{type(e).__name__}: {e}") from None
            self._own_client = True
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
            address = self.client.scheduler.address
            tls = " --tls-ca-file CA.pem --tls-cert CERT.pem --tls-key KEY.pem" if address.startswith("tls://") else ""
            raise TesseraError(f"DaskRunner: no worker of the Dask pool announces target {target!r} (resource "
                               f"{res}); start one on a device with: python -m "
                               f"tessera.autotune.measure.dask_worker {address} --target \"{target}\"{tls}")
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


__all__ = ["DaskRunner", "resource_name", "measure_task", "pool_security", "check_pool_address"]
