"""Starts sanitize_driver.py under AddressSanitizer + UBSan and reads back what happened to each case."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DRIVER = HERE / "sanitize_driver.py"
TIMEOUT_S = 600


@dataclass
class Outcome:
    """What each case did: index -> label; passed indices; failed/crashed index -> report."""

    labels: dict = field(default_factory=dict)
    passed: set = field(default_factory=set)
    failed: dict = field(default_factory=dict)
    crashed: dict = field(default_factory=dict)

    def problems(self) -> list:
        out = [f"{self.labels.get(i, '?')} (case {i}): {why}" for i, why in sorted(self.failed.items())]
        out += [f"{self.labels.get(i, '?')} (case {i}) CRASHED under the sanitizers:\n{rep}"
                for i, rep in sorted(self.crashed.items())]
        return out


def sanitizer_env() -> dict:
    from tessera.errors import TesseraError
    from tessera.toolchain import asan_runtime

    try:
        runtime = asan_runtime()
    except TesseraError as e:
        pytest.skip(f"no AddressSanitizer runtime: {e}")
    return dict(os.environ, LD_PRELOAD=runtime,
                ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86",
                UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=87",
                PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def selected_groups(items) -> list:
    """The op groups of the selected test_op_kernels_under_asan_and_ubsan items, in GROUPS order."""
    from sanitize_cases import GROUPS

    groups = {item.callspec.params["group"] for item in items
              if getattr(item, "originalname", None) == "test_op_kernels_under_asan_and_ubsan"}
    return [g for g in GROUPS if g in groups]


_PREBUILDS: dict = {}     # group -> the thread compiling its op kernels


def start_prebuild(groups) -> None:
    """Start compiling the op kernels of these groups (those not started yet in this process) into
    the kernel cache, in a background thread of this process (without the ASan runtime; see
    sanitize_driver.prebuild_ops): the C compilers run while the tests before run_cases("ops", ...)
    do. Whatever goes wrong here is left for the driver, which builds the same units, to report
    per case."""
    import threading

    from sanitize_driver import prebuild_ops

    todo = [g for g in groups if g not in _PREBUILDS]
    if not todo:
        return

    def work():
        try:
            prebuild_ops(todo)
        except Exception:       # noqa: BLE001 - the driver meets it again and reports it
            pass

    t = threading.Thread(target=work, name="sanitize-prebuild", daemon=True)
    for g in todo:
        _PREBUILDS[g] = t
    t.start()


def prebuild_ops(groups) -> None:
    """The op kernels of these groups in the kernel cache (started by start_prebuild, or now)."""
    start_prebuild(groups)
    for g in groups:
        _PREBUILDS[g].join()


def _report(stderr: str) -> str:
    """The sanitizer's report out of stderr (from its first line), else the tail."""
    m = re.search(r"^(==\d+==ERROR: .*|.*runtime error: .*)$", stderr, re.M)
    text = stderr[m.start():] if m else stderr[-3000:]
    return text[:6000]


def run_cases(kind: str, what: str, total: int | None = None) -> Outcome:
    """Run the driver over every case of (kind, what); after a crash, go on from the next case."""
    env = sanitizer_env()
    if kind == "ops":
        prebuild_ops([what])
    res, start = Outcome(), 0
    while True:
        proc = subprocess.run([sys.executable, str(DRIVER), kind, what, "--start", str(start)], env=env,
                              cwd=str(HERE), capture_output=True, text=True, timeout=TIMEOUT_S)
        current, done = None, False
        for line in proc.stdout.splitlines():
            head, _, rest = line.partition(" ")
            if head == "CASE":
                i, _, label = rest.partition(" ")
                current = int(i)
                res.labels.setdefault(current, label)
            elif head == "PASS":
                res.passed.add(int(rest))
                current = None
            elif head == "FAIL":
                i, _, why = rest.partition(" ")
                res.failed[int(i)] = why
                current = None
            elif head == "DONE":
                done = True
        if done and proc.returncode == 0:
            break
        if current is None:       # died outside any case: the driver itself is broken
            raise AssertionError(f"the sanitizer driver ({kind} {what}) exited with {proc.returncode} outside "
                                 f"a case:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        res.crashed[current] = f"exit status {proc.returncode}\n" + _report(proc.stderr)
        start = current + 1
        if total is not None and start >= total:
            break
    return res
