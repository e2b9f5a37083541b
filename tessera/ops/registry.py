"""The operator registry: what a graph op is, for every stage that meets it.

An operator is registered once, by name (Relay-style: "add", "nn.conv2d", "reshape"), with:
- `inputs`: input names; a last name ending in "*" takes any number (concatenate's "data*");
- `attrs`: attribute name -> default (`REQUIRED` for none); unknown attributes are refused;
- `pattern`: its fusion pattern (TVM's OpPattern), read by the graph fusion pass;
- `infer(types, attrs) -> [TensorType]`: output types from input types (shape inference);
- `compute(tensors, attrs) -> [te.Tensor]`: the tensor expression over te placeholders (a compute
  that takes `target` too gets the Target it is built for: `OpDef.compute_for`);
- `schedule(sch, ctx)`: optional default CPU schedule of the PrimFunc made from compute;
- `host(arrays, attrs) -> [arrays]`: instead of a compute, for an op whose output extents depend on
  its input values (nonzero, unique, non_max_suppression): run on the host by the graph executor,
  its outputs' data-dependent extents typed as symbols that the run binds.

    conv2d = register_op("nn.conv2d", inputs=("data", "weight"), pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
                         attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "groups": 1})
    @conv2d.def_infer
    def _(types, attrs): ...
    @conv2d.def_compute
    def _(tensors, attrs): ...
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Callable, Mapping

from ..errors import ShapeError, TesseraError, UnsupportedOpError


class OpPattern(IntEnum):
    """Fusion patterns, as in TVM: lower is more fusable."""

    ELEMWISE = 0              # out[i] = f(in[i]), same shape
    BROADCAST = 1             # elementwise with broadcasting of some inputs
    INJECTIVE = 2             # every output element reads a computable input element (reshape, transpose)
    COMM_REDUCE = 3           # a commutative reduction (sum, max)
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output may take elementwise epilogues (conv2d, dense)
    TUPLE = 7
    OPAQUE = 8                # never fused (sort, topk, extern calls)


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()


class Knobs:
    """The tunable decisions of a default schedule while the tuner explores it: each `choose` is a
    sample_categorical of the schedule (so its trace records and replays the choice), taking the
    next of `decisions` (candidate indices, in call order) where given and valid, else drawn from
    the schedule's random state (seed: the schedule's seed, for whoever makes it). `names` lists
    the knobs chosen, in order."""

    def __init__(self, decisions=None, seed=None):
        self.decisions = list(decisions) if decisions is not None else None
        self.seed = seed
        self.names: list = []
        self.counts: list = []   # candidates of each sampling instruction made, in order
        self._k = 0              # sampling instructions made (a knob with one candidate makes none)

    def choose(self, sch, name: str, candidates, default):
        cands = _knob_candidates(name, candidates, default)
        self.names.append(name)
        if len(cands) == 1:
            return cands[0]
        k, self._k = self._k, self._k + 1
        self.counts.append(len(cands))
        d = self.decisions[k] if self.decisions is not None and k < len(self.decisions) else None
        if d is not None and not (isinstance(d, int) and 0 <= d < len(cands)):
            d = None
        probs = [1.0 / len(cands)] * len(cands)
        rv = sch.sample_categorical(list(range(len(cands))), probs, decision=d)
        return cands[int(sch.get(rv))]


def _knob_candidates(name, candidates, default) -> list:
    """candidates without repeats, default first (added when missing)."""
    out = [default]
    for c in candidates:
        if c not in out:
            out.append(c)
    if not isinstance(name, str) or not name:
        raise TesseraError(f"a schedule knob is named by a non-empty string, got {name!r}")
    return out


@dataclass
class ScheduleContext:
    """What a default schedule gets besides the Schedule: which block is the op's, and for what.

    block: name of the op's output block (the anchor); epilogue: names of blocks fused after it
    (elementwise consumers the schedule should place, e.g. reverse_compute_at into its tile loop);
    the input/output types and attrs of the op; the Target. knobs: None for the hand-written
    default schedule; a Knobs while the tuner explores the schedule's decisions (`choose`).
    """

    block: str
    attrs: Mapping
    target: object
    input_types: tuple = ()
    output_types: tuple = ()
    epilogue: tuple = ()
    knobs: Knobs | None = None

    def choose(self, sch, name: str, candidates, default):
        """A tunable decision of the schedule: `default` (the hand-written choice) unless the tuner
        is exploring the schedule, when it is one of candidates + [default], recorded in the trace
        (so the default schedule is always a point of the schedule's space)."""
        if self.knobs is None:
            return default
        return self.knobs.choose(sch, name, candidates, default)


@dataclass
class OpDef:
    name: str
    inputs: tuple
    attrs: Mapping
    pattern: OpPattern
    num_outputs: int | None = 1      # None: decided by infer (split, topk)
    infer: Callable | None = None
    compute: Callable | None = None
    schedule: Callable | None = None
    host: Callable | None = None
    bounds: Callable | None = None
    doc: str = ""
    _extra: dict = field(default_factory=dict, repr=False)

    # registration decorators ------------------------------------------------------------------
    def def_infer(self, fn):
        self.infer = fn
        return fn

    def def_compute(self, fn):
        """Register fn(tensors, attrs) -> [te.Tensor]; a compute whose layout depends on the target
        (nn.matmul packs B in the panels of the target's micro-kernel) also takes `target`."""
        self.compute = fn
        self._extra["compute_takes_target"] = "target" in inspect.signature(fn).parameters
        return fn

    def def_schedule(self, fn):
        self.schedule = fn
        return fn

    def def_bounds(self, fn):
        """Register fn(types, attrs) -> {symbol: largest allowed value}: limits on the symbols an
        output extent names, which the executor checks per run (prefix_slice: at most the axis)."""
        self.bounds = fn
        return fn

    def def_host(self, fn):
        """Register fn(arrays, attrs) -> [numpy arrays]: the op runs on the host (see the module
        docstring); it has no compute."""
        self.host = fn
        return fn

    # use -------------------------------------------------------------------------------------
    def compute_for(self, tensors, attrs, target=None) -> list:
        """The op's te tensors over `tensors`, for `target` (None: the host) where the compute
        depends on it."""
        if self._extra.get("compute_takes_target"):
            return self.compute(tensors, attrs, target=target)
        return self.compute(tensors, attrs)

    @property
    def variadic(self) -> bool:
        return bool(self.inputs) and self.inputs[-1].endswith("*")

    def check_arity(self, n: int, node: str = "") -> None:
        fixed = len(self.inputs) - (1 if self.variadic else 0)
        ok = n >= fixed if self.variadic else n == fixed
        if not ok:
            want = f"at least {fixed}" if self.variadic else str(fixed)
            where = f" (node {node!r})" if node else ""
            raise ShapeError(f"{self.name}{where}: takes {want} inputs {self.inputs}, got {n}")

    def normalize_attrs(self, attrs: Mapping | None, node: str = "") -> Mapping:
        """attrs with defaults filled in; unknown or missing required attributes are errors."""
        attrs = dict(attrs or {})
        where = f" (node {node!r})" if node else ""
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise TesseraError(f"{self.name}{where}: unknown attributes {unknown}; it takes "
                               f"{sorted(self.attrs)}")
        out = {}
        for k, default in self.attrs.items():
            if k in attrs:
                out[k] = attrs[k]
            elif default is REQUIRED:
                raise TesseraError(f"{self.name}{where}: attribute {k!r} is required")
            else:
                out[k] = default
        return MappingProxyType(out)

    def infer_types(self, types, attrs, node: str = "") -> tuple:
        if self.infer is None:
            raise TesseraError(f"op {self.name} has no type inference registered")
        self.check_arity(len(types), node)
        try:
            out = self.infer(tuple(types), attrs)
        except TesseraError as e:
            if node and node not in str(e):
                raise type(e)(f"{e} (node {node!r})") if type(e) in (ShapeError, TesseraError) else e
            raise
        out = tuple(out)
        if self.num_outputs is not None and len(out) != self.num_outputs:
            raise TesseraError(f"{self.name}: infer gave {len(out)} outputs, the op has {self.num_outputs}")
        return out


_REGISTRY: dict[str, OpDef] = {}


def register_op(name: str, *, inputs, pattern: OpPattern, attrs: Mapping | None = None,
                num_outputs: int | None = 1, doc: str = "") -> OpDef:
    """Register an operator and return its OpDef (add infer/compute/schedule with its decorators)."""
    if name in _REGISTRY:
        raise TesseraError(f"op {name!r} is registered twice")
    op = OpDef(name=name, inputs=tuple(inputs), attrs=MappingProxyType(dict(attrs or {})),
               pattern=OpPattern(pattern), num_outputs=num_outputs, doc=doc)
    _REGISTRY[name] = op
    return op


def get_op(name: str, node: str | None = None) -> OpDef:
    """The registered OpDef of `name`, or UnsupportedOpError. (Every op family is registered by the
    time anyone outside the package can call this: importing tessera.ops.registry runs
    tessera/ops/__init__.py, which imports them all.)"""
    op = _REGISTRY.get(name)
    if op is None:
        raise UnsupportedOpError(name, node, "no such tessera operator")
    return op


def list_ops() -> list[str]:
    return sorted(_REGISTRY)
