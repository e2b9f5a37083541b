"""TensorIntrin: a computation pattern (desc) and what replaces it (impl), by name (TVM's names).

    TensorIntrin.register("my_gemm_6x16", desc, impl, c_source=C_CODE, features=("avx2", "fma"))
    sch.tensorize(loop, "my_gemm_6x16")

desc is a PrimFunc whose body (inside an optional root block with no iterators) is the loop nest
and the one block computing the pattern, e.g. `C[i, j] = C[i, j] + A[i, k] * B[k, j]` over a 6x16xK
tile. Symbolic extents in its parameters' shapes (`K`) match any extent. impl is a PrimFunc with
parameters of the same dtypes and shapes, whose body is what the matched block becomes: usually
`T.evaluate(T.my_kernel(K, T.address_of(A[0, 0]), lda, ...))`. tensorize binds impl's buffers to the
regions the block accesses: `A[i, k]` in impl becomes the element of the real buffer at the
region's offset, impl's stride variables (declared with `Buffer(..., strides=(lda, 1))`) become
the real buffer's strides (a constant stride must equal the real one; no strides at all means the
region must be compact), and impl's shape variables the matched extents.

The C source of the micro-kernel lives with the intrinsic (`c_source`, defining the functions impl
calls) and is emitted once into each translation unit that uses it. `features` are the CPU features
(as Target spells them: "avx2", "fma", "avx512f", "avx512vnni") the code needs; building a program
that uses the intrinsic for a target without them is refused, naming the missing feature.
"""
from __future__ import annotations

import re
import threading

from ...errors import TesseraError
from ...ir import Block, BlockRealize, Buffer, PrimFunc, Var, Visitor
from ...ir.functor import collect_vars
from ...target import Target, canon_feature
from .epilogue import EpilogueHook

_FAMILIES: list = []   # (compiled pattern, make(match)) of TensorIntrin.register_family
_MAKING: set = set()   # names whose family is registering them now (in the thread holding _MAKE_LOCK)
_MAKE_LOCK = threading.RLock()   # one family make() at a time: another thread asking waits for it
_REGISTRY: dict = {}
_MADE: set = set()     # names a family registered on first use (TensorIntrin.list(made=False) leaves them out)


class _Calls(Visitor):
    def __init__(self):
        super().__init__()
        self.ops = []

    def visit_Call(self, e):
        if e.op not in self.ops:
            self.ops.append(e.op)
        self.generic_visit(e)


def _canon_features(features, name) -> tuple:
    if isinstance(features, str):
        features = [f for f in features.replace(",", " ").split() if f]
    out = []
    for f in features:
        if not isinstance(f, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", f.strip().lstrip("+")):
            raise TesseraError(f"tensor intrinsic {name!r}: feature {f!r} is not a CPU feature name "
                               f"(e.g. 'avx2', 'fma', 'avx512f', 'avx512vnni')")
        c = canon_feature(f.strip().lstrip("+"))
        if c not in out:
            out.append(c)
    return tuple(out)


def pattern_of(func: PrimFunc, what: str, name: str):
    """The statement a desc/impl describes: the body of its root block (no iterators) or its body."""
    body = func.body
    if type(body) is BlockRealize and not body.block.iter_vars:
        b = body.block
        if b.init is not None or b.alloc_buffers or b.match_buffers:
            raise TesseraError(f"tensor intrinsic {name!r}: the root block of its {what} must have no init, "
                               f"allocations or match_buffers")
        return b.body
    return body


def shape_vars(func: PrimFunc) -> list:
    """The variables in the parameters' shapes (what a desc's extents may be matched to)."""
    out = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for d in p.shape:
                for v in collect_vars(d):
                    out.setdefault(v, None)
    return list(out)


class TensorIntrin:
    """A tensor intrinsic (see the module docstring); registered by name, found with `get`."""

    __slots__ = ("name", "desc", "impl", "c_source", "c_functions", "features", "doc", "pattern_vars", "epilogue")

    def __init__(self, desc: PrimFunc, impl: PrimFunc, *, c_source: str | None = None, features=(),
                 name: str = "<unnamed>", doc: str = "", epilogue=None):
        if not isinstance(desc, PrimFunc) or not isinstance(impl, PrimFunc):
            raise TesseraError(f"tensor intrinsic {name!r}: desc and impl must be PrimFuncs, got "
                               f"{type(desc).__name__} and {type(impl).__name__}")
        self.name = name
        self.desc, self.impl = desc, impl
        if epilogue is not None and not isinstance(epilogue, EpilogueHook):
            raise TesseraError(f"tensor intrinsic {name!r}: epilogue must be an EpilogueHook, got "
                               f"{type(epilogue).__name__}")
        self.epilogue = epilogue      # its zero-start / fused-epilogue variants (fuse_intrin_epilogue)
        self.features = _canon_features(features, name)
        self.doc = doc
        self._check_params()
        self._check_desc()
        self.pattern_vars = frozenset(shape_vars(desc))  # desc extents that match any extent
        pattern_of(impl, "impl", name)
        if c_source is not None and not isinstance(c_source, str):
            raise TesseraError(f"tensor intrinsic {name!r}: c_source must be C source text")
        self.c_source = c_source
        calls = _Calls()
        calls.visit(impl.body)
        self.c_functions = ()
        if c_source is not None:
            defined = tuple(op for op in calls.ops
                            if re.search(r"\b" + re.escape(op) + r"\s*\(", c_source) and op != "address_of")
            if not defined:
                raise TesseraError(f"tensor intrinsic {name!r}: c_source defines none of the functions its "
                                   f"impl calls ({', '.join(calls.ops) or 'none'})")
            self.c_functions = defined

    # -- checks -------------------------------------------------------------------------------
    def _check_params(self):
        d, i, name = self.desc.params, self.impl.params, self.name
        if len(d) != len(i):
            raise TesseraError(f"tensor intrinsic {name!r}: desc has {len(d)} parameters, impl {len(i)}; "
                               f"they must correspond one to one")
        vmap = {}
        for k, (a, b) in enumerate(zip(d, i)):
            if not isinstance(a, Buffer) or not isinstance(b, Buffer):
                raise TesseraError(f"tensor intrinsic {name!r}: parameter {k} must be a Buffer in desc and impl")
            if a.dtype != b.dtype or a.ndim != b.ndim:
                raise TesseraError(f"tensor intrinsic {name!r}: parameter {k} is {a.dtype}{list(a.shape)} in desc "
                                   f"but {b.dtype}{list(b.shape)} in impl")
            for x, y in zip(a.shape, b.shape):
                if isinstance(x, Var) and isinstance(y, Var):
                    if vmap.setdefault(y, x) is not x:
                        raise TesseraError(f"tensor intrinsic {name!r}: impl extent {y.name} stands for two "
                                           f"different desc extents")
                elif not (type(x) is type(y) and getattr(x, "value", None) == getattr(y, "value", None)
                          and not isinstance(x, Var)):
                    raise TesseraError(f"tensor intrinsic {name!r}: parameter {a.name} has shape "
                                       f"{[s.script() for s in a.shape]} in desc but "
                                       f"{[s.script() for s in b.shape]} in impl")

    def _check_desc(self):
        body = pattern_of(self.desc, "desc", self.name)
        s = body
        while True:
            t = type(s)
            if t is BlockRealize:
                if not s.block.iter_vars:
                    raise TesseraError(f"tensor intrinsic {self.name!r}: the block of its desc must have "
                                       f"iteration variables")
                return
            if hasattr(s, "body") and not isinstance(s, Block):
                s = s.body
                continue
            raise TesseraError(f"tensor intrinsic {self.name!r}: its desc must be a loop nest around one block "
                               f"(found {t.__name__})")

    # -- the registry (TVM's tir.TensorIntrin.register / get) --------------------------------
    @staticmethod
    def register(name: str, desc: PrimFunc, impl: PrimFunc, override: bool = False, *, c_source=None,
                 features=(), doc: str = "", epilogue=None) -> "TensorIntrin":
        """Register a tensor intrinsic under `name` (override=True replaces an existing one); epilogue:
        an EpilogueHook (tensor_intrin/epilogue.py) where the intrinsic has fused-epilogue variants."""
        if not isinstance(name, str) or not name:
            raise TesseraError(f"a tensor intrinsic's name must be a non-empty string, got {name!r}")
        if name in _REGISTRY and not override:
            raise TesseraError(f"tensor intrinsic {name!r} is already registered; pass override=True to "
                               f"replace it")
        intrin = TensorIntrin(desc, impl, c_source=c_source, features=features, name=name, doc=doc,
                              epilogue=epilogue)
        _REGISTRY[name] = intrin
        _MADE.discard(name)        # registered by name now (a family's make() marks its own afterwards)
        return intrin

    @staticmethod
    def register_family(pattern: str, make) -> None:
        """Intrinsics made on first use: a name that `pattern` (a regular expression) matches in
        full, asked for while unregistered, is registered by `make(match)` (a parameterized
        micro-kernel whose name spells its parameters, so a tuning record naming any of them
        replays in a fresh process)."""
        _FAMILIES.append((re.compile(pattern), make))

    @staticmethod
    def unregister_family(pattern: str) -> None:
        """Remove the family registered under pattern (a TesseraError when there is none); the
        intrinsics it made stay registered (unregister them by name)."""
        for k, (p, _) in enumerate(_FAMILIES):
            if p.pattern == pattern:
                del _FAMILIES[k]
                return
        raise TesseraError(f"unregister_family: no intrinsic family with pattern {pattern!r}")

    @staticmethod
    def get(name: str, allow_missing: bool = False) -> "TensorIntrin | None":
        """The intrinsic registered under name, or made by its family (register_family); None when
        missing and allow_missing."""
        intrin = _REGISTRY.get(name)
        if intrin is None and isinstance(name, str) and _FAMILIES:
            with _MAKE_LOCK:
                intrin = _REGISTRY.get(name)    # made by another thread meanwhile
                if intrin is None and name not in _MAKING:
                    intrin = _make_from_family(name)
        if intrin is None and not allow_missing:
            import difflib

            close = difflib.get_close_matches(str(name), list(_REGISTRY), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TesseraError(f"no tensor intrinsic named {name!r}{hint} (registered: "
                               f"{', '.join(sorted(_REGISTRY)) or 'none'})")
        return intrin

    @staticmethod
    def unregister(name: str) -> None:
        """Remove the intrinsic registered under name (a TesseraError when there is none): the
        tuner's design-space rules try every registered intrinsic, so a temporary one must go."""
        if name not in _REGISTRY:
            raise TesseraError(f"unregister: no tensor intrinsic named {name!r}")
        del _REGISTRY[name]
        _MADE.discard(name)

    @staticmethod
    def list(made: bool = True) -> list:
        """Names of the registered intrinsics, sorted. made=False leaves out those a family made on
        first use (register_family): which of them exist depends on what this process has asked for
        (records replayed, kernels compiled), so what is derived from the list must not see them."""
        return sorted(n for n in _REGISTRY if made or n not in _MADE)

    def missing_features(self, target) -> list:
        """The CPU features this intrinsic needs that `target` (a Target or its text) lacks."""
        t = Target(target)
        if not t.is_cpu:
            return list(self.features) or ["a C (CPU) target"]
        return [f for f in self.features if not t.has_feature(f)]

    def __repr__(self):
        feats = f", needs {'+'.join(self.features)}" if self.features else ""
        return f"<TensorIntrin {self.name}{feats}>"


def _make_from_family(name: str):
    """Register name through the first family whose pattern matches it in full (under _MAKE_LOCK);
    the intrinsic, or None when no family makes it."""
    for pattern, make in _FAMILIES:
        m = pattern.fullmatch(name)
        if m is not None:
            _MAKING.add(name)      # make() registers through register(), which may ask get() first
            before = set(_REGISTRY)
            try:
                make(m)
            finally:
                _MAKING.discard(name)
                _MADE.update(set(_REGISTRY) - before)
            return _REGISTRY.get(name)
    return None


__all__ = ["TensorIntrin", "pattern_of", "shape_vars"]
