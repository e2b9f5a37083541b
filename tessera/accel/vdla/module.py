"""A compiled VDLA module: its programs, run on the simulator.

    mod = tessera.build(sch, target="vdla")
    mod(data, kernel, out)            # numpy arrays or NDArrays; outputs are written in place
    print(mod.get_source())           # the disassembled instruction stream
    mod.last_report                   # the simulator's Report of the last call (cycles, utilization)
    mod.program.insns                 # the instructions
The module file is JSON (the encoded instructions and micro-ops, the parameters' DRAM layout), never
a pickle.
"""
from __future__ import annotations

import json
import os

import numpy as np

from ...errors import ShapeError, TesseraError
from ...runtime.module import BenchmarkResult
from .codegen import Program
from .simulator import DRAM, Simulator

FORMAT = "tessera-vdla"


class VDLAFunction:
    """One program, callable with its parameters (inputs read, outputs written back)."""

    def __init__(self, program: Program):
        self.program = program
        self.name = program.name
        self.last_report = None

    def __call__(self, *args):
        p = self.program
        if len(args) != len(p.params):
            raise TesseraError(f"{self.name} takes {len(p.params)} arguments "
                               f"({', '.join(x['name'] for x in p.params)}), got {len(args)}")
        dram = DRAM(p.dram_bytes)
        if p.uop_words.size:
            dram.write(p.uop_addr, p.uop_words)
        arrays = []
        for info, a in zip(p.params, args):
            arr = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)
            if tuple(arr.shape) != tuple(info["shape"]) or str(arr.dtype) != info["dtype"]:
                raise ShapeError(f"{self.name}: argument {info['name']} must be {info['dtype']}"
                                 f"{list(info['shape'])}, got {arr.dtype}{list(arr.shape)}")
            dram.write(info["addr"], np.ascontiguousarray(arr))
            arrays.append(arr)
        self.last_report = Simulator(p.cfg).run(p.insns, dram)
        for info, a, arr in zip(p.params, args, arrays):
            out = dram.read(info["addr"], info["dtype"], info["shape"])
            if isinstance(a, np.ndarray):
                if a.flags.writeable:
                    np.copyto(a, out)
            elif hasattr(a, "copyfrom"):
                a.copyfrom(out)
        return None

    def simulate(self, execute: bool = False):
        """The Report of a run on zeroed inputs (execute=False: timing and tokens only, no data)."""
        p = self.program
        dram = DRAM(p.dram_bytes)
        if p.uop_words.size:
            dram.write(p.uop_addr, p.uop_words)
        return Simulator(p.cfg).run(p.insns, dram, execute=execute)

    def time(self, args, number=1, repeat=1) -> BenchmarkResult:
        """Simulated seconds per call (cycles / the configured clock), one entry per repeat."""
        self(*args)
        secs = self.last_report.cycles / (self.program.cfg.freq_mhz * 1e6)
        return BenchmarkResult([secs] * max(int(repeat), 1))


class VDLAModule:
    """The functions of one VDLA build; `mod(...)` runs main (or the only function)."""

    def __init__(self, programs: list, path: str | None = None):
        self.path = path
        self._functions = {p.name: VDLAFunction(p) for p in programs}
        self._main = self._functions.get("main") or (next(iter(self._functions.values()))
                                                     if len(self._functions) == 1 else None)

    @staticmethod
    def load(path: str) -> "VDLAModule":
        try:
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise TesseraError(f"cannot read VDLA module {path}: {e}") from None
        if meta.get("format") != FORMAT or meta.get("version") != 1:
            raise TesseraError(f"{path} is not a version-1 tessera VDLA module")
        return VDLAModule([Program.from_json(p) for p in meta["programs"]], path)

    @staticmethod
    def dumps(programs: list) -> str:
        return json.dumps({"format": FORMAT, "version": 1, "programs": [p.to_json() for p in programs]})

    @property
    def function_names(self) -> list:
        return list(self._functions)

    @property
    def entry_name(self):
        return self._main.name if self._main else None

    def get_function(self, name: str) -> VDLAFunction:
        f = self._functions.get(name)
        if f is None:
            if name == "main" and self._main is not None:
                return self._main
            raise TesseraError(f"VDLA module has no function {name!r}; it has {', '.join(self._functions)}")
        return f

    __getitem__ = get_function

    def __contains__(self, name):
        return name in self._functions

    def _entry(self) -> VDLAFunction:
        if self._main is None:
            raise TesseraError(f"VDLA module has several functions ({', '.join(self._functions)}); "
                               f"use mod['name'](...)")
        return self._main

    def __call__(self, *args):
        return self._entry()(*args)

    @property
    def program(self) -> Program:
        return self._entry().program

    @property
    def last_report(self):
        return self._entry().last_report

    def get_source(self, fmt: str = "asm") -> str:
        """The disassembled instruction streams ("asm"), or the module's JSON ("json")."""
        if fmt == "json":
            return self.dumps([f.program for f in self._functions.values()])
        if fmt not in ("asm", "", "c"):
            raise TesseraError(f"get_source: a VDLA module has 'asm' and 'json', not {fmt!r}")
        return "\n\n".join(f.program.listing() for f in self._functions.values())

    def time_evaluator(self, func_name: str = "main", number: int = 1, repeat: int = 1, min_repeat_ms: int = 0):
        """f(*args) -> BenchmarkResult of simulated seconds (cycles at the configured clock)."""
        func = self.get_function(func_name)
        return lambda *args: func.time(args, number, repeat)

    def export_library(self, path) -> str:
        path = os.path.abspath(os.fspath(path))
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.dumps([fn.program for fn in self._functions.values()]))
        return path

    def __repr__(self):
        return f"<tessera VDLA module functions={list(self._functions)}>"
