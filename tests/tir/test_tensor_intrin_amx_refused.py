"""The AMX int8 kernels where Linux refuses AMX to the process (a seccomp filter, a kernel without
XTILEDATA): the GEMM tile and the convolution rows run their VNNI fallback and give the same integers.
A small launcher installs a seccomp filter that answers arch_prctl(ARCH_REQ_XCOMP_PERM) with EPERM, then
runs Python: an AMX instruction without the permission would kill the process (SIGILL)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tessera.tir.tensor_intrin.x86_qconv import amx_for

LAUNCHER = r"""
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* arch_prctl(ARCH_REQ_XCOMP_PERM, ...) fails with EPERM; every other call (arch_prctl's own TLS set-up
   included) is allowed; then exec argv[1..] */
int main(int argc, char** argv) {
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_arch_prctl, 0, 3),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x1023, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
    perror("seccomp");
    return 3;
  }
  execv(argv[1], argv + 1);
  perror("execv");
  return 4;
}
"""

CHILD = """
import ctypes, os, sys
import numpy as np
import tessera
from tessera.graph import Builder

if sys.argv[2] == "refused":     # the filter is in force: Linux refuses AMX to this process
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(158, 0x1023, 18) == -1 and ctypes.get_errno() == 1, "AMX was not refused"
rng = np.random.default_rng(0)
out = {}
# a packed qnn.dense on the 16 x 64 AMX tile (K = 198: three 64-k steps and a tail of 6)
b = Builder("gemm")
x = b.input("x", (32, 198), "uint8")
w = rng.integers(-128, 128, (1, 50, 64, 4)).astype(np.int8)
w[:, -1, :, 2:] = 0                     # zeros past K, as packing leaves them
b.output(b.op("qnn.dense", x, b.const(w, "w"), b.const(np.zeros(64, np.int32), "b"),
              b.const(np.full(64, 1e-5, np.float32), "m"), input_zero_point=0, b_panel=64, output_zero_point=0,
              out_dtype="uint8", out_min=0, out_max=255, name="dense"))
exe = tessera.compile(b.finish(), target="c -num-threads=1")
assert any("x86_amx_gemm" in str(k.prim.trace) for k in exe.kernels)
xv = rng.integers(0, 256, (32, 198)).astype(np.uint8)
out["gemm"] = exe(xv)
# a blocked convolution on 64-channel input blocks (AMX rows: 16 pixels + 3)
b = Builder("conv")
d = b.input("d", (1, 1, 6, 19, 64), "uint8")
b.output(b.op("qnn.contrib_conv2d_NCHWc", d, b.const(rng.integers(-128, 128, (2, 1, 3, 3, 16, 16, 4)).astype(np.int8), "w"),
              b.const(rng.integers(-500, 500, (2, 16)).astype(np.int32), "b"),
              b.const(np.full((2, 16), 1e-5, np.float32), "m"), padding=(1, 1, 1, 1), pad_value=5,
              output_zero_point=3, out_dtype="uint8", name="conv"))
exe = tessera.compile(b.finish(), target="c -num-threads=1")
assert any("x86_amx_qconv2d" in str(k.prim.trace) for k in exe.kernels)
dv = rng.integers(0, 256, (1, 1, 6, 19, 64)).astype(np.uint8)
out["conv"] = exe(dv)
np.savez(sys.argv[1], **out, x=xv, w=w, d=dv)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")
def test_amx_kernels_refused_amx_run_their_vnni_fallback(tmp_path):
    if not amx_for("c"):
        pytest.skip("the host has no AMX: the AMX kernels are not chosen here")
    src = tmp_path / "launcher.c"
    src.write_text(LAUNCHER)
    launcher = tmp_path / "launcher"
    res = subprocess.run([os.environ.get("CC", "cc"), "-O1", str(src), "-o", str(launcher)], capture_output=True,
                         text=True)
    if res.returncode:
        pytest.skip(f"the seccomp launcher does not build here: {res.stderr.strip()[:200]}")
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent(CHILD))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    refused, allowed = tmp_path / "refused.npz", tmp_path / "allowed.npz"
    run = subprocess.run([str(launcher), sys.executable, str(child), str(refused), "refused"], capture_output=True,
                         text=True, env=env, timeout=600)
    if run.returncode == 3 and "seccomp" in run.stderr:
        pytest.skip(f"this machine does not let a process install a seccomp filter: {run.stderr.strip()[:200]}")
    assert run.returncode == 0, run.stderr[-2000:]
    # the same script with AMX permitted takes the AMX path
    run = subprocess.run([sys.executable, str(child), str(allowed), "permitted"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    got, amx = np.load(refused), np.load(allowed)
    for key in ("gemm", "conv"):
        np.testing.assert_array_equal(got[key], amx[key])
    # and the GEMM's integers against numpy (weight[k, j] at [j // 64, k // 4, j % 64, k % 4])
    wk = got["w"].transpose(1, 3, 0, 2).reshape(200, 64)[:198].astype(np.int64)
    acc = got["x"].astype(np.int64) @ wk
    want = np.clip(np.rint(acc.astype(np.float32) * np.float32(1e-5)), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got["gemm"], want)
