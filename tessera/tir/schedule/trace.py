"""Trace: the instructions a schedule applied, with the decisions of its sampling instructions.

A trace replays on a fresh schedule of the same function (`apply_to_schedule`), prints as the
Python that replays it (`str(trace)`), and serializes to JSON-compatible lists:

    [[[kind, inputs, attrs, outputs], ...], [[instruction index, decision], ...]]

In inputs and attrs a handle is its name ("b0", "l1", "v2": block, loop, integer), a string
literal is JSON-quoted ('"C"'), True/False/None are the strings "True"/"False"/"None", numbers
and lists are themselves; outputs are names. Reading JSON checks everything and names the
instruction and field at fault in a TesseraError.
"""
from __future__ import annotations

import json
import math
import re

from ...errors import ScheduleError, TesseraError
from .handles import RV_OF_PREFIX, RV
from .instruction import INSTRUCTION_KINDS, Instruction, instruction_kind

_NAME = re.compile(r"^([blv])(\d+)$")


def _assign_names(insts) -> dict:
    names = {}
    for inst in insts:
        for o in inst.outputs:
            if o not in names:
                names[o] = f"{o.prefix}{len(names)}"
    return names


class Trace:
    """Instructions in order and the decision of each sampling instruction (`decisions`)."""

    __slots__ = ("insts", "decisions")

    def __init__(self, insts=(), decisions=None):
        self.insts: list = list(insts)
        self.decisions: dict = dict(decisions or {})

    # building ---------------------------------------------------------------------------------
    def append(self, inst: Instruction, decision=None):
        self.insts.append(inst)
        if decision is not None:
            self.decisions[inst] = decision

    def pop(self):
        """Remove and return the last instruction (None when empty)."""
        if not self.insts:
            return None
        inst = self.insts.pop()
        self.decisions.pop(inst, None)
        return inst

    def get_decision(self, inst):
        return self.decisions.get(inst)

    def copy(self) -> "Trace":
        return Trace(self.insts, self.decisions)

    def __len__(self):
        return len(self.insts)

    def _until_postproc(self, remove_postproc):
        if not remove_postproc:
            return self.insts
        for k, inst in enumerate(self.insts):
            if inst.kind.name == "EnterPostproc":
                return self.insts[:k]
        return self.insts

    def with_decision(self, inst, decision, remove_postproc: bool = False) -> "Trace":
        """A new trace where `inst` (a sampling instruction of this trace) has `decision` (None
        removes it: replay samples anew)."""
        insts = self._until_postproc(remove_postproc)
        if not any(i is inst for i in insts):
            raise TesseraError(f"with_decision: {inst!r} is not an instruction of this trace")
        if not inst.kind.sampling:
            raise TesseraError(f"with_decision: {inst.kind.name} is not a sampling instruction")
        decisions = {i: d for i, d in self.decisions.items() if any(i is j for j in insts)}
        if decision is None:
            decisions.pop(inst, None)
        else:
            decisions[inst] = decision
        return Trace(insts, decisions)

    def simplified(self, remove_postproc: bool = False) -> "Trace":
        """The trace without pure instructions (lookups, sampling) whose outputs nothing uses."""
        insts = self._until_postproc(remove_postproc)
        used = set()
        keep = []
        for inst in reversed(insts):
            if inst.kind.pure and not any(o in used for o in inst.outputs):
                continue
            keep.append(inst)
            for x in inst.inputs:
                _collect_rvs(x, used)
        keep.reverse()
        return Trace(keep, {i: d for i, d in self.decisions.items() if i in set(keep)})

    # replay -----------------------------------------------------------------------------------
    def apply_to_schedule(self, sch, remove_postproc: bool = False, decision_provider=None):
        """Replay the instructions on sch (a schedule of the same function).

        decision_provider(inst, inputs, attrs, decision) -> decision, if given, chooses the
        decision of every sampling instruction (inputs already mapped to sch's handles)."""
        rv_map = {}
        for k, inst in enumerate(self._until_postproc(remove_postproc)):
            kind = inst.kind
            where = f"trace instruction {k} ({kind.name})"
            inputs = [_map_rv(x, rv_map, where) for x in inst.inputs]
            attrs = list(inst.attrs)
            decision = self.decisions.get(inst) if kind.sampling else None
            if decision_provider is not None and kind.sampling:
                decision = decision_provider(inst, inputs, attrs, decision)
            try:
                outputs = kind.apply(sch, inputs, attrs, decision)
            except ScheduleError as e:
                raise ScheduleError(f"{where}: {e}") from e
            except TesseraError as e:
                raise TesseraError(f"{where}: {e}") from e
            if len(outputs) != len(inst.outputs):
                raise TesseraError(f"{where}: the instruction records {len(inst.outputs)} outputs, "
                                   f"the schedule returned {len(outputs)}")
            for old, new in zip(inst.outputs, outputs):
                if type(old) is not type(new):
                    raise TesseraError(f"{where}: output {old!r} is a {type(old).__name__}, the "
                                       f"schedule returned a {type(new).__name__}")
                rv_map[old] = new

    # printing ---------------------------------------------------------------------------------
    def as_python(self, remove_postproc: bool = False) -> list:
        """The instructions as Python statements on `sch`, one string each."""
        insts = self._until_postproc(remove_postproc)
        names = _assign_names(insts)
        return [inst.kind.as_python(inst.inputs, inst.attrs, inst.outputs, self.decisions.get(inst), names)
                for inst in insts]

    def __str__(self):
        lines = self.as_python()
        body = "\n".join("  " + line for line in lines) if lines else "  pass"
        return "# from tessera import tir\ndef apply_trace(sch: tir.Schedule) -> None:\n" + body

    def __repr__(self):
        return f"<Trace of {len(self.insts)} instructions>"

    def show(self):
        print(str(self))

    # JSON -------------------------------------------------------------------------------------
    def as_json(self, remove_postproc: bool = False) -> list:
        """[instructions, decisions] as JSON-compatible lists, strings, ints and floats."""
        insts = self._until_postproc(remove_postproc)
        names = _assign_names(insts)
        out_insts, out_decisions = [], []
        for k, inst in enumerate(insts):
            where = f"trace instruction {k} ({inst.kind.name})"
            out_insts.append([inst.kind.name,
                              [_encode(x, names, where) for x in inst.inputs],
                              [_encode(x, names, where) for x in inst.attrs],
                              [names[o] for o in inst.outputs]])
            d = self.decisions.get(inst)
            if d is not None:
                out_decisions.append([k, _encode(d, names, where)])
        return [out_insts, out_decisions]

    @staticmethod
    def from_json(obj) -> "Trace":
        """Read a trace written by as_json (after json.dumps/loads); raises TesseraError naming the
        instruction and field of anything malformed."""
        if not isinstance(obj, (list, tuple)) or len(obj) not in (1, 2):
            raise TesseraError(f"trace JSON must be [instructions, decisions], got {_short(obj)}")
        raw_insts = obj[0]
        raw_decisions = obj[1] if len(obj) == 2 else []
        if not isinstance(raw_insts, (list, tuple)):
            raise TesseraError(f"trace JSON: the instructions must be a list, got {_short(raw_insts)}")
        if not isinstance(raw_decisions, (list, tuple)):
            raise TesseraError(f"trace JSON: the decisions must be a list, got {_short(raw_decisions)}")
        defined = {}
        insts = []
        for k, raw in enumerate(raw_insts):
            insts.append(_decode_inst(k, raw, defined))
        decisions = {}
        for j, entry in enumerate(raw_decisions):
            where = f"trace JSON: decisions[{j}]"
            if not isinstance(entry, (list, tuple)) or len(entry) != 2:
                raise TesseraError(f"{where} must be [instruction index, decision], got {_short(entry)}")
            idx, raw_d = entry
            if type(idx) is not int or not 0 <= idx < len(insts):
                raise TesseraError(f"{where}: instruction index {_short(idx)} is not in [0, {len(insts)})")
            inst = insts[idx]
            if not inst.kind.sampling:
                raise TesseraError(f"{where}: instruction {idx} ({inst.kind.name}) takes no decision")
            if inst in decisions:
                raise TesseraError(f"{where}: instruction {idx} has two decisions")
            decisions[inst] = _decode(raw_d, defined, f"{where} (instruction {idx}, {inst.kind.name})",
                                      "decision")
        return Trace(insts, decisions)

    @staticmethod
    def apply_json_to_schedule(json_obj, sch):
        """Replay a JSON trace (as from as_json) on sch."""
        Trace.from_json(json_obj).apply_to_schedule(sch)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
@instruction_kind("EnterPostproc", pure=False)
def enter_postproc(self) -> None:
    """Mark where post-processing starts (Trace(remove_postproc=True) stops here)."""
    return None


def _collect_rvs(x, out):
    if isinstance(x, RV):
        out.add(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _collect_rvs(y, out)


def _defined(rv, table, where):
    """What table holds for rv, an input of the instruction `where`; an error when no earlier one defined it."""
    y = table.get(rv)
    if y is None:
        raise TesseraError(f"{where}: input {rv!r} is not defined by an earlier instruction")
    return y


def _map_rv(x, rv_map, where):
    if isinstance(x, RV):
        return _defined(x, rv_map, where)
    if isinstance(x, (list, tuple)):
        return [_map_rv(y, rv_map, where) for y in x]
    return x


def _encode(x, names, where):
    if isinstance(x, RV):
        return _defined(x, names, where)
    if x is None:
        return "None"
    if isinstance(x, bool):
        return "True" if x else "False"
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            raise TesseraError(f"{where}: {x} cannot be written to JSON")
        return x
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, (list, tuple)):
        return [_encode(y, names, where) for y in x]
    raise TesseraError(f"{where}: cannot write {x!r} to JSON")


def _short(x, n=60) -> str:
    text = repr(x)
    return text if len(text) <= n else text[:n] + "..."


def _decode(x, defined, where, field):
    t = type(x)
    if t is int or t is float:
        if t is float and not math.isfinite(x):
            raise TesseraError(f"{where}: {field} is {x}, not a finite number")
        return x
    if t is list or t is tuple:
        return [_decode(y, defined, where, f"{field}[{i}]") for i, y in enumerate(x)]
    if t is str:
        if x.startswith('"'):
            try:
                value = json.loads(x)
            except ValueError:
                value = None
            if type(value) is not str:
                raise TesseraError(f"{where}: {field} {_short(x)} is not a well-formed quoted string")
            return value
        if x == "None":
            return None
        if x == "True":
            return True
        if x == "False":
            return False
        if _NAME.match(x):
            rv = defined.get(x)
            if rv is None:
                raise TesseraError(f"{where}: {field} refers to {x!r}, which no earlier instruction defines")
            return rv
        raise TesseraError(f"{where}: {field} {_short(x)} is neither a handle name (b0, l1, v2), a "
                           f"quoted string, True/False/None nor a number")
    raise TesseraError(f"{where}: {field} {_short(x)} has JSON type {t.__name__}, which traces do not use")


def _decode_inst(k, raw, defined) -> Instruction:
    where = f"trace JSON: instruction {k}"
    if not isinstance(raw, (list, tuple)) or len(raw) != 4:
        raise TesseraError(f"{where} must be [kind, inputs, attrs, outputs], got {_short(raw)}")
    name, inputs, attrs, outputs = raw
    if not isinstance(name, str):
        raise TesseraError(f"{where}: the kind must be a string, got {_short(name)}")
    kind = INSTRUCTION_KINDS.get(name)
    if kind is None:
        raise TesseraError(f"{where}: unknown instruction kind {name!r}")
    where = f"{where} ({name})"
    for field, value in (("inputs", inputs), ("attrs", attrs), ("outputs", outputs)):
        if not isinstance(value, (list, tuple)):
            raise TesseraError(f"{where}: {field} must be a list, got {_short(value)}")
    if not kind.varargs and len(inputs) != len(kind.inputs):
        raise TesseraError(f"{where}: {len(inputs)} inputs, {name} takes {len(kind.inputs)} "
                           f"({', '.join(kind.inputs) or 'none'})")
    if len(attrs) != len(kind.attrs):
        raise TesseraError(f"{where}: {len(attrs)} attrs, {name} takes {len(kind.attrs)} "
                           f"({', '.join(kind.attrs) or 'none'})")
    dec_inputs = [_decode(x, defined, where, f"inputs[{i}]") for i, x in enumerate(inputs)]
    dec_attrs = [_decode(x, defined, where, f"attrs[{i}]") for i, x in enumerate(attrs)]
    for i, a in enumerate(dec_attrs):
        if any(isinstance(y, RV) for y in _flatten(a)):
            raise TesseraError(f"{where}: attrs[{i}] ({kind.attrs[i]}) cannot be a handle")
    if kind.outputs == "none" and outputs:
        raise TesseraError(f"{where}: {name} has no outputs, the JSON lists {len(outputs)}")
    if kind.outputs == "one" and len(outputs) != 1:
        raise TesseraError(f"{where}: {name} has one output, the JSON lists {len(outputs)}")
    outs = []
    for i, o in enumerate(outputs):
        m = _NAME.match(o) if isinstance(o, str) else None
        if m is None:
            raise TesseraError(f"{where}: outputs[{i}] {_short(o)} is not a handle name (b0, l1, v2)")
        if o in defined:
            raise TesseraError(f"{where}: outputs[{i}] {o!r} is already defined by an earlier instruction")
        cls = RV_OF_PREFIX[m.group(1)]
        if kind.output_type is not None and cls is not kind.output_type:
            raise TesseraError(f"{where}: outputs[{i}] {o!r} names a {cls.__name__}, {name} returns "
                               f"{kind.output_type.__name__}s")
        rv = cls(o)
        defined[o] = rv
        outs.append(rv)
    return Instruction(kind, dec_inputs, dec_attrs, outs)


def _flatten(x):
    if isinstance(x, list):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


__all__ = ["Trace", "enter_postproc"]
