"""The parent's handle on one measurement worker subprocess (the program in _worker.py).

A worker is `python -m tessera.autotune.measure._worker FD` in its own session (killing its process
group also kills a C compiler it runs); requests go as JSON lines to its stdin, answers come back on
a pipe of their own. Its stderr goes to a log file whose tail explains a death. `call` waits for the
answer until a deadline: past it the worker is killed (WorkerTimeout); an answer that never comes
because the process ended is a WorkerDied carrying the signal or exit code.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

from ...errors import TesseraError

STARTUP_TIMEOUT = 120.0


class WorkerDied(TesseraError):
    """The worker process ended before answering."""


class WorkerTimeout(TesseraError):
    """The worker did not answer in time (it has been killed)."""


def describe_exit(code) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class WorkerProcess:
    """One persistent worker; started on first use, restarted after it dies or is killed."""

    def __init__(self, name: str = "worker", env: dict | None = None):
        self.name, self.env = name, dict(env or {})
        self.proc = None
        self.sent_keys: set = set()      # workloads (and intrinsics) this incarnation already has
        self.prepared: dict = {}         # workloads with a reference there, oldest first (as the worker evicts)
        self.intrins: dict = {}
        self.served = 0
        self._rfd = None
        self._buf = b""
        self._log = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        self.stop()
        r, w = os.pipe()
        self._log = tempfile.TemporaryFile(prefix="tessera-worker-")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)   # the modules the parent imports
        env.update(self.env)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "tessera.autotune.measure._worker", str(w)],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._log,
                                         pass_fds=(w,), start_new_session=True, env=env)
        finally:
            os.close(w)
        self._rfd, self._buf = r, b""
        self.sent_keys, self.prepared, self.intrins, self.served = set(), {}, {}, 0
        ready = self._receive(time.monotonic() + STARTUP_TIMEOUT, "starting")
        if "ready" not in ready:
            raise WorkerDied(f"{self.name}: unexpected first message {ready}")

    def stop(self):
        """Kill the worker (and everything in its session) and forget it."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.wait()
            self.proc = None
        if self._rfd is not None:
            os.close(self._rfd)
            self._rfd = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def ensure(self):
        if not self.alive:
            self.start()

    def log_tail(self, n: int = 600) -> str:
        if self._log is None:
            return ""
        try:
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - n))
            return self._log.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def call(self, req: dict, timeout: float) -> dict:
        """Send req and wait for its answer at most `timeout` seconds."""
        self.ensure()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass   # it died: the read below reports how
        self.served += 1
        return self._receive(time.monotonic() + timeout, req.get("op", "request"))

    def _receive(self, deadline: float, what: str) -> dict:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1:]
                return json.loads(line)
            left = deadline - time.monotonic()
            ready = select.select([self._rfd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.stop()
                raise WorkerTimeout(f"{self.name}: no answer to {what} within the time limit")
            data = os.read(self._rfd, 1 << 16)
            if not data:
                code = self.proc.wait()
                tail = self.log_tail()
                self.stop()
                raise WorkerDied(f"{self.name} {describe_exit(code)} during {what}"
                                 + (f"; its last words: {tail[-400:]}" if tail else ""))
            self._buf += data

    def __del__(self):
        try:
            self.stop()
        except Exception:  # interpreter shutdown: nothing left to do
            pass
