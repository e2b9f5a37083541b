"""The kernel cache's cap: $TESSERA_CACHE_MAX_SIZE, least-recently-used eviction after builds, what is
never touched (recent entries, live builds' .tmp- files, files that are not the cache's), `tessera cache`."""
import ctypes
import os
import shutil
import threading
import time

import pytest

from tessera.cli import main
from tessera.errors import TesseraError
from tessera.runtime import cache
from tessera.runtime.c_compiler import compile_source

N_LIBS = 4
HOUR = 3600


def source(i: int) -> str:
    return f"int tessera_answer_{i}(void) {{ return {40 + i}; }}\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache folder holding N_LIBS tiny libraries (built once, copied per test)."""
    d = tmp_path_factory.mktemp("kernel-cache-template")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESSERA_CACHE_DIR", str(d))
        mp.setenv("TESSERA_CACHE_MAX_SIZE", "none")
        paths = [compile_source(source(i), name_hint=f"answer{i}") for i in range(N_LIBS)]
    return d, [os.path.relpath(p, d) for p in paths]


@pytest.fixture
def libs(built, tmp_path, monkeypatch):
    """A fresh copy of the built cache as $TESSERA_CACHE_DIR; the libraries' paths, all used 5 hours ago."""
    template, rel = built
    root = tmp_path / "cache"
    shutil.copytree(template, root)
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(root))
    monkeypatch.delenv("TESSERA_CACHE_MAX_SIZE", raising=False)
    paths = [str(root / r) for r in rel]
    for p in paths:
        age(p, 5)
    return paths


def entry_files(so_path: str) -> list:
    return [so_path, so_path[:-3] + ".c", so_path + cache.RECORD]


def age(so_path: str, hours: float):
    """Make a library (its .so, .c and integrity record) last used `hours` ago."""
    t = time.time() - hours * HOUR
    for p in entry_files(so_path):
        os.utime(p, (t, t))


def entry_size(so_path: str) -> int:
    return sum(os.stat(p).st_blocks * 512 for p in entry_files(so_path))


def answer(so_path: str, i: int) -> int:
    return getattr(ctypes.CDLL(so_path), f"tessera_answer_{i}")()


# ---------------------------------------------------------------------------------------------
# the cap's setting
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("2048", 2048), ("10G", 10 * 2**30), ("500M", 500 * 2**20), ("500m", 500 * 2**20), ("1.5GiB", 3 * 2**29),
    ("64KB", 64 * 1024), (" 2 T ", 2 * 2**40), ("none", None), ("0", None), ("unlimited", None)])
def test_parse_size(text, expected):
    assert cache.parse_size(text, "X") == expected


@pytest.mark.parametrize("text", ["abc", "10Q", "-5G", "", "1e9", "G", "0.1"])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(TesseraError, match=r"SETTING="):
        cache.parse_size(text, "SETTING")


def test_max_size_from_the_environment(monkeypatch):
    monkeypatch.delenv("TESSERA_CACHE_MAX_SIZE", raising=False)
    assert cache.max_size() == cache.DEFAULT_MAX_BYTES == 10 * 2**30
    monkeypatch.setenv("TESSERA_CACHE_MAX_SIZE", "3G")
    assert cache.max_size() == 3 * 2**30
    for off in ("0", "none", "NONE"):
        monkeypatch.setenv("TESSERA_CACHE_MAX_SIZE", off)
        assert cache.max_size() is None


def test_a_bad_cap_fails_the_build_naming_variable_and_value(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TESSERA_CACHE_MAX_SIZE", "ten gigs")
    with pytest.raises(TesseraError, match=r"TESSERA_CACHE_MAX_SIZE='ten gigs' is not a size"):
        compile_source(source(99))
    assert not list(tmp_path.rglob("*.so"))   # refused before the compile


# ---------------------------------------------------------------------------------------------
# eviction
# ---------------------------------------------------------------------------------------------
def test_least_recently_used_go_first_and_a_hit_counts_as_a_use(libs):
    for i, p in enumerate(libs):          # lib 0 is the oldest, lib 3 the newest
        age(p, 5 - i)
    mtime = os.stat(libs[0]).st_mtime_ns
    assert compile_source(source(0)) == libs[0]           # a hit: lib 0 becomes the most recent
    assert os.stat(libs[0]).st_mtime_ns == mtime           # (the loader compares mtimes: kept)
    assert time.time() - os.stat(libs[0]).st_atime < 60
    age(libs[0], 0.5)                     # ... half an hour ago: evictable, but the newest
    keep = entry_size(libs[0]) + entry_size(libs[3])
    evicted = entry_size(libs[1]) + entry_size(libs[2])
    res = cache.prune(keep)
    assert res.removed == {"libraries": (2, evicted)} and res.bytes == evicted
    assert res.count == 2 and res.size == keep and res.entries == 2
    for gone in (libs[1], libs[2]):       # the two least recently used, .so and .c
        assert not any(os.path.exists(f) for f in entry_files(gone))
    assert answer(libs[0], 0) == 40 and answer(libs[3], 3) == 43
    # what a prune removed is rebuilt on demand, at the same path
    assert compile_source(source(1)) == libs[1] and answer(libs[1], 1) == 41


def test_a_hit_writes_nothing_when_the_access_time_is_recent(libs):
    t = time.time() - 60                  # used a minute ago: within TOUCH_AFTER_S
    os.utime(libs[0], (t, t))
    assert compile_source(source(0)) == libs[0]
    st = os.stat(libs[0])
    assert st.st_atime == pytest.approx(t, abs=1e-3) and st.st_mtime == pytest.approx(t, abs=1e-3)


def test_removed_bytes_are_the_entries_sizes(libs):
    sizes = [entry_size(p) for p in libs]
    res = cache.prune(0)
    assert res.count == N_LIBS and res.bytes == sum(sizes) and res.size == 0 and res.entries == 0
    assert cache.scan().entries == []


def test_recently_used_entries_are_never_evicted(libs):
    age(libs[2], 0)                       # just built or loaded
    hit = libs[1]
    age(hit, 2)
    compile_source(source(1))             # just hit
    res = cache.prune(0)
    assert res.count == N_LIBS - 2 and res.kept_recent == 2
    assert os.path.exists(libs[2]) and os.path.exists(hit)
    assert res.size == entry_size(libs[2]) + entry_size(hit)


def test_an_entry_used_after_the_scan_survives(libs):
    contents = cache.scan()
    age(libs[0], 0)                       # another process uses it between the scan and the eviction
    res = cache.prune(0, contents=contents)
    assert os.path.exists(libs[0]) and res.kept_recent == 1 and res.count == N_LIBS - 1


def test_files_gone_before_the_prune_are_not_an_error(libs):
    contents = cache.scan()
    for f in entry_files(libs[0]) + [libs[1]]:
        os.unlink(f)                      # another pruner was first
    res = cache.prune(0, contents=contents)
    assert res.count == N_LIBS - 1 and not any(os.path.exists(p) for p in libs)


def test_concurrent_pruners(libs):
    results, errors = [], []

    def run():
        try:
            results.append(cache.prune(0))
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 4
    assert not any(os.path.exists(f) for p in libs for f in entry_files(p))
    assert sum(r.count for r in results) >= N_LIBS


def test_temporary_files_of_live_builds_are_left_stale_ones_removed(libs):
    sub = os.path.dirname(libs[0])
    live = os.path.join(sub, ".tmp-live.so")
    stale = os.path.join(sub, ".tmp-crashed.so")
    os.makedirs(os.path.join(os.environ["TESSERA_CACHE_DIR"], "weights"), exist_ok=True)
    live_blob = os.path.join(os.environ["TESSERA_CACHE_DIR"], "weights", ".tmp-abc.bin")
    for p in (live, stale, live_blob):
        with open(p, "wb") as f:
            f.write(b"\0" * 5000)
    old = time.time() - 2 * HOUR
    os.utime(stale, (old, old))
    res = cache.prune(0, min_age=0)
    assert os.path.exists(live) and os.path.exists(live_blob) and not os.path.exists(stale)
    assert res.removed_temps == 1 and res.count == N_LIBS
    res = cache.clear()
    assert os.path.exists(live) and os.path.exists(live_blob)


def test_the_other_cached_files_are_entries_and_foreign_files_stay(libs):
    root = os.environ["TESSERA_CACHE_DIR"]
    digest = "ab" * 32
    made = {"weight blobs": os.path.join(root, "weights", digest + ".bin"),
            "vdla modules": os.path.join(root, "vdla", "main-0123456789abcdef0123.json"),
            "reference outputs": os.path.join(root, "autotune-ref", "k-1", "out2.npy"),
            "libraries": os.path.join(root, digest[:2], digest + ".cl.json")}
    foreign = [os.path.join(root, "notes.txt"), os.path.join(root, digest[:2], "README"),
               os.path.join(root, "weights", "mine.bin"), os.path.join(root, "other", digest + ".bin")]
    for p in list(made.values()) + foreign:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b"x" * 100)
    for p in made.values():
        os.utime(p, (time.time() - 10 * HOUR,) * 2)   # older than every library
    kinds = cache.scan().by_kind()
    assert kinds["libraries"][0] == N_LIBS + 1
    assert all(kinds[k][0] == 1 for k in ("weight blobs", "vdla modules", "reference outputs"))
    lib_bytes = sum(entry_size(p) for p in libs)
    res = cache.prune(lib_bytes)          # the four older entries go first
    assert not any(os.path.exists(p) for p in made.values()) and all(os.path.exists(p) for p in libs)
    assert {k: n for k, (n, _) in res.removed.items()} == {k: 1 for k in made}
    cache.clear()
    assert all(os.path.exists(p) for p in foreign) and not any(os.path.exists(p) for p in libs)


# ---------------------------------------------------------------------------------------------
# pruning after builds
# ---------------------------------------------------------------------------------------------
def test_a_build_over_the_cap_evicts_the_least_recently_used(libs, monkeypatch):
    root = os.environ["TESSERA_CACHE_DIR"]
    for i, p in enumerate(libs):
        age(p, 5 - i)
    sizes = [entry_size(p) for p in libs]
    # after the build the low-water mark holds the two newest old libraries and the new one (about
    # their size; a page of slack), not a third
    cap = int((sizes[2] + sizes[3] + max(sizes) + 4096) / cache.LOW_WATER) + 1
    assert cap * cache.LOW_WATER < sizes[1] + sizes[2] + sizes[3] + min(sizes) and cap < sum(sizes) + min(sizes)
    monkeypatch.setenv("TESSERA_CACHE_MAX_SIZE", str(cap))
    stamp = os.path.join(root, cache.STAMP)
    if os.path.exists(stamp):
        os.unlink(stamp)
    new = compile_source(source(7))
    assert os.path.exists(new) and os.path.exists(stamp)
    assert cache.scan().size <= cap * cache.LOW_WATER
    assert [os.path.exists(p) for p in libs] == [False, False, True, True]   # the oldest went first
    assert answer(new, 7) == 47 and answer(libs[3], 3) == 43


def test_the_size_is_checked_now_and_then(libs, monkeypatch):
    root = os.environ["TESSERA_CACHE_DIR"]
    monkeypatch.setattr(cache, "_builds_since_check", 0)   # whatever this process built before
    assert cache.after_build(root, 1) is not None      # no stamp yet: checks, prunes (all are old)
    assert cache.scan().entries == []
    for i, p in enumerate(libs):
        compile_source(source(i))                     # rebuilt ...
        age(p, 5)
    assert cache.after_build(root, 1) is None          # ... the stamp is fresh: no check
    monkeypatch.setattr(cache, "_builds_since_check", cache.CHECK_EVERY_BUILDS)
    assert cache.after_build(root, 1).count == N_LIBS  # many builds since: checks anyway
    assert cache.after_build(root, None) is None       # unbounded: never


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
def test_cli_cache_info(libs, capsys, monkeypatch):
    root = os.environ["TESSERA_CACHE_DIR"]
    total = sum(entry_size(p) for p in libs)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert root in out and f"libraries: {N_LIBS} ({cache.format_size(total)})" in out
    assert f"total:     {cache.format_size(total)}" in out and "cap:       10.0 GiB (default" in out
    monkeypatch.setenv("TESSERA_CACHE_MAX_SIZE", "none")
    assert main(["cache", "info"]) == 0
    assert "cap:       unbounded" in capsys.readouterr().out
    monkeypatch.setenv("TESSERA_CACHE_MAX_SIZE", "lots")
    assert main(["cache", "info"]) == 2
    assert "TESSERA_CACHE_MAX_SIZE='lots'" in capsys.readouterr().err


def test_cli_cache_prune(libs, capsys):
    for i, p in enumerate(libs):
        age(p, 5 - i)
    keep = entry_size(libs[2]) + entry_size(libs[3])
    removed = entry_size(libs[0]) + entry_size(libs[1])
    assert main(["cache", "prune", "--max-size", str(keep)]) == 0
    out = capsys.readouterr().out
    assert f"removed 2 entries ({cache.format_size(removed)})" in out and "2 libraries" in out
    assert f"left: 2 entries, {cache.format_size(keep)}" in out
    assert [os.path.exists(p) for p in libs] == [False, False, True, True]
    assert main(["cache", "prune"]) == 0                  # under the default cap: nothing to do
    assert "removed 0 entries (0 B)" in capsys.readouterr().out
    assert main(["cache", "prune", "--max-size", "a lot"]) == 2
    assert "--max-size='a lot' is not a size" in capsys.readouterr().err


def test_cli_cache_prune_unbounded_needs_a_size(libs, capsys, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_MAX_SIZE", "0")
    assert main(["cache", "prune"]) == 2
    assert "--max-size" in capsys.readouterr().err and all(os.path.exists(p) for p in libs)
    age(libs[0], 0)
    assert main(["cache", "prune", "--max-size", "0"]) == 0
    out = capsys.readouterr().out
    assert f"removed {N_LIBS - 1} entries" in out and "kept 1 entries over the target" in out


def test_cli_cache_clear(libs, capsys):
    age(libs[0], 0)                                        # clear takes recent ones too
    total = sum(entry_size(p) for p in libs)
    assert main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert f"removed {N_LIBS} entries ({cache.format_size(total)})" in out
    assert not any(os.path.exists(p) for p in libs)
    assert main(["cache", "info"]) == 0
    assert "libraries: 0 (0 B)" in capsys.readouterr().out


def test_a_reused_weight_blob_counts_as_used(tmp_path, monkeypatch):
    """A model compiled again reuses its weights blob (its library .incbin's it while compiling): the
    blob must look used, or a prune could take it between the reuse and the compile."""
    from tessera.executor.library import _weights_file

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    blob = bytes(range(256)) * 8
    path, _ = _weights_file(blob)
    old = time.time() - 5 * HOUR
    os.utime(path, (old, old))
    assert _weights_file(blob)[0] == path            # the model compiled again
    res = cache.prune(0)
    assert res.count == 0 and res.kept_recent == 1
    with open(path, "rb") as f:
        assert f.read() == blob
