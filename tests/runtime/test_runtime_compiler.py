"""The compiler driver: content-addressed cache, $CC and $TESSERA_CACHE_DIR, build errors, concurrency."""
import os
import shutil
import stat
import threading

import pytest

from tessera.codegen.c_entry import C_HEADER
from tessera.errors import BuildError, TesseraError
from tessera.runtime import Module
from tessera.runtime.c_compiler import compile_source
from tessera.target import Target

SIMPLE = "int tessera_answer(void) { return 42; }\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(d))
    return d


@pytest.fixture
def counting_cc(tmp_path, monkeypatch):
    """$CC = a wrapper around the real compiler that logs every compile (not `--version`, nor the
    preprocessor runs that ask which CPU features a -march has)."""
    real = shutil.which("gcc") or shutil.which("cc")
    log = tmp_path / "cc.log"
    script = tmp_path / "counting-cc"
    script.write_text(f'#!/bin/sh\ncase " $* " in *" --version "*|*" -dM "*) ;; *) echo compile >> "{log}" ;; esac\n'
                      f'exec "{real}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(script))
    return lambda: len(log.read_text().splitlines()) if log.exists() else 0


def test_cache_hit_does_not_recompile(cache, counting_cc):
    p1 = compile_source(SIMPLE, name_hint="answer")
    assert counting_cc() == 1
    mtime = os.stat(p1).st_mtime_ns
    p2 = compile_source(SIMPLE)
    assert p2 == p1 and counting_cc() == 1 and os.stat(p1).st_mtime_ns == mtime
    # other flags or other source: a new library
    p3 = compile_source(SIMPLE, "c -mcpu=x86-64-v2")
    p4 = compile_source(SIMPLE + "int tessera_other(void) { return 1; }\n")
    assert len({p1, p3, p4}) == 3 and counting_cc() == 3


def test_layout_in_cache_dir(cache):
    path = compile_source(SIMPLE)
    key = os.path.basename(path)[:-3]
    assert len(key) == 64 and path == str(cache / key[:2] / (key + ".so"))
    assert (cache / key[:2] / (key + ".c")).read_text() == SIMPLE
    leftovers = [n for n in os.listdir(cache / key[:2]) if n.startswith(".tmp")]
    assert leftovers == []


def test_cache_dir_is_read_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "one"))
    a = compile_source(SIMPLE)
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "two"))
    b = compile_source(SIMPLE)
    assert a.startswith(str(tmp_path / "one")) and b.startswith(str(tmp_path / "two"))
    assert os.path.basename(a) == os.path.basename(b)


def test_build_error_carries_stderr_and_source_path(cache):
    bad = "int ok(void) { return 0; }\nint broken(void) {\n  return undefined_thing;\n}\n"
    with pytest.raises(BuildError) as info:
        compile_source(bad, name_hint="broken_kernel")
    e = info.value
    assert e.source_path and os.path.isfile(e.source_path)
    with open(e.source_path) as f:
        assert f.read() == bad
    assert "undefined_thing" in e.compiler_output
    assert f"{e.source_path}:3:" in e.compiler_output      # diagnostics point into the saved .c
    assert "broken_kernel" in str(e) and e.source_path in str(e)
    assert not any(n.endswith(".so") for n in os.listdir(os.path.dirname(e.source_path)))


def test_missing_compiler_and_non_c_target(cache, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/tessera-cc")
    with pytest.raises(BuildError, match="nonexistent"):
        compile_source(SIMPLE)
    monkeypatch.delenv("CC")
    with pytest.raises(TesseraError, match="cuda"):
        compile_source(SIMPLE, Target("cuda"))
    with pytest.raises(TesseraError, match="C source text"):
        compile_source(b"int x;")


def test_concurrent_builds_of_one_source(cache):
    src = SIMPLE + "/* concurrent */\n"
    barrier = threading.Barrier(2)
    results, errors = [], []

    def build():
        try:
            barrier.wait()
            results.append(compile_source(src))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 2 and results[0] == results[1]
    import ctypes

    assert ctypes.CDLL(results[0]).tessera_answer() == 42


def test_source_is_embedded_verbatim(cache):
    # quotes, backslashes, non-ASCII, tabs, a trigraph-looking sequence, CRLF and no final newline
    source = ('#include <stdint.h>\n' + C_HEADER + '/* "quoted" \\ back\\slash \t tab, ??= é ∑ 🚀 */\r\n'
              'static const char* s = "a\\"b\\\\n";\n'
              'int32_t tessera_call_main(void** a, const int32_t* k, int32_t n, char* e, int32_t l) '
              '{ (void)a; (void)k; (void)e; (void)l; (void)s; return n == 0 ? 0 : 1; }\n'
              'const char tessera_metadata[] = "{\\"version\\": 1, \\"functions\\": [{\\"name\\": '
              '\\"main\\", \\"params\\": []}]}";')
    mod = Module(compile_source(source))
    assert mod.get_source() == source
    mod()                                              # zero arguments, returns OK
