"""tessera: an end-to-end optimizing compiler for deep learning.

    from tessera import te
    A = te.placeholder((n, 64), name="A"); ...
    lib = tessera.build(te.create_prim_func([A, B, C]), target="c")
"""
from . import errors, ir
from .errors import BuildError, DTypeError, ScheduleError, ShapeError, TesseraError, UnsupportedOpError

__version__ = "0.1.0"


def __getattr__(name):
    # heavier sub-packages load on first use so `import tessera` stays fast
    import importlib

    if name in ("te", "tir", "arith", "codegen", "runtime", "graph", "ops", "frontend", "zoo", "autotune", "backend",
                "accel", "language", "generation", "progress"):
        return importlib.import_module(f".{name}", __name__)
    if name == "nd":
        return importlib.import_module(".runtime.nd", __name__)
    if name == "Target":
        from .target import Target

        return Target
    if name in ("jit", "Config"):   # the tile language's decorator and autotuning config (tessera.language)
        from . import language

        return getattr(language, name)
    if name in ("generate", "Generator"):   # generation with decoder language models (tessera.generation)
        from . import generation

        return getattr(generation, name)
    if name == "quantize":     # post-training int8 quantization for the CPU (graph/quantization.py)
        from .graph.quantization import quantize

        return quantize
    if name == "compile":
        from .compile_graph import compile

        return compile
    if name in ("build", "lower"):
        from . import build_module

        return getattr(build_module, name)
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")
