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


def timed_repeats(measure, number: int, repeat: int, min_repeat_ms: int) -> BenchmarkResult:
    """The C timer loop's rule (codegen.c_entry) for device timers: `repeat` measurements of `number`
    calls each, a measurement shorter than min_repeat_ms growing `number` and taken again.
    `measure(n)` is the device seconds of n calls (the warm-up is the caller's)."""
    n, results = int(number), []
    for _ in range(repeat):
        while True:
            elapsed = measure(n)
            if min_repeat_ms <= 0 or elapsed * 1e3 >= min_repeat_ms or n >= 1 << 40:
                break
            grow = -(-min_repeat_ms // (elapsed * 1e3)) if elapsed > 0 else 1e9
            n *= int(min(max(grow, 2), 1e9))
        results.append(elapsed / n)
    return BenchmarkResult(results)
