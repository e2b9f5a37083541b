"""The base of both executors of a compiled model (runtime/graph_executor.py: node by node;
runtime/aot_executor.py: the whole model in one C call): the interface users see, over a Plan.

    exe(x) / exe(x, y) / exe(x=..., y=...)     one output -> an array, several -> a tuple
    exe.run({"input": x})                      a list of numpy arrays, in output order
    exe.input_names / exe.output_names         the model's public names
    exe.defaults                               inputs a run may also give, and their values when it does not
    exe.inputs / exe.outputs                   their TensorSpecs (dtype, shape with symbols)
    exe.profile(...), exe.export_library(path)

Inputs are bound by runtime/inputs.py; a subclass checks shapes its own way (`_check_input`) and
runs (`_run(arrays) -> list`).

What only the graph compiler knows is attached by it, never made here (the runtime imports
nothing from graph, ops or frontend): `graph` (the optimized Graph), `memory_plan` (its
MemoryPlan), `opt_level`, and `exporter` (writes the library of an executor compiled in this
process). An executor loaded from a library has none of these; its graph is rebuilt by graph
code, `tessera.graph.document.load_graph(exe)`.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading

from ..errors import TesseraError
from ..target import Target
from .inputs import check_input_names, check_input_shape, gather_inputs, input_array, named_inputs
from .plan import Plan


class Executor:
    """A compiled model's runs over its Plan (see the module docstring)."""

    kind = ""

    def __init__(self, plan: Plan):
        if not isinstance(plan, Plan):
            raise TesseraError(f"an executor runs a tessera.runtime.plan.Plan, got {type(plan).__name__}")
        self.plan = plan
        self._inputs = plan.input_specs()
        self._outputs = plan.output_specs()
        self._graph = None
        self.memory_plan = plan.memory
        self.opt_level = None
        self.exporter = None           # set by the graph compiler: (exe, path, prefix) -> path
        self.reporter = None           # set by tessera.compile: (exe, path, **options) -> path (tessera.report)
        self.library_path = None       # set when loaded from a library
        self.defaults: dict = {}       # set by tessera.compile: {input name: value} of inputs a run may give
        self.overriding = None         # set with them: () -> the executor compiled with them as inputs
        self._overriding = None
        self._overriding_lock = threading.Lock()

    # ------------------------------------------------------------------ description
    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def target(self):
        return Target(self.plan.target)

    @property
    def input_names(self) -> list:
        """The inputs' public names, in graph order (an ONNX model's own names: what run() takes)."""
        return list(self.plan.input_names)

    @property
    def output_names(self) -> list:
        """The outputs' public names, in the order run() returns them."""
        return list(self.plan.output_names)

    @property
    def inputs(self) -> list:
        """The inputs' TensorSpecs (dtype, shape with symbol names), in input_names' order."""
        return list(self._inputs)

    @property
    def outputs(self) -> list:
        """The outputs' TensorSpecs, in output_names' order."""
        return list(self._outputs)

    @property
    def graph(self):
        """The optimized Graph this executor runs, when the graph compiler made it in this process."""
        if self._graph is None:
            raise TesseraError(f"{self.kind} executor of {self.name!r} (loaded from {self.library_path}) carries no "
                               f"Graph; rebuild it with tessera.graph.document.load_graph(exe)")
        return self._graph

    @graph.setter
    def graph(self, g):
        self._graph = g

    @property
    def has_graph(self) -> bool:
        return self._graph is not None

    # ------------------------------------------------------------------ inputs
    def _normalize_inputs(self, args, kwargs) -> list:
        """Positional (input order) and keyword arguments -> one checked array per input."""
        return self._from_dict(gather_inputs(self.name, self.input_names, args, kwargs))

    def _from_dict(self, given) -> list:
        names = self.plan.input_names
        if len(given) != len(names) or not all(n in given for n in names):     # the message only on error
            check_input_names(self.name, names, given, [f"{n}: {s}" for n, s in zip(names, self._inputs)],
                              [s.name for s in self._inputs])
        return [self._check_input(s, n, given[n]) for s, n in zip(self._inputs, names)]

    def _check_input(self, spec, name: str, x):
        x = input_array(name, x, spec.np_dtype, spec.dtype, spec)   # spec prints as its type text, only on error
        check_input_shape(name, x, spec)
        return x

    def _arrays(self, inputs, kwargs) -> list:
        """The inputs of profile/benchmark: a dict by name, a list/tuple in order, or one array."""
        if inputs is None and not kwargs and not self._inputs:
            return []
        if isinstance(inputs, dict) or inputs is None:
            given = dict(inputs or {})
            given.update(kwargs)
            return self._from_dict(given)
        if isinstance(inputs, (list, tuple)):
            return self._normalize_inputs(tuple(inputs), kwargs)
        return self._normalize_inputs((inputs,), kwargs)

    # ------------------------------------------------------------------ running
    def _run(self, arrays) -> list:
        raise NotImplementedError

    def run(self, inputs=None, **kwargs) -> list:
        """Run on a dict {input name: array}; a list of numpy arrays in the graph's output order."""
        given = named_inputs(inputs, kwargs)
        if self.defaults and not self.defaults.keys().isdisjoint(given):
            return self._run_overriding(given)
        return self._run(self._from_dict(given))

    def __call__(self, *args, **kwargs):
        """exe(x) / exe(x, y) / exe(x=..., y=...): one output -> an array, several -> a tuple."""
        if self.defaults and not self.defaults.keys().isdisjoint(kwargs):
            outs = self._run_overriding(gather_inputs(self.name, self.input_names, args, kwargs))
        else:
            outs = self._run(self._normalize_inputs(args, kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run_overriding(self, given: dict) -> list:
        """A run that gives inputs held here as defaults (exe.defaults: folded in as constants): on the
        executor compiled with them as inputs (made on first use), the defaults of those not given
        filled in."""
        with self._overriding_lock:
            if self._overriding is None:
                self._overriding = self.overriding()
        return self._overriding.run({**{n: a for n, a in self.defaults.items() if n not in given}, **given})

    # ------------------------------------------------------------------ export
    def export_library(self, path, prefix: str | None = None) -> str:
        """Write the deployable library (weights embedded, C API) to `path` and, with static shapes,
        model.h beside it; prefix names the C API (default tessera_model). A loaded library is
        copied (with its header) and keeps its prefix."""
        if self.exporter is not None:
            return self.exporter(self, path, prefix)
        path = target_path(path)
        if self.library_path is None:
            raise TesseraError(f"export_library: the executor of {self.name!r} was neither compiled in this process "
                               f"nor loaded from a library")
        current = self._prefix()
        if prefix is not None and prefix != current:
            raise TesseraError(f"export_library: this library's C API is named {current!r}; renaming it to "
                               f"{prefix!r} needs the compiled graph (tessera.compile), not a loaded library")
        write_library(self.library_path, self._header(), path)
        return path

    # ------------------------------------------------------------------ report
    def report(self, path, database=None, inputs=None, **options) -> str:
        """Write the report page of this model to `path` (one self-contained HTML file: the optimized
        graph coloured by measured time, each kernel's code, the memory plan, the tuning with
        `database`, the machine); returns the path. inputs: what to profile on (default: seeded random
        inputs). options: tessera.report.write_report's (profile, number, repeat, title)."""
        if self.reporter is None:
            raise TesseraError(f"report: the {self.kind} executor of {self.name!r} was not compiled by tessera.compile "
                               f"in this process (a loaded library keeps no kernels' programs); compile the model "
                               f"to report on it")
        return self.reporter(self, path, database=database, inputs=inputs, **options)

    def _prefix(self):
        return None

    def _header(self):
        return None


# ---------------------------------------------------------------------------------------------
# writing library files
# ---------------------------------------------------------------------------------------------
def header_path(path: str) -> str:
    """model.so -> model.h (the C header export_library writes beside the library)."""
    root, ext = os.path.splitext(path)
    return (root if ext in (".so", ".dylib", ".dll") else path) + ".h"


def target_path(path) -> str:
    """`path` made absolute, its folder checked."""
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise TesseraError(f"export_library: folder {folder} does not exist")
    return path


def write_library(src: str, header: str | None, path: str) -> None:
    """Copy the library `src` to `path` and write `header` (when there is one) beside it. They are the
    user's files where the user chose: made as any new file, the umask taken off (0755 and 0644 under
    umask 022; 0700 and 0600 under 077, which keeps embedded weights private), whatever the mode of the
    cache's copy (0600)."""
    if os.path.abspath(src) != os.path.abspath(path):
        _atomic_copy(src, path)
    if header is not None:
        _atomic_write_text(header_path(path), header)


def _atomic_copy(src: str, dst: str) -> None:
    _atomic_write(dst, ".so", 0o755, lambda tmp: shutil.copyfile(src, tmp))


def _atomic_write_text(dst: str, text: str) -> None:
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    _atomic_write(dst, ".h", 0o644, write)


def _atomic_write(dst: str, suffix: str, mode: int, fill) -> None:
    """fill(a temporary file beside dst), then rename it to dst (`mode` less the umask): a reader never
    sees half a file."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst), prefix=".tmp-", suffix=suffix)
        os.close(fd)
        fill(tmp)
        os.chmod(tmp, mode & ~_umask())
        os.replace(tmp, dst)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise TesseraError(f"export_library: cannot write {dst}: {e}") from None


def _umask() -> int:
    """The process's umask, read without changing it (Linux's /proc; elsewhere set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


__all__ = ["Executor", "header_path", "target_path", "write_library"]
