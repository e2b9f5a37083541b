"""What the OpenCL and CUDA runtime modules share: the table of launchable functions read from a GPU
artifact (`self.functions`, name -> function with `__call__` and `time`) and the source text."""
from __future__ import annotations

from ..errors import TesseraError
from .module import BenchmarkResult


class GPUModuleBase:
    """Function lookup, calling and timing for a built GPU artifact; subclasses set `self.functions`
    and `self.source`."""

    functions: dict
    source: str

    @property
    def entry_name(self):
        return next(iter(self.functions))

    def function_names(self) -> list:
        return list(self.functions)

    def __call__(self, *args):
        if len(self.functions) != 1:
            raise TesseraError(f"this module has {len(self.functions)} functions; call get_function(name)")
        return next(iter(self.functions.values()))(*args)

    def get_function(self, name: str):
        f = self.functions.get(name)
        if f is None:
            raise TesseraError(f"the module has no function {name!r} (it has {', '.join(self.functions)})")
        return f

    def __contains__(self, name):
        return name in self.functions

    def get_source(self, fmt: str = "") -> str:
        return self.source

    def time_evaluator(self, func_name: str = "main", number: int = 10, repeat: int = 3, min_repeat_ms: int = 0):
        """Times `func_name` (or the only function, whatever its name) on the device."""
        f = self.get_function(func_name) if func_name in self.functions or len(self.functions) != 1 \
            else next(iter(self.functions.values()))

        def evaluator(*args) -> BenchmarkResult:
            return f.time(args, number, repeat, min_repeat_ms)
        return evaluator
