"""The plan: what a compiled model is at run time, with no graph objects.

Lowering (tessera/graph/lowering.py) makes one from an optimized Graph; an exported
library carries the same plan as its `tessera_graph` JSON document (`Plan.document` writes it,
`Plan.from_document` reads it back). Both executors (runtime/graph_executor.py,
runtime/aot_executor.py) run from a Plan:

- values: one TensorSpec per value slot (the graph's inputs first, then its constants, then the
  node outputs in step order); a shape holds ints and symbol names;
- inputs / outputs: slots, with the model's public names (`input_names`, `output_names`);
- constants: slot -> numpy array;
- steps: per node, in execution order, its name, op, the kernel it calls and its input and
  output slots;
- kernels: per kernel name, its op (a fused node's function name), which input dimensions bind
  which symbols (`in_vars`) and its output extents as JSON expressions over those symbols
  (`{"var": "n"}`, `{"add": [a, b]}`, ...: `eval_expr_json`);
- memory: the static memory plan (arena bytes, strategy, an offset per intermediate slot) when
  the shapes are static, else None.
"""
from __future__ import annotations

import json


from ..errors import DTypeError, ShapeError, TesseraError
from ..ir.dtype import numpy_dtype
from ..ir.tensor_type import TensorType

FORMAT = "tessera-graph"
VERSION = 3
READS = (2, 3)   # version 2 (before the memory plan was written) still loads: it runs the general path


class TensorSpec:
    """One value: its (sanitized) name and its ir.TensorType (dtype + shape of ints and symbol
    names), with the type's parts and its numpy dtype at hand for the executors' hot paths."""

    __slots__ = ("name", "type", "dtype", "shape", "np_dtype")

    def __init__(self, name: str, dtype, shape):
        self.name = str(name)
        self.type = TensorType(shape, dtype)
        self.dtype, self.shape = str(self.type.dtype), self.type.shape
        self.np_dtype = numpy_dtype(self.type.dtype)

    @property
    def ndim(self) -> int:
        return self.type.ndim

    @property
    def is_static(self) -> bool:
        return self.type.is_static

    def numel(self) -> int:
        return self.type.numel()

    def nbytes(self) -> int:
        return self.numel() * self.np_dtype.itemsize

    def as_json(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape)}

    def __str__(self):
        return str(self.type)

    __repr__ = __str__


class KernelSpec:
    """How a kernel's output extents follow from its input extents (see the module docstring).

    shape_fn: for a plan made in this process whose extents JSON cannot describe, the function
    computing them (such a plan runs, but cannot be written into a library). host: the kernel runs
    on the host and returns its outputs, whose extents depend on the values (the executor binds the
    symbols of its output types from them). tuned: the kernel is scheduled by a tuning record (the
    profile marks it)."""

    __slots__ = ("op", "in_vars", "out_shapes", "shape_fn", "static_out_shapes", "host", "bounds", "tuned")

    def __init__(self, op: str, in_vars, out_shapes, shape_fn=None, host: bool = False, bounds=None,
                 tuned: bool = False):
        self.op = str(op)
        self.host = bool(host)
        self.tuned = bool(tuned)
        self.bounds = {str(k): int(v) for k, v in (bounds or {}).items()}
        self.in_vars = tuple(tuple((int(d), str(v)) for d, v in dims) for dims in in_vars)
        self.out_shapes, self.shape_fn = out_shapes, shape_fn
        static = out_shapes is not None and all(isinstance(d, int) for s in out_shapes for d in s)
        self.static_out_shapes = [tuple(s) for s in out_shapes] if static else None

    def output_shapes(self, in_shapes, symbols=None) -> list:
        """Output shapes (tuples of ints) for inputs of these actual shapes; `symbols`: the values the
        graph's inputs bind (for an output extent no input of the kernel names)."""
        if self.static_out_shapes is not None:
            return self.static_out_shapes
        if self.shape_fn is not None:
            return self.shape_fn(in_shapes)
        if self.host:
            raise ShapeError(f"kernel {self.op}: its output extents are known only after it runs")
        env = dict(symbols) if symbols else {}
        for name, most in self.bounds.items():
            if name in env and env[name] > most:
                raise ShapeError(f"kernel {self.op}: {name} = {env[name]} at run time, but it cuts an axis of "
                                 f"extent {most}")
        for dims, shape in zip(self.in_vars, in_shapes):
            for d, name in dims:
                env.setdefault(name, int(shape[d]))
        return [tuple(eval_expr_json(e, env) for e in s) for s in self.out_shapes]

    def as_json(self, name: str) -> dict:
        if self.host:
            raise TesseraError(f"kernel {name} ({self.op}) runs on the host (its output extents depend on the "
                               f"values): a model with it cannot be written into a library")
        if self.out_shapes is None:
            raise TesseraError(f"kernel {name} ({self.op}): its output extents cannot be written into a library")
        out = {"op": self.op, "in_vars": [[[d, v] for d, v in dims] for dims in self.in_vars],
               "out_shapes": self.out_shapes}
        if self.bounds:
            out["bounds"] = dict(self.bounds)
        if self.tuned:
            out["tuned"] = True
        return out


class Step:
    """One node: its name and op, the kernel it calls, its input and output slots."""

    __slots__ = ("name", "op", "kernel", "ins", "outs")

    def __init__(self, name: str, op: str, kernel: str, ins, outs):
        self.name, self.op, self.kernel = name, op, kernel
        self.ins, self.outs = tuple(ins), tuple(outs)

    def __repr__(self):
        return f"<Step {self.name} {self.op} -> {self.kernel}{list(self.ins)}{list(self.outs)}>"


class MemoryLayout:
    """The static memory plan at run time: one arena; offsets[slot] = (offset, nbytes) per
    intermediate (node outputs that are not graph outputs); `figures` are the planner's report."""

    __slots__ = ("arena_bytes", "strategy", "alignment", "offsets", "figures")

    def __init__(self, arena_bytes: int, strategy: str, alignment: int, offsets: dict, figures=None):
        self.arena_bytes, self.strategy, self.alignment = int(arena_bytes), str(strategy), int(alignment)
        self.offsets = {int(s): (int(o), int(n)) for s, (o, n) in offsets.items()}
        self.figures = dict(figures or {})

    def as_json(self) -> dict:
        return {"arena_bytes": self.arena_bytes, "strategy": self.strategy, "alignment": self.alignment,
                "offsets": [[s, o, n] for s, (o, n) in sorted(self.offsets.items())]}

    def __repr__(self):
        return (f"<MemoryLayout {self.strategy}: arena {self.arena_bytes} bytes, "
                f"{len(self.offsets)} intermediates>")


class Plan:
    """A compiled model at run time (see the module docstring)."""

    def __init__(self, name: str, target: str, values, inputs, outputs, input_names, output_names,
                 constants: dict, steps, kernels: dict, memory: MemoryLayout | None = None):
        self.name, self.target = str(name), str(target)
        self.values = list(values)
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.input_names, self.output_names = list(input_names), list(output_names)
        self.constants = dict(constants)
        self.steps = list(steps)
        self.kernels = dict(kernels)
        self.memory = memory
        self._check()

    def _check(self):
        n = len(self.values)
        where = f"plan of {self.name!r}"
        for label, slots in (("inputs", self.inputs), ("outputs", self.outputs), ("constants", self.constants)):
            bad = [s for s in slots if not 0 <= s < n]
            if bad:
                raise TesseraError(f"{where}: {label} name slots {bad} outside the {n} values")
        if len(self.input_names) != len(self.inputs) or len(self.output_names) != len(self.outputs):
            raise TesseraError(f"{where}: {len(self.input_names)} input names for {len(self.inputs)} inputs, "
                               f"{len(self.output_names)} output names for {len(self.outputs)} outputs")
        for st in self.steps:
            if st.kernel not in self.kernels:
                raise TesseraError(f"{where}: node {st.name!r} calls kernel {st.kernel!r}, which it does not have")
            bad = [s for s in st.ins + st.outs if not 0 <= s < n]
            if bad:
                raise TesseraError(f"{where}: node {st.name!r} names slots {bad} outside the {n} values")
        if self.memory is not None:
            check_memory(self, where)

    @property
    def is_static(self) -> bool:
        return all(v.is_static for v in self.values)

    def input_specs(self) -> list:
        return [self.values[s] for s in self.inputs]

    def output_specs(self) -> list:
        return [self.values[s] for s in self.outputs]

    # ------------------------------------------------------------------ the library document
    def document(self, constant_offsets: dict, weights_symbol: str, weights_nbytes: int, attrs=None) -> dict:
        """The tessera_graph JSON document of this plan (docs/internals.md, "A graph library"):
        constant_offsets: slot -> byte offset in the embedded weights; attrs: per step, its node's
        attributes as JSON (the graph compiler's; {} without)."""
        v = self.values

        def value(s):
            return {"id": s, "name": v[s].name, **v[s].as_json()}

        nodes = []
        for i, st in enumerate(self.steps):
            nodes.append({"op": st.op, "name": st.name, "attrs": attrs[i] if attrs is not None else {},
                          "inputs": list(st.ins), "outputs": [value(s) for s in st.outs], "kernel": st.kernel})
        used = []
        for st in self.steps:
            if st.kernel not in used:
                used.append(st.kernel)
        return {"format": FORMAT, "version": VERSION, "name": self.name, "target": self.target,
                "inputs": [value(s) for s in self.inputs],
                "constants": [{**value(s), "offset": constant_offsets[s]} for s in sorted(self.constants)],
                "nodes": nodes, "outputs": list(self.outputs),
                "input_names": list(self.input_names), "output_names": list(self.output_names),
                "kernels": {k: self.kernels[k].as_json(k) for k in used},
                "weights": {"symbol": weights_symbol, "nbytes": int(weights_nbytes)},
                "memory": self.memory.as_json() if self.memory is not None else None, "aot": None}

    @staticmethod
    def from_document(doc: dict, constants: dict, where: str = "tessera graph library") -> "Plan":
        """The Plan of a library's document; constants: id -> array (runtime/library.py maps them
        from the library's embedded weights). A malformed document is a TesseraError naming `where`."""
        try:
            return _from_document(doc, constants, where)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise TesseraError(f"{where}: malformed tessera_graph ({type(e).__name__}: {e})") from None


def _from_document(doc, constants, where) -> Plan:
    slot_of: dict = {}
    values: list = []

    def define(j):
        i = j["id"]
        if i in slot_of:
            raise TesseraError(f"{where}: malformed tessera_graph: value id {i} is defined twice")
        slot_of[i] = len(values)
        values.append(TensorSpec(j["name"], j["dtype"], j["shape"]))
        return slot_of[i]

    def use(i):
        if i not in slot_of:
            raise TesseraError(f"{where}: malformed tessera_graph: value id {i!r} is used before it is defined")
        return slot_of[i]

    inputs = [define(j) for j in doc["inputs"]]
    consts = {}
    for j in doc["constants"]:
        consts[define(j)] = constants[j["id"]]
    steps = []
    for n in doc["nodes"]:
        ins = [use(i) for i in n["inputs"]]
        outs = [define(o) for o in n["outputs"]]
        steps.append(Step(n["name"], n["op"], n["kernel"], ins, outs))
    kernels = {name: KernelSpec(k["op"], k["in_vars"], k["out_shapes"], bounds=k.get("bounds"),
                                tuned=k.get("tuned") is True)
               for name, k in doc["kernels"].items()}
    outputs = [use(i) for i in doc["outputs"]]
    in_names, out_names = public_names(doc, where)
    memory = None
    m = doc.get("memory")
    if m is not None:
        def num(v, field):
            if type(v) is not int:
                raise TesseraError(f"{where}: malformed tessera_graph: {field} is {v!r}, not an integer")
            return v

        offsets = {}
        for i, o, nb in m["offsets"]:
            offsets[use(i)] = (num(o, f"memory.offsets offset of id {i}"), num(nb, f"memory.offsets nbytes of id {i}"))
        memory = MemoryLayout(num(m["arena_bytes"], "memory.arena_bytes"), m["strategy"],
                              num(m["alignment"], "memory.alignment"), offsets, (doc.get("aot") or {}).get("plan"))
    return Plan(doc["name"], doc["target"], values, inputs, outputs, in_names, out_names, consts, steps, kernels,
                memory)


def check_memory(plan: Plan, where: str) -> None:
    """Refuse a memory layout a static run could not trust (the StaticRunner puts every intermediate at
    its offset in an arena of `arena_bytes` and kernels write there): per intermediate (a node output
    that is not a graph output) an offset, a multiple of the alignment (a power of two up to the
    runner's 64), its recorded size that of its type and of what its kernel writes, the whole tensor
    inside the arena; the arena exactly as large as its last tensor needs; and no two tensors alive at
    once (a tensor lives from its node to its last reader, both included) sharing a byte."""
    m = plan.memory
    a, arena = m.alignment, m.arena_bytes
    if not 1 <= a <= 64 or a & (a - 1):
        raise TesseraError(f"{where}: memory.alignment is {a}; a power of two from 1 to 64 is expected")
    if arena < 0:
        raise TesseraError(f"{where}: memory.arena_bytes is {arena}, a negative size")
    if not plan.is_static:
        raise TesseraError(f"{where}: a memory layout needs static shapes, but the plan has symbolic ones")
    values, outputs = plan.values, set(plan.outputs)
    mids = [s for st in plan.steps for s in st.outs if s not in outputs]
    extra = sorted(set(m.offsets) - set(mids))
    if extra:
        raise TesseraError(f"{where}: memory.offsets places slot {extra[0]} ({values[extra[0]].name}), which is "
                           f"not an intermediate (a node output that is not a graph output)")
    for st in plan.steps:
        spec = plan.kernels[st.kernel]
        shapes = spec.static_out_shapes
        if shapes is None:                    # extents computed per run: the static runner is not used
            continue
        if len(shapes) != len(st.outs) or any(tuple(sh) != tuple(values[s].shape) for sh, s in zip(shapes, st.outs)):
            raise TesseraError(f"{where}: node {st.name!r}: its kernel {st.kernel!r} writes outputs of shapes "
                               f"{spec.out_shapes}, its outputs are {[str(values[s]) for s in st.outs]}")
    top = 0
    for s in mids:
        if s not in m.offsets:
            raise TesseraError(f"{where}: memory.offsets has no place for intermediate {values[s].name!r} (slot {s})")
        off, nb = m.offsets[s]
        name = f"memory.offsets of {values[s].name!r} (slot {s})"
        if nb != values[s].nbytes():
            raise TesseraError(f"{where}: {name}: nbytes {nb}, but the tensor ({values[s]}) takes "
                               f"{values[s].nbytes()} bytes")
        if off < 0 or off % a:
            raise TesseraError(f"{where}: {name}: offset {off} is not a non-negative multiple of the alignment {a}")
        if off + nb > arena:
            raise TesseraError(f"{where}: {name}: bytes [{off}, {off + nb}) lie outside the arena of "
                               f"memory.arena_bytes = {arena}")
        if nb:
            top = max(top, -(-(off + nb) // a) * a)
    if arena != top:
        raise TesseraError(f"{where}: memory.arena_bytes is {arena}, but its tensors end at byte {top}")
    _check_no_overlap(plan, where)


def _check_no_overlap(plan: Plan, where: str) -> None:
    """No two intermediates alive at the same step share a byte (see check_memory)."""
    offsets, values = plan.memory.offsets, plan.values
    last = {}
    for i, st in enumerate(plan.steps):
        for s in st.ins:
            last[s] = i
    live = []                                   # (last step, start, end, slot)
    for i, st in enumerate(plan.steps):
        live = [t for t in live if t[0] >= i]
        for s in st.outs:
            if s not in offsets or not offsets[s][1]:
                continue
            off, nb = offsets[s]
            for _, o, e, other in live:
                if off < e and o < off + nb:
                    raise TesseraError(f"{where}: memory.offsets: {values[s].name!r} at [{off}, {off + nb}) "
                                       f"overlaps {values[other].name!r} at [{o}, {e}), alive at the same time")
            live.append((max(last.get(s, i), i), off, off + nb, s))


def public_names(doc: dict, where: str = "tessera graph library") -> tuple:
    """(input names, output names) of a library's tessera_graph document: its `input_names` and
    `output_names` (the model's public names, aligned with `inputs` / `outputs`), or the values'
    names for a library written before them; malformed lists are refused."""
    out = []
    for key, items in (("input_names", doc["inputs"]), ("output_names", doc["outputs"])):
        names = doc.get(key)
        if names is None:
            if key == "input_names":
                names = [j["name"] for j in items]
            else:
                by_id = {j["id"]: j["name"] for j in doc["inputs"]}
                by_id.update({j["id"]: j["name"] for j in doc["constants"]})
                for n in doc["nodes"]:
                    by_id.update({o["id"]: o["name"] for o in n["outputs"]})
                names = [by_id[i] for i in items]
        if not isinstance(names, list) or len(names) != len(items) or \
                not all(isinstance(n, str) and n for n in names):
            raise TesseraError(f"{where}: malformed tessera_graph: {key} must be a list of {len(items)} non-empty "
                               f"names, got {names!r}")
        if key == "input_names" and len(set(names)) != len(names):
            raise TesseraError(f"{where}: malformed tessera_graph: input_names repeat a name ({names})")
        out.append(list(names))
    return tuple(out)


def parse_document(text: str, where: str) -> dict:
    """The tessera_graph document in `text`, checked for its format and a version this tessera reads."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise TesseraError(f"{where}: unreadable tessera_graph: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TesseraError(f"{where}: tessera_graph is not a {FORMAT} document")
    if doc.get("version") not in READS:
        raise TesseraError(f"{where}: graph library version {doc.get('version')!r}; this tessera reads versions "
                           f"{', '.join(map(str, READS))} (re-export the model with this tessera)")
    return doc


# ---------------------------------------------------------------------------------------------
# output extents as JSON expressions
# ---------------------------------------------------------------------------------------------
def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b,
         "truncdiv": _trunc_div, "truncmod": lambda a, b: a - b * _trunc_div(a, b),
         "min": min, "max": max, "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
         "lt": lambda a, b: int(a < b), "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b),
         "ge": lambda a, b: int(a >= b)}


def eval_expr_json(j, env: dict) -> int:
    """Evaluate an extent written as JSON (graph/lowering.py's expr_json) with var name -> int bindings."""
    if isinstance(j, int):
        return j
    if not isinstance(j, dict) or len(j) != 1:
        raise TesseraError(f"tessera graph plan: malformed extent {j!r}")
    (k, v), = j.items()
    if k == "var":
        if v not in env:
            raise TesseraError(f"tessera graph plan: extent variable {v!r} is not bound by the inputs")
        return env[v]
    if k == "select":
        c, a, b = v
        return eval_expr_json(a, env) if eval_expr_json(c, env) else eval_expr_json(b, env)
    fn = _EVAL.get(k)
    if fn is None:
        raise TesseraError(f"tessera graph plan: unknown extent operation {k!r}")
    return fn(eval_expr_json(v[0], env), eval_expr_json(v[1], env))


_RETAG = (TesseraError, ShapeError, DTypeError)


def node_error(st, e: TesseraError) -> TesseraError:
    """e with the node that raised it named (`st.where()`; tessera's own error classes only)."""
    return type(e)(f"{st.where()}: {e}") if type(e) in _RETAG else e


__all__ = ["FORMAT", "VERSION", "TensorSpec", "KernelSpec", "Step", "MemoryLayout", "Plan", "check_memory",
           "public_names", "parse_document", "eval_expr_json", "node_error"]
