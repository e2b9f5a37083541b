"""What the kernel cache trusts: a private folder (0700) and entries (0600) that only the user owns and
can write, an integrity record checked before anything is loaded (a tampered or damaged library is
rebuilt, never run), weights blobs checked against the hash in their names, and write failures (a
folder that cannot be made or written, a full disk) reported as TesseraErrors that say where."""
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.errors import TesseraError
from tessera.graph import Builder
from tessera.runtime import cache
from tessera.runtime.c_compiler import compile_source

SOURCE = "int tessera_answer(void) { return 42; }\n"
OTHER_UID = 54321
RNG = np.random.default_rng(27)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user (os.chown) needs root")


@pytest.fixture
def root(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(d))
    return d


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def scale_func(n=64, factor=3.0):
    A = te.placeholder((n,), name="A", dtype="float32")
    B = te.compute((n,), lambda i: A[i] * factor + 1.0, name="B")
    return te.create_prim_func([A, B])


def gpu_scale(factor=3.0):
    sch = tessera.tir.Schedule(scale_func(factor=factor))
    i, = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, [None, 32])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def run_scale(mod, n=64, factor=3.0):
    a = RNG.standard_normal(n).astype("float32")
    b = np.zeros(n, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a * factor + 1.0, rtol=1e-6, atol=1e-6)   # (the C may fuse the multiply-add)


def planted_library(tmp_path, monkeypatch, marker) -> str:
    """A library (built in another cache) whose constructor writes `marker`: what an attacker would plant."""
    evil = textwrap.dedent(f"""\
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE* f = fopen("{marker}", "w");
            if (f) {{ fputs("ran", f); fclose(f); }}
        }}
        int tessera_answer(void) {{ return 666; }}
        """)
    victim = os.environ["TESSERA_CACHE_DIR"]
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "elsewhere"))
    path = compile_source(evil, name_hint="planted")
    monkeypatch.setenv("TESSERA_CACHE_DIR", victim)
    return path


# ---------------------------------------------------------------------------------------------
# a private cache
# ---------------------------------------------------------------------------------------------
def test_the_cache_is_created_private(root):
    path = compile_source(SOURCE, name_hint="answer")
    assert mode(root) == 0o700 and mode(os.path.dirname(path)) == 0o700
    assert mode(path) == 0o600 and mode(path[:-3] + ".c") == 0o600
    assert mode(path + ".sha256") == 0o600
    assert ctypes.CDLL(path).tessera_answer() == 42


@pytest.mark.parametrize("bits, who", [(0o002, "other users"), (0o020, "its group")])
def test_world_writable_cache_entry_is_refused(root, bits, who):
    path = compile_source(SOURCE)
    os.chmod(path, mode(path) | bits)
    with pytest.raises(TesseraError, match=rf"{re.escape(path)}.* writable by {who}.*chmod go-w"):
        compile_source(SOURCE)


def test_world_writable_integrity_record_is_refused(root):
    path = compile_source(SOURCE)
    os.chmod(path + ".sha256", 0o666)
    with pytest.raises(TesseraError, match=rf"{re.escape(path)}\.sha256.* writable by other users"):
        compile_source(SOURCE)


@needs_root
def test_cache_entry_owned_by_another_user_is_refused(root):
    path = compile_source(SOURCE)
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(TesseraError, match=rf"{re.escape(path)}.* owned by uid {OTHER_UID}"):
        compile_source(SOURCE)


@pytest.mark.parametrize("which", ["root", "sub"])
def test_world_writable_cache_folder_is_refused(root, which):
    path = compile_source(SOURCE)
    folder = str(root) if which == "root" else os.path.dirname(path)
    os.chmod(folder, 0o777)
    with pytest.raises(TesseraError, match=rf"cache folder {re.escape(folder)} is writable by other users.*"
                                           r"TESSERA_CACHE_DIR"):
        compile_source(SOURCE)


@needs_root
def test_cache_folder_made_by_another_user_is_refused(root):
    """Another user made $TESSERA_CACHE_DIR first (a shared /tmp): nothing is built or loaded there."""
    root.mkdir(mode=0o700)
    os.chown(root, OTHER_UID, OTHER_UID)
    with pytest.raises(TesseraError, match=rf"cache folder {re.escape(str(root))} is owned by uid {OTHER_UID}"):
        compile_source(SOURCE)
    assert os.listdir(root) == []


# ---------------------------------------------------------------------------------------------
# verified before loading; a damaged entry is rebuilt
# ---------------------------------------------------------------------------------------------
def test_tampered_library_is_refused_before_it_runs(root, tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    evil = planted_library(tmp_path, monkeypatch, marker)
    func = scale_func()
    src = tessera.backend.generate(func, "c")
    path = tessera.backend.get_backend("c").compile(src)       # built, not loaded
    shutil.copyfile(evil, path)                               # same owner, same mode: only the bytes differ
    mod = tessera.build(func, target="c")
    assert not marker.exists()                                # the planted constructor never ran
    run_scale(mod)
    assert os.path.getsize(path) != os.path.getsize(evil)     # rebuilt in place


def test_tampered_cache_library_loaded_directly_is_refused(root, tmp_path, monkeypatch):
    """Loading a cache entry by its path (as the tuner's runner does with what its builder made)
    checks it too."""
    marker = tmp_path / "marker"
    evil = planted_library(tmp_path, monkeypatch, marker)
    func = scale_func(factor=4.0)
    path = tessera.backend.get_backend("c").compile(tessera.backend.generate(func, "c"))
    shutil.copyfile(evil, path)
    with pytest.raises(TesseraError, match=rf"{re.escape(path)} is in the kernel cache but does not match its "
                                           r"integrity record"):
        tessera.runtime.load_module(path)
    assert not marker.exists()


def test_tampered_kernel_library_is_rebuilt(root, tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    evil = planted_library(tmp_path, monkeypatch, marker)
    path = compile_source(SOURCE)
    shutil.copyfile(evil, path)
    assert compile_source(SOURCE) == path
    assert ctypes.CDLL(path).tessera_answer() == 42 and not marker.exists()


def test_truncated_library_is_rebuilt_and_the_call_succeeds(root):
    """A truncated library mapped by the loader kills the process (SIGBUS): run it in a child."""
    script = textwrap.dedent("""\
        import os, numpy as np, tessera
        from tessera import te
        A = te.placeholder((64,), name="A", dtype="float32")
        B = te.compute((64,), lambda i: A[i] * 3.0 + 1.0, name="B")
        func = te.create_prim_func([A, B])
        path = tessera.backend.get_backend("c").compile(tessera.backend.generate(func, "c"))
        os.truncate(path, os.path.getsize(path) * 2 // 3)
        mod = tessera.build(func, target="c")
        a = np.arange(64, dtype="float32"); b = np.zeros(64, "float32")
        mod(a, b)
        np.testing.assert_allclose(b, a * 3 + 1)
        print("ok", os.path.getsize(path))
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ.copy(),
                          timeout=300)
    assert proc.returncode == 0, f"exit code {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("ok ")


def test_garbage_library_is_rebuilt_not_a_permanent_failure(root):
    func = scale_func(factor=5.0)
    path = tessera.backend.get_backend("c").compile(tessera.backend.generate(func, "c"))
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    run_scale(tessera.build(func, target="c"), factor=5.0)
    run_scale(tessera.build(func, target="c"), factor=5.0)


def test_library_without_an_integrity_record_is_rebuilt(root):
    """An entry of an older cache (no record) is not trusted: it is built again, with its record."""
    path = compile_source(SOURCE)
    ino = os.stat(path).st_ino
    os.unlink(path + ".sha256")
    assert compile_source(SOURCE) == path
    assert os.stat(path).st_ino != ino and os.path.isfile(path + ".sha256")
    assert ctypes.CDLL(path).tessera_answer() == 42


def test_cache_entry_that_fails_to_load_is_rebuilt_once(root):
    """A library that matches its record but does not load (as if the compiler had written garbage)
    is discarded and built once more by tessera.build."""
    func = scale_func(factor=7.0)
    path = tessera.backend.get_backend("c").compile(tessera.backend.generate(func, "c"))
    garbage = b"not a shared library" * 100
    with open(path, "wb") as f:
        f.write(garbage)
    with open(path + ".sha256", "w") as f:
        f.write(f"{hashlib.sha256(garbage).hexdigest()}  {os.path.basename(path)}\n")
    run_scale(tessera.build(func, target="c"), factor=7.0)


def test_a_verified_library_is_hashed_once_per_process(root, monkeypatch):
    path = compile_source(SOURCE)
    calls = []
    real = cache.file_sha256
    monkeypatch.setattr(cache, "file_sha256", lambda p: calls.append(p) or real(p))
    for _ in range(3):
        assert compile_source(SOURCE) == path
    assert calls == []                         # just built: known good
    with open(path, "r+b") as f:               # changed behind tessera's back: looked at again
        f.seek(100)
        f.write(b"\0")
    assert compile_source(SOURCE) == path and calls == [path]
    assert compile_source(SOURCE) == path and calls == [path]


# ---------------------------------------------------------------------------------------------
# weights blobs and the libraries that embed them
# ---------------------------------------------------------------------------------------------
def weighted_graph(w):
    gb = Builder("weighted")
    x = gb.input("x", w.shape)
    gb.output(gb.op("add", x, gb.const(w, "w")))
    return gb.finish()


def test_corrupt_weights_blob_is_rebuilt(root):
    w = RNG.standard_normal((4, 16)).astype("float32")
    x = RNG.standard_normal((4, 16)).astype("float32")
    np.testing.assert_allclose(tessera.compile(weighted_graph(w))(x), x + w, rtol=1e-6)
    [blob] = (root / "weights").glob("*.bin")
    with open(blob, "r+b") as f:               # same size, other bytes
        f.write(b"\0" * 64)
    for so in root.glob("*/*.so"):             # the library is compiled again (it embeds the blob)
        os.unlink(so)
    np.testing.assert_allclose(tessera.compile(weighted_graph(w))(x), x + w, rtol=1e-6)
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name[:-4]


def test_a_cached_model_library_is_used_without_reading_its_weights_blob(root):
    """The blob is only the compiler's input: a library hit neither reads (hashes) nor writes it."""
    w = RNG.standard_normal((4, 16)).astype("float32")
    x = RNG.standard_normal((4, 16)).astype("float32")
    tessera.compile(weighted_graph(w))
    [blob] = (root / "weights").glob("*.bin")
    blob.unlink()
    np.testing.assert_allclose(tessera.compile(weighted_graph(w))(x), x + w, rtol=1e-6)
    assert not blob.exists()


def test_cached_libraries_with_weights_are_private(root):
    w = RNG.standard_normal((4, 16)).astype("float32")
    tessera.compile(weighted_graph(w))
    files = [p for p in root.rglob("*") if p.is_file() and p.name != ".size-checked"]
    assert any(p.suffix == ".bin" for p in files) and any(p.suffix == ".so" for p in files)
    assert {str(p): mode(p) for p in files} == {str(p): 0o600 for p in files}
    assert {mode(p) for p in root.rglob("*") if p.is_dir()} | {mode(root)} == {0o700}


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_exported_library_follows_the_umask(root, tmp_path, umask):
    """An exported library is the user's file, where the user chose: made as the user's umask says
    (it carries the weights; umask 077 keeps them private), not forced open or closed."""
    w = RNG.standard_normal((4, 16)).astype("float32")
    exe = tessera.compile(weighted_graph(w))
    old = os.umask(umask)
    try:
        path = exe.export_library(tmp_path / "model.so")
    finally:
        os.umask(old)
    assert mode(path) == 0o755 & ~umask and mode(tmp_path / "model.h") == 0o644 & ~umask


# ---------------------------------------------------------------------------------------------
# a folder that cannot be written, a full disk
# ---------------------------------------------------------------------------------------------
def test_cache_dir_that_cannot_be_made_raises_a_tessera_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(TesseraError, match=rf"cannot make the kernel cache folder {re.escape(str(blocker))}/cache"
                                           r".*TESSERA_CACHE_DIR"):
        compile_source(SOURCE)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_cache_dir_raises_a_tessera_error(root):
    root.mkdir(mode=0o500)
    with pytest.raises(TesseraError, match=rf"{re.escape(str(root))}.*permission denied.*TESSERA_CACHE_DIR"):
        compile_source(SOURCE)


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("what", ["kernel", "weights", "vdla"])
def test_full_disk_while_writing_the_cache_raises_a_tessera_error(root, monkeypatch, what):
    from tessera.executor.library import _weights_file

    write = {"kernel": lambda: compile_source(SOURCE),
             "weights": lambda: _weights_file(b"\1" * 4096),
             "vdla": lambda: tessera.backend.get_backend("vdla").compile(tessera.backend.generate(
                 vdla_dense(), "vdla"))}[what]
    monkeypatch.setattr("tempfile.mkstemp", no_space)
    with pytest.raises(TesseraError, match=rf"cannot write .*{re.escape(str(root))}.*the disk is full.*"
                                           r"TESSERA_CACHE_DIR"):
        write()


def test_pruning_a_read_only_cache_raises_a_tessera_error(root, monkeypatch):
    path = compile_source(SOURCE)

    def read_only(p, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), p)

    with monkeypatch.context() as m, pytest.raises(TesseraError, match=r"cannot remove .*\.(so|c|sha256): the file "
                                                                      r"system is read-only.*TESSERA_CACHE_DIR"):
        m.setattr("os.unlink", read_only)
        cache.clear()
    assert os.path.exists(path)


# ---------------------------------------------------------------------------------------------
# the GPU and VDLA backends' artifacts
# ---------------------------------------------------------------------------------------------
def opencl_usable():
    from tessera.runtime import opencl
    return opencl.usable()[0]


@pytest.mark.skipif(not opencl_usable(), reason="no OpenCL device that builds kernels (PoCL)")
def test_damaged_opencl_artifact_is_rebuilt_and_a_writable_one_refused(root):
    func = gpu_scale(factor=2.0)
    art = tessera.backend.build(func, "opencl")
    run_scale(art.module, factor=2.0)
    doc = json.loads(open(art.path).read())
    doc["source"] = doc["source"].replace("2.0", "9.0")        # other kernels under the same name
    with open(art.path, "w") as f:
        json.dump(doc, f)
    again = tessera.backend.build(func, "opencl")
    assert again.path == art.path
    run_scale(again.module, factor=2.0)
    with open(art.path, "w") as f:                                 # loaded by its path: refused
        json.dump(doc, f)
    with pytest.raises(TesseraError, match=r"does not match its integrity record"):
        tessera.backend.get_backend("opencl").load(art.path)
    os.chmod(art.path, 0o666)
    with pytest.raises(TesseraError, match=rf"{re.escape(art.path)}.* writable by other users"):
        tessera.backend.build(func, "opencl")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_damaged_cuda_cubin_is_rebuilt(root):
    backend = tessera.backend.get_backend("cuda")
    src = tessera.backend.generate(gpu_scale(), "cuda")
    path = backend.compile(src)
    cubin = json.loads(open(path).read())["cubin"]
    good = open(cubin, "rb").read()
    assert mode(path) == mode(cubin) == 0o600
    with open(cubin, "r+b") as f:
        f.truncate(len(good) // 2)
    assert backend.compile(src) == path
    assert open(cubin, "rb").read() == good
    with open(cubin, "r+b") as f:                                  # loaded by its path: refused
        f.truncate(len(good) // 2)
    with pytest.raises(TesseraError, match=rf"{re.escape(cubin)} is in the kernel cache but does not match"):
        backend.load(path).kernel("default_function_kernel")


def vdla_dense():
    from tessera.accel.vdla.layers import dense_packed, schedule_dense

    return schedule_dense(dense_packed(1, 16, 16))


def test_damaged_vdla_module_is_rebuilt(root):
    from tessera.accel.vdla.layers import dense_reference, pack_data, pack_weight, unpack_data

    backend = tessera.backend.get_backend("vdla")
    src = tessera.backend.generate(vdla_dense(), "vdla")
    path = backend.compile(src)
    assert mode(path) == 0o600
    with open(path, "w") as f:
        f.write(src.text.replace('"programs"', '"programz"'))
    assert backend.compile(src) == path
    assert open(path).read() == src.text
    x = RNG.integers(-128, 128, (1, 16), dtype=np.int8)
    w = RNG.integers(-128, 128, (16, 16), dtype=np.int8)
    out = np.zeros((1, 1, 1, 16), np.int8)
    tessera.build(vdla_dense(), target="vdla")(pack_data(x), pack_weight(w), out)
    np.testing.assert_array_equal(unpack_data(out), dense_reference(x, w, None, 0, False))
