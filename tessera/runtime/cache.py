"""The on-disk kernel cache: what it may be trusted with (private folders, entries checked before they
are loaded), and its size: a cap ($TESSERA_CACHE_MAX_SIZE) kept by least-recently-used eviction.

The cache folder ($TESSERA_CACHE_DIR, default ~/.cache/tessera) holds what the compiler driver and the
backends write there by content hash: libraries (`<key[:2]>/<key>.so` with its `<key>.c`; the GPU
backends' `<key>.cl.json` / `<key>.cu.json` and `<key>.cubin` beside them), each loaded file with its
integrity record `<file>.sha256`, model weight blobs (`weights/<sha256>.bin`, read only while a model's
library is compiled), VDLA modules (`vdla/<name>-<sha256[:20]>.json`) and the tuner's expected outputs
(`autotune-ref/<task>/out<i>.npy`). Every one of them is rebuilt on demand, so any of them may go. Nothing
else in the folder is touched: a mistyped $TESSERA_CACHE_DIR pointing at a home folder loses nothing.

Whom it trusts. A library in the cache is code that runs as the user the moment it is loaded (its
constructors run at dlopen), so nothing another user could have written is loaded. `folder()` makes the
folders 0700 and refuses (TesseraError naming the path, the reason and the fix) a folder that another user
owns or that its group or others can write; `new_file`/`write` make entries 0600 (a model's library embeds
its weights). `hit()` refuses an entry (or its record) that is not a plain file, that another user owns or
that others can write, and uses an entry only when its content has the sha256 of its record, written
(atomically, before the entry is renamed into place) when it was built, or, for an entry named by its
hash (a weights blob, a VDLA module), the sha256 in its name. Anything else (truncated, changed, no
record: built by an older tessera) is not a hit: the caller builds it again, over it. The loaders
(`Module`, `OpenCLModule`, `CUDAModule` and its cubin) call `check_before_load`, which refuses an entry
that fails these checks before anything of it runs; `Backend.compile_and_load` rebuilds, once, an
entry that passed them yet does not load. Owners trusted: the user and root. What the checks cannot
stop: the user's own processes (and root) writing a matching record.

How it stays cheap. A file is hashed once per process and version of it (device, inode, size and
modification time of it and its record): later hits are a few `stat`s. A
hit moves the entry's access time forward only when it is older than TOUCH_AFTER_S (one `utime` per
entry every few minutes at most; the modification time, which the module loader and the hash memo
compare, is kept); hashing reads with O_NOATIME. A build (a miss: a compile costs 100s of ms) calls
`after_build`, which looks at the cache's size only every CHECK_EVERY_BUILDS builds of this process or
when the stamp file `.size-checked` is older than CHECK_EVERY_S (any process), and prunes when the total
is over the cap. No lock and no index file: the files' own times are the record.

How it stays safe beside other processes. An entry (a library's .so, .c and records together, a blob, a
file) counts as used at the later of its files' access and modification times; one used within MIN_AGE_S
(just built, just hit, being loaded) is never evicted, and its time is read again just before it goes.
A builder's `.tmp-` file is left alone unless it is older than STALE_TMP_S (a crashed build). A file
another pruner removed first is not an error. Removing a library a process has loaded is harmless on
Linux (its mapping stays). Two builders of one entry write the same bytes; a reader that meets a
record and a file of two builds sees a mismatch and builds once more.

When the disk is full or the folder read-only, writing (or pruning) an entry raises a TesseraError
naming the file and the reason (`write_error`); a hit in a read-only cache still works.
"""
from __future__ import annotations

import errno
import hashlib
import math
import os
import re
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import TesseraError

ENV_DIR = "TESSERA_CACHE_DIR"
ENV_MAX = "TESSERA_CACHE_MAX_SIZE"
DEFAULT_MAX_BYTES = 10 * 2**30      # 10 GiB
LOW_WATER = 0.8                      # an automatic prune goes down to this fraction of the cap
TOUCH_AFTER_S = 300                  # a hit refreshes a library's access time older than this
MIN_AGE_S = 600                      # an entry used more recently is never evicted (> TOUCH_AFTER_S)
STALE_TMP_S = 3600                   # a builder's .tmp- file older than this is a crashed build's
CHECK_EVERY_S = 60                   # after a build: the size is checked at most this often ...
CHECK_EVERY_BUILDS = 500             # ... unless this process has built this many libraries since
STAMP = ".size-checked"

KINDS = ("libraries", "weight blobs", "vdla modules", "reference outputs")
_HEX2 = re.compile(r"^[0-9a-f]{2}$")
_KEYED = re.compile(r"^([0-9a-f]{64})\.[A-Za-z0-9.]+$")
_WEIGHTS = re.compile(r"^[0-9a-f]{64}\.bin$")
_VDLA = re.compile(r"^.+-[0-9a-f]{20}\.json$")
_REF = re.compile(r"^out\d+\.npy$")
_SIZE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(i?b)?$")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}


def cache_dir() -> str:
    """Where compiled libraries are kept: $TESSERA_CACHE_DIR, else ~/.cache/tessera."""
    return os.environ.get(ENV_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "tessera")


# ---------------------------------------------------------------------------------------------
# the cap
# ---------------------------------------------------------------------------------------------
def parse_size(text: str, what: str, unbounded_ok: bool = True) -> int | None:
    """A size as people write it -> bytes: "10G", "500M", "1.5GiB", "2048". K/M/G/T/P are powers of 1024
    (with or without "B"/"iB"). With `unbounded_ok`, "0" and "none" mean no limit (None); else "0" is
    0 bytes. `what` names the setting in errors."""
    t = str(text).strip().lower()
    if unbounded_ok and t in ("none", "unlimited", "0"):
        return None
    m = _SIZE.match(t)
    if m is None:
        hint = "; 0 or none for no limit" if unbounded_ok else ""
        raise TesseraError(f"{what}={text!r} is not a size: write bytes or a number with K, M, G or T (powers "
                           f"of 1024), e.g. 10G or 500M{hint}")
    n = float(m[1]) * _UNITS[m[2]]
    if not math.isfinite(n) or (unbounded_ok and n < 1):
        raise TesseraError(f"{what}={text!r}: a cache size is at least 1 byte (0 or none: no limit)")
    return int(n)


def max_size() -> int | None:
    """The cap from $TESSERA_CACHE_MAX_SIZE (default 10 GiB); None when unbounded."""
    raw = os.environ.get(ENV_MAX)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_BYTES
    return parse_size(raw, ENV_MAX)


def format_size(n: int | None) -> str:
    """Bytes for people: "0 B", "812 B", "3.4 MiB", "10.0 GiB"; None: "unbounded"."""
    if n is None:
        return "unbounded"
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


# ---------------------------------------------------------------------------------------------
# what the cache holds
# ---------------------------------------------------------------------------------------------
@dataclass
class Entry:
    """What is evicted as one: a library's files (its .so, .c, GPU artifact), or one blob or file."""
    kind: str
    paths: list
    size: int = 0           # bytes on disk (allocated blocks, as du counts)
    used: float = 0.0       # the later of the files' access and modification times


@dataclass
class Contents:
    """A scan of the cache folder: its entries and the builders' temporary files."""
    root: str
    entries: list = field(default_factory=list)
    temps: list = field(default_factory=list)     # (path, size, mtime) of .tmp- files

    @property
    def size(self) -> int:
        """Everything the cache holds on disk, builds in progress included."""
        return sum(e.size for e in self.entries) + sum(s for _, s, _ in self.temps)

    def by_kind(self) -> dict:
        """kind -> (entries, bytes), in KINDS order, kinds with no entry left out."""
        out = {}
        for e in self.entries:
            n, b = out.get(e.kind, (0, 0))
            out[e.kind] = (n + 1, b + e.size)
        return {k: out[k] for k in KINDS if k in out}


@dataclass
class PruneResult:
    """What a prune or clear removed, and what the cache holds after it."""
    removed: dict = field(default_factory=dict)   # kind -> (entries, bytes)
    removed_temps: int = 0                         # stale .tmp- files removed
    temp_bytes: int = 0
    kept_recent: int = 0                           # entries over the target left because just used
    size: int = 0                                  # bytes left
    entries: int = 0                               # entries left

    @property
    def count(self) -> int:
        return sum(n for n, _ in self.removed.values())

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.removed.values()) + self.temp_bytes


def _disk_bytes(st) -> int:
    blocks = getattr(st, "st_blocks", None)
    return blocks * 512 if blocks is not None else st.st_size


def _files(folder: str):
    """(name, stat) of the plain files in folder; nothing when it is gone."""
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    with it:
        for d in it:
            try:
                if d.is_file(follow_symlinks=False):
                    yield d.name, d.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue


def _add_file(contents: Contents, kind: str, path: str, st):
    contents.entries.append(Entry(kind, [path], _disk_bytes(st), max(st.st_atime, st.st_mtime)))


def scan(root: str | None = None) -> Contents:
    """Every entry of the cache at `root` (default: cache_dir()) with its size and last use."""
    root = root or cache_dir()
    contents = Contents(root)

    def temp(path, st):
        contents.temps.append((path, _disk_bytes(st), st.st_mtime))

    try:
        top = sorted(d.name for d in os.scandir(root) if d.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return contents
    for name in top:
        folder = os.path.join(root, name)
        if _HEX2.match(name):
            groups = {}
            for fname, st in _files(folder):
                path = os.path.join(folder, fname)
                m = _KEYED.match(fname)
                if fname.startswith(".tmp-"):
                    temp(path, st)
                elif m and m[1].startswith(name):
                    e = groups.setdefault(m[1], Entry("libraries", []))
                    e.paths.append(path)
                    e.size += _disk_bytes(st)
                    e.used = max(e.used, st.st_atime, st.st_mtime)
            contents.entries.extend(groups.values())
        elif name in ("weights", "vdla"):
            pattern, kind = (_WEIGHTS, "weight blobs") if name == "weights" else (_VDLA, "vdla modules")
            for fname, st in _files(folder):
                path = os.path.join(folder, fname)
                if fname.startswith(".tmp-"):
                    temp(path, st)
                elif pattern.match(fname):
                    _add_file(contents, kind, path, st)
        elif name == "autotune-ref":
            try:
                tasks = [d.path for d in os.scandir(folder) if d.is_dir(follow_symlinks=False)]
            except FileNotFoundError:
                continue
            for task in tasks:
                for fname, st in _files(task):
                    path = os.path.join(task, fname)
                    if fname.startswith(".tmp-"):
                        temp(path, st)
                    elif _REF.match(fname):
                        _add_file(contents, "reference outputs", path, st)
    return contents


# ---------------------------------------------------------------------------------------------
# eviction
# ---------------------------------------------------------------------------------------------
def _last_use(entry: Entry) -> float | None:
    """The entry's last use read again now; None when its files are gone."""
    used = None
    for p in entry.paths:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        used = max(used or 0.0, st.st_atime, st.st_mtime)
    return used


def _remove(paths) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:   # another pruner was first
            pass
        except OSError as e:        # a read-only cache
            raise write_error(e, p, "", verb="remove") from None


def _remove_entry(entry: Entry, res: PruneResult) -> None:
    _remove(entry.paths)
    n, b = res.removed.get(entry.kind, (0, 0))
    res.removed[entry.kind] = (n + 1, b + entry.size)


def _remove_stale_temps(contents: Contents, res: PruneResult, now: float) -> None:
    for path, size, mtime in contents.temps:
        if now - mtime > STALE_TMP_S:
            _remove([path])
            res.removed_temps += 1
            res.temp_bytes += size


def prune(target_bytes: int, root: str | None = None, min_age: float = MIN_AGE_S,
          contents: Contents | None = None) -> PruneResult:
    """Evict least recently used entries until the cache holds at most `target_bytes`, never one used
    within `min_age` seconds; crashed builds' temporary files go too. `contents`: a scan just made."""
    if target_bytes < 0:
        raise TesseraError(f"prune: a target size is at least 0 bytes, got {target_bytes}")
    contents = scan(root) if contents is None else contents
    now = time.time()
    res = PruneResult()
    _remove_stale_temps(contents, res, now)
    total = contents.size - res.temp_bytes
    left = []
    for e in sorted(contents.entries, key=lambda e: e.used):
        if total <= target_bytes:
            left.append(e)
            continue
        used = _last_use(e) if now - e.used >= min_age else e.used
        if used is None:              # gone already (another pruner)
            total -= e.size
            continue
        if now - used < min_age:
            res.kept_recent += 1
            left.append(e)
            continue
        _remove_entry(e, res)
        total -= e.size
    res.size, res.entries = max(total, 0), len(left)
    return res


def clear(root: str | None = None) -> PruneResult:
    """Remove every entry of the cache, however recent; builds in progress keep their temporary files."""
    contents = scan(root)
    res = PruneResult()
    for e in contents.entries:
        _remove_entry(e, res)
    _remove_stale_temps(contents, res, time.time())
    res.size = contents.size - res.bytes
    return res


# ---------------------------------------------------------------------------------------------
# trust: private folders, entries only this user can write, an integrity record per entry
# ---------------------------------------------------------------------------------------------
RECORD = ".sha256"          # <entry>.sha256 beside an entry: "<sha256 hex>  <entry's file name>\n"
_CHUNK = 1 << 20
_VERIFIED: dict = {}        # path -> (dev, inode, size, mtime) of the file (and its record) as last verified
_WRITE_REASONS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                  errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                  errno.EPERM: "permission denied"}


def _fix(kind: str, path: str, owner_ok: bool) -> str:
    if kind == "folder":
        own = f"run `chmod go-w {path}` if the folder is yours, or " if owner_ok else ""
        return f"{own}set {ENV_DIR} to a folder only you can write (tessera makes it, private)"
    own = f"run `chmod go-w {path}` or " if owner_ok else ""
    return f"{own}remove it (tessera builds it again), or set {ENV_DIR} to a folder only you can write"


def check_private(path: str, st, kind: str) -> None:
    """Refuse (TesseraError) a cache folder or entry (`kind`: "folder", "entry") that another user owns
    or that its group or other users can write: what tessera loads from it could be anyone's code.
    Owners trusted: this user and root."""
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        raise TesseraError(f"the kernel cache {kind} {path} is owned by uid {st.st_uid}, not by this user (uid {me}) "
                           f"or root: tessera loads nothing from it, another user could have put code there; "
                           f"{_fix(kind, path, False)}")
    if st.st_mode & 0o022:
        who = "other users" if st.st_mode & 0o002 else "its group"
        raise TesseraError(f"the kernel cache {kind} {path} is writable by {who} (mode "
                           f"{stat.S_IMODE(st.st_mode):04o}): tessera loads nothing from it, another user could put "
                           f"code there; {_fix(kind, path, True)}")


def write_error(e: OSError, path: str, what: str, verb: str = "write") -> TesseraError:
    """The TesseraError of an OSError met writing (or removing: `verb`) `what` at `path` in the cache: what
    ran out or was refused, where, and what to do."""
    reason = _WRITE_REASONS.get(e.errno, e.strerror or str(e))
    detail = f" ({e.strerror})" if e.strerror and e.strerror.lower() != reason else ""
    room = " with room" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    what = f"{what} " if what else ""
    return TesseraError(f"cannot {verb} {what}{path}: {reason}{detail}; free space or fix the permissions there, "
                        f"or set {ENV_DIR} to a writable folder{room}")


def _dir(path: str, follow: bool) -> None:
    """Check the cache folder at path, making it (0700) where missing."""
    look = os.stat if follow else os.lstat
    try:
        st = look(path)
    except (FileNotFoundError, NotADirectoryError):
        try:
            if follow:
                os.makedirs(path, mode=0o700, exist_ok=True)
            else:
                os.mkdir(path, 0o700)
        except FileExistsError:   # another process was first
            pass
        except OSError as e:
            raise TesseraError(f"cannot make the kernel cache folder {path}: "
                               f"{_WRITE_REASONS.get(e.errno, e.strerror or str(e))}; set {ENV_DIR} to a folder "
                               f"you can write") from None
        st = look(path)
    except OSError as e:
        raise TesseraError(f"cannot use the kernel cache folder {path}: {e.strerror or e}; set {ENV_DIR} to a "
                           f"folder you can write") from None
    if not stat.S_ISDIR(st.st_mode):
        raise TesseraError(f"the kernel cache folder {path} is not a folder; set {ENV_DIR} to a folder of your own")
    check_private(path, st, "folder")


def folder(*parts: str) -> str:
    """The folder `os.path.join(cache_dir(), *parts)`, each level made private (0700) where missing and
    refused (TesseraError) where another user owns it or can write to it."""
    path = cache_dir()
    _dir(path, follow=True)
    for part in parts:
        path = os.path.join(path, part)
        _dir(path, follow=False)
    return path


def file_sha256(path: str) -> str:
    """The sha256 (hex) of a file's content, read without moving its access time where the system allows
    (O_NOATIME: a check is not a use)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOATIME", 0))
    except PermissionError:
        fd = os.open(path, os.O_RDONLY)
    h = hashlib.sha256()
    with open(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _signature(st) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _recorded(path: str) -> str | None:
    """The sha256 the integrity record of `path` holds, None without a (well-formed) record for it."""
    try:
        with open(path + RECORD, encoding="ascii") as f:
            text = f.read(200)
    except (OSError, ValueError):
        return None
    digest, _, name = text.strip().partition("  ")
    return digest if name == os.path.basename(path) and len(digest) == 64 else None


def _lstat_entry(path: str):
    """lstat of a cache entry's file, None when missing; refused (TesseraError) when it is not a plain
    file, or another user owns it or can write it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TesseraError(f"cannot read the kernel cache entry {path}: {e.strerror or e}; set {ENV_DIR} to a "
                           f"folder of your own") from None
    if not stat.S_ISREG(st.st_mode):
        raise TesseraError(f"the kernel cache entry {path} is not a plain file (a link, a folder?): tessera loads "
                           f"nothing from it; {_fix('entry', path, False)}")
    check_private(path, st, "entry")
    return st


def hit(path: str, digest: str | None = None) -> bool:
    """Whether the cache file at `path` may be used as it is: its sha256 is `digest` (an entry named by
    its content's hash) or, without one, what its integrity record `path.sha256` says. A file is hashed
    once per process and version (inode, size, modification time of it and its record). On a hit the use
    is noted (LRU eviction). False: missing, no record, another content: the caller builds it again
    (over it). Refused (TesseraError): it or its record is not a plain file, or another user owns it or
    can write it."""
    st = _lstat_entry(path)
    if st is None:
        return False
    sig = _signature(st)
    if digest is None:
        rec = _lstat_entry(path + RECORD)
        if rec is None:
            return False
        sig += _signature(rec)
    if _VERIFIED.get(path) != sig:
        want = digest if digest is not None else _recorded(path)
        try:
            if want is None or file_sha256(path) != want:
                return False
        except OSError:
            return False
        _VERIFIED[path] = sig
    note_hit(path, st)
    return True


def _write_record(path: str, digest: str, what: str) -> tuple:
    """Write the integrity record of `path`; the signature of the record written."""
    rec = path + RECORD
    with new_file(rec, f"the integrity record of {what}", record=False) as tmp:
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{digest}  {os.path.basename(path)}\n")
    return _signature(os.lstat(rec))


def _seal(tmp: str, path: str, what: str, record: bool) -> None:
    """Make the finished file tmp private and move it to `path`, its integrity record written first."""
    os.chmod(tmp, 0o600)
    sig = _signature(os.stat(tmp))
    if record:
        sig += _write_record(path, file_sha256(tmp), what)
    os.replace(tmp, path)
    _VERIFIED[path] = sig


@contextmanager
def new_file(path: str, what: str, record: bool = True):
    """A temporary file beside the cache's `path` (its name yielded) to fill; on leaving it becomes `path`,
    private (0600), with its integrity record unless `record` is False (an entry named by its hash). An
    OSError (a full disk, a read-only folder) becomes a TesseraError naming `what` and where; a failure
    leaves nothing behind."""
    tmp = None
    try:     # the clean-up is armed before the file exists: a Ctrl-C right after it is made removes it too
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-",
                                   suffix=os.path.splitext(path)[1] or ".tmp")
        os.close(fd)
        yield tmp
        _seal(tmp, path, what, record)
    except OSError as e:
        raise write_error(e, path, what) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write(path: str, data, what: str, record: bool = True) -> None:
    """Write text or bytes to the cache's `path` as new_file does (atomically, 0600, with a record)."""
    with new_file(path, what, record) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)


def check_before_load(path: str) -> None:
    """Refuse (TesseraError) to load a library or GPU artifact of the cache (a `<key[:2]>/` entry) that
    another user could have written or that does not match its integrity record (the loaders call this
    first: a hit of the compiler driver was checked already, once per process and file version). A file
    outside the cache is the caller's to trust."""
    path = os.path.realpath(path)
    root = os.path.realpath(cache_dir())
    sub = os.path.dirname(path)
    if os.path.dirname(sub) != root or not _HEX2.match(os.path.basename(sub)):
        return
    for folder, st in ((root, os.stat(root)), (sub, os.lstat(sub))):
        check_private(folder, st, "folder")
    if not hit(path):
        raise TesseraError(f"{path} is in the kernel cache but does not match its integrity record (damaged or "
                           f"changed since it was built, or built by an older tessera): tessera does not load it; "
                           f"build it again (tessera.build, tessera.compile) or remove it")


def discard(path: str) -> bool:
    """Remove the cache entry at `path` and its record (one that failed to load, to be built again);
    False, touching nothing, when path is not in the cache."""
    root = os.path.realpath(cache_dir())
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        return False
    _VERIFIED.pop(path, None)
    _remove([path, path + RECORD])
    return True


# ---------------------------------------------------------------------------------------------
# the hooks of the compiler driver
# ---------------------------------------------------------------------------------------------
def note_hit(path: str, st) -> None:
    """A cache hit on `path` (its stat result `st`): when its access time is old, move it to now, keeping
    the modification time (the module loader and the integrity check compare it), so that LRU eviction
    sees the use."""
    now = time.time()
    if now - st.st_atime > TOUCH_AFTER_S:
        try:
            os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
        except OSError:   # a read-only cache: eviction then goes by build time
            pass


_builds_since_check = 0


def after_build(root: str | None = None, cap: int | None = None) -> PruneResult | None:
    """After a library was built into the cache: now and then, check its size and, over `cap` (the
    caller reads max_size() before compiling, so a bad setting fails first), prune to LOW_WATER of it.
    Returns what a prune removed, None when no check ran; never raises for the file system."""
    global _builds_since_check
    if cap is None:
        return None
    root = root or cache_dir()
    _builds_since_check += 1
    stamp = os.path.join(root, STAMP)
    try:
        age = time.time() - os.stat(stamp).st_mtime
    except OSError:
        age = math.inf
    if age < CHECK_EVERY_S and _builds_since_check < CHECK_EVERY_BUILDS:
        return None
    _builds_since_check = 0
    try:
        with open(stamp, "a"):
            pass
        os.utime(stamp)
        contents = scan(root)
        if contents.size <= cap:
            return PruneResult(size=contents.size, entries=len(contents.entries))
        return prune(int(cap * LOW_WATER), root, contents=contents)
    except (OSError, TesseraError):   # a read-only cache: the build itself went through
        return None


__all__ = ["DEFAULT_MAX_BYTES", "ENV_MAX", "RECORD", "Contents", "Entry", "PruneResult", "after_build", "cache_dir",
           "check_before_load", "check_private", "clear", "discard", "file_sha256", "folder", "format_size", "hit",
           "max_size", "new_file", "note_hit", "parse_size", "prune", "scan", "write", "write_error"]
